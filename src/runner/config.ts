/** Box-side configuration from the environment (names in docs/CONTRACTS.md). */
import { BOX_ENV } from "../domain/box-layout";

export interface BoxConfig {
  threadId: string;
  streamUrl: string;
  token: string;
  authorId?: string;
  runId?: string;
  mirrorNextIndex?: number;
  heartbeatMs: number;
  runawayMs: number;
  /** how long a mirroring harness may take to write its first output before it is stopped; 0: no limit */
  startTimeoutMs: number;
  /** how long pi, interrupted and waiting for what to do instead, waits for a message before the run ends as stopped; 0: for ever */
  idleAfterInterruptMs: number;
  /** SIGTERM -> SIGKILL grace, ms */
  killGraceMs: number;
  /** bound on posting at shutdown (mirror flush, runner finished-signal), ms */
  flushTimeoutMs: number;
  /** bound on collecting and posting the run's artifacts; 0 turns them off */
  artifactsTimeoutMs: number;
  /** pass chat posted mid-run to the harness (pi's RPC mode); THREADBOX_STEERING=0 turns it off */
  steering: boolean;
}

export const THREE_DAYS_MS = 3 * 24 * 60 * 60 * 1000;
export const THIRTY_MINUTES_MS = 30 * 60 * 1000;
export const FIVE_MINUTES_MS = 5 * 60 * 1000;

function num(v: string | undefined, dflt: number): number {
  if (v === undefined || v === "") return dflt;
  const n = Number(v);
  return Number.isFinite(n) && n >= 0 ? n : dflt;
}

/**
 * Returns the config, or the list of missing required variables. The token comes separately, from
 * the file THREADBOX_STREAM_TOKEN_FILE names (see token-file.ts), never from the environment.
 */
export function readBoxConfig(env: Record<string, string | undefined>, token: string | undefined): BoxConfig | { missing: string[] } {
  const missing: string[] = [BOX_ENV.threadId, BOX_ENV.streamUrl].filter((k) => !env[k]);
  if (!token) missing.push(BOX_ENV.streamTokenFile);
  if (missing.length || !token) return { missing };
  const nextIdx = env[BOX_ENV.mirrorNextIndex];
  return {
    threadId: env[BOX_ENV.threadId]!,
    streamUrl: env[BOX_ENV.streamUrl]!,
    token,
    authorId: env[BOX_ENV.authorId] || undefined,
    runId: env[BOX_ENV.runId] || undefined,
    mirrorNextIndex: nextIdx !== undefined && nextIdx !== "" && Number.isInteger(Number(nextIdx)) ? Number(nextIdx) : undefined,
    heartbeatMs: num(env[BOX_ENV.heartbeatMs], 5_000),
    runawayMs: num(env[BOX_ENV.runawayMs], THREE_DAYS_MS),
    // pi loads its extensions within seconds; minutes of nothing on a loaded box is a pi stuck
    // before its mirror could beat, not a slow one.
    startTimeoutMs: num(env[BOX_ENV.startTimeoutMs], FIVE_MINUTES_MS),
    idleAfterInterruptMs: num(env[BOX_ENV.idleAfterInterruptMs], THIRTY_MINUTES_MS),
    killGraceMs: num(env[BOX_ENV.killGraceMs], 10_000),
    // How long the end of a run waits for an unreachable thread (a worker deploy or restart, a
    // proxy blip) before what is unposted is given up: the final answer and the finished-signal
    // come last, so a short window loses exactly them. Far below the silence that orphans a run.
    flushTimeoutMs: num(env[BOX_ENV.flushTimeoutMs], 60_000),
    artifactsTimeoutMs: num(env[BOX_ENV.artifactsTimeoutMs], 20_000),
    steering: env[BOX_ENV.steering] !== "0",
  };
}
