import { backoffDelayMs } from "../../domain/backoff";
import { BOX_ENV, runDir, runnerPidPath, STREAM_TOKEN_FILE_PREFIX } from "../../domain/box-layout";

export type BoxState = "provisioning" | "live" | "dead" | "deleted";

export type BoxRowView = { ephemeral: boolean; state: BoxState; runningThreads: number; deletePending: boolean };

/** An ephemeral box with no running thread is deleted; a shared box never is; a tombstone stays one. */
export function shouldReap(box: BoxRowView): boolean {
  return box.ephemeral && box.runningThreads === 0 && (box.state === "live" || box.state === "provisioning" || box.state === "dead") && !box.deletePending;
}

/** What the box's alarm does, given its pending delete (`nextDeleteAt`, epoch ms) and the time. */
export type BoxAlarmDecision = "nothing" | "cancel" | "delete" | "rearm";

/**
 * A pending delete runs once it is due, unless a run took the box meanwhile (then it is dropped).
 * An alarm that comes before the deadline (one left from an earlier deadline) only re-arms.
 */
export function boxAlarmDecision(box: { state: BoxState; nextDeleteAt: number | null; runningThreads: number }, nowMs: number): BoxAlarmDecision {
  if (box.nextDeleteAt === null || box.state === "deleted") return "nothing";
  if (box.state === "live" && box.runningThreads > 0) return "cancel";
  return box.nextDeleteAt <= nowMs ? "delete" : "rearm";
}

/**
 * A shared box whose claim was not confirmed is its environment's when the environment (as the
 * house has it) names it; otherwise nothing will ever use or delete it, and it is retired.
 */
export function claimCheckDecision(environment: { sharedBoxId?: string } | null, boxId: string): "keep" | "retire" {
  return environment?.sharedBoxId === boxId ? "keep" : "retire";
}

/**
 * A box whose run has ended is held while its runner is still in it (it posts what the run left
 * after a failure the mirror already reported), but never past `drainUntilMs`.
 */
export function releaseDecision(d: { runnerRunning: boolean; drainUntilMs: number }, nowMs: number): "wait" | "delete" {
  return d.runnerRunning && nowMs < d.drainUntilMs ? "wait" : "delete";
}

/** How often a held box asks whether its runner has exited. */
export const RUNNER_DRAIN_POLL_MS = 1_000;

export const DELETE_BACKOFF_BASE_MS = 5_000;
export const DELETE_BACKOFF_MAX_MS = 10 * 60_000;

/** Exponential backoff for delete retries: 5 s, 10 s, 20 s, ... capped at 10 min. */
export function deleteRetryDelayMs(attempts: number): number {
  return backoffDelayMs(attempts, DELETE_BACKOFF_BASE_MS, DELETE_BACKOFF_MAX_MS);
}

const THREAD_ID_PATTERN = /^[A-Za-z0-9._:-]+$/;

/**
 * A shell script run in the box. TERM: the runner's recorded pid. KILL: every process whose
 * environment names the thread (runner, harness, and the tools it started in their own groups).
 * Null: the thread id cannot be put in a script safely.
 */
export function stopScript(threadId: string, signal: "TERM" | "KILL"): string | null {
  if (!THREAD_ID_PATTERN.test(threadId)) return null;
  if (signal === "TERM") {
    return `f="$HOME/${runnerPidPath(threadId)}"; if [ -f "$f" ]; then kill -TERM "$(cat "$f")" 2>/dev/null; fi; true`;
  }
  return `for d in /proc/[0-9]*; do p=\${d#/proc/}; [ "$p" = "$$" ] && continue; ` +
    `if tr '\\0' '\\n' < "$d/environ" 2>/dev/null | grep -qx "${BOX_ENV.threadId}=${threadId}"; then kill -KILL "$p" 2>/dev/null; fi; done; true`;
}

const RUN_ID_PATTERN = /^[A-Za-z0-9_-][A-Za-z0-9._:-]*$/;

/**
 * Removes a stopped run's stream token files: one is left when the launch uploaded it and then
 * died before its runner (which removes it at once) started. A stopped run keeps its box, and the
 * next run's commands there could read it. Null: the run id cannot be put in a script safely.
 */
export function tokenCleanupScript(runId: string): string | null {
  if (!RUN_ID_PATTERN.test(runId) || runId.includes("..")) return null;
  return `rm -f "$HOME/${runDir(runId)}/${STREAM_TOKEN_FILE_PREFIX}"*; true`;
}
