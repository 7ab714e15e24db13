import { z } from "zod";
import type { Entry } from "../entries/schema";
import { allowedToolsSchema, permissionModeSchema, type PermissionMode } from "../workspace/box-config";
import type { HarnessName } from "../sandbox/harness/types";

/**
 * What a resume of a run keeps from it: its harness (the session it continues is that harness's)
 * and what the run's request chose over the environment's defaults. Without this a child delegated
 * read-only (`permissionMode: "plan"`) would be resumed with the environment's, possibly full, rights.
 * They ride on the run's claim entry.
 */
export type RunSettings = { harness?: HarnessName; model?: string; permissionMode?: PermissionMode; allowedTools?: string[] };

const runSettingsSchema = z.object({
  harness: z.enum(["pi", "claude-code", "codex"]).optional(),
  model: z.string().min(1).optional(),
  permissionMode: permissionModeSchema.optional(),
  allowedTools: allowedToolsSchema.optional(),
});

/** The fields a run's claim carries for a later resume: only what the run set itself. */
export function claimedSettings(spec: RunSettings): RunSettings {
  return {
    ...(spec.harness ? { harness: spec.harness } : {}),
    ...(spec.model ? { model: spec.model } : {}),
    ...(spec.permissionMode ? { permissionMode: spec.permissionMode } : {}),
    ...(spec.allowedTools ? { allowedTools: spec.allowedTools } : {}),
  };
}

/** The settings a claim entry recorded; nothing for a claim from before they were recorded. */
export function settingsOfClaim(claim: Entry | null): RunSettings {
  if (!claim) return {};
  const parsed = runSettingsSchema.safeParse(claim.payload);
  return parsed.success ? parsed.data : {};
}
