/**
 * The thread's one alarm slot, shared by every service that needs to be woken. Each service is a
 * deadline SOURCE (`nextDeadline()` from its persisted state); the persisted `deadlines` table is
 * what the alarm was last set from, so an operator can see why an actor will wake. Every handler
 * ends with `recompute()`; the alarm runs every step and then recomputes too.
 */
import { ensureSchema, type Schema } from "../../domain/sql-schema";
export type DeadlineSource = {
  /** Stable name: a row in the deadlines table. */
  name: string;
  /** Epoch ms when this source next needs the alarm, or null when it needs nothing. */
  nextDeadline(): number | null;
};

export const DEADLINES_SCHEMA: Schema = { name: "deadlines", ddl: `create table if not exists deadlines (name text primary key, at integer not null)` };

/** One unit of alarm work. Steps run in the order they were registered; each checks its own due-ness. */
export type AlarmStep = {
  name: string;
  run(nowMs: number): Promise<void>;
};

export class Deadlines {
  private readonly sources: DeadlineSource[] = [];
  /** The deadlines table as last written; `undefined` until first read. This actor is its only writer. */
  private written: Map<string, number> | undefined;
  /** The earliest deadline the alarm was last set from (null: cleared); `undefined` = unknown, set it. */
  private armedFor: number | null | undefined;

  constructor(private readonly storage: DurableObjectStorage, private readonly nowMs: () => number) {
    ensureSchema(storage.sql, DEADLINES_SCHEMA);
  }

  addSource(source: DeadlineSource): void {
    this.sources.push(source);
  }

  /** The alarm fired (and so is no longer set): the next recompute must set it again. */
  alarmFired(): void {
    this.armedFor = undefined;
  }

  /**
   * Writes every source's next deadline and sets the alarm to the earliest one (or clears it),
   * but not before `notBeforeMs` when given. Only what changed is written: most handlers leave
   * every deadline where it was.
   */
  async recompute(notBeforeMs?: number): Promise<void> {
    const sql = this.storage.sql;
    const written = (this.written ??= new Map(sql.exec(`select name, at from deadlines`).toArray().map((r) => [r.name as string, r.at as number])));
    let next: number | null = null;
    for (const source of this.sources) {
      const at = source.nextDeadline();
      if (at === null) {
        if (written.has(source.name)) sql.exec(`delete from deadlines where name = ?`, source.name);
        written.delete(source.name);
        continue;
      }
      if (written.get(source.name) !== at) {
        sql.exec(`insert into deadlines (name, at) values (?, ?) on conflict(name) do update set at = excluded.at`, source.name, at);
        written.set(source.name, at);
      }
      next = next === null ? at : Math.min(next, at);
    }
    // A row no source names any more (a source removed in a newer version) must not hold the alarm.
    for (const name of written.keys()) {
      if (this.sources.some((s) => s.name === name)) continue;
      sql.exec(`delete from deadlines where name = ?`, name);
      written.delete(name);
    }
    if (next !== null && notBeforeMs !== undefined) next = Math.max(next, notBeforeMs);
    if (next === this.armedFor) return;
    if (next === null) await this.storage.deleteAlarm();
    else await this.storage.setAlarm(Math.max(next, this.nowMs()));
    this.armedFor = next;
  }
}
