/** The statuses a run's finished-signal may carry, and the entry types every writer shares. */
export type FinishedStatus = "completed" | "pi_failed" | "pi_session_orphaned" | "stopped";

export const FINISHED_STATUSES: readonly FinishedStatus[] = ["completed", "pi_failed", "pi_session_orphaned", "stopped"];

export const STATUS_CHANGED = "signal.thread.status_changed";
export const HEARTBEAT = "signal.heartbeat";
