/**
 * A bot's turn: call its model, run the tools it asks for, feed the results back, until it
 * answers without tool calls. Every round is handed to `onEvent` (and awaited) before the next
 * model call, so the caller can persist progress as it happens.
 */
import type { AssistantMessage, Message, Tool, ToolCall } from "@earendil-works/pi-ai";
import { validateToolArguments } from "@earendil-works/pi-ai/utils/validation";
import { callModel, redactSecrets } from "./model-call";
import { DEFAULT_REQUEST_TIMEOUT_MS, type ResolvedModel } from "./models";
import { EMPTY_USAGE } from "../domain/pi-usage";

export type ToolSpec = {
  name: string;
  description: string;
  /** JSON Schema object */
  parameters: Record<string, unknown>;
  execute(args: Record<string, unknown>, signal: AbortSignal, call: { toolCallId: string }): Promise<{ output: string; isError?: boolean }>;
};

export type LoopToolCall = { id: string; name: string; args: Record<string, unknown> };

/** The conversation the bot sees. A user message with `authorId` reaches the model as `[authorId] text`. */
export type LoopMessage =
  | { role: "user"; text: string; authorId?: string }
  | { role: "assistant"; text: string; toolCalls?: LoopToolCall[] }
  | { role: "tool"; toolCallId: string; name: string; output: string; isError?: boolean };

export type LoopEvent =
  | { kind: "assistant"; text: string; toolCalls: LoopToolCall[]; stopReason: string }
  | { kind: "tool_result"; toolCallId: string; name: string; output: string; isError: boolean };

export type LoopResult = { ok: true; finalText: string; rounds: number } | { ok: false; reason: string; rounds: number };

export const DEFAULT_MAX_ROUNDS = 20;
/**
 * A malformed tool call is answered as an error result, so the model can correct itself; a model
 * that sends nothing but malformed calls this many rounds in a row will not, and its turn ends.
 */
export const DEFAULT_MAX_MALFORMED_ROUNDS = 3;
/**
 * The most tool calls one round may ask for. Each call may act (post, delegate a run, run a
 * command), and every call needs its result written back: a model asking for thousands at once
 * is broken or abused, and its round ends the turn with nothing of it run.
 */
export const DEFAULT_MAX_TOOL_CALLS_PER_ROUND = 32;
/** Ends an answer the model's output limit cut off (stop reason `length`). */
export const OUTPUT_LIMIT_NOTE = "[cut: the model reached its output limit]";
export { DEFAULT_REQUEST_TIMEOUT_MS };
export const DEFAULT_RETRIES = 2;
export const DEFAULT_RETRY_BASE_DELAY_MS = 500;

/** Converts the bot's view of the conversation into pi-ai messages for `model`. */
export function toPiMessages(messages: LoopMessage[], model: ResolvedModel, now = Date.now()): Message[] {
  // An assistant turn with neither text nor calls is refused by providers; it carries nothing.
  const meaningful = messages.filter((m) => m.role !== "assistant" || m.text !== "" || (m.toolCalls?.length ?? 0) > 0);
  return meaningful.map((m): Message => {
    if (m.role === "user") {
      return { role: "user", content: m.authorId ? `[${m.authorId}] ${m.text}` : m.text, timestamp: now };
    }
    if (m.role === "tool") {
      return {
        role: "toolResult",
        toolCallId: m.toolCallId,
        toolName: m.name,
        content: [{ type: "text", text: m.output }],
        isError: m.isError ?? false,
        timestamp: now,
      } as Message;
    }
    const calls = m.toolCalls ?? [];
    const content: AssistantMessage["content"] = [];
    if (m.text) content.push({ type: "text", text: m.text });
    for (const c of calls) content.push({ type: "toolCall", id: c.id, name: c.name, arguments: c.args as ToolCall["arguments"] });
    return {
      role: "assistant",
      content,
      api: model.api,
      provider: model.provider,
      model: model.modelId,
      usage: EMPTY_USAGE,
      stopReason: calls.length ? "toolUse" : "stop",
      timestamp: now,
    };
  });
}

function toPiTool(t: ToolSpec): Tool {
  return { name: t.name, description: t.description, parameters: t.parameters as unknown as Tool["parameters"] };
}

const textOf = (m: AssistantMessage) =>
  m.content
    .filter((c): c is { type: "text"; text: string } => c.type === "text")
    .map((c) => c.text)
    .join("");

const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** Why a tool call cannot run as asked (told to the model so it may correct itself), or its checked args. */
export function checkToolCall(
  call: ToolCall,
  rawArgs: string | undefined,
  tools: ToolSpec[],
  /** The tools the model was offered when it asked, if some have been taken away since. */
  offered: ToolSpec[] = tools,
  /** Why a tool the bot has is not offered to this turn (its trigger's reach), if it is one. */
  withheld: (name: string) => string | null = () => null,
): { ok: true; tool: ToolSpec; args: Record<string, unknown> } | { ok: false; error: string; refused?: true } {
  const tool = tools.find((t) => t.name === call.name);
  if (!tool) {
    const why = withheld(call.name);
    if (why !== null) return { ok: false, error: why, refused: true };
    const names = tools.map((t) => t.name).join(", ") || "none";
    if (offered.some((t) => t.name === call.name)) {
      return { ok: false, error: `The tool "${call.name}" is no longer available to you: it was removed from your tools. Available tools: ${names}.` };
    }
    return { ok: false, error: `Unknown tool "${call.name}". Available tools: ${names}.` };
  }
  let args: unknown = call.arguments;
  // pi-ai repairs partial JSON while streaming; a call whose finished text is not JSON is malformed.
  if (rawArgs !== undefined && rawArgs.trim() !== "") {
    try {
      args = JSON.parse(rawArgs);
    } catch {
      return { ok: false, error: `The arguments for tool "${call.name}" are not valid JSON: ${rawArgs.slice(0, 200)}` };
    }
  }
  if (!isPlainObject(args)) return { ok: false, error: `The arguments for tool "${call.name}" must be a JSON object.` };
  try {
    const checked = validateToolArguments(toPiTool(tool), { ...call, arguments: args as ToolCall["arguments"] });
    return { ok: true, tool, args: isPlainObject(checked) ? checked : args };
  } catch (err) {
    return { ok: false, error: `Invalid arguments for tool "${call.name}": ${err instanceof Error ? err.message : String(err)}` };
  }
}

export async function runToolLoop(opts: {
  model: ResolvedModel;
  /** A function is asked again every round (the tools it names may change). */
  systemPrompt: string | (() => string);
  messages: LoopMessage[];
  /**
   * A function is asked again every round, and again before each call the model asked for: a
   * tool it no longer returns is offered no more, and not run.
   */
  tools: ToolSpec[] | (() => ToolSpec[]);
  /**
   * Why a tool that is not offered may not be called, for tools withheld rather than unknown: a
   * call of one is answered with that (a refusal, as a tool's own is, not a malformed call).
   */
  withheld?: (name: string) => string | null;
  onEvent: (e: LoopEvent) => Promise<void>;
  maxRounds?: number;
  maxMalformedRounds?: number;
  maxToolCallsPerRound?: number;
  /** Default: the model's `requestTimeoutMs`. */
  requestTimeoutMs?: number;
  retries?: number;
  /** first retry waits about this long, doubling each time */
  retryBaseDelayMs?: number;
  signal?: AbortSignal;
}): Promise<LoopResult> {
  const maxRounds = opts.maxRounds ?? DEFAULT_MAX_ROUNDS;
  const signal = opts.signal ?? new AbortController().signal;
  const history = toPiMessages(opts.messages, opts.model);
  const toolsNow = typeof opts.tools === "function" ? opts.tools : () => opts.tools as ToolSpec[];
  const promptNow = typeof opts.systemPrompt === "function" ? opts.systemPrompt : () => opts.systemPrompt as string;
  let malformedRounds = 0;

  for (let round = 1; round <= maxRounds; round++) {
    const offered = toolsNow();
    const call = await callModel({
      model: opts.model,
      systemPrompt: promptNow(),
      messages: history,
      tools: offered.map(toPiTool),
      requestTimeoutMs: opts.requestTimeoutMs ?? opts.model.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS,
      retries: opts.retries ?? DEFAULT_RETRIES,
      retryBaseDelayMs: opts.retryBaseDelayMs ?? DEFAULT_RETRY_BASE_DELAY_MS,
      signal,
    });
    if (!call.ok) return { ok: false, reason: call.reason, rounds: round - 1 };

    const message = call.message;
    const said = textOf(message);
    // Stopped by its output limit mid-answer: posted as it is, the cut would read as the whole answer.
    const text = message.stopReason === "length" && said !== "" ? `${said}\n${OUTPUT_LIMIT_NOTE}` : said;
    const calls = message.content
      .map((c, index) => ({ c, index }))
      .filter((x): x is { c: ToolCall; index: number } => x.c.type === "toolCall");
    const maxCalls = opts.maxToolCallsPerRound ?? DEFAULT_MAX_TOOL_CALLS_PER_ROUND;
    if (calls.length > maxCalls) {
      // Not recorded either: a round of thousands of calls may not fit in one entry.
      return { ok: false, reason: `the model asked for ${calls.length} tool calls in one round; a round may ask for at most ${maxCalls}, and none of them were run`, rounds: round - 1 };
    }
    history.push(message);
    await opts.onEvent({
      kind: "assistant",
      text,
      toolCalls: calls.map(({ c }) => ({ id: c.id, name: c.name, args: isPlainObject(c.arguments) ? c.arguments : {} })),
      stopReason: message.stopReason,
    });
    if (calls.length === 0 && message.stopReason === "length" && said.trim() === "") {
      // A reasoning model may spend its whole output limit thinking: "empty" would hide why.
      return { ok: false, reason: `the model reached its output limit (maxTokens ${opts.model.maxTokens}) before it wrote an answer; give the model a higher maxTokens in piModels`, rounds: round };
    }
    if (calls.length === 0) return { ok: true, finalText: text, rounds: round };

    let malformed: string | null = null;
    let wellFormed = 0;
    for (const { c, index } of calls) {
      if (signal.aborted) return { ok: false, reason: "the turn was cancelled", rounds: round };
      // Asked before each call: a tool taken away while an earlier call of the round ran is not run.
      const checked = checkToolCall(c, call.rawToolArgs.get(index), toolsNow(), offered, opts.withheld);
      let output: string;
      let isError: boolean;
      if (!checked.ok) {
        output = checked.error;
        isError = true;
        if (checked.refused) wellFormed += 1;
        else malformed = checked.error;
      } else {
        wellFormed += 1;
        try {
          const r = await checked.tool.execute(checked.args, signal, { toolCallId: c.id });
          output = r.output;
          isError = r.isError ?? false;
        } catch (err) {
          output = `Tool "${c.name}" failed: ${redactSecrets(err instanceof Error ? err.message : String(err), opts.model)}`;
          isError = true;
        }
      }
      history.push({ role: "toolResult", toolCallId: c.id, toolName: c.name, content: [{ type: "text", text: output }], isError, timestamp: Date.now() } as Message);
      await opts.onEvent({ kind: "tool_result", toolCallId: c.id, name: c.name, output, isError });
    }
    malformedRounds = wellFormed === 0 ? malformedRounds + 1 : 0;
    if (malformed !== null && malformedRounds >= (opts.maxMalformedRounds ?? DEFAULT_MAX_MALFORMED_ROUNDS)) {
      return { ok: false, reason: `malformed tool calls ${malformedRounds} rounds in a row: ${malformed}`, rounds: round };
    }
  }
  return { ok: false, reason: "too many tool rounds", rounds: maxRounds };
}
