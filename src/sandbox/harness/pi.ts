/**
 * The pi coding-agent descriptor, and the projection of pi messages to `pi.*` entries that
 * both the mirror extension and the `--mode json` parser use. Pure.
 */
import { decideOutcome } from "./outcome";
import { parseJsonLine } from "./types";
import type {
  CodingAgent,
  HarnessCommand,
  HarnessParser,
  StartOptions,
  StopReason,
  ThreadEntry,
} from "./types";

import { piInstall } from "../../domain/pi-install";
export { PI_PACKAGE, PI_VERSION, PI_PREFIX, npmInstall } from "../../domain/pi-install";

const STOP_REASONS: StopReason[] = ["stop", "length", "toolUse", "error", "aborted"];

function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .filter((c: any) => c && c.type === "text" && typeof c.text === "string")
    .map((c: any) => c.text as string)
    .join("");
}

/** Roles the mirror projects (and counts for its message index). */
export function isMirroredRole(role: unknown): boolean {
  return role === "user" || role === "assistant" || role === "toolResult";
}

/**
 * One pi message -> its `pi.*` entries (no ids). System and custom messages give none.
 * An assistant message gives `pi.assistant` (carrying the whole message as `raw`, which the
 * session rebuild uses) followed by one `pi.tool_call` per tool call.
 */
export function piMessageToEntries(message: any): ThreadEntry[] {
  if (!message || typeof message !== "object") return [];
  const ts = typeof message.timestamp === "number" ? message.timestamp : undefined;
  const withTs = (e: ThreadEntry): ThreadEntry => (ts !== undefined ? { ...e, ts } : e);
  switch (message.role) {
    case "user":
      return [withTs({ payload: { type: "pi.user", text: textOf(message.content) } })];
    case "assistant": {
      const stopReason: StopReason = STOP_REASONS.includes(message.stopReason) ? message.stopReason : "stop";
      const payload: Record<string, unknown> = {
        type: "pi.assistant",
        text: textOf(message.content),
        stopReason,
        raw: message,
      };
      if (message.model) payload.model = message.model;
      if (message.errorMessage) payload.errorMessage = message.errorMessage;
      const out: ThreadEntry[] = [withTs({ payload: payload as any })];
      for (const c of Array.isArray(message.content) ? message.content : []) {
        if (c && c.type === "toolCall") {
          out.push(withTs({ payload: { type: "pi.tool_call", toolCallId: c.id, name: c.name, args: c.arguments ?? {} } }));
        }
      }
      return out;
    }
    case "toolResult":
      return [
        withTs({
          payload: {
            type: "pi.tool_result",
            toolCallId: message.toolCallId,
            name: message.toolName,
            output: textOf(message.content),
            isError: Boolean(message.isError),
          },
        }),
      ];
    default:
      return [];
  }
}

/** Deterministic id of the k-th entry of the mirrored message at `index` of pi session `sessionId`. */
export function mirrorEntryId(threadId: string, sessionId: string, index: number, k = 0): string {
  return k === 0 ? `${threadId}:m:${sessionId}:${index}` : `${threadId}:m:${sessionId}:${index}:${k}`;
}

/** Parse a mirror entry id back; undefined when the id is not one. */
export function parseMirrorEntryId(
  id: string | undefined,
  threadId: string,
): { sessionId: string; index: number; k: number } | undefined {
  if (!id || !id.startsWith(`${threadId}:m:`)) return undefined;
  const rest = id.slice(threadId.length + 3).split(":");
  if (rest.length < 2) return undefined;
  const k = rest.length >= 3 ? Number(rest[rest.length - 1]) : 0;
  const indexStr = rest.length >= 3 ? rest[rest.length - 2] : rest[rest.length - 1];
  const sessionId = rest.slice(0, rest.length >= 3 ? -2 : -1).join(":");
  const index = Number(indexStr);
  if (!Number.isInteger(index) || !Number.isInteger(k)) return undefined;
  return { sessionId, index, k };
}

/**
 * THREADBOX_MIRROR_NEXT_INDEX for a same-box resume of pi session `sessionId`: one past the
 * highest message index of that session already on the thread (0 when none).
 */
export function mirrorNextIndex(entries: ThreadEntry[], threadId: string, sessionId: string): number {
  let next = 0;
  for (const e of entries) {
    const m = parseMirrorEntryId(e.id, threadId);
    if (m && m.sessionId === sessionId) next = Math.max(next, m.index + 1);
  }
  return next;
}

/** Id of a run's finished-signal: shared by the mirror and the runner so only one can land. */
export function finishedSignalId(threadId: string, runId: string): string {
  return `${threadId}:finished:${runId}`;
}

/** Parser of `pi --mode json` stdout: message_end records -> pi.* entries, raw event kept. */
export function createPiJsonParser(): HarnessParser {
  return {
    push(line: string): ThreadEntry[] {
      const ev = parseJsonLine(line);
      if (ev === null) return [];
      if (ev.type === "message_end") return piMessageToEntries(ev.message);
      if (ev.type === "auto_retry_end" && ev.success === false) {
        return [{ payload: { type: "pi.error", message: String(ev.finalError ?? "retries exhausted"), raw: ev } }];
      }
      if (ev.type === "extension_error") {
        return [{ payload: { type: "pi.error", message: `extension error: ${ev.error}`, raw: ev } }];
      }
      return [];
    },
    end: () => [],
  };
}

export interface PiCommandOptions extends StartOptions {
  /** output mode; the runner uses rpc when it steers pi (else json): stdout is consumed, the mirror posts */
  mode?: "json" | "print" | "rpc";
}

export function buildPiCommand(opts: PiCommandOptions): HarnessCommand {
  const mode = opts.mode ?? (opts.interactive ? "rpc" : "json");
  const argv = ["pi", "--mode", mode];
  for (const e of opts.extensions ?? []) argv.push("--extension", e);
  if (opts.provider) argv.push("--provider", opts.provider);
  if (opts.model) argv.push("--model", opts.model);
  if (opts.systemPrompt !== undefined) argv.push("--system-prompt", opts.systemPrompt);
  if (opts.appendSystemPrompt !== undefined) argv.push("--append-system-prompt", opts.appendSystemPrompt);
  if (opts.allowedTools) {
    if (opts.allowedTools.length === 0) argv.push("--no-tools");
    else argv.push("--tools", opts.allowedTools.join(","));
  }
  if (opts.sessionFile) argv.push("--session", opts.sessionFile);
  argv.push(...(opts.extraArgs ?? []));
  // In RPC mode the task goes in on stdin as the first `prompt` command.
  // `--` so a prompt starting with "-" is not read as an option
  if (mode !== "rpc") argv.push("--", opts.prompt);
  return { argv, env: { PI_SKIP_VERSION_CHECK: "1" } };
}

export const piAgent: CodingAgent = {
  name: "pi",
  bin: "pi",
  install: piInstall(),
  mirrorsItself: true,
  takesMessages: true,
  buildCommand: (opts) => buildPiCommand(opts),
  createParser: createPiJsonParser,
  decideOutcome,
};
