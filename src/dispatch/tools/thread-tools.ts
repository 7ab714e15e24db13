import { z } from "zod";
import { idSchema } from "../../auth/tokens";
import { ApiError } from "../../errors";
import { nonBlankText } from "../../entries/schema";
import { createThread, createThreadSchema } from "../../http/routes-threads";
import { houseStub, threadStub } from "../../http/actors";
import { unwrapRpc } from "../../actors/rpc";
import { defineTool, type ToolContext } from "./context";
import type { ToolSpec } from "../tool-loop";

/** Thread structure: make threads, list them, and speak in another thread of the same house. */
export function threadTools(ctx: ToolContext): ToolSpec[] {
  return [
    defineTool({
      name: "create_thread",
      description: "Create a new thread in this house (optionally bound to an environment, or as a child of a thread).",
      parameters: {
        type: "object",
        properties: {
          title: { type: "string" },
          environmentId: { type: "string" },
          parent: { type: "object", properties: { kind: { type: "string", enum: ["none", "agent", "thread"] }, id: { type: "string" } }, required: ["kind"] },
        },
        additionalProperties: false,
      },
      args: createThreadSchema.omit({ brainId: true }),
      async run(args) {
        const { thread: t } = await createThread(ctx.env, ctx.claims, args);
        return JSON.stringify({ id: t.id, title: t.title, environmentId: t.environmentId });
      },
    }),
    defineTool({
      name: "list_threads",
      description: "List the most recent threads of this house.",
      parameters: { type: "object", properties: { limit: { type: "integer", minimum: 1, maximum: 100 } }, additionalProperties: false },
      args: z.object({ limit: z.number().int().min(1).max(100).default(20) }).strict(),
      async run(args) {
        const list = await unwrapRpc(houseStub(ctx.env, ctx.claims.houseId).listThreads({ limit: args.limit }));
        return JSON.stringify(list.map((t) => ({ id: t.id, title: t.title, status: t.status, parent: t.parent })));
      },
    }),
    defineTool({
      name: "post_to_thread",
      description: "Post a chat message into another thread of this house, as yourself. A bare @handle in the text wakes that bot there.",
      parameters: {
        type: "object",
        properties: { threadId: { type: "string" }, text: { type: "string" } },
        required: ["threadId", "text"],
        additionalProperties: false,
      },
      args: z.object({ threadId: idSchema, text: nonBlankText(100_000, "text") }).strict(),
      async run(args, _signal, call) {
        if (args.threadId === ctx.threadId) throw new ApiError("bad_request", "that is this thread: answer here instead");
        if (ctx.postBudget.left <= 0) throw new ApiError("forbidden", "width cap: this turn may post into no more threads");
        // The id names the turn and the tool call (and what it posts, should a model reuse call
        // ids): the same call run again after a restart cannot post twice, and a later call of a
        // resumed turn is a post of its own, not taken for one made before the restart.
        const digest = await shortDigest(`${args.threadId}\u0000${args.text}`);
        const r = await unwrapRpc(threadStub(ctx.env, args.threadId).postChat(ctx.claims.houseId, {
          id: `post:${ctx.turnId}:${call.toolCallId}:${digest}`, text: args.text, authorId: ctx.claims.subject, depth: ctx.depth, sourceThreadId: ctx.threadId, reach: ctx.reach,
        }));
        // Only a post that landed wakes anybody, so only it counts against the cap (a resumed turn
        // counts its recorded posts the same way); the calls of a round run one after another.
        ctx.postBudget.left -= 1;
        return JSON.stringify({ posted: true, threadId: args.threadId, entryId: r.entryId });
      },
    }),
  ];
}

async function shortDigest(text: string): Promise<string> {
  const d = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
  return Array.from(d.slice(0, 6), (b) => b.toString(16).padStart(2, "0")).join("");
}
