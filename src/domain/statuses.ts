/** The statuses a run's finished-signal may carry, and the entry types every writer shares. */
export type FinishedStatus = "completed" | "pi_failed" | "pi_session_orphaned" | "stopped";

export const FINISHED_STATUSES = ["completed", "pi_failed", "pi_session_orphaned", "stopped"] as const satisfies readonly FinishedStatus[];

/** A thread's own status, as its row and the API show it. */
export const THREAD_STATUSES = ["idle", "running", "completed", "failed"] as const;
export type ThreadStatus = (typeof THREAD_STATUSES)[number];

/** Statuses a status-changed entry may carry: the launch claim (`running`), then one finished status. */
export const RUN_SIGNAL_STATUSES = ["running", ...FINISHED_STATUSES] as const;
export type RunSignalStatus = "running" | FinishedStatus;

export const STATUS_CHANGED = "signal.thread.status_changed";

/** Longest `reason` a status-changed entry may carry (the worker refuses a longer one). */
export const MAX_REASON_LENGTH = 10_000;

/**
 * A reason within MAX_REASON_LENGTH. A harness's failure message (an API error quoting a long
 * body) can be longer, and a refused finished-signal would leave the run to the silence alarm.
 */
export function boundedReason(reason: string): string {
  if (reason.length <= MAX_REASON_LENGTH) return reason;
  let cut = MAX_REASON_LENGTH - 1;
  // Not half of a surrogate pair.
  if (/[\uD800-\uDBFF]/.test(reason[cut - 1])) cut -= 1;
  return `${reason.slice(0, cut)}…`;
}

export const HEARTBEAT = "signal.heartbeat";
