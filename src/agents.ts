import { z } from "zod";
import { idSchema } from "./auth/tokens";
import { nonBlankText } from "./entries/schema";

export const TRIGGER_MODES = ["mention", "ambient", "always"] as const;
export type TriggerMode = (typeof TRIGGER_MODES)[number];

/** Every tool a bot may be given; an agent's `tools` is an allow-list of these names. */
export const TOOL_NAMES = ["run_command", "delegate_task", "preview_link", "create_agent", "create_thread", "list_threads", "post_to_thread"] as const;
export type ToolName = (typeof TOOL_NAMES)[number];

/** What `@handle` in chat text matches. */
export const handleSchema = z.string().regex(/^[a-z0-9_-]{1,40}$/, "handle is 1-40 chars of [a-z0-9_-]");
/** `provider/modelId`, as pi's `--model` takes it. */
export const modelRefSchema = z.string().min(3).max(200).regex(/^[^/\s]+\/\S+$/, "model is provider/modelId");
/** A model as a run's harness takes it (`provider/modelId`, or what that harness accepts): one word. */
export const modelNameSchema = z.string().min(1).max(200).regex(/^[^\s\x00-\x1f\x7f]+$/, "a model name has no spaces, line breaks or control characters");

const fields = {
  // What the bot's model is told it is called, and what people see next to its messages.
  name: nonBlankText(200, "a bot's name"),
  handle: handleSchema,
  model: modelRefSchema,
  systemPrompt: z.string().max(50_000).optional(),
  triggerMode: z.enum(TRIGGER_MODES).default("mention"),
  tools: z.array(z.enum(TOOL_NAMES)).max(TOOL_NAMES.length)
    .refine((t) => new Set(t).size === t.length, "a tool is named twice").optional(),
  environmentId: idSchema.optional(),
  /** The cheap model that answers "should this bot reply?" for ambient mode; default: `model`. */
  gateModel: modelRefSchema.optional(),
};

export const agentInputSchema = z.object(fields).strict();

/** A PATCH changes only the fields it names; `null` clears an optional field. */
export const agentPatchSchema = z.object({
  name: fields.name.optional(),
  handle: fields.handle.optional(),
  model: fields.model.optional(),
  systemPrompt: fields.systemPrompt.unwrap().nullable().optional(),
  // Cleared, it is what a new bot gets.
  triggerMode: z.enum(TRIGGER_MODES).nullable().optional().transform((v) => (v === null ? "mention" as const : v)),
  tools: fields.tools.unwrap().nullable().optional(),
  environmentId: idSchema.nullable().optional(),
  gateModel: modelRefSchema.nullable().optional(),
}).strict();

export type AgentInput = z.infer<typeof agentInputSchema>;
export type AgentPatch = z.infer<typeof agentPatchSchema>;

export type Agent = {
  id: string;
  houseId: string;
  name: string;
  handle: string;
  model: string;
  systemPrompt?: string;
  triggerMode: TriggerMode;
  tools?: ToolName[];
  environmentId?: string;
  gateModel?: string;
  createdBy: string;
  createdAt: string;
  updatedAt: string;
};

export function applyAgentPatch(a: Agent, patch: AgentPatch, nowIso: string): Agent {
  const out: Agent = { ...a, updatedAt: nowIso };
  for (const [k, v] of Object.entries(patch) as [keyof AgentPatch, unknown][]) {
    if (v === undefined) continue;
    if (v === null) delete (out as Record<string, unknown>)[k];
    else (out as Record<string, unknown>)[k] = v;
  }
  return out;
}

/** Agent ids are minted with this prefix, so an `authorId` tells a bot from a person at a glance. */
export const AGENT_ID_PREFIX = "ag_";
