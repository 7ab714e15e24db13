import type { Entry, RunSignalStatus, ThreadStatus } from "../entries/schema";
import type { ThreadRow } from "./thread-row";
import { STATUS_CHANGED } from "../domain/statuses";

export type StatusPatch = { status: ThreadStatus; statusReason: string | null; statusDetail: string | null; boxId?: string | null; runStartedAt?: number | null; runId?: string | null };

const TERMINAL: Record<Exclude<RunSignalStatus, "running">, ThreadStatus> = {
  completed: "completed",
  pi_failed: "failed",
  pi_session_orphaned: "failed",
  stopped: "failed",
};

export function isTerminal(status: ThreadStatus): boolean {
  return status === "completed" || status === "failed";
}

/**
 * A launch's readiness milestone: a `running` status naming the box the run is on, written once
 * the box is assigned and before the harness writes anything (the claim that started the run went
 * on the thread before there was a box to name). It starts nothing: the run is already running.
 */
export function readinessMilestone(runId: string, boxId: string, nowMs: number): Entry {
  return { id: `${READINESS_ID}${runId}`, ts: nowMs, authorId: "threadbox", payload: { type: STATUS_CHANGED, status: "running", reason: `ready on box ${boxId}`, runId, boxId } };
}

const READINESS_ID = "ready:";

/**
 * What a `signal.thread.status_changed` entry does to the row. The first finished-signal of a run
 * wins; later ones, and one while no run is running, stay in the log but change nothing. A `running` claim starts a (new) run.
 * A finished-signal that names another run than the current one (a stopped run's runner ending
 * late, after a resume started the next run) changes nothing; one without a run id still counts.
 */
export function decideSignal(row: Pick<ThreadRow, "status"> & { runId?: string | null }, entry: Entry, nowMs: number): StatusPatch | null {
  // The control plane's own (clients cannot write a `ready:` id): never a claim, even if the run ended meanwhile.
  if (entry.id.startsWith(READINESS_ID)) return null;
  const p = entry.payload;
  if (p.type !== STATUS_CHANGED) return null;
  const status = p.status as RunSignalStatus;
  const reason = typeof p.reason === "string" ? p.reason : null;
  const runId = typeof p.runId === "string" ? p.runId : null;
  if (status === "running") {
    if (row.status === "running") return null;
    // A run is on the box its claim names, else on none until its launch assigns one: the
    // previous run's box (gone, maybe) is not this run's to be probed, shown or released.
    return { status: "running", statusReason: null, statusDetail: reason, boxId: typeof p.boxId === "string" ? p.boxId : null, runStartedAt: nowMs, runId };
  }
  // Only a running thread has a run to end: a finished-signal on an idle (never run) or settled
  // thread changes nothing.
  if (row.status !== "running") return null;
  if (isForeignRun(row, entry)) return null;
  return { status: TERMINAL[status], statusReason: status, statusDetail: reason };
}

/** A finished-signal for a run other than the row's current one. */
export function isForeignRun(row: { runId?: string | null }, entry: Entry): boolean {
  const runId = entry.payload.runId;
  return typeof runId === "string" && typeof row.runId === "string" && runId !== row.runId;
}

/**
 * The running thread's `detail`: where the run is between the claim and its finished-signal, from
 * the control plane's own milestone entries. Null: the entry changes nothing.
 */
export function decideDetail(row: Pick<ThreadRow, "status">, entry: Entry): string | null {
  if (row.status !== "running") return null;
  const p = entry.payload;
  if (p.type === "signal.thread.box_assigned" && typeof p.boxId === "string") return `preparing box ${p.boxId}`;
  if (p.type === "signal.run.launched") {
    const harness = typeof p.harness === "string" ? p.harness : "harness";
    const box = typeof p.boxId === "string" ? ` on box ${p.boxId}` : "";
    return `${harness} running${box}`;
  }
  return null;
}
