import { TOOL_NAMES } from "../../agents";
import type { ToolSpec } from "../tool-loop";
import type { ToolContext } from "./context";
import { sandboxTools } from "./sandbox-tools";
import { threadTools } from "./thread-tools";
import { agentTools } from "./agent-tools";

/** The tools one turn gets: every tool, narrowed by the agent's allow-list when it has one. */
export function buildTools(ctx: ToolContext, allow: readonly string[] | undefined): ToolSpec[] {
  const all = [...sandboxTools(ctx), ...threadTools(ctx), ...agentTools(ctx)];
  const allowed = new Set(allow ?? TOOL_NAMES);
  return all.filter((t) => allowed.has(t.name));
}
