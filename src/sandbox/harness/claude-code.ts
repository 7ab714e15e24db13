/**
 * The Claude Code descriptor: `claude -p --output-format stream-json --verbose`.
 *
 * stream-json records: `system` (subtype init), `assistant` (an Anthropic message; Claude Code
 * often emits one record per content block, sharing the message id), `user` (tool_result
 * blocks), and one final `result` (subtype `success`, or `error_max_turns` /
 * `error_during_execution`; `is_error` can also be true on subtype success for API errors).
 * Pure.
 */
import { decideOutcome } from "./outcome";
import { npmInstall } from "../../domain/pi-install";
import { parseJsonLine } from "./types";
import type { CodingAgent, HarnessCommand, HarnessParser, StartOptions, StopReason, ThreadEntry } from "./types";

export const CLAUDE_CODE_PACKAGE = "@anthropic-ai/claude-code";

function mapStopReason(stop: unknown, hasToolUse: boolean): StopReason {
  switch (stop) {
    case "end_turn":
    case "stop_sequence":
      return "stop";
    case "tool_use":
      return "toolUse";
    case "max_tokens":
      return "length";
    case "refusal":
      return "error";
    default:
      return hasToolUse ? "toolUse" : "stop";
  }
}

function toolResultText(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map((c: any) => (c?.type === "text" ? String(c.text ?? "") : c?.type ? `[${c.type}]` : ""))
      .join("");
  }
  return content == null ? "" : JSON.stringify(content);
}

export function createClaudeCodeParser(): HarnessParser {
  const toolNames = new Map<string, string>();
  let model: string | undefined;
  return {
    push(line: string): ThreadEntry[] {
      const ev = parseJsonLine(line);
      if (ev === null) return [];
      const out: ThreadEntry[] = [];
      switch (ev.type) {
        case "system":
          if (ev.subtype === "init" && typeof ev.model === "string") model = ev.model;
          return [];
        case "assistant": {
          if (ev.parent_tool_use_id) return []; // a sub-agent's inner turn: not the run's transcript
          const msg = ev.message ?? {};
          const content: any[] = Array.isArray(msg.content) ? msg.content : [];
          const text = content
            .filter((c) => c?.type === "text")
            .map((c) => String(c.text ?? ""))
            .join("");
          const toolUses = content.filter((c) => c?.type === "tool_use");
          if (text || toolUses.length === 0) {
            const payload: Record<string, unknown> = {
              type: "pi.assistant",
              text,
              stopReason: mapStopReason(msg.stop_reason, toolUses.length > 0),
              raw: ev,
            };
            if (msg.model ?? model) payload.model = msg.model ?? model;
            out.push({ payload: payload as any });
          }
          for (const tu of toolUses) {
            toolNames.set(tu.id, tu.name);
            out.push({
              payload: { type: "pi.tool_call", toolCallId: tu.id, name: tu.name, args: tu.input ?? {}, raw: text ? undefined : ev },
            });
          }
          return out;
        }
        case "user": {
          if (ev.parent_tool_use_id) return [];
          const content: any[] = Array.isArray(ev.message?.content) ? ev.message.content : [];
          for (const c of content) {
            if (c?.type !== "tool_result") continue;
            out.push({
              payload: {
                type: "pi.tool_result",
                toolCallId: c.tool_use_id,
                name: toolNames.get(c.tool_use_id),
                output: toolResultText(c.content),
                isError: Boolean(c.is_error),
                raw: ev,
              },
            });
          }
          return out;
        }
        case "result": {
          const failed = ev.is_error === true || (typeof ev.subtype === "string" && ev.subtype.startsWith("error"));
          if (failed) {
            const detail = typeof ev.result === "string" && ev.result ? `: ${ev.result}` : "";
            out.push({ payload: { type: "pi.error", message: `claude-code ${ev.subtype ?? "error"}${detail}`, raw: ev } });
          }
          return out;
        }
        default:
          return [];
      }
    },
    end: () => [],
  };
}

export function buildClaudeCodeCommand(opts: StartOptions): HarnessCommand {
  const argv = ["claude", "-p", "--output-format", "stream-json", "--verbose", "--permission-mode", opts.permissionMode ?? "bypassPermissions"];
  if (opts.model) argv.push("--model", opts.model);
  if (opts.systemPrompt !== undefined) argv.push("--system-prompt", opts.systemPrompt);
  if (opts.appendSystemPrompt !== undefined) argv.push("--append-system-prompt", opts.appendSystemPrompt);
  if (opts.allowedTools) {
    // --allowedTools only spares a prompt, and bypassPermissions (the default here) spares every
    // prompt anyway: what makes the list a limit is --tools, the built-in tools that exist at all.
    // It takes names without a rule's pattern, and knows no MCP tools (those stay as configured).
    const builtIn = [...new Set(opts.allowedTools.filter((t) => !t.startsWith("mcp__")).map((t) => t.replace(/\(.*$/, "")))];
    argv.push("--tools", builtIn.join(","));
    if (opts.allowedTools.length > 0) argv.push("--allowedTools", opts.allowedTools.join(","));
  }
  if (opts.sessionFile) argv.push("--resume", opts.sessionFile);
  argv.push(...(opts.extraArgs ?? []));
  argv.push("--", opts.prompt);
  return { argv, env: { DISABLE_AUTOUPDATER: "1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1" } };
}

export const claudeCodeAgent: CodingAgent = {
  name: "claude-code",
  bin: "claude",
  install: npmInstall(CLAUDE_CODE_PACKAGE, "command -v claude >/dev/null 2>&1"),
  mirrorsItself: false,
  sessionIdOf: (ev) => (ev?.type === "system" && ev.subtype === "init" && typeof ev.session_id === "string" ? ev.session_id : undefined),
  buildCommand: buildClaudeCodeCommand,
  createParser: createClaudeCodeParser,
  decideOutcome,
};
