import { z } from "zod";
import type { Env } from "../../env";
import type { HouseClaims } from "../../auth/tokens";
import { ApiError } from "../../errors";
import { formatZodError } from "../../entries/schema";
import type { ToolSpec } from "../tool-loop";
import { errorMessage, logEvent } from "../../domain/log-event";
import type { Reach } from "../reach";

/** What a turn gives its tools. Tools act as the bot: `claims` is a bot-role house identity. */
export type ToolContext = {
  env: Env;
  claims: HouseClaims;
  threadId: string;
  environmentId: string | null;
  /** The depth this turn writes at; a post into another thread carries it too. */
  depth: number;
  turnId: string;
  /** The reach of the chat the turn answers, which a chat it posts elsewhere carries on. */
  reach: Reach;
  /** How many more threads this turn may post into (the width cap, per turn). */
  postBudget: { left: number };
};

export const TOOL_OUTPUT_MAX_BYTES = 16 * 1024;

export function truncate(text: string, maxBytes = TOOL_OUTPUT_MAX_BYTES): string {
  const bytes = new TextEncoder().encode(text);
  if (bytes.length <= maxBytes) return text;
  const head = new TextDecoder().decode(bytes.slice(0, maxBytes)).replace(/\uFFFD$/, "");
  return `${head}\n[output truncated: ${bytes.length} bytes, showing the first ${maxBytes}]`;
}

/**
 * A tool with zod-checked arguments. A client mistake (ApiError: denied, not found, ...) becomes
 * an error result the model can read and react to; anything else is a bug and is not shown to it.
 */
export function defineTool<T extends z.ZodType>(spec: {
  name: string;
  description: string;
  parameters: Record<string, unknown>;
  args: T;
  run(args: z.infer<T>, signal: AbortSignal, call: { toolCallId: string }): Promise<string>;
}): ToolSpec {
  return {
    name: spec.name,
    description: spec.description,
    parameters: spec.parameters,
    async execute(raw, signal, call) {
      const parsed = spec.args.safeParse(raw);
      if (!parsed.success) {
        return { output: `invalid arguments: ${formatZodError(parsed.error).map((i) => `${i.path || "(root)"}: ${i.message}`).join("; ")}`, isError: true };
      }
      try {
        return { output: truncate(await spec.run(parsed.data, signal, call)) };
      } catch (err) {
        if (err instanceof ApiError) return { output: `${err.code}: ${err.publicMessage}`, isError: true };
        logEvent("bot_tool_failed", { tool: spec.name, error: errorMessage(err) }, "error");
        return { output: `${spec.name} failed with an internal error`, isError: true };
      }
    },
  };
}
