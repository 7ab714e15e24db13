// Pure decision rules of the run lifecycle, without a runtime.
import { describe, expect, it } from "vitest";
import { decideLiveness, foldProbe, LATE_ALARM_MS, livenessDeadlines, silenceGraceMs, type LivenessConfig, type ProbeState } from "../../src/threads/liveness";
import { decideDetail, decideSignal, isTerminal, readinessMilestone } from "../../src/threads/run-rules";
import { boxAlarmDecision, claimCheckDecision, deleteRetryDelayMs, releaseDecision, shouldReap, tokenCleanupScript } from "../../src/actors/sandbox/sandbox-decisions";
import type { ThreadRow } from "../../src/threads/thread-row";
import { getCodingAgent } from "../../src/sandbox/harness";

const cfg: LivenessConfig = { orphanSilenceMs: 300_000, probeIntervalMs: 60_000, probeConfirmMs: 5_000 };
const T0 = 1_800_000_000_000;

function row(over: Partial<ThreadRow> = {}): ThreadRow {
  return {
    id: "th_1", houseId: "h", parent: { kind: "none", id: null }, environmentId: null, title: null, status: "running",
    statusReason: null, statusDetail: null, boxId: "box_1", lastLivenessAt: null, runStartedAt: T0, runId: null, brainId: null,
    createdBy: "u", createdAt: T0, updatedAt: T0, ...over,
  };
}
const noProbe = { lastProbeAt: null, deadStreak: 0 };
const signal = (status: string, extra: Record<string, unknown> = {}) => ({ id: "e", ts: T0, payload: { type: "signal.thread.status_changed", status, ...extra } });

describe("liveness", () => {
  it("nothing is due for a thread that is not running", () => {
    for (const status of ["idle", "completed", "failed"] as const) {
      expect(livenessDeadlines(row({ status }), noProbe, cfg)).toEqual({ silenceAt: null, probeAt: null });
      expect(decideLiveness(row({ status }), noProbe, cfg, T0 + 10 * cfg.orphanSilenceMs)).toEqual({ kind: "none" });
    }
  });

  it("silence counts from the last sign of life, or from the claim when there was none", () => {
    expect(decideLiveness(row(), noProbe, cfg, T0 + cfg.orphanSilenceMs - 1).kind).not.toBe("orphan");
    expect(decideLiveness(row(), noProbe, cfg, T0 + cfg.orphanSilenceMs).kind).toBe("orphan");
    const alive = row({ lastLivenessAt: T0 + 200_000 });
    expect(decideLiveness(alive, { lastProbeAt: T0 + 380_000, deadStreak: 0 }, cfg, T0 + 400_000)).toEqual({ kind: "none" });
    expect(decideLiveness(alive, noProbe, cfg, T0 + 500_000).kind).toBe("orphan");
  });

  it("a silence found late (the alarm ran well past its deadline: the server was away) gets one grace before the run is orphaned", () => {
    const due = T0 + cfg.orphanSilenceMs;
    // On time (within LATE_ALARM_MS): orphaned at once, as always.
    expect(decideLiveness(row(), noProbe, cfg, due + LATE_ALARM_MS).kind).toBe("orphan");
    // Late: a grace of min(silence, 60 s), after which the check is due again.
    const late = decideLiveness(row(), noProbe, cfg, due + 120_000);
    expect(late).toEqual({ kind: "grace", until: due + 120_000 + silenceGraceMs(cfg) });
    const until = (late as { until: number }).until;
    expect(livenessDeadlines(row(), noProbe, cfg, until).silenceAt).toBe(until);
    expect(decideLiveness(row(), noProbe, cfg, until - 1, until).kind).not.toBe("orphan");
    // Still silent when the grace ends: orphaned, however late that alarm runs.
    expect(decideLiveness(row(), noProbe, cfg, until + 30_000, until).kind).toBe("orphan");
    // Heard in the grace: the next silence is judged afresh, with a grace of its own if found late again.
    const heard = row({ lastLivenessAt: until - 1_000 });
    expect(decideLiveness(heard, noProbe, cfg, until, until).kind).not.toBe("orphan");
    expect(decideLiveness(heard, noProbe, cfg, until - 1_000 + cfg.orphanSilenceMs + 120_000, until).kind).toBe("grace");
    expect(silenceGraceMs({ ...cfg, orphanSilenceMs: 15_000 })).toBe(15_000);
  });

  it("probes every interval, and sooner to confirm a first dead answer; never without a box", () => {
    expect(livenessDeadlines(row(), noProbe, cfg).probeAt).toBe(T0 + cfg.probeIntervalMs);
    expect(livenessDeadlines(row(), { lastProbeAt: T0 + 60_000, deadStreak: 1 }, cfg).probeAt).toBe(T0 + 65_000);
    expect(livenessDeadlines(row({ boxId: null }), noProbe, cfg).probeAt).toBeNull();
    expect(decideLiveness(row({ lastLivenessAt: T0 + 60_000 }), noProbe, cfg, T0 + 60_000)).toEqual({ kind: "probe" });
  });

  it("death needs two dead answers in a row; live or unknown in between resets", () => {
    let state: ProbeState = noProbe;
    const feed = (v: "live" | "dead" | "unknown") => {
      const r = foldProbe(state, v, T0);
      state = r.next;
      return r.confirmedDead;
    };
    expect(feed("dead")).toBe(false);
    expect(feed("unknown")).toBe(false);
    expect(feed("dead")).toBe(false);
    expect(feed("live")).toBe(false);
    expect(feed("dead")).toBe(false);
    expect(feed("dead")).toBe(true);
  });
});

describe("finished-signals", () => {
  it("a finished-signal while no run is running changes nothing", () => {
    for (const status of ["idle", "completed", "failed"] as const) {
      for (const finished of ["completed", "pi_failed", "pi_session_orphaned", "stopped"]) {
        expect(decideSignal({ status }, signal(finished), T0), `${status} + ${finished}`).toBeNull();
      }
    }
  });

  it("a launch's readiness milestone names the box and starts no run, even one written after its run ended", () => {
    const ready = readinessMilestone("r1", "box_7", T0);
    expect(ready).toMatchObject({ id: "ready:r1", payload: { type: "signal.thread.status_changed", status: "running", runId: "r1", boxId: "box_7" } });
    for (const status of ["idle", "running", "completed", "failed"] as const) expect(decideSignal({ status }, ready, T0), status).toBeNull();
    // The same status under a client's id is a claim, as before.
    expect(decideSignal({ status: "completed" }, { ...ready, id: "e" }, T0)).toMatchObject({ status: "running", boxId: "box_7" });
  });

  it("a claim starts a run; the first finished-signal wins; later ones change nothing", () => {
    const claim = decideSignal({ status: "idle" }, signal("running", { boxId: "box_9" }), T0);
    expect(claim).toMatchObject({ status: "running", boxId: "box_9", runStartedAt: T0 });
    expect(decideSignal({ status: "running" }, signal("running"), T0)).toBeNull();
    expect(decideSignal({ status: "running" }, signal("completed"), T0)).toMatchObject({ status: "completed", statusReason: "completed" });
    expect(decideSignal({ status: "running" }, signal("pi_failed", { reason: "boom" }), T0)).toMatchObject({ status: "failed", statusReason: "pi_failed", statusDetail: "boom" });
    expect(decideSignal({ status: "running" }, signal("stopped"), T0)).toMatchObject({ status: "failed", statusReason: "stopped" });
    expect(decideSignal({ status: "completed" }, signal("pi_failed"), T0)).toBeNull();
    expect(decideSignal({ status: "failed" }, signal("completed"), T0)).toBeNull();
    // A resume is a new claim on a finished thread.
    expect(decideSignal({ status: "completed" }, signal("running"), T0)).toMatchObject({ status: "running" });
    expect(decideSignal({ status: "running" }, { id: "c", ts: T0, payload: { type: "chat", text: "hi" } }, T0)).toBeNull();
    expect([isTerminal("completed"), isTerminal("failed"), isTerminal("running"), isTerminal("idle")]).toEqual([true, true, false, false]);
  });
});

describe("finished-signals are matched to their run", () => {
  it("a claim records its run; a finished-signal of another run changes nothing; one without a run id still counts", () => {
    expect(decideSignal({ status: "failed", runId: "run-a" }, signal("running", { runId: "run-b" }), T0)).toMatchObject({ status: "running", runId: "run-b" });
    const runningB = { status: "running" as const, runId: "run-b" };
    // The stopped run A's runner ends late, after run B was claimed.
    expect(decideSignal(runningB, signal("stopped", { runId: "run-a", reason: "stopped by request" }), T0)).toBeNull();
    expect(decideSignal(runningB, signal("completed", { runId: "run-b" }), T0)).toMatchObject({ status: "completed" });
    expect(decideSignal(runningB, signal("pi_failed", { reason: "old runner" }), T0)).toMatchObject({ status: "failed", statusReason: "pi_failed" });
    // A thread claimed before runs had ids takes any finished-signal.
    expect(decideSignal({ status: "running", runId: null }, signal("completed", { runId: "run-x" }), T0)).toMatchObject({ status: "completed" });
  });

  it("the runner's and the mirror's finished-signal carries the run id", () => {
    const out = getCodingAgent("pi").decideOutcome([], 1, { signalId: "t:finished:run-a", runId: "run-a" });
    expect(out.entries[0].payload).toMatchObject({ type: "signal.thread.status_changed", status: "pi_failed", runId: "run-a" });
  });
});

describe("run detail", () => {
  const entry = (payload: Record<string, unknown>) => ({ id: "e", ts: T0, payload: payload as { type: string } });
  it("names the milestone a running thread reached, and nothing once it is settled", () => {
    expect(decideDetail({ status: "running" }, entry({ type: "signal.thread.box_assigned", boxId: "box_1" }) as never)).toBe("preparing box box_1");
    expect(decideDetail({ status: "running" }, entry({ type: "signal.run.launched", harness: "codex", boxId: "box_1" }) as never)).toBe("codex running on box box_1");
    expect(decideDetail({ status: "completed" }, entry({ type: "signal.run.launched", harness: "pi" }) as never)).toBeNull();
    expect(decideDetail({ status: "running" }, entry({ type: "chat", text: "hi" }) as never)).toBeNull();
  });
});

describe("box reaping", () => {
  it("reaps only an ephemeral box with no running thread and no delete already pending", () => {
    const base = { ephemeral: true, state: "live" as const, runningThreads: 0, deletePending: false };
    expect(shouldReap(base)).toBe(true);
    expect(shouldReap({ ...base, ephemeral: false })).toBe(false);
    expect(shouldReap({ ...base, runningThreads: 1 })).toBe(false);
    expect(shouldReap({ ...base, deletePending: true })).toBe(false);
    expect(shouldReap({ ...base, state: "deleted" })).toBe(false);
    expect(shouldReap({ ...base, state: "dead" })).toBe(true);
  });

  it("runs a pending delete only once it is due, drops it for a box a run took, and re-arms an early alarm", () => {
    const pending = { state: "live" as const, nextDeleteAt: 10_000, runningThreads: 0 };
    expect(boxAlarmDecision(pending, 10_000)).toBe("delete");
    expect(boxAlarmDecision(pending, 9_999)).toBe("rearm");
    expect(boxAlarmDecision({ ...pending, state: "dead" }, 10_000)).toBe("delete");
    expect(boxAlarmDecision({ ...pending, runningThreads: 1 }, 10_000)).toBe("cancel");
    expect(boxAlarmDecision({ ...pending, nextDeleteAt: null }, 10_000)).toBe("nothing");
    expect(boxAlarmDecision({ ...pending, state: "deleted" }, 10_000)).toBe("nothing");
  });

  it("holds an ended run's box while its runner runs, up to the drain deadline", () => {
    expect(releaseDecision({ runnerRunning: true, drainUntilMs: 60_000 }, 59_999)).toBe("wait");
    expect(releaseDecision({ runnerRunning: true, drainUntilMs: 60_000 }, 60_000)).toBe("delete");
    expect(releaseDecision({ runnerRunning: false, drainUntilMs: 60_000 }, 1_000)).toBe("delete");
  });

  it("keeps a shared box whose claim was not confirmed only while its environment names it", () => {
    expect(claimCheckDecision({ sharedBoxId: "box_a" }, "box_a")).toBe("keep");
    expect(claimCheckDecision({ sharedBoxId: "box_b" }, "box_a")).toBe("retire");
    expect(claimCheckDecision({}, "box_a")).toBe("retire");
    expect(claimCheckDecision(null, "box_a")).toBe("retire");
  });

  it("backs off delete retries exponentially up to a cap", () => {
    expect([1, 2, 3, 4].map(deleteRetryDelayMs)).toEqual([5_000, 10_000, 20_000, 40_000]);
    expect(deleteRetryDelayMs(30)).toBe(600_000);
  });
});

describe("a stopped run's token files", () => {
  it("are removed by a script naming only that run's directory; an id the shell could read otherwise gets none", () => {
    expect(tokenCleanupScript("0b7c-run_1")).toBe('rm -f "$HOME/.threadbox/runs/0b7c-run_1/stream-token-"*; true');
    for (const bad of ["", "..", "a/../b", "a b", "$(id)", "`id`", 'a"b', "a;b", ".hidden"]) expect(tokenCleanupScript(bad), bad).toBeNull();
  });
});
