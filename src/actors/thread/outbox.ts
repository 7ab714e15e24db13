import type { LaunchSpec } from "../../threads/launch";
import type { LaunchBoxRelease } from "./launcher";
import { backoffDelayMs } from "../../domain/backoff";
import { ensureSchema, type Schema } from "../../domain/sql-schema";
import { errorMessage } from "../../domain/log-event";

/**
 * Side effects a thread owes other actors. They are written in the same turn as the state change
 * that caused them and retried by alarm until they succeed, so a crash or a failed call never
 * loses one; receivers dedupe by key.
 */
export type OutboxPayloads = {
  attach: { boxId: string };
  detach: { boxId: string; keepBox: boolean };
  /** `runId`: the run whose stream token files go too (none on items queued by an older version). */
  stop_harness: { boxId: string; runId?: string };
  /** Readwrite folders the run changed become new versions (before `detach` releases the box). */
  sync_folders: { boxId: string; runId: string };
  launch: LaunchSpec;
  /** A launch that ended without its run releases the box it took (owed before its first try). */
  release_launch_box: LaunchBoxRelease;
  notify_parent: { parentId: string; runKey: number; status: string; reason: string | null; resultText: string; brainId: string | null };
  /** The house index is told the row as it is when the item runs, so one pending item is enough. */
  sync_index: Record<string, never>;
};

/** A run's stop on its box: the run is named so that its stream token files go too. */
export function stopHarnessPayload(boxId: string, runId: string | null): OutboxPayloads["stop_harness"] {
  return runId ? { boxId, runId } : { boxId };
}

export type OutboxKind = keyof OutboxPayloads;

export type OutboxItem<K extends OutboxKind = OutboxKind> = {
  [P in K]: { key: string; kind: P; payload: OutboxPayloads[P]; attempts: number; nextAt: number };
}[K];

export const OUTBOX_SCHEMA: Schema = {
  name: "outbox",
  ddl: `create table if not exists outbox (
      key text primary key, kind text not null, payload text not null, attempts integer not null default 0, next_at integer not null)`,
};

/**
 * How one kind of item is carried out. `slow` kinds (box creation, a stop's grace period) run only
 * from the alarm, and the ordered items owed after them wait for them; `unordered` kinds depend on
 * nothing before them and run whenever due. `giveUp` makes a failure final instead of retried.
 */
export type OutboxExecutor<K extends OutboxKind> = {
  slow?: boolean;
  unordered?: boolean;
  run(payload: OutboxPayloads[K], item: OutboxItem<K>): Promise<void>;
  giveUp?(payload: OutboxPayloads[K], message: string): void;
};

export type OutboxExecutors = { [K in OutboxKind]: OutboxExecutor<K> };

const BACKOFF_BASE_MS = 2_000;
const BACKOFF_MAX_MS = 5 * 60_000;

export class Outbox {
  constructor(private readonly sql: SqlStorage) {
    ensureSchema(sql, OUTBOX_SCHEMA);
  }

  /** Idempotent by key: owing the same thing twice is owing it once. */
  enqueue<K extends OutboxKind>(key: string, kind: K, payload: OutboxPayloads[K], nowMs: number): void {
    this.sql.exec(`insert into outbox (key, kind, payload, next_at) values (?, ?, ?, ?) on conflict(key) do nothing`, key, kind, JSON.stringify(payload), nowMs);
  }

  /**
   * Owes `key` now: a new item, or one already waiting out a backoff is made due again (its
   * attempts count stays). For items that carry the latest state rather than one event.
   */
  enqueueNow<K extends OutboxKind>(key: string, kind: K, payload: OutboxPayloads[K], nowMs: number): void {
    this.sql.exec(
      `insert into outbox (key, kind, payload, next_at) values (?, ?, ?, ?)
       on conflict(key) do update set next_at = min(next_at, excluded.next_at), payload = excluded.payload`,
      key, kind, JSON.stringify(payload), nowMs,
    );
  }

  due(nowMs: number): OutboxItem[] {
    return this.sql.exec(`select * from outbox where next_at <= ? order by rowid`, nowMs).toArray().map((r) => ({
      key: r.key as string, kind: r.kind as OutboxKind, payload: JSON.parse(r.payload as string), attempts: r.attempts as number, nextAt: r.next_at as number,
    }) as OutboxItem);
  }

  done(key: string): void {
    this.sql.exec(`delete from outbox where key = ?`, key);
  }

  failed(item: OutboxItem, nowMs: number): void {
    const attempts = item.attempts + 1;
    this.sql.exec(`update outbox set attempts = ?, next_at = ? where key = ?`, attempts, nowMs + backoffDelayMs(attempts, BACKOFF_BASE_MS, BACKOFF_MAX_MS), item.key);
  }

  nextAt(): number | null {
    const r = this.sql.exec(`select min(next_at) as at from outbox`).toArray()[0];
    return (r?.at as number | null) ?? null;
  }

  pending(): OutboxItem[] {
    return this.due(Number.MAX_SAFE_INTEGER);
  }

  has(kind: OutboxKind): boolean {
    return this.sql.exec(`select 1 from outbox where kind = ? limit 1`, kind).toArray().length > 0;
  }

  /** Whether any item of these kinds is owed. */
  hasAny(kinds: readonly OutboxKind[]): boolean {
    if (kinds.length === 0) return false;
    return this.sql.exec(`select 1 from outbox where kind in (${kinds.map(() => "?").join(", ")}) limit 1`, ...kinds).toArray().length > 0;
  }

  /**
   * Runs what is due, in the order it was owed. A slow item stops the ordered items behind it
   * unless `includeSlow` (the alarm); unordered items still run.
   */
  async drain(executors: OutboxExecutors, nowMs: () => number, includeSlow: boolean, report: (item: OutboxItem, outcome: "retry" | "dropped", message: string) => void): Promise<void> {
    let blocked = false;
    for (const item of this.due(nowMs())) {
      const executor = executors[item.kind] as OutboxExecutor<OutboxKind> | undefined;
      if (!executor) {
        this.done(item.key);
        report(item, "dropped", "unknown outbox kind");
        continue;
      }
      if (executor.slow && !includeSlow) blocked = true;
      if (blocked && !executor.unordered) continue;
      try {
        await executor.run(item.payload, item as OutboxItem<OutboxKind>);
        this.done(item.key);
      } catch (err) {
        const message = errorMessage(err);
        if (executor.giveUp) {
          this.done(item.key);
          executor.giveUp(item.payload, message);
          continue;
        }
        this.failed(item, nowMs());
        report(item, "retry", message);
      }
    }
  }
}
