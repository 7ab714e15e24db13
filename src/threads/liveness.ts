import type { ThreadRow } from "./thread-row";

export type LivenessConfig = { orphanSilenceMs: number; probeIntervalMs: number; probeConfirmMs: number };

/** What the thread remembers between alarms about its box's health. */
export type ProbeState = { lastProbeAt: number | null; deadStreak: number };

export type ProbeVerdict = "live" | "dead" | "unknown";

export const DEAD_CONFIRMATIONS = 2;

/**
 * An alarm that runs this long after the silence deadline it was set for did not run on time: the
 * server was down (or could not run it). The boxes were not heard because nobody listened; they
 * keep their entries and retry, so they get one grace to get through before the run is called dead.
 */
export const LATE_ALARM_MS = 5_000;

/** That grace: long enough for a box's writer (backoff up to 5 s) and heartbeat to get through. */
export const silenceGraceMs = (cfg: LivenessConfig) => Math.min(cfg.orphanSilenceMs, 60_000);

/**
 * When each liveness check of a running thread is next due. Not running -> nothing is due.
 * `graceUntil`: a grace given to a silence found late (see LATE_ALARM_MS) puts its check off until then.
 */
export function livenessDeadlines(row: ThreadRow, probe: ProbeState, cfg: LivenessConfig, graceUntil: number | null = null): { silenceAt: number | null; probeAt: number | null } {
  if (row.status !== "running") return { silenceAt: null, probeAt: null };
  const lastLife = Math.max(row.lastLivenessAt ?? 0, row.runStartedAt ?? 0);
  const silenceAt = Math.max(lastLife + cfg.orphanSilenceMs, graceUntil ?? 0);
  if (!row.boxId) return { silenceAt, probeAt: null };
  const since = probe.lastProbeAt ?? row.runStartedAt ?? lastLife;
  const wait = probe.deadStreak > 0 ? cfg.probeConfirmMs : cfg.probeIntervalMs;
  return { silenceAt, probeAt: since + wait };
}

export type LivenessDecision =
  | { kind: "none" }
  | { kind: "orphan"; reason: string }
  /** The silence was found late (the server was away): check again at `until` before calling the run dead. */
  | { kind: "grace"; until: number }
  | { kind: "probe" };

/** Given the row and the clock, what the alarm should do now. Silence wins over probing. */
export function decideLiveness(row: ThreadRow, probe: ProbeState, cfg: LivenessConfig, nowMs: number, graceUntil: number | null = null): LivenessDecision {
  const { silenceAt, probeAt } = livenessDeadlines(row, probe, cfg, graceUntil);
  if (silenceAt !== null && nowMs >= silenceAt) {
    const lastLife = Math.max(row.lastLivenessAt ?? 0, row.runStartedAt ?? 0);
    const due = lastLife + cfg.orphanSilenceMs;
    // Once per silence: a grace given for an earlier one (the run was heard since) does not count.
    if (nowMs - due > LATE_ALARM_MS && (graceUntil === null || graceUntil < due)) return { kind: "grace", until: nowMs + silenceGraceMs(cfg) };
    const silentS = Math.round((nowMs - lastLife) / 1000);
    return { kind: "orphan", reason: `no heartbeat or entry for ${silentS}s (threshold ${Math.round(cfg.orphanSilenceMs / 1000)}s)` };
  }
  if (probeAt !== null && nowMs >= probeAt) return { kind: "probe" };
  return { kind: "none" };
}

/**
 * Folds one probe answer into the state. Only `dead` twice in a row confirms death: a single
 * 404 or a network error never settles a run.
 */
export function foldProbe(probe: ProbeState, verdict: ProbeVerdict, nowMs: number): { next: ProbeState; confirmedDead: boolean } {
  const deadStreak = verdict === "dead" ? probe.deadStreak + 1 : 0;
  return { next: { lastProbeAt: nowMs, deadStreak }, confirmedDead: deadStreak >= DEAD_CONFIRMATIONS };
}
