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
export const HEARTBEAT = "signal.heartbeat";
