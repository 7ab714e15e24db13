/** Box-side configuration from the environment (names in docs/CONTRACTS.md). */

export interface BoxConfig {
  threadId: string;
  streamUrl: string;
  token: string;
  authorId?: string;
  runId?: string;
  mirrorNextIndex?: number;
  heartbeatMs: number;
  runawayMs: number;
  /** SIGTERM -> SIGKILL grace, ms */
  killGraceMs: number;
  /** bound on posting at shutdown (mirror flush, runner finished-signal), ms */
  flushTimeoutMs: number;
}

export const THREE_DAYS_MS = 3 * 24 * 60 * 60 * 1000;

function num(v: string | undefined, dflt: number): number {
  if (v === undefined || v === "") return dflt;
  const n = Number(v);
  return Number.isFinite(n) && n >= 0 ? n : dflt;
}

/** Returns the config, or the list of missing required variables. */
export function readBoxConfig(env: Record<string, string | undefined>): BoxConfig | { missing: string[] } {
  const missing = ["THREADBOX_THREAD_ID", "THREADBOX_STREAM_URL", "THREADBOX_STREAM_TOKEN"].filter((k) => !env[k]);
  if (missing.length) return { missing };
  const nextIdx = env.THREADBOX_MIRROR_NEXT_INDEX;
  return {
    threadId: env.THREADBOX_THREAD_ID!,
    streamUrl: env.THREADBOX_STREAM_URL!,
    token: env.THREADBOX_STREAM_TOKEN!,
    authorId: env.THREADBOX_AUTHOR_ID || undefined,
    runId: env.THREADBOX_RUN_ID || undefined,
    mirrorNextIndex: nextIdx !== undefined && nextIdx !== "" && Number.isInteger(Number(nextIdx)) ? Number(nextIdx) : undefined,
    heartbeatMs: num(env.THREADBOX_HEARTBEAT_MS, 5_000),
    runawayMs: num(env.THREADBOX_RUNAWAY_MS, THREE_DAYS_MS),
    killGraceMs: num(env.THREADBOX_KILL_GRACE_MS, 10_000),
    flushTimeoutMs: num(env.THREADBOX_FLUSH_TIMEOUT_MS, 15_000),
  };
}
