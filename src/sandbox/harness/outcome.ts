/**
 * decideOutcome: how a run ended, from the thread and the harness's exit code. Pure.
 *
 * The run's slice of the thread is everything after its own `status_changed: running` claim
 * (the one with its `runId`; else the last claim; the whole thread when there is none), up to
 * the next run's claim. Rules, first match wins:
 *   1. a finished-signal of this run already in the slice -> that status, nothing to post
 *      (one naming another run — a stopped run's runner reporting late — is not this run's)
 *   2. exit 0 and the last assistant stopped with "stop" -> completed
 *   3. last assistant stopReason "error"                 -> pi_failed (its errorMessage, the provider's words)
 *   4. a pi.error after the last assistant               -> pi_failed (its message)
 *   5. the runaway guard fired, or the harness wrote nothing by THREADBOX_START_TIMEOUT_MS -> pi_failed
 *   6. the runner was asked to stop                      -> stopped
 *   7. killed by a signal / non-zero exit                -> pi_failed
 *   8. no assistant message at all                       -> pi_failed
 *   9. last stopReason length / aborted / toolUse        -> pi_failed (the task did not finish)
 */
import {
  HEARTBEAT,
  STATUS_CHANGED,
  TERMINAL_STATUSES,
  type FinishedStatus,
  type Outcome,
  type OutcomeContext,
  type ThreadEntry,
} from "./types";
import { boundedReason } from "../../domain/statuses";
import { modelErrorReason } from "../../dispatch/provider-error";

const isTerminal = (s: unknown): s is FinishedStatus => TERMINAL_STATUSES.includes(s as FinishedStatus);

const isClaim = (e: ThreadEntry | undefined) => e?.payload?.type === STATUS_CHANGED && e.payload.status === "running";

/**
 * The entries of run `runId`: after its claim, up to the next claim (a later run's). Without a
 * `runId`, or when its claim is not there, the run is the one after the last claim. Heartbeats dropped.
 */
export function currentRunSlice(entries: ThreadEntry[], runId?: string): ThreadEntry[] {
  let claim = -1;
  for (let i = entries.length - 1; i >= 0; i--) {
    if (isClaim(entries[i]) && (runId === undefined || entries[i].payload.runId === runId)) {
      claim = i;
      break;
    }
  }
  if (claim < 0 && runId !== undefined) return currentRunSlice(entries);
  let end = entries.length;
  for (let i = claim + 1; i < entries.length; i++) {
    if (isClaim(entries[i])) {
      end = i;
      break;
    }
  }
  return entries.slice(claim + 1, end).filter((e) => e?.payload && e.payload.type !== HEARTBEAT);
}

/** Whether `e` ends run `runId`: a finished-signal naming it, or naming no run. */
function endsRun(e: ThreadEntry, runId: string | undefined): boolean {
  if (e.payload.type !== STATUS_CHANGED || !isTerminal(e.payload.status)) return false;
  const named = e.payload.runId;
  return runId === undefined || named === undefined || named === null || named === runId;
}

/** The finished-signal already on the run's slice, if any. */
export function findFinishedSignal(entries: ThreadEntry[], runId?: string): ThreadEntry | undefined {
  return currentRunSlice(entries, runId).find((e) => endsRun(e, runId));
}

export function finishedSignal(status: FinishedStatus, reason: string, ctx: OutcomeContext = {}): ThreadEntry {
  const payload: Record<string, unknown> = { type: STATUS_CHANGED, status, reason: boundedReason(reason) };
  if (ctx.boxId) payload.boxId = ctx.boxId;
  if (ctx.runId) payload.runId = ctx.runId;
  const entry: ThreadEntry = { payload: payload as ThreadEntry["payload"] };
  if (ctx.signalId) entry.id = ctx.signalId;
  if (ctx.authorId) entry.authorId = ctx.authorId;
  return entry;
}

export function decideOutcome(
  threadEntries: ThreadEntry[],
  exitCode: number | null,
  ctx: OutcomeContext = {},
): Outcome {
  const slice = currentRunSlice(threadEntries, ctx.runId);
  const done = slice.find((e) => endsRun(e, ctx.runId));
  if (done) {
    return {
      status: done.payload.status as FinishedStatus,
      reason: String(done.payload.reason ?? "already finished"),
      entries: [],
      alreadyFinished: true,
    };
  }

  let lastAssistantIdx = -1;
  for (let i = slice.length - 1; i >= 0; i--) {
    if (slice[i].payload.type === "pi.assistant") {
      lastAssistantIdx = i;
      break;
    }
  }
  const last = lastAssistantIdx >= 0 ? slice[lastAssistantIdx].payload : undefined;
  const stopReason = last?.stopReason as string | undefined;
  const laterError = slice.slice(lastAssistantIdx + 1).find((e) => e.payload.type === "pi.error");

  const out = (status: FinishedStatus, reason: string): Outcome => ({
    status,
    reason,
    entries: [finishedSignal(status, reason, ctx)],
    alreadyFinished: false,
  });

  if (exitCode === 0 && stopReason === "stop" && !laterError && !ctx.runaway) return out("completed", "stop");
  // The run's last turn is the interrupted one: pi reports a model call cut short by the abort (an
  // interrupt during a tool call) as an `error` stop. A real model error was posted by the mirror.
  if (ctx.idleAfterInterruptMs !== undefined) return out("stopped", `no message within ${formatWait(ctx.idleAfterInterruptMs)} of the interrupt (THREADBOX_IDLE_AFTER_INTERRUPT_MS)`);
  if (stopReason === "error") return out("pi_failed", modelErrorReason(String(last?.errorMessage || "model error")));
  if (laterError) return out("pi_failed", String(laterError.payload.message || "harness error"));
  if (ctx.runaway) return out("pi_failed", "runaway guard: the harness ran past THREADBOX_RUNAWAY_MS");
  if (ctx.startTimeoutMs !== undefined) return out("pi_failed", `the harness did not start: no output within ${formatWait(ctx.startTimeoutMs)} (THREADBOX_START_TIMEOUT_MS)`);
  if (ctx.stopRequested) return out("stopped", "stopped by request");
  if (exitCode === null) return out("pi_failed", `harness killed by signal ${ctx.signal ?? "unknown"}`);
  if (exitCode !== 0) return out("pi_failed", `harness exited with code ${exitCode}`);
  if (!last) return out("pi_failed", "harness exited without an assistant message");
  if (stopReason === "length") return out("pi_failed", "length: the model hit its output limit");
  if (stopReason === "aborted") return out("pi_failed", "aborted");
  return out("pi_failed", `harness exited after stopReason ${stopReason ?? "unknown"}`);
}

/** "30 min", "90 s", "1500 ms": a wait as a reader says it. */
function formatWait(ms: number): string {
  if (ms >= 60_000 && ms % 60_000 === 0) return `${ms / 60_000} min`;
  if (ms >= 1_000 && ms % 1_000 === 0) return `${ms / 1_000} s`;
  return `${ms} ms`;
}
