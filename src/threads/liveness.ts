import type { ThreadRow } from "./thread-row";

export type LivenessConfig = { orphanSilenceMs: number; probeIntervalMs: number; probeConfirmMs: number };

/** What the thread remembers between alarms about its box's health. */
export type ProbeState = { lastProbeAt: number | null; deadStreak: number };

export type ProbeVerdict = "live" | "dead" | "unknown";

export const DEAD_CONFIRMATIONS = 2;

/** When each liveness check of a running thread is next due. Not running -> nothing is due. */
export function livenessDeadlines(row: ThreadRow, probe: ProbeState, cfg: LivenessConfig): { silenceAt: number | null; probeAt: number | null } {
  if (row.status !== "running") return { silenceAt: null, probeAt: null };
  const lastLife = Math.max(row.lastLivenessAt ?? 0, row.runStartedAt ?? 0);
  const silenceAt = lastLife + cfg.orphanSilenceMs;
  if (!row.boxId) return { silenceAt, probeAt: null };
  const since = probe.lastProbeAt ?? row.runStartedAt ?? lastLife;
  const wait = probe.deadStreak > 0 ? cfg.probeConfirmMs : cfg.probeIntervalMs;
  return { silenceAt, probeAt: since + wait };
}

export type LivenessDecision =
  | { kind: "none" }
  | { kind: "orphan"; reason: string }
  | { kind: "probe" };

/** Given the row and the clock, what the alarm should do now. Silence wins over probing. */
export function decideLiveness(row: ThreadRow, probe: ProbeState, cfg: LivenessConfig, nowMs: number): LivenessDecision {
  const { silenceAt, probeAt } = livenessDeadlines(row, probe, cfg);
  if (silenceAt !== null && nowMs >= silenceAt) {
    const silentS = Math.round((nowMs - Math.max(row.lastLivenessAt ?? 0, row.runStartedAt ?? 0)) / 1000);
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
