import type { TriggerMode } from "../agents";
import { MAX_DEPTH, type DispatchConfig } from "./config";

/** A chat entry that may make bots react. `depth` is 0 for a person's message, n for a bot's reply in a chain. */
export type Trigger = {
  entryId: string;
  authorId: string | null;
  text: string;
  depth: number;
  mentions?: string[];
  /** `false` on control-plane notifications (child_finished): they never wake a bot. */
  dispatch?: boolean;
};

export type Candidate = { id: string; handle: string; triggerMode: TriggerMode };

export type DecisionReason =
  | "mentioned" | "always" | "ambient_wait" | "not_mentioned" | "author" | "cooldown" | "depth_cap" | "width_cap"
  | "gated_yes" | "gated_no" | "error";

/** `react`: run a turn now; `gate`: at `runAt`, ask the gate model first; `skip`: nothing to do. */
export type Decision = { agentId: string; verdict: "react" | "gate" | "skip"; reason: DecisionReason; runAt: number; depth: number };

export type SelectionInput = {
  trigger: Trigger;
  agents: Candidate[];
  config: DispatchConfig;
  /** When each bot last replied in this thread (ms). */
  lastReplyAt: Record<string, number>;
  nowMs: number;
};

/**
 * `@handle` standing on its own: not inside a word, an address or a path (`x@coder.io`, `é@coder`,
 * an npm scope `@types/node`, a URL's `/@coder`), nor the first part of a longer name (`@coder.io`,
 * `@coder@example.social`), in any letter case (handles are lower case, `@Coder` means @coder).
 * Markdown's underscores around it (`_@coder_`) are emphasis, not part of a word. Chinese and
 * Japanese put no spaces between words: next to their letters (`请@coder帮我`) an ASCII handle is a
 * word of its own.
 */
const UNSPACED = String.raw`\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}`;
const MENTION = new RegExp(
  String.raw`(?:^|[${UNSPACED}]|[^\p{L}\p{N}_.@/-])_*@([A-Za-z0-9_-]+)(?![^${UNSPACED}\P{L}]|[\p{N}_/@-]|\.[\p{L}\p{N}])`,
  "gu",
);
const MAX_HANDLE = 40;

/**
 * The handles a text mentions. Handles may end in `-` or `_`, but in chat those are mostly
 * punctuation (`@coder- see this`, `_@coder_`): such a mention names the handle as written only
 * when a bot of that handle is among `known`, else the handle without them.
 */
export function mentionedHandles(text: string, explicit: string[] = [], known?: ReadonlySet<string>): Set<string> {
  const out = new Set<string>();
  // An explicit mention may be an agent id (kept as given) or a handle (any case).
  for (const m of explicit) {
    const bare = m.replace(/^@/, "");
    out.add(bare);
    out.add(bare.toLowerCase());
  }
  // An input method in full-width mode writes `＠ｃｏｄｅｒ`: the same mention to a reader.
  for (const m of text.normalize("NFKC").matchAll(MENTION)) {
    const written = m[1].toLowerCase();
    const trimmed = written.replace(/[-_]+$/, "");
    const handle = trimmed === "" || known?.has(written) ? written : trimmed;
    if (handle.length <= MAX_HANDLE) out.add(handle);
  }
  return out;
}

/** Whether a text may hold a mention at all (an `@`, or a character that reads as one). */
export function mayMention(text: string): boolean {
  return /[@\uFF20\uFE6B]/.test(text);
}

export function isBot(authorId: string | null, agents: Candidate[]): boolean {
  return authorId !== null && agents.some((a) => a.id === authorId);
}

export function effectiveMode(agent: Candidate, config: DispatchConfig): TriggerMode {
  return config.perAgent[agent.id]?.triggerMode ?? config.othersTriggerMode ?? agent.triggerMode;
}

/** True when a chat entry should be recorded as a trigger at all. */
export function isTriggerable(payload: { type: string; dispatch?: unknown }): boolean {
  return payload.type === "chat" && payload.dispatch !== false;
}

/**
 * Who reacts to one chat entry, with the reason for every bot of the house.
 * Order of preference under the width cap: mentioned bots (in the order the text names them),
 * then `always` bots, then `ambient` ones.
 */
export function selectResponders(input: SelectionInput): Decision[] {
  const { trigger, agents, config, lastReplyAt, nowMs } = input;
  if (trigger.dispatch === false) return [];
  const depth = trigger.depth + 1;
  const handles = mentionedHandles(trigger.text, trigger.mentions, new Set(agents.map((a) => a.handle)));
  const humanTrigger = !isBot(trigger.authorId, agents);
  const mentionOrder = [...handles];

  const base: Decision[] = agents.map((agent) => {
    const d = (verdict: Decision["verdict"], reason: DecisionReason, runAt = nowMs): Decision => ({ agentId: agent.id, verdict, reason, runAt, depth });
    if (agent.id === trigger.authorId) return d("skip", "author");
    if (handles.has(agent.handle) || handles.has(agent.id)) return d("react", "mentioned");
    switch (effectiveMode(agent, config)) {
      case "always": {
        const last = lastReplyAt[agent.id];
        if (last !== undefined && nowMs - last < config.cooldownMs) return d("skip", "cooldown");
        return d("react", "always");
      }
      case "ambient":
        // A person gets a moment to finish their thought; bots already spoke their piece.
        return d("gate", "ambient_wait", humanTrigger ? nowMs + config.ambientDelayMs : nowMs);
      default:
        return d("skip", "not_mentioned");
    }
  });

  const rank = (x: Decision): number => {
    if (x.reason === "mentioned") {
      const a = agents.find((g) => g.id === x.agentId)!;
      const i = mentionOrder.indexOf(a.handle);
      return i >= 0 ? i : mentionOrder.indexOf(a.id);
    }
    return x.reason === "always" ? 1_000 : 2_000;
  };
  const wanted = base.filter((x) => x.verdict !== "skip").sort((a, b) => rank(a) - rank(b));
  const capped = new Map<string, DecisionReason>();
  // A bot's message wakes at most one bot that it did not name: with several `always` bots every
  // reply would otherwise wake all the others, and one chat would fan out to bots^depth turns.
  let unaddressed = 0;
  for (const [i, x] of wanted.entries()) {
    if (trigger.depth >= MAX_DEPTH) capped.set(x.agentId, "depth_cap");
    else if (i >= config.widthCap) capped.set(x.agentId, "width_cap");
    else if (!humanTrigger && x.reason !== "mentioned" && unaddressed++ >= 1) capped.set(x.agentId, "width_cap");
  }
  return base.map((x) => {
    const reason = capped.get(x.agentId);
    return reason ? { ...x, verdict: "skip", reason } : x;
  });
}

/** The ambient gate's answer turns a waiting decision into a turn or a recorded "no". */
export function afterGate(d: Decision, reply: boolean): Decision {
  return reply ? { ...d, verdict: "react", reason: "gated_yes" } : { ...d, verdict: "skip", reason: "gated_no" };
}

/** The depth a chat entry carries: a bot's reply says so; anything else starts a chain at 0. */
export function entryDepth(payload: { [k: string]: unknown }): number {
  const d = payload.depth;
  return typeof d === "number" && Number.isInteger(d) && d >= 0 ? Math.min(d, MAX_DEPTH) : 0;
}
