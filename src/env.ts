import { logEvent } from "./domain/log-event";
import type { ThreadActor } from "./actors/thread/thread-actor";
import type { HouseActor } from "./actors/house/house-actor";
import type { SandboxActor } from "./actors/sandbox/sandbox-actor";

export interface Env {
  THREADS: DurableObjectNamespace<ThreadActor>;
  HOUSES: DurableObjectNamespace<HouseActor>;
  SANDBOXES: DurableObjectNamespace<SandboxActor>;
  THREADBOX_ADMIN_SECRET?: string;
  THREADBOX_TOKEN_SECRET?: string;
  LONG_POLL_TIMEOUT_MS?: string;
  ORPHAN_SILENCE_MS?: string;
  PROBE_INTERVAL_MS?: string;
  DAYTONA_API_URL?: string;
  DAYTONA_API_KEY?: string;
  DAYTONA_TARGET?: string;
  THREADBOX_STREAM_URL?: string;
  /** The snapshot a run's box is made from when its environment names none (`npm run snapshot` makes it). */
  THREADBOX_SNAPSHOT?: string;
  /** The image a run's box is made from when that snapshot does not exist. */
  THREADBOX_FALLBACK_IMAGE?: string;
  PROBE_CONFIRM_MS?: string;
  STOPPED_BOX_GRACE_MS?: string;
  STOP_GRACE_MS?: string;
  RUNNER_DRAIN_MS?: string;
  STREAM_TOKEN_TTL_SECONDS?: string;
  /** How soon a bot's turn interrupted by an eviction is resumed (ms); default 60000. */
  DISPATCH_TURN_LEASE_MS?: string;
  DISPATCH_AGENT_CACHE_MS?: string;
  /** Largest folder archive (upload or synced back), bytes; default 16 MiB. */
  FOLDER_MAX_BYTES?: string;
}

/** The numeric settings: each a positive whole number (ms or bytes) with a default. */
export type IntVarName = "LONG_POLL_TIMEOUT_MS" | "ORPHAN_SILENCE_MS" | "PROBE_INTERVAL_MS" | "PROBE_CONFIRM_MS" | "STOPPED_BOX_GRACE_MS"
  | "STOP_GRACE_MS" | "RUNNER_DRAIN_MS" | "DISPATCH_TURN_LEASE_MS" | "DISPATCH_AGENT_CACHE_MS" | "FOLDER_MAX_BYTES" | "STREAM_TOKEN_TTL_SECONDS";

const warnedValues = new Set<string>();

/**
 * A numeric setting, or its default when unset. A value that is not a positive whole number
 * ("5s", "0.5", "0") cannot be used: the default applies, and the log says so once per isolate,
 * since a worker has no start-up to refuse it at.
 */
export function intVar(env: Partial<Record<IntVarName, string>>, name: IntVarName, fallback: number, range: { min?: number; max?: number } = {}): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === "") return fallback;
  const n = Number(raw);
  const min = range.min ?? 1;
  const max = range.max ?? Number.MAX_SAFE_INTEGER;
  if (Number.isSafeInteger(n) && n >= min && n <= max) return n;
  if (!warnedValues.has(`${name}=${raw}`)) {
    warnedValues.add(`${name}=${raw}`);
    const reason = range.min === undefined && range.max === undefined ? "not a positive whole number" : `not a whole number from ${min} to ${max}`;
    logEvent("config_value_ignored", { name, value: raw, using: fallback, reason }, "warn");
  }
  return fallback;
}
