import { z } from "zod";
import { recordSchema } from "../domain/record-schema";
import { idSchema } from "../auth/tokens";
import { TRIGGER_MODES, type TriggerMode } from "../agents";

/** Dispatch defaults; each is overridable per thread through `PATCH /api/threads/:id/config`. */
export const DEFAULT_AMBIENT_DELAY_MS = 2_000;
export const DEFAULT_COOLDOWN_MS = 0;
export const DEFAULT_WIDTH_CAP = 3;
/** No bot reacts to an entry at this depth or deeper: bounds any bot-to-bot chain, across threads too. */
export const MAX_DEPTH = 8;

export type DispatchConfig = {
  perAgent: Record<string, { triggerMode: TriggerMode }>;
  /** The mode of every bot without a `perAgent` entry, instead of its own (a DM thread: `mention`). */
  othersTriggerMode?: TriggerMode;
  ambientDelayMs: number;
  cooldownMs: number;
  widthCap: number;
};

export const DEFAULT_DISPATCH_CONFIG: DispatchConfig = {
  perAgent: {}, ambientDelayMs: DEFAULT_AMBIENT_DELAY_MS, cooldownMs: DEFAULT_COOLDOWN_MS, widthCap: DEFAULT_WIDTH_CAP,
};

/** A PATCH merges: `perAgent[id]: null` removes that agent's override. */
export const threadConfigPatchSchema = z.object({
  dispatch: z.object({
    perAgent: recordSchema(idSchema, z.object({ triggerMode: z.enum(TRIGGER_MODES) }).strict().nullable()).optional(),
    othersTriggerMode: z.enum(TRIGGER_MODES).nullable().optional(),
    ambientDelayMs: z.number().int().min(0).max(3_600_000).optional(),
    cooldownMs: z.number().int().min(0).max(86_400_000).optional(),
    widthCap: z.number().int().min(0).max(50).optional(),
  }).strict(),
}).strict();

export type ThreadConfigPatch = z.infer<typeof threadConfigPatchSchema>;

export function mergeDispatchConfig(current: DispatchConfig, patch: ThreadConfigPatch["dispatch"]): DispatchConfig {
  const perAgent = { ...current.perAgent };
  for (const [id, v] of Object.entries(patch.perAgent ?? {})) {
    if (v === null) delete perAgent[id];
    else perAgent[id] = { triggerMode: v.triggerMode };
  }
  const othersTriggerMode = patch.othersTriggerMode === null ? undefined : patch.othersTriggerMode ?? current.othersTriggerMode;
  return {
    perAgent,
    ...(othersTriggerMode ? { othersTriggerMode } : {}),
    ambientDelayMs: patch.ambientDelayMs ?? current.ambientDelayMs,
    cooldownMs: patch.cooldownMs ?? current.cooldownMs,
    widthCap: patch.widthCap ?? current.widthCap,
  };
}

/**
 * A DM thread (`parent.kind = "agent"`) starts with its bot answering every message, and the
 * house's other bots answering only when someone names them: the conversation is private.
 */
export function initialDispatchConfig(parent: { kind: string; id: string | null }): DispatchConfig | undefined {
  if (parent.kind === "agent" && parent.id) {
    return { ...DEFAULT_DISPATCH_CONFIG, perAgent: { [parent.id]: { triggerMode: "always" } }, othersTriggerMode: "mention" };
  }
  // Any other thread has the defaults, which a thread without stored settings reads anyway.
  return undefined;
}
