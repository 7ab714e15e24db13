/**
 * The Codex descriptor: `codex exec --json`.
 *
 * Records: `thread.started`, `turn.started`, `item.started` / `item.updated` / `item.completed`
 * (item types agent_message, reasoning, command_execution, file_change, mcp_tool_call,
 * web_search, todo_list, error), `turn.completed` (usage), `turn.failed` (error), `error`.
 * Codex gives no stop reasons: an agent_message is held until the next record tells whether
 * the turn went on with a tool (`toolUse`) or ended (`stop`). Pure.
 */
import { decideOutcome } from "./outcome";
import { npmInstall } from "../../domain/pi-install";
import { parseJsonLine } from "./types";
import type { CodingAgent, HarnessCommand, HarnessParser, StartOptions, ThreadEntry } from "./types";

export const CODEX_PACKAGE = "@openai/codex";

const TOOL_ITEMS = new Set(["command_execution", "file_change", "mcp_tool_call", "web_search"]);

function toolCallOf(item: any): { name: string; args: unknown } {
  switch (item.type) {
    case "command_execution":
      return { name: "bash", args: { command: item.command } };
    case "file_change":
      return { name: "file_change", args: { changes: item.changes ?? [] } };
    case "mcp_tool_call":
      return { name: `${item.server}.${item.tool}`, args: item.arguments ?? {} };
    case "web_search":
      return { name: "web_search", args: { query: item.query } };
    default:
      return { name: item.type, args: {} };
  }
}

function toolResultOf(item: any): { output: string; isError: boolean } {
  switch (item.type) {
    case "command_execution":
      return {
        output: String(item.aggregated_output ?? ""),
        isError: item.status === "failed" || (typeof item.exit_code === "number" && item.exit_code !== 0),
      };
    case "file_change":
      return {
        output: (item.changes ?? []).map((c: any) => `${c.kind} ${c.path}`).join("\n"),
        isError: item.status === "failed",
      };
    case "mcp_tool_call": {
      const isError = item.status === "failed" || Boolean(item.error);
      const res = item.error?.message ?? item.result;
      return { output: typeof res === "string" ? res : JSON.stringify(res ?? null), isError };
    }
    default:
      return { output: "", isError: item.status === "failed" };
  }
}

export function createCodexParser(): HarnessParser {
  let held: ThreadEntry | undefined; // last agent_message, stopReason decided by what follows
  const started = new Set<string>();
  let model: string | undefined;

  const release = (stopReason: "stop" | "toolUse"): ThreadEntry[] => {
    if (!held) return [];
    const e = held;
    held = undefined;
    (e.payload as any).stopReason = stopReason;
    return [e];
  };

  return {
    push(line: string): ThreadEntry[] {
      const ev = parseJsonLine(line);
      if (ev === null) return [];
      const item = ev.item;
      switch (ev.type) {
        case "thread.started":
          return [];
        case "item.started": {
          if (!item || !TOOL_ITEMS.has(item.type)) return [];
          const out = release("toolUse");
          const { name, args } = toolCallOf(item);
          started.add(item.id);
          out.push({ payload: { type: "pi.tool_call", toolCallId: item.id, name, args, raw: ev } });
          return out;
        }
        case "item.completed": {
          if (!item) return [];
          if (item.type === "agent_message") {
            const out = release("toolUse");
            const payload: Record<string, unknown> = { type: "pi.assistant", text: String(item.text ?? ""), stopReason: "stop", raw: ev };
            if (model) payload.model = model;
            held = { payload: payload as any };
            return out;
          }
          if (item.type === "error") {
            return [...release("toolUse"), { payload: { type: "pi.error", message: String(item.message ?? "codex error"), raw: ev } }];
          }
          if (!TOOL_ITEMS.has(item.type)) return []; // reasoning, todo_list: not mirrored
          const out = release("toolUse");
          if (!started.has(item.id)) {
            const { name, args } = toolCallOf(item);
            out.push({ payload: { type: "pi.tool_call", toolCallId: item.id, name, args, raw: ev } });
          }
          started.delete(item.id);
          const { output, isError } = toolResultOf(item);
          out.push({
            payload: { type: "pi.tool_result", toolCallId: item.id, name: toolCallOf(item).name, output, isError, raw: ev },
          });
          return out;
        }
        case "turn.completed":
          return release("stop");
        case "turn.failed":
          return [
            ...release("stop"),
            { payload: { type: "pi.error", message: String(ev.error?.message ?? "turn failed"), raw: ev } },
          ];
        case "error": {
          const message = String(ev.message ?? "codex error");
          // "Reconnecting... n/m" is codex retrying a dropped stream: not fatal, keep it as a note
          if (/^Reconnecting\b/.test(message)) return [{ payload: { type: "pi.warning", message, raw: ev } }];
          return [...release("stop"), { payload: { type: "pi.error", message, raw: ev } }];
        }
        default:
          return [];
      }
    },
    end(): ThreadEntry[] {
      // a message held at end of stream without turn.completed: the turn did not finish
      if (!held) return [];
      const e = held;
      held = undefined;
      (e.payload as any).stopReason = "aborted";
      return [e];
    },
  };
}

/** Permission modes as codex's sandbox: reading only, writing the workspace, or no sandbox at all. */
export function codexSandboxArgs(mode: string | undefined): string[] {
  if (mode === "plan") return ["--sandbox", "read-only"];
  if (mode === "default" || mode === "acceptEdits") return ["--sandbox", "workspace-write"];
  return ["--dangerously-bypass-approvals-and-sandbox"];
}

export function buildCodexCommand(opts: StartOptions): HarnessCommand {
  const argv = ["codex", "exec"];
  if (opts.sessionFile) argv.push("resume", opts.sessionFile);
  argv.push("--json", "--skip-git-repo-check", ...codexSandboxArgs(opts.permissionMode));
  if (opts.model) argv.push("--model", opts.model);
  argv.push(...(opts.extraArgs ?? []));
  // codex exec has no system-prompt flag: the instructions lead the prompt
  const instructions = [opts.systemPrompt, opts.appendSystemPrompt].filter((s): s is string => !!s);
  let prompt = opts.prompt;
  if (instructions.length) prompt = `<instructions>\n${instructions.join("\n\n")}\n</instructions>\n\n${prompt}`;
  if (opts.allowedTools?.length) prompt = `Only use these tools: ${opts.allowedTools.join(", ")}.\n\n${prompt}`;
  argv.push("--", prompt);
  return { argv, env: {} };
}

export const codexAgent: CodingAgent = {
  name: "codex",
  bin: "codex",
  install: npmInstall(CODEX_PACKAGE, "command -v codex >/dev/null 2>&1"),
  mirrorsItself: false,
  sessionIdOf: (ev) => (ev?.type === "thread.started" && typeof ev.thread_id === "string" ? ev.thread_id : undefined),
  buildCommand: buildCodexCommand,
  createParser: createCodexParser,
  decideOutcome,
};
