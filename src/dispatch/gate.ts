/**
 * The cheap "should this bot reply?" question for ambient bots: one completion, no tools,
 * answered YES or NO. Anything else, or any failure, means "do not reply".
 */
import { callModel, redactSecrets } from "./model-call";
import type { ResolvedModel } from "./models";
import type { LoopMessage } from "./tool-loop";

/** A YES or NO is a few tokens: a gate slower than this holds up the bot's answer for nothing. */
export const DEFAULT_GATE_TIMEOUT_MS = 30_000;
const GATE_RETRIES = 1;
const GATE_MAX_TOKENS = 16;
const TRANSCRIPT_CHARS_PER_MESSAGE = 2_000;

/** Reads a YES/NO answer, tolerating case, punctuation, markdown and a short explanation. */
export function parseGateAnswer(text: string): boolean | undefined {
  const words: string[] = text.toUpperCase().match(/[A-Z]+/g) ?? [];
  const first = words[0];
  if (first === "YES") return true;
  if (first === "NO") return false;
  const yes = words.includes("YES");
  const no = words.includes("NO");
  if (yes !== no) return yes;
  return undefined;
}

function transcript(recent: LoopMessage[], botName: string): string {
  const lines: string[] = [];
  for (const m of recent) {
    if (m.role === "tool") continue;
    const who = m.role === "user" ? (m.authorId ?? "someone") : botName;
    const text = m.text.length > TRANSCRIPT_CHARS_PER_MESSAGE ? `${m.text.slice(0, TRANSCRIPT_CHARS_PER_MESSAGE)}…` : m.text;
    if (text.trim()) lines.push(`${who}: ${text}`);
  }
  return lines.join("\n");
}

/**
 * The gate's whole-call limit: the model's own `requestTimeoutMs` where its environment sets one
 * (a slow local model may need more than the default to say YES); where only `idleTimeoutMs` is
 * set (a model that thinks in silence), that long to start plus the default to answer. The idle
 * timeout itself is the model's, as for any call.
 */
export function gateTimeoutMs(model: ResolvedModel, defaultMs = DEFAULT_GATE_TIMEOUT_MS): number {
  if (model.configuredTimeouts?.request && model.requestTimeoutMs) return model.requestTimeoutMs;
  if (model.configuredTimeouts?.idle && model.idleTimeoutMs) return model.idleTimeoutMs + defaultMs;
  return defaultMs;
}

export async function askGate(opts: {
  model: ResolvedModel;
  botName: string;
  botInstructions: string;
  recent: LoopMessage[];
  requestTimeoutMs?: number;
  /** The default in gateTimeoutMs: DEFAULT_GATE_TIMEOUT_MS; a test gives a short one so as not to outwait 30 s. */
  defaultTimeoutMs?: number;
}): Promise<{ reply: boolean; reason: string; failed?: boolean }> {
  const systemPrompt =
    `You decide whether the chat participant "${opts.botName}" should reply to the latest message of a conversation. ` +
    `${opts.botName}'s instructions:\n${opts.botInstructions || "(none)"}\n\n` +
    `Answer YES if the latest message asks for, or clearly benefits from, ${opts.botName}'s reply; otherwise NO. ` +
    `Reply with exactly one word: YES or NO.`;
  const question = `Conversation (oldest first):\n${transcript(opts.recent, opts.botName) || "(empty)"}\n\nShould ${opts.botName} reply now? Reply YES or NO.`;

  const r = await callModel({
    model: opts.model,
    systemPrompt,
    messages: [{ role: "user", content: question, timestamp: Date.now() }],
    maxTokens: GATE_MAX_TOKENS,
    requestTimeoutMs: opts.requestTimeoutMs ?? gateTimeoutMs(opts.model, opts.defaultTimeoutMs),
    retries: GATE_RETRIES,
    retryBaseDelayMs: 250,
  });
  if (!r.ok) return { reply: false, reason: `gate failed: ${r.reason}`, failed: true };
  const answer = r.message.content
    .filter((c): c is { type: "text"; text: string } => c.type === "text")
    .map((c) => c.text)
    .join("");
  const reply = parseGateAnswer(answer);
  if (reply === undefined) return { reply: false, reason: `gate answer unclear: "${redactSecrets(answer.trim(), opts.model).slice(0, 80)}"` };
  return { reply, reason: reply ? "gate said yes" : "gate said no" };
}
