/**
 * Side effects a thread owes other actors (attach/detach its box, notify its parent). They are
 * written in the same turn as the state change that caused them and retried by alarm until they
 * succeed, so a crash or a failed call never loses one; receivers dedupe by key.
 */
export type OutboxItem = { key: string; kind: string; payload: Record<string, unknown>; attempts: number; nextAt: number };

const BACKOFF_BASE_MS = 2_000;
const BACKOFF_MAX_MS = 5 * 60_000;

export class Outbox {
  constructor(private readonly sql: SqlStorage) {
    sql.exec(`create table if not exists outbox (
      key text primary key, kind text not null, payload text not null, attempts integer not null default 0, next_at integer not null)`);
  }

  enqueue(key: string, kind: string, payload: Record<string, unknown>, nowMs: number): void {
    this.sql.exec(`insert into outbox (key, kind, payload, next_at) values (?, ?, ?, ?) on conflict(key) do nothing`, key, kind, JSON.stringify(payload), nowMs);
  }

  due(nowMs: number): OutboxItem[] {
    return this.sql.exec(`select * from outbox where next_at <= ? order by rowid`, nowMs).toArray().map((r) => ({
      key: r.key as string, kind: r.kind as string, payload: JSON.parse(r.payload as string), attempts: r.attempts as number, nextAt: r.next_at as number,
    }));
  }

  done(key: string): void {
    this.sql.exec(`delete from outbox where key = ?`, key);
  }

  failed(item: OutboxItem, nowMs: number): void {
    const attempts = item.attempts + 1;
    const delay = Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** (attempts - 1));
    this.sql.exec(`update outbox set attempts = ?, next_at = ? where key = ?`, attempts, nowMs + delay, item.key);
  }

  nextAt(): number | null {
    const r = this.sql.exec(`select min(next_at) as at from outbox`).toArray()[0];
    return (r?.at as number | null) ?? null;
  }

  pending(): OutboxItem[] {
    return this.due(Number.MAX_SAFE_INTEGER);
  }
}
