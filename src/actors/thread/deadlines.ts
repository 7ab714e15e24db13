/**
 * The thread's one alarm slot, shared by every service that needs to be woken. Each service is a
 * deadline SOURCE (`nextDeadline()` from its persisted state); the persisted `deadlines` table is
 * what the alarm was last set from, so an operator can see why an actor will wake. Every handler
 * ends with `recompute()`; the alarm runs every step and then recomputes too.
 */
export type DeadlineSource = {
  /** Stable name: a row in the deadlines table. */
  name: string;
  /** Epoch ms when this source next needs the alarm, or null when it needs nothing. */
  nextDeadline(): number | null;
};

/** One unit of alarm work. Steps run in the order they were registered; each checks its own due-ness. */
export type AlarmStep = {
  name: string;
  run(nowMs: number): Promise<void>;
};

export class Deadlines {
  private readonly sources: DeadlineSource[] = [];

  constructor(private readonly storage: DurableObjectStorage, private readonly nowMs: () => number) {
    storage.sql.exec(`create table if not exists deadlines (name text primary key, at integer not null)`);
  }

  addSource(source: DeadlineSource): void {
    this.sources.push(source);
  }

  /** Writes every source's next deadline and sets the alarm to the earliest one (or clears it). */
  async recompute(): Promise<void> {
    const sql = this.storage.sql;
    for (const source of this.sources) {
      const at = source.nextDeadline();
      if (at === null) sql.exec(`delete from deadlines where name = ?`, source.name);
      else sql.exec(`insert into deadlines (name, at) values (?, ?) on conflict(name) do update set at = excluded.at`, source.name, at);
    }
    const next = sql.exec(`select min(at) as at from deadlines`).toArray()[0]?.at as number | null | undefined;
    if (next === null || next === undefined) await this.storage.deleteAlarm();
    else await this.storage.setAlarm(Math.max(next, this.nowMs()));
  }
}
