import { agentInputSchema, TOOL_NAMES, TRIGGER_MODES } from "../../agents";
import { createAgent } from "../../http/routes-agents";
import { defineTool, type ToolContext } from "./context";
import type { ToolSpec } from "../tool-loop";

/** House tools: what a bot may set up for its house, as itself. */
export function agentTools(ctx: ToolContext): ToolSpec[] {
  return [defineTool({
    name: "create_agent",
    description: "Create a new bot in this house.",
    parameters: {
      type: "object",
      properties: {
        name: { type: "string" },
        handle: { type: "string", description: "what @handle mentions: [a-z0-9_-]" },
        model: { type: "string", description: "provider/modelId" },
        systemPrompt: { type: "string" },
        triggerMode: { type: "string", enum: [...TRIGGER_MODES] },
        tools: { type: "array", items: { type: "string", enum: [...TOOL_NAMES] } },
        environmentId: { type: "string" },
        gateModel: { type: "string", description: "provider/modelId of a cheap model that decides, for an ambient bot, whether to reply; default: model" },
      },
      required: ["name", "handle", "model"],
      additionalProperties: false,
    },
    args: agentInputSchema,
    async run(args) {
      const a = await createAgent(ctx.env, ctx.claims, args);
      return JSON.stringify({ id: a.id, handle: a.handle, triggerMode: a.triggerMode });
    },
  })];
}
