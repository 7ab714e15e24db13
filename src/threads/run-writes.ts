import type { ThreadStatus } from "../domain/statuses";
import { HEARTBEAT, STATUS_CHANGED } from "../domain/statuses";

/**
 * Where the run a token names stands on its thread, from the thread's row:
 * - `current`: the thread's running run. Its token writes as any stream token does.
 * - `unstarted`: it has not run (its claim is not on the thread, nor is it the row's run) and
 *   nothing runs now. Only a run driven from outside (src/sandbox/run.ts) has a token before
 *   its claim: a launch writes the claim before it mints the token.
 * - `over`: it ended, a later run took the thread, or it never ran and another run is on.
 */
export type RunStanding = "current" | "unstarted" | "over";

export function runStanding(row: { status: ThreadStatus; runId: string | null }, runId: string, claimed: () => boolean): RunStanding {
  if (row.status === "running") return row.runId === runId ? "current" : "over";
  return row.runId === runId || claimed() ? "over" : "unstarted";
}

/**
 * The entry types a run's box writes around its end, each inert once its run is over. A run ends
 * on the thread (a stop, the silence alarm, the first finished-signal) before its box has had its
 * say: the harness gets SIGTERM only after the stop is written, the mirror flushes its queue at
 * pi's shutdown, the runner flushes its own writers, then collects and posts the artifacts and
 * its stderr, then the finished-signal; an orphaned run's box may only have been slow and
 * flushes whenever it gets through. Refusing these would lose the run's record for good (a box's
 * writer retries a 403 until its flush deadline, then gives up). Once the run is over none of
 * them starts, claims or wakes anything: `pi.*` and live output are only shown (and read into a
 * session rebuilt for a resume, as the rest of the run's record is), a delivery mark and the
 * artifacts name their own run, a finished-signal of a run that is not the current one changes
 * nothing (run-rules.ts), and a heartbeat is taken but shows no run alive (see `showsRunAlive`).
 *
 * Everything else is refused, `chat` first: a chat wakes bots and is delivered to whichever agent
 * is running on the thread, so a kept box, or a process the agent left there, would speak into
 * the thread (and to its next run) as its brain for as long as the token lived.
 */
const INERT_TYPES: ReadonlySet<string> = new Set([HEARTBEAT, "signal.exec.output", "signal.run.message_delivered", "signal.run.stderr"]);
const INERT_PREFIXES = ["pi.", "artifact."] as const;

function isInertOnceOver(payload: { type: string; status?: unknown }): boolean {
  if (payload.type === STATUS_CHANGED) return payload.status !== "running";
  return INERT_TYPES.has(payload.type) || INERT_PREFIXES.some((p) => payload.type.startsWith(p));
}

/** A run driven from outside writes its start under these ids, with its own token (entries.ts). */
const isOwnStart = (id: string | undefined, runId: string) => id === `prompt:${runId}` || id === `claim:${runId}`;

/**
 * Why an entry written with the token of run `runId` is refused, or null when it may go on. The
 * writer's other rules (entries.ts) are checked besides this one. `onLog`: whether an entry of
 * that id is on the thread already.
 */
export function runWriteRefusal(
  standing: RunStanding, runId: string, entry: { id?: string; payload: { type: string; status?: unknown } }, onLog: (id: string) => boolean,
): string | null {
  if (standing === "current") return null;
  // Written again, an entry already on the thread is dropped as a duplicate and changes nothing:
  // a retry of a write taken while the run was on gets the answer it lost, not a refusal.
  if (entry.id !== undefined && onLog(entry.id)) return null;
  if (standing === "unstarted" && isOwnStart(entry.id, runId)) return null;
  if (isInertOnceOver(entry.payload)) return null;
  return standing === "unstarted"
    ? `run ${runId} has not started on this thread: its token writes its start (prompt:${runId}, claim:${runId}) first`
    : `run ${runId} is not this thread's current run: its token writes only what its box still owes the run (pi.*, artifact.*, live output, delivery marks, stderr, its own finished-signal)`;
}

/**
 * Whether a write shows the thread's running run alive (it puts off the silence alarm). A write
 * with the token of another run does not: an old run's box beating on would keep the run after
 * it from ever being found silent.
 */
export function showsRunAlive(row: { runId: string | null }, writerRunId: string | undefined): boolean {
  return writerRunId === undefined || row.runId === writerRunId;
}
