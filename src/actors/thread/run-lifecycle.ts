import type { Entry } from "../../entries/schema";
import type { StreamLog } from "../../streams/log";
import { toEntryWithOffset } from "../../threads/entries";
import { decideLiveness, livenessDeadlines, type LivenessConfig, type ProbeState, type ProbeVerdict } from "../../threads/liveness";
import { decideDetail, decideSignal, isForeignRun, isTerminal } from "../../threads/run-rules";
import type { ThreadRow, ThreadRowStore } from "../../threads/thread-row";
import type { Clock } from "../clock";
import { errorMessage, logEvent } from "../../domain/log-event";
import type { DeadlineSource } from "./deadlines";
import { stopHarnessPayload, type Outbox } from "./outbox";
import { STATUS_CHANGED } from "../../domain/statuses";
import { LazySchema, type Schema } from "../../domain/sql-schema";

export type RunLifecyclePorts = {
  sql: SqlStorage;
  rows: ThreadRowStore;
  log: StreamLog;
  outbox: Outbox;
  clock: Clock;
  config: LivenessConfig;
  /** Asks the box's actor; a failed call is the caller's problem (it reads as `unknown`). */
  probeBox(houseId: string, boxId: string): Promise<{ verdict: ProbeVerdict | string; confirmedDead: boolean }>;
  /** Whether the run copied in readwrite folders, owed a sync-back before its box goes. */
  owesFolderSync(runId: string): boolean;
  /** Whether run `runId`'s launch (still under way) took the box the thread's previous run kept: a resume's, not a shared box. */
  launchOnKeptBox(runId: string): boolean;
  /** The box run `runId`'s launch (still under way) holds and did not make: a resume's, or a shared one; null if none. */
  launchHeldBox(runId: string): string | null;
  /** Appends a finished-signal written by the control plane (deduped by id). */
  appendSystemSignal(id: string, status: string, reason: string): void;
};

/** The grace a silence found late was given (see LATE_ALARM_MS in threads/liveness.ts). */
export const SILENCE_GRACE_SCHEMA: Schema = {
  name: "silence_grace",
  ddl: `create table if not exists silence_grace (id integer primary key check (id = 1), until integer not null)`,
};

/** Far below any silence timeout, so skipping writes inside it never orphans a live run. */
const LIVENESS_WRITE_GRANULARITY_MS = 500;

export const PROBE_SCHEMA: Schema = {
  name: "probe_state",
  ddl: `create table if not exists probe_state (id integer primary key check (id = 1), last_probe_at integer, dead_streak integer not null default 0)`,
};

/**
 * A run from claim to finished-signal: liveness (heartbeats, silence, box probes, orphaning),
 * status signals applied to the row, and what a terminal status owes other actors. The decisions
 * are the pure rules in threads/run-rules.ts and threads/liveness.ts; this applies them.
 */
export class RunLifecycle {
  /** Set when an append changed the row's state; the handler then settles (outbox, index, alarm). */
  private changed = false;

  /** Only a run whose box is probed has probe state. */
  private readonly probeTable: LazySchema;
  /** Only a run whose silence was found late has one. */
  private readonly graceTable: LazySchema;

  constructor(private readonly p: RunLifecyclePorts) {
    this.probeTable = new LazySchema(p.sql, PROBE_SCHEMA);
    this.graceTable = new LazySchema(p.sql, SILENCE_GRACE_SCHEMA);
  }

  /** A heartbeat (or a live command's output): the box is alive. A burst needs one write, not one each. */
  recordLiveness(): void {
    const row = this.p.rows.get();
    const now = this.p.clock.now();
    if (!row) return;
    if (row.lastLivenessAt !== null && now >= row.lastLivenessAt && now - row.lastLivenessAt < LIVENESS_WRITE_GRANULARITY_MS) return;
    this.p.rows.touchLiveness(now);
  }

  /** Whether something appended since the last call changed the run's state. */
  takeChanged(): boolean {
    const changed = this.changed;
    this.changed = false;
    return changed;
  }

  /**
   * An append hook: runs in the same synchronous turn as the append. `showsRunAlive`: false for a
   * write with another run's token, which says nothing of this run's life.
   */
  onAppended(entries: Entry[], showsRunAlive = true): void {
    // Any entry shows a run is alive; on a thread with no run on, nothing reads it (never orphaned).
    if (showsRunAlive && this.p.rows.get()?.status === "running") this.recordLiveness();
    for (const entry of entries) this.apply(entry);
  }

  readonly deadlineSources: DeadlineSource[] = [
    { name: "silence", nextDeadline: () => this.deadlines()?.silenceAt ?? null },
    { name: "probe", nextDeadline: () => this.deadlines()?.probeAt ?? null },
  ];

  /** The alarm step: orphan a silent run, or probe the box (twice `dead` settles the run). */
  async alarmStep(): Promise<void> {
    const { rows, outbox, config } = this.p;
    const row = rows.get();
    if (!row) return;
    const decision = decideLiveness(row, this.probeState(), config, this.p.clock.now(), this.graceUntil());
    if (decision.kind === "grace") {
      // The server was away (its alarm ran late): the box's silence may be the server's own.
      this.graceTable.ensure();
      this.p.sql.exec(`insert into silence_grace (id, until) values (1, ?) on conflict(id) do update set until = excluded.until`, decision.until);
      logEvent("silence_grace", { threadId: row.id, runId: row.runId, lastLivenessAt: row.lastLivenessAt, until: decision.until });
      return;
    }
    if (decision.kind === "orphan") {
      this.p.appendSystemSignal(`orphan:${row.runStartedAt ?? 0}`, "pi_session_orphaned", decision.reason);
      return;
    }
    // While the launch is still owed the box may not exist yet: probing it would prove nothing.
    if (decision.kind !== "probe" || !row.boxId || outbox.has("launch")) return;
    let answer: { verdict: string; confirmedDead: boolean };
    try {
      answer = await this.p.probeBox(row.houseId, row.boxId);
    } catch (err) {
      logEvent("box_probe_failed", { threadId: row.id, boxId: row.boxId, error: errorMessage(err) }, "warn");
      answer = { verdict: "unknown", confirmedDead: false };
    }
    const deadStreak = answer.verdict === "dead" && !answer.confirmedDead ? 1 : 0;
    this.probeTable.ensure();
    this.p.sql.exec(
      `insert into probe_state (id, last_probe_at, dead_streak) values (1, ?, ?)
       on conflict(id) do update set last_probe_at = excluded.last_probe_at, dead_streak = excluded.dead_streak`,
      this.p.clock.now(), deadStreak,
    );
    const current = rows.get()!;
    if (answer.confirmedDead && current.status === "running" && current.boxId === row.boxId) {
      this.p.appendSystemSignal(`orphan:${row.runStartedAt ?? 0}`, "pi_session_orphaned", `box ${row.boxId} confirmed dead by two probes`);
    }
  }

  /** A change the house index shows: it is owed an update, in the same turn as the change. */
  private markChanged(now: number): void {
    this.changed = true;
    this.p.outbox.enqueueNow("sync_index", "sync_index", {}, now);
  }

  private deadlines() {
    const row = this.p.rows.get();
    return row ? livenessDeadlines(row, this.probeState(), this.p.config, this.graceUntil()) : null;
  }

  private apply(entry: Entry): void {
    const { rows, outbox, clock } = this.p;
    const before = rows.get()!;
    const now = clock.now();
    const detail = decideDetail(before, entry);
    if (entry.payload.type === "signal.thread.box_assigned" && before.status === "running" && typeof entry.payload.boxId === "string") {
      this.markChanged(now);
      rows.update({ boxId: entry.payload.boxId, statusDetail: detail ?? undefined }, now);
      outbox.enqueue(`attach:${entry.payload.boxId}:${before.runStartedAt}`, "attach", { boxId: entry.payload.boxId }, now);
      return;
    }
    if (detail !== null) {
      rows.update({ statusDetail: detail }, now);
      return;
    }
    const patch = decideSignal(before, entry, now);
    if (!patch) {
      if (entry.payload.type === STATUS_CHANGED && before.status === "running" && isForeignRun(before, entry)) {
        logEvent("foreign_run_signal_ignored", { threadId: before.id, runId: before.runId, signalRunId: entry.payload.runId, status: entry.payload.status, entryId: entry.id });
      }
      return;
    }
    this.markChanged(now);
    rows.update(patch, now);
    const after = rows.get()!;
    if (patch.status === "running") {
      if (this.probeTable.exists()) this.p.sql.exec(`delete from probe_state`);
      if (this.graceTable.exists()) this.p.sql.exec(`delete from silence_grace`);
      // Only a claim that names its box attaches it here; the row may still hold the previous
      // run's box (a resume), which this run may not use: its launch assigns the box it gets.
      if (typeof patch.boxId === "string") outbox.enqueue(`attach:${patch.boxId}:${after.runStartedAt}`, "attach", { boxId: patch.boxId }, now);
    } else if (isTerminal(after.status)) {
      this.onTerminal(after, entry, now);
    }
  }

  /** Owed once per run: release the box, and tell a delegating parent how the child ended. */
  private onTerminal(row: ThreadRow, signal: Entry, now: number): void {
    const { outbox } = this.p;
    const runKey = row.runStartedAt ?? 0;
    // An orphaned run may still have live processes (a hung runner, a box that lost its network):
    // end them before the box is released, so nothing writes to a settled thread.
    if (row.boxId && row.statusReason === "pi_session_orphaned") {
      outbox.enqueue(`stop:${runKey}`, "stop_harness", stopHarnessPayload(row.boxId, row.runId), now);
    }
    if (row.boxId && row.runId && this.p.owesFolderSync(row.runId)) {
      outbox.enqueue(`sync_folders:${runKey}`, "sync_folders", { boxId: row.boxId, runId: row.runId }, now);
    }
    // The box the launch held but had not assigned yet (it failed or was stopped in between) is
    // released as the thread's box is: the hold puts off the box's reap (a retired shared box's
    // delete waits for it), and nothing else would ever reap it.
    const held = row.runId ? this.p.launchHeldBox(row.runId) : null;
    for (const boxId of new Set([row.boxId, held])) {
      if (!boxId) continue;
      // A stopped run keeps its box a while, to resume there. So does a resume whose launch failed
      // on the box a stop kept: it ran nothing there, and a later resume can still go on there.
      const keepBox = row.statusReason === "stopped" || (signal.id === `launch_failed:${row.runId}` && this.p.launchOnKeptBox(row.runId!));
      outbox.enqueue(`detach:${boxId}:${runKey}`, "detach", { boxId, keepBox }, now);
    }
    if (row.parent.kind === "thread" && row.parent.id) {
      outbox.enqueue(`notify_parent:${runKey}`, "notify_parent", {
        parentId: row.parent.id, runKey, status: row.status === "completed" ? "completed" : row.statusReason ?? "failed",
        reason: row.statusDetail, resultText: this.resultText(row), brainId: row.brainId,
      }, now);
    }
  }

  private resultText(row: ThreadRow): string {
    if (row.status !== "completed") {
      return `Task ${row.id} ended: ${row.statusReason ?? "failed"}${row.statusDetail ? ` (${row.statusDetail})` : ""}`;
    }
    // This run's answer only: its start (the readiness milestone, or the claim before it) ends the
    // search, so a run that gave none is not reported with the answer of the run before it.
    for (const e of this.p.log.lastMessages(200).map(toEntryWithOffset).reverse()) {
      if (e.payload.type === STATUS_CHANGED && e.payload.status === "running") break;
      if (e.payload.type === "pi.assistant" && typeof e.payload.text === "string" && e.payload.text !== "") return e.payload.text;
    }
    return `Task ${row.id} completed.`;
  }

  private graceUntil(): number | null {
    if (!this.graceTable.exists()) return null;
    return (this.p.sql.exec(`select until from silence_grace where id = 1`).toArray()[0]?.until as number | undefined) ?? null;
  }

  private probeState(): ProbeState {
    const r = !this.probeTable.exists() ? undefined : this.p.sql.exec(`select last_probe_at, dead_streak from probe_state where id = 1`).toArray()[0];
    return { lastProbeAt: (r?.last_probe_at as number | null) ?? null, deadStreak: (r?.dead_streak as number) ?? 0 };
  }
}
