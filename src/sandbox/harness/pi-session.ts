/**
 * Rebuild a loadable, linear pi session (JSONL, version 3) from a thread, for a resume on a
 * fresh box: `pi --session <file>`. Pure.
 *
 * What is rebuilt: a header with the cwd you pass (it must exist on the box), optionally a
 * model_change entry, then one `message` entry per user turn, assistant message and tool
 * result, in thread order, with an unbroken parent-id chain (each entry's parentId is the
 * previous entry's id).
 *  - `pi.assistant` with a `raw` pi AssistantMessage is restored as that message (text,
 *    thinking, tool calls, usage, model). Without `raw` (other harnesses, bot answers) it
 *    becomes a text block plus the tool calls of the `pi.tool_call` entries that follow it.
 *  - `pi.tool_call` entries with no assistant before them get a synthesized assistant message.
 *  - `pi.user` is a user turn. A `chat` entry is a user turn unless a later `pi.user` repeats
 *    it (the runner's prompt is the chat text): then the `pi.user` stands for both.
 *  - a tool call with no recorded result gets a synthesized error result, and a result with
 *    no call is dropped, so providers accept the transcript.
 *
 * What is lost (the mirror's projection is lossy): pi's tree (branches, labels), system
 * prompt/tool-loadout messages (pi writes a fresh one on the next request), compaction and
 * branch summaries, custom entries, thinking-level changes, images and tool `details`,
 * per-message usage of assistants mirrored without `raw`, entries of other harnesses' native
 * formats beyond text/tool calls, the original entry ids and session id, and the part of any
 * entry over 256 KiB that the box cut (src/runner/bound-entry.ts).
 */
import type { ThreadEntry } from "./types";
import { EMPTY_USAGE } from "../../domain/pi-usage";

export interface RebuildOptions {
  /** working directory recorded in the header; must exist where pi runs */
  cwd: string;
  /** session id for the header (default: a random UUID) */
  sessionId?: string;
  /** header timestamp, ms (default: now) */
  now?: number;
  /** record the model in a model_change entry so pi restores it */
  model?: { provider: string; modelId: string };
  /**
   * chat entries after the last pi.* message: "drop" (default; returned as pendingPrompt, the
   * runner passes the new prompt on the command line) or "include" as user turns.
   */
  trailingChat?: "drop" | "include";
}

export interface RebuiltSession {
  jsonl: string;
  sessionId: string;
  /** number of message entries written (== THREADBOX_MIRROR_NEXT_INDEX for the resumed run) */
  messageCount: number;
  /** text of trailing chat entries not written (drop mode) */
  pendingPrompt?: string;
}

type Msg = Record<string, any>;

function randomUuid(): string {
  const c = (globalThis as any).crypto;
  if (c?.randomUUID) return c.randomUUID();
  return "xxxxxxxx-xxxx-4xxx-8xxx-xxxxxxxxxxxx".replace(/x/g, () => Math.floor(Math.random() * 16).toString(16));
}

const isPiMessage = (t: string) => t === "pi.user" || t === "pi.assistant" || t === "pi.tool_call" || t === "pi.tool_result";

export function rebuildPiSession(entries: ThreadEntry[], opts: RebuildOptions): RebuiltSession {
  const now = opts.now ?? Date.now();
  const sessionId = opts.sessionId ?? randomUuid();
  const list = entries.filter((e) => e && e.payload && typeof e.payload.type === "string");

  let lastPiIdx = -1;
  list.forEach((e, i) => {
    if (isPiMessage(e.payload.type)) lastPiIdx = i;
  });

  const messages: Msg[] = [];
  const pendingChats: { text: string; ts: number }[] = [];
  const trailing: string[] = [];
  const calls = new Map<string, string>(); // toolCallId -> name
  const answered = new Set<string>();
  let openAssistant: Msg | undefined; // synthesized assistant that can still take tool calls

  const tsOf = (e: ThreadEntry) => (typeof e.ts === "number" ? e.ts : now);
  const flushChats = () => {
    for (const c of pendingChats.splice(0)) {
      messages.push({ role: "user", content: [{ type: "text", text: c.text }], timestamp: c.ts });
    }
  };
  const closeOpenCalls = () => {
    openAssistant = undefined;
    // results missing for calls made so far: synthesize them before the next non-result message
    for (const [id, name] of calls) {
      if (answered.has(id)) continue;
      answered.add(id);
      messages.push({
        role: "toolResult",
        toolCallId: id,
        toolName: name,
        content: [{ type: "text", text: "[tool result not recorded on the thread]" }],
        isError: true,
        timestamp: messages[messages.length - 1]?.timestamp ?? now,
      });
    }
  };

  list.forEach((e, i) => {
    const p = e.payload as Record<string, any>;
    switch (p.type) {
      case "chat": {
        const text = String(p.text ?? "");
        if (i > lastPiIdx && opts.trailingChat !== "include") {
          trailing.push(text);
          return;
        }
        pendingChats.push({ text, ts: tsOf(e) });
        return;
      }
      case "pi.user": {
        const text = String(p.text ?? "");
        // a chat this pi.user repeats is the same turn
        for (let k = pendingChats.length - 1; k >= 0; k--) {
          if (pendingChats[k].text && text.includes(pendingChats[k].text)) pendingChats.splice(k, 1);
        }
        closeOpenCalls();
        flushChats();
        openAssistant = undefined;
        messages.push({ role: "user", content: [{ type: "text", text }], timestamp: tsOf(e) });
        return;
      }
      case "pi.assistant": {
        closeOpenCalls();
        flushChats();
        const raw = p.raw as Msg | undefined;
        let msg: Msg;
        if (raw && raw.role === "assistant" && Array.isArray(raw.content)) {
          msg = { ...raw, stopReason: raw.stopReason === "pending" ? "aborted" : raw.stopReason };
          openAssistant = undefined;
        } else {
          const content: Msg[] = [];
          if (p.text) content.push({ type: "text", text: String(p.text) });
          msg = {
            role: "assistant",
            content,
            api: "openai-completions",
            provider: "threadbox",
            model: String(p.model ?? "unknown"),
            usage: EMPTY_USAGE,
            stopReason: p.stopReason ?? "stop",
            timestamp: tsOf(e),
          };
          if (p.errorMessage) msg.errorMessage = p.errorMessage;
          openAssistant = msg;
        }
        const hasContent = Array.isArray(msg.content) && msg.content.length > 0;
        if (!hasContent && (msg.stopReason === "error" || msg.stopReason === "aborted")) {
          openAssistant = undefined;
          return; // an empty failed turn carries nothing for the model
        }
        for (const c of msg.content as Msg[]) if (c?.type === "toolCall") calls.set(c.id, c.name);
        messages.push(msg);
        return;
      }
      case "pi.tool_call": {
        const id = String(p.toolCallId);
        if (calls.has(id)) return; // already in a raw assistant message
        if (!openAssistant) {
          closeOpenCalls();
          flushChats();
          openAssistant = {
            role: "assistant",
            content: [],
            api: "openai-completions",
            provider: "threadbox",
            model: "unknown",
            usage: EMPTY_USAGE,
            stopReason: "toolUse",
            timestamp: tsOf(e),
          };
          messages.push(openAssistant);
        }
        openAssistant.content.push({ type: "toolCall", id, name: String(p.name), arguments: p.args ?? {} });
        if (openAssistant.stopReason === "stop") openAssistant.stopReason = "toolUse";
        calls.set(id, String(p.name));
        return;
      }
      case "pi.tool_result": {
        const id = String(p.toolCallId);
        if (!calls.has(id) || answered.has(id)) return; // orphan or duplicate result
        answered.add(id);
        openAssistant = undefined; // results follow: later tool calls belong to a new assistant turn
        messages.push({
          role: "toolResult",
          toolCallId: id,
          toolName: String(p.name ?? calls.get(id)),
          content: [{ type: "text", text: String(p.output ?? "") }],
          isError: Boolean(p.isError),
          timestamp: tsOf(e),
        });
        return;
      }
      default:
        return; // signal.*, pi.error, unknown types: not part of the model context
    }
  });
  closeOpenCalls();
  flushChats();

  const lines: string[] = [];
  const iso = (ms: number) => new Date(ms).toISOString();
  lines.push(JSON.stringify({ type: "session", version: 3, id: sessionId, timestamp: iso(now), cwd: opts.cwd }));
  let parentId: string | null = null;
  let n = 0;
  const nextId = () => (++n).toString(16).padStart(8, "0");
  if (opts.model) {
    const id = nextId();
    lines.push(
      JSON.stringify({ type: "model_change", id, parentId, timestamp: iso(now), provider: opts.model.provider, modelId: opts.model.modelId }),
    );
    parentId = id;
  }
  for (const m of messages) {
    const id = nextId();
    lines.push(JSON.stringify({ type: "message", id, parentId, timestamp: iso(m.timestamp ?? now), message: m }));
    parentId = id;
  }
  return {
    jsonl: lines.join("\n") + "\n",
    sessionId,
    messageCount: messages.length,
    pendingPrompt: trailing.length ? trailing.join("\n\n") : undefined,
  };
}
