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

export function intVar(value: string | undefined, fallback: number): number {
  const n = Number(value);
  return Number.isFinite(n) && n > 0 ? n : fallback;
}
