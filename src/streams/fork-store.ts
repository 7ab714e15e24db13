/**
 * What a stream's actor stores about forking, next to its log:
 * - `stream_fork`: if this stream is a fork, which source it reads its first `forkSeq` messages
 *   from, and the fork request it was created with (for idempotent re-creation);
 * - `fork_children`: the forks that read through this stream (its reference count);
 * - `fork_releases`: references to drop on a source once this stream is gone (sent after the
 *   request that purged it, retried on the next one if the source could not be reached).
 */
import { LazySchema, type Schema } from "../domain/sql-schema";
export type ForkRef = {
  sourceKey: string;
  sourceName: string;
  /** Messages 1..forkSeq are the source's; this stream's own start at forkSeq + 1. */
  forkSeq: number;
  /** The request's Stream-Fork-Offset (null = the source's tail then) and sub-offset (0 = none). */
  requestedOffset: string | null;
  subOffset: number;
};

export const FORK_SCHEMA: Schema = {
  name: "forks",
  ddl: `create table if not exists stream_fork (
      id integer primary key check (id = 1), source_key text not null, source_name text not null,
      fork_seq integer not null, requested_offset text, sub_offset integer not null default 0);
    create table if not exists fork_children (child_key text primary key);
    create table if not exists fork_releases (source_key text primary key)`,
};

export class ForkStore {
  private cached: ForkRef | null | undefined;
  /** Checked on every request, so it is answered from memory once the table is known empty. */
  private releasesKnownEmpty = false;

  /** Most streams never fork nor are forked: their tables come with the first fork. */
  private readonly tables: LazySchema;

  constructor(private readonly sql: SqlStorage) {
    this.tables = new LazySchema(sql, FORK_SCHEMA);
  }

  /** Read on every page of a read: kept in memory, every write goes through this class. */
  ref(): ForkRef | null {
    if (this.cached !== undefined) return this.cached;
    const row = !this.tables.exists() ? undefined : this.sql.exec(`select * from stream_fork where id = 1`).toArray()[0];
    this.cached = row
      ? {
          sourceKey: row.source_key as string,
          sourceName: row.source_name as string,
          forkSeq: row.fork_seq as number,
          requestedOffset: row.requested_offset as string | null,
          subOffset: row.sub_offset as number,
        }
      : null;
    return this.cached;
  }

  setRef(ref: ForkRef): void {
    this.tables.ensure();
    this.sql.exec(
      `insert into stream_fork (id, source_key, source_name, fork_seq, requested_offset, sub_offset) values (1, ?, ?, ?, ?, ?)`,
      ref.sourceKey, ref.sourceName, ref.forkSeq, ref.requestedOffset, ref.subOffset,
    );
    this.cached = ref;
  }

  /** The stream is gone: its source reference becomes a pending release. */
  dropRef(): void {
    const ref = this.ref();
    if (!ref) return;
    this.queueRelease(ref.sourceKey);
    this.sql.exec(`delete from stream_fork`);
    this.cached = null;
  }

  queueRelease(sourceKey: string): void {
    this.tables.ensure();
    this.sql.exec(`insert or ignore into fork_releases (source_key) values (?)`, sourceKey);
    this.releasesKnownEmpty = false;
  }

  addChild(childKey: string): void {
    this.tables.ensure();
    this.sql.exec(`insert or ignore into fork_children (child_key) values (?)`, childKey);
  }

  removeChild(childKey: string): void {
    if (this.tables.exists()) this.sql.exec(`delete from fork_children where child_key = ?`, childKey);
  }

  childCount(): number {
    if (!this.tables.exists()) return 0;
    return this.sql.exec(`select count(*) as n from fork_children`).one().n as number;
  }

  mayHaveReleases(): boolean {
    return !this.releasesKnownEmpty;
  }

  pendingReleases(): string[] {
    const keys = !this.tables.exists() ? [] : this.sql.exec(`select source_key from fork_releases`).toArray().map((r) => r.source_key as string);
    this.releasesKnownEmpty = keys.length === 0;
    return keys;
  }

  releaseSent(sourceKey: string): void {
    if (this.tables.exists()) this.sql.exec(`delete from fork_releases where source_key = ?`, sourceKey);
  }

  /** A new stream under this key must not have a stale release cancel the reference it takes. */
  cancelRelease(sourceKey: string): void {
    this.releaseSent(sourceKey);
  }
}
