import { ApiError } from "../errors";
import { ForkStore, type ForkRef } from "./fork-store";
import { formatOffset, isJsonContentType, normalizeContentType } from "./protocol";
import { packRun, runCount, runLengths, runOffset, runStatements, unpackRun } from "./packed-runs";
import { addColumnIfMissing, ensureSchema, LazySchema, type Schema } from "../domain/sql-schema";
import { CommitGroup } from "./commit-group";

export type StreamMeta = {
  name: string;
  contentType: string;
  ttlSeconds: number | null;
  expiresAt: string | null;
  createdAt: number;
  lastAccessAt: number;
  closed: boolean;
  closedBy: ProducerTuple | null;
  lastStreamSeq: string | null;
  tailSeq: number;
};

export type ProducerTuple = { id: string; epoch: number; seq: number };

export type CreateOptions = {
  contentType: string;
  ttlSeconds: number | null;
  expiresAt: string | null;
  closed: boolean;
};

/** `parsed`: the value `data` was serialized from, when the writer had it (spares readers of a fresh append a parse). */
export type NewMessage = { data: Uint8Array; entryId?: string | null; parsed?: unknown };

export type AppendRequest = {
  messages: NewMessage[];
  streamSeq?: string;
  producer?: ProducerTuple;
  close?: boolean;
};

export type AppendedRef = { seq: number; entryId: string | null; duplicate: boolean };

export type AppendOutcome =
  | { kind: "appended"; tailSeq: number; appended: AppendedRef[]; fresh: StoredMessage[]; closed: boolean }
  | { kind: "duplicate"; tailSeq: number; lastSeq: number; closed: boolean }
  | { kind: "closed"; tailSeq: number };

export type StoredMessage = { seq: number; data: Uint8Array; entryId: string | null; parsed?: unknown };

const PRODUCER_STATE_TTL_MS = 7 * 24 * 60 * 60 * 1000;

/**
 * The append-only log behind every stream and thread, in the actor's SQLite.
 * Synchronous on purpose: inside one actor each call is atomic with respect to every other
 * request, which is what gives ordering, read-your-writes and gap-free fan-out.
 */
export const STREAM_LOG_SCHEMA: Schema = {
  name: "stream_log",
  ddl: `create table if not exists stream_meta (
      id integer primary key check (id = 1), name text not null, content_type text not null,
      ttl_seconds integer, expires_at text, created_at integer not null, last_access_at integer not null,
      closed integer not null default 0, closed_by text, last_stream_seq text, tail_seq integer not null default 0,
      deleted_at integer);
    create table if not exists messages (seq integer primary key, data blob not null, entry_id text, ts integer not null, lens blob);
    create unique index if not exists messages_entry_id on messages(entry_id) where entry_id is not null`,
  // Logs created before forking existed lack the tombstone column; before packed runs, the lengths column.
  migrate: (sql) => {
    addColumnIfMissing(sql, "stream_meta", "deleted_at", "integer");
    addColumnIfMissing(sql, "messages", "lens", "blob");
  },
};

/** Idempotent producers' state: only streams written with Producer-* headers have it. */
export const PRODUCERS_SCHEMA: Schema = {
  name: "producers",
  ddl: `create table if not exists producers (id text primary key, epoch integer not null, last_seq integer not null, updated_at integer not null)`,
};

export class StreamLog {
  readonly forks: ForkStore;
  private readonly producers: LazySchema;
  /** Stream-protocol appends that arrive together write in one turn, so they share one commit. */
  readonly commits = new CommitGroup();

  constructor(private readonly storage: DurableObjectStorage) {
    const sql = storage.sql;
    ensureSchema(sql, STREAM_LOG_SCHEMA);
    this.producers = new LazySchema(sql, PRODUCERS_SCHEMA);
    this.forks = new ForkStore(sql);
  }

  /**
   * Runs inside the append's storage transaction with the messages it adds: what a thread must
   * record about an entry (a dispatch trigger) commits with the entry or not at all.
   */
  onAppendInTransaction: ((fresh: StoredMessage[]) => void) | null = null;

  /**
   * Whether `onAppendInTransaction` has anything to do for these messages. An append it has
   * nothing to do for that is also a single statement runs without the hook and without a
   * transaction of its own.
   */
  appendHookWrites: (messages: NewMessage[]) => boolean = () => this.onAppendInTransaction !== null;

  /**
   * Whether this log may store a run of id-less JSON messages as one packed row (packed-runs.ts).
   * Only a plain stream's owner turns it on: a thread's log is read row by row by entry id and by
   * content (lastMessages, lastContaining, the thread actor's own queries), which see no runs.
   */
  packsRuns: () => boolean = () => false;

  private packs(contentType: string): boolean {
    return isJsonContentType(contentType) && this.packsRuns();
  }

  private get sql(): SqlStorage {
    return this.storage.sql;
  }

  /**
   * The stream_meta row as last committed, kept in memory: every append and read needs it, and
   * this actor is its only writer. `undefined` = not loaded yet. Changed only after a write has
   * succeeded, so a rolled-back transaction cannot leave it ahead of storage.
   */
  private row: { meta: StreamMeta; deletedAt: number | null } | null | undefined;

  private loadRow(): { meta: StreamMeta; deletedAt: number | null } | null {
    if (this.row !== undefined) return this.row;
    // `tail_seq` is written at create only: the stored messages say where the tail is now.
    const r = this.sql.exec(`select *, (select max(seq) from messages) as max_seq from stream_meta where id = 1`).toArray()[0];
    this.row = r
      ? {
          deletedAt: r.deleted_at as number | null,
          meta: {
            name: r.name as string,
            contentType: r.content_type as string,
            ttlSeconds: r.ttl_seconds as number | null,
            expiresAt: r.expires_at as string | null,
            createdAt: r.created_at as number,
            lastAccessAt: r.last_access_at as number,
            closed: r.closed === 1,
            closedBy: r.closed_by ? (JSON.parse(r.closed_by as string) as ProducerTuple) : null,
            lastStreamSeq: r.last_stream_seq as string | null,
            tailSeq: Math.max(r.tail_seq as number, (r.max_seq as number | null) ?? 0),
          },
        }
      : null;
    return this.row;
  }

  /** Drops the in-memory row: after an enclosing transaction that created the stream was rolled back. */
  forgetCached(): void {
    this.row = undefined;
  }

  /** Applies a committed change to the in-memory row. */
  private patchRow(patch: Partial<StreamMeta>): void {
    if (this.row) this.row = { ...this.row, meta: { ...this.row.meta, ...patch } };
  }

  /**
   * The stream's metadata, or null if it does not exist or is a tombstone. An expired stream is
   * purged here, or made a tombstone while forks still read through it.
   */
  meta(nowMs = Date.now()): StreamMeta | null {
    const row = this.loadRow();
    if (!row || row.deletedAt !== null) return null;
    if (isExpired(row.meta, nowMs)) {
      this.delete(nowMs);
      return null;
    }
    return { ...row.meta };
  }

  /**
   * A deleted (or expired) stream that forks still read through: its messages stay, every
   * protocol operation on it answers 410, and its name cannot be reused until the last fork is gone.
   */
  isTombstone(): boolean {
    const row = this.loadRow();
    return row !== null && row.deletedAt !== null;
  }

  /** Deletes the stream: a tombstone while it has forks, else purged. Returns which. */
  delete(nowMs = Date.now()): "tombstone" | "purged" {
    if (this.forks.childCount() === 0) {
      this.purge();
      return "purged";
    }
    this.storage.transactionSync(() => {
      this.sql.exec(`update stream_meta set deleted_at = ? where id = 1`, nowMs);
      if (this.producers.exists()) this.sql.exec(`delete from producers`);
    });
    if (this.row) this.row = { ...this.row, deletedAt: nowMs };
    return "tombstone";
  }

  /** Idempotent create: same configuration -> existing stream, different -> conflict. */
  create(
    name: string, opts: CreateOptions, initial: NewMessage[], nowMs = Date.now(), fork?: ForkRef,
  ): { created: boolean; meta: StreamMeta } {
    const existing = this.meta(nowMs);
    if (!existing && this.isTombstone()) {
      throw new ApiError("conflict", "stream was deleted but forks still read through it: the name cannot be reused yet");
    }
    if (existing) {
      const same =
        normalizeContentType(existing.contentType) === normalizeContentType(opts.contentType) &&
        existing.ttlSeconds === opts.ttlSeconds &&
        existing.expiresAt === opts.expiresAt &&
        existing.closed === opts.closed;
      if (!same) throw new ApiError("conflict", "stream already exists with a different configuration");
      return { created: false, meta: existing };
    }
    this.row = undefined;
    this.storage.transactionSync(() => {
      this.sql.exec(
        `insert into stream_meta (id, name, content_type, ttl_seconds, expires_at, created_at, last_access_at, closed, tail_seq)
         values (1, ?, ?, ?, ?, ?, ?, 0, ?)`,
        name, opts.contentType, opts.ttlSeconds, opts.expiresAt, nowMs, nowMs, fork?.forkSeq ?? 0,
      );
      if (fork) this.forks.setRef(fork);
      const { tail } = this.insertMessages(initial, fork?.forkSeq ?? 0, nowMs, this.packs(opts.contentType));
      this.sql.exec(`update stream_meta set tail_seq = ?, closed = ? where id = 1`, tail, opts.closed ? 1 : 0);
    });
    this.row = undefined;
    return { created: true, meta: this.meta(nowMs)! };
  }

  /** Appends atomically. `known` is the metadata the caller already read in this turn. */
  append(req: AppendRequest, nowMs = Date.now(), known?: StreamMeta | null): AppendOutcome {
    const meta = known ?? this.meta(nowMs);
    if (!meta) throw new ApiError("not_found", "stream not found");
    if (meta.closed) {
      const by = meta.closedBy;
      if (req.producer && by && by.id === req.producer.id && by.epoch === req.producer.epoch && by.seq === req.producer.seq) {
        return { kind: "duplicate", tailSeq: meta.tailSeq, lastSeq: req.producer.seq, closed: true };
      }
      return { kind: "closed", tailSeq: meta.tailSeq };
    }
    // Producer dedup comes before Stream-Seq so a retried POST carrying both is acknowledged.
    if (req.producer) {
      const verdict = this.checkProducer(req.producer, nowMs);
      if (verdict.kind === "duplicate") return { kind: "duplicate", tailSeq: meta.tailSeq, lastSeq: verdict.lastSeq, closed: false };
    }
    if (req.streamSeq !== undefined && meta.lastStreamSeq !== null && req.streamSeq <= meta.lastStreamSeq) {
      throw new ApiError("sequence_conflict", `Stream-Seq ${req.streamSeq} is not above ${meta.lastStreamSeq}`);
    }
    let result: { appended: AppendedRef[]; fresh: StoredMessage[]; tail: number } = { appended: [], fresh: [], tail: meta.tailSeq };
    const pack = this.packs(meta.contentType);
    if (this.isOneStatement(req, meta, pack)) {
      // One INSERT is atomic by itself: a savepoint around it would only cost time. The hook
      // has nothing to do here (isOneStatement asked it), so nothing can fail after the insert.
      result = this.insertMessages(req.messages, meta.tailSeq, nowMs, pack);
      this.patchRow({ tailSeq: result.tail });
      return { kind: "appended", tailSeq: result.tail, appended: result.appended, fresh: result.fresh, closed: false };
    }
    this.storage.transactionSync(() => {
      result = this.insertMessages(req.messages, meta.tailSeq, nowMs, pack);
      if (result.fresh.length > 0) this.onAppendInTransaction?.(result.fresh);
      if (req.producer) this.commitProducer(req.producer, nowMs);
      // At most one metadata write per append, and none for a plain append to a stream without a
      // TTL (every thread's): the tail is the last stored message's seq (see loadRow).
      const sets: string[] = [];
      const args: unknown[] = [];
      if (meta.ttlSeconds !== null) { sets.push("last_access_at = ?"); args.push(nowMs); }
      if (req.streamSeq !== undefined) { sets.push("last_stream_seq = ?"); args.push(req.streamSeq); }
      if (req.close) { sets.push("closed = 1", "closed_by = ?"); args.push(req.producer ? JSON.stringify(req.producer) : null); }
      if (sets.length > 0) this.sql.exec(`update stream_meta set ${sets.join(", ")} where id = 1`, ...args);
    });
    this.patchRow({
      tailSeq: result.tail,
      ...(meta.ttlSeconds !== null ? { lastAccessAt: nowMs } : {}),
      ...(req.streamSeq !== undefined ? { lastStreamSeq: req.streamSeq } : {}),
      ...(req.close ? { closed: true, closedBy: req.producer ?? null } : {}),
    });
    return { kind: "appended", tailSeq: result.tail, appended: result.appended, fresh: result.fresh, closed: !!req.close };
  }

  /**
   * An append that writes exactly one statement: one message, or messages without entry ids that
   * fit one packed row (`pack`) or one multi-row insert; no producer state, no Stream-Seq, no
   * close, no TTL bookkeeping, and no hook write for these messages.
   */
  private isOneStatement(req: AppendRequest, meta: StreamMeta, pack: boolean): boolean {
    if (req.producer || req.streamSeq !== undefined || req.close || meta.ttlSeconds !== null) return false;
    if (req.messages.length === 0) return false;
    if (req.messages.length > 1) {
      for (const m of req.messages) if ((m.entryId ?? null) !== null) return false;
      if (pack ? runStatements(req.messages) > 1 : req.messages.length > ROWS_PER_INSERT) return false;
    }
    return !this.appendHookWrites(req.messages);
  }

  /** Close without data. With a producer the close takes part in producer sequencing. */
  close(producer: ProducerTuple | undefined, nowMs = Date.now()): AppendOutcome {
    const meta = this.meta(nowMs);
    if (!meta) throw new ApiError("not_found", "stream not found");
    if (meta.closed) {
      if (!producer) return { kind: "duplicate", tailSeq: meta.tailSeq, lastSeq: -1, closed: true };
      const by = meta.closedBy;
      if (by && by.id === producer.id && by.epoch === producer.epoch && by.seq === producer.seq) {
        return { kind: "duplicate", tailSeq: meta.tailSeq, lastSeq: producer.seq, closed: true };
      }
      return { kind: "closed", tailSeq: meta.tailSeq };
    }
    if (producer) {
      const verdict = this.checkProducer(producer, nowMs);
      if (verdict.kind === "duplicate") return { kind: "duplicate", tailSeq: meta.tailSeq, lastSeq: verdict.lastSeq, closed: false };
    }
    this.storage.transactionSync(() => {
      if (producer) this.commitProducer(producer, nowMs);
      this.sql.exec(`update stream_meta set closed = 1, closed_by = ? where id = 1`, producer ? JSON.stringify(producer) : null);
    });
    this.patchRow({ closed: true, closedBy: producer ?? null });
    return { kind: "appended", tailSeq: meta.tailSeq, appended: [], fresh: [], closed: true };
  }

  /**
   * Stored messages after `afterSeq` (up to `uptoSeq`), at most about `maxBytes` (always at least
   * one message). A fork's inherited messages are not stored here: see readThrough in fork.ts.
   */
  read(afterSeq: number, maxBytes: number, maxCount = 1_000_000, uptoSeq = Number.MAX_SAFE_INTEGER): { messages: StoredMessage[]; upToDate: boolean } {
    // A reader at the tail (every long-poll that re-arms) finds nothing: no query for that.
    if (afterSeq >= this.tailSeq() || afterSeq >= uptoSeq) return { messages: [], upToDate: true };
    const messages: StoredMessage[] = [];
    let bytes = 0;
    let more = false;
    const take = (m: StoredMessage): boolean => {
      if (messages.length >= maxCount || (messages.length > 0 && bytes + m.data.byteLength > maxBytes)) {
        more = true;
        return false;
      }
      messages.push(m);
      bytes += m.data.byteLength;
      return true;
    };
    const takeRow = (row: SqlStorageValue[]): boolean => {
      const [rowSeq, rowData, rowEntryId, rowLens] = row as [number, ArrayBuffer, string | null, ArrayBuffer | null];
      if (rowLens === null) return take({ seq: rowSeq, data: new Uint8Array(rowData), entryId: rowEntryId });
      for (const m of unpackRun(rowSeq, rowData, rowLens, afterSeq, uptoSeq)) if (!take(m)) return false;
      return true;
    };
    // Every row holds at least one message, so maxCount + 1 rows are enough to know there is more.
    const cursor = this.sql.exec(
      `select seq, data, entry_id, lens from messages where seq > ? and seq <= ? order by seq limit ?`, afterSeq, uptoSeq, maxCount + 1,
    );
    // Rows as arrays, not objects: a catch-up read goes through many thousands of them.
    for (const row of cursor.raw()) if (!takeRow(row)) break;
    // A packed row that ends after uptoSeq may begin at or before it.
    if (!more && uptoSeq < this.tailSeq()) {
      const next = this.sql.exec(`select seq, data, entry_id, lens from messages where seq > ? order by seq limit 1`, uptoSeq).raw().next();
      if (!next.done && next.value[3] !== null) takeRow(next.value);
    }
    return { messages, upToDate: !more };
  }

  /**
   * A JSON stream's page of stored messages as the body a read sends (`[` + values joined by `,` +
   * `]`), built by SQLite: the same messages and bytes as `read` + joining them, without handing every
   * row to JavaScript (what a catch-up read of a long log spends its time on). Same page rule as `read`,
   * by rows: rows while they fit in `maxBytes`, always at least one message. A packed row that begins
   * at or before `afterSeq` gives the page its messages after it (cut by message if they alone are over).
   */
  readJoined(afterSeq: number, maxBytes: number): { body: Uint8Array; lastSeq: number; count: number; upToDate: boolean } {
    const tail = this.tailSeq();
    if (afterSeq >= tail) return { body: new TextEncoder().encode("[]"), lastSeq: afterSeq, count: 0, upToDate: true };
    let head: Uint8Array | null = null;
    let headCount = 0;
    let from = afterSeq;
    const first = this.sql.exec(`select seq, data, lens from messages where seq > ? order by seq limit 1`, afterSeq).raw().next();
    if (!first.done && first.value[2] !== null) {
      const [rowSeq, rowData, rowLens] = first.value as [number, ArrayBuffer, ArrayBuffer];
      const firstSeq = rowSeq - runCount(rowLens) + 1;
      if (firstSeq <= afterSeq) {
        const start = runOffset(rowLens, afterSeq + 1 - firstSeq);
        head = new Uint8Array(rowData, start);
        headCount = rowSeq - afterSeq;
        from = rowSeq;
        if (head.byteLength > maxBytes) {
          const page = this.read(afterSeq, maxBytes, Number.MAX_SAFE_INTEGER, rowSeq).messages;
          const end = runOffset(rowLens, page[page.length - 1].seq + 1 - firstSeq) - 1;
          const lastSeq = page[page.length - 1].seq;
          return { body: bracketed([new Uint8Array(rowData, start, end - start)]), lastSeq, count: page.length, upToDate: lastSeq >= tail };
        }
      }
    }
    const parts: Uint8Array[] = head ? [head] : [];
    let count = headCount;
    let lastSeq = from;
    let budget = maxBytes - (head?.byteLength ?? 0);
    // SQLite joins at most JOIN_MAX_BYTES at a time: a Durable Object's SQLite refuses a string or
    // BLOB over 2 MB, and a page may be 4 MiB. The page is its joins, joined.
    while (lastSeq < tail) {
      const pageBound = budget <= JOIN_MAX_BYTES;
      const chunk = pageBound ? budget : JOIN_MAX_BYTES;
      // The first row that no longer fits this join; every row before it goes in.
      const cut = this.sql.exec(
        `select seq, rn, run from (
           select seq, row_number() over w as rn, sum(length(cast(data as blob))) over w as run
           from messages where seq > ? window w as (order by seq rows between unbounded preceding and current row))
         where run > ? limit 1`,
        lastSeq, chunk,
      ).toArray()[0] as { seq: number; rn: number; run: number } | undefined;
      // Rows before the cut row (no row has a seq between theirs and its). A first row over the
      // join alone goes in when it fits the page, or when the page has nothing yet (at least one message).
      const upto = cut === undefined ? tail : cut.rn > 1 ? cut.seq - 1 : parts.length === 0 || cut.run <= budget ? cut.seq : lastSeq;
      if (upto <= lastSeq) break;
      const r = this.sql.exec(
        `select sum(coalesce(length(lens) / 4, 1)) as n, max(seq) as last, sum(length(cast(data as blob))) as bytes,
           cast(coalesce(group_concat(cast(data as text), ','), '') as blob) as body
         from (select seq, data, lens from messages where seq > ? and seq <= ? order by seq)`,
        lastSeq, upto,
      ).one();
      parts.push(new Uint8Array(r.body as ArrayBuffer));
      count += (r.n as number | null) ?? 0;
      lastSeq = (r.last as number | null) ?? upto;
      budget -= (r.bytes as number | null) ?? 0;
      // Cut by the page, not by the join: the page is full.
      if (cut !== undefined && pageBound) break;
    }
    return { body: bracketed(parts), lastSeq, count, upToDate: lastSeq >= tail };
  }

  /** The last `count` messages of a thread's log, which holds no packed runs (see packsRuns). */
  lastMessages(count: number): StoredMessage[] {
    return this.sql.exec(`select seq, data, entry_id from messages order by seq desc limit ?`, count).toArray().reverse().map(storedMessage);
  }

  /**
   * The last `count` messages whose bytes contain `needle`, among the `scan` messages up to and
   * including `upToSeq`, oldest first: SQLite looks through the rows, not JavaScript. For a
   * thread's log, which holds no packed runs (see packsRuns).
   */
  lastContaining(needle: string, count: number, upToSeq: number, scan: number): StoredMessage[] {
    return this.sql
      .exec(
        `select seq, data, entry_id from (select seq, data, entry_id from messages where seq <= ? order by seq desc limit ?)
         where instr(data, cast(? as blob)) > 0 order by seq desc limit ?`,
        upToSeq, scan, needle, count,
      )
      .toArray()
      .reverse()
      .map(storedMessage);
  }

  tailSeq(): number {
    return this.loadRow()?.meta.tailSeq ?? 0;
  }

  /** Sliding TTL: reads and appends (not HEAD) push expiry out. Only written when a TTL is set. */
  touch(meta: StreamMeta, nowMs = Date.now()): void {
    if (meta.ttlSeconds === null) return;
    this.sql.exec(`update stream_meta set last_access_at = ? where id = 1`, nowMs);
    this.patchRow({ lastAccessAt: nowMs });
  }

  /** Removes everything; a fork's source reference becomes a pending release (fork-store.ts). */
  purge(): void {
    this.storage.transactionSync(() => {
      this.sql.exec(`delete from messages`);
      if (this.producers.exists()) this.sql.exec(`delete from producers`);
      this.sql.exec(`delete from stream_meta`);
      this.forks.dropRef();
    });
    this.row = null;
  }

  formatTail(): string {
    return formatOffset(this.tailSeq());
  }

  private insertMessages(messages: NewMessage[], tailSeq: number, nowMs: number, pack: boolean) {
    const appended: AppendedRef[] = [];
    const fresh: StoredMessage[] = [];
    let seq = tailSeq;
    // Messages without an entry id go in as packed runs (`pack`: a plain JSON stream's), or as
    // multi-row inserts: one statement per run of up to ROWS_PER_INSERT instead of one per message.
    let pending: { seq: number; data: Uint8Array }[] = [];
    const flush = () => {
      if (pack) {
        let i = 0;
        for (const n of runLengths(pending)) {
          const run = pending.slice(i, (i += n));
          const lastSeq = run[n - 1].seq;
          if (n === 1) {
            this.sql.exec(`insert into messages (seq, data, entry_id, ts) values (?, ?, null, ?)`, lastSeq, run[0].data, nowMs);
          } else {
            const packed = packRun(run);
            this.sql.exec(`insert into messages (seq, data, entry_id, ts, lens) values (?, ?, null, ?, ?)`, lastSeq, packed.data, nowMs, packed.lens);
          }
        }
        pending = [];
        return;
      }
      for (let i = 0; i < pending.length; i += ROWS_PER_INSERT) {
        const chunk = pending.slice(i, i + ROWS_PER_INSERT);
        // A run's seqs are consecutive: the first seq and the time are bound once, then each row's data.
        const args: unknown[] = [chunk[0].seq, nowMs];
        for (const r of chunk) args.push(r.data);
        this.sql.exec(`insert into messages (seq, data, entry_id, ts) values ${insertRows(chunk.length)}`, ...args);
      }
      pending = [];
    };
    for (const m of messages) {
      const entryId = m.entryId ?? null;
      if (entryId === null) {
        seq += 1;
        pending.push({ seq, data: m.data });
      } else {
        flush();
        // The unique index on entry_id is the dedup: an ignored insert means the entry is already there.
        const written = this.sql.exec(`insert or ignore into messages (seq, data, entry_id, ts) values (?, ?, ?, ?)`, seq + 1, m.data, entryId, nowMs).rowsWritten;
        if (written === 0) {
          const existing = this.sql.exec(`select seq from messages where entry_id = ?`, entryId).one();
          appended.push({ seq: existing.seq as number, entryId, duplicate: true });
          continue;
        }
        seq += 1;
      }
      appended.push({ seq, entryId, duplicate: false });
      fresh.push(m.parsed === undefined ? { seq, data: m.data, entryId } : { seq, data: m.data, entryId, parsed: m.parsed });
    }
    flush();
    return { appended, fresh, tail: seq };
  }

  private lastProducerSweepMs = 0;

  /** Whether this producer request was taken already (same producer and epoch, a seq not above its last). */
  isProducerReplay(p: ProducerTuple): boolean {
    if (!this.producers.exists()) return false;
    const state = this.sql.exec(`select epoch, last_seq from producers where id = ?`, p.id).toArray()[0];
    return state !== undefined && state.epoch === p.epoch && p.seq <= (state.last_seq as number);
  }

  private checkProducer(p: ProducerTuple, nowMs: number): { kind: "accept" } | { kind: "duplicate"; lastSeq: number } {
    if (!this.producers.exists()) {
      if (p.seq !== 0) throw producerGap(0, p.seq);
      return { kind: "accept" };
    }
    // Expired producer state is swept at most hourly, not on every append.
    if (nowMs - this.lastProducerSweepMs > 3_600_000) {
      this.sql.exec(`delete from producers where updated_at < ?`, nowMs - PRODUCER_STATE_TTL_MS);
      this.lastProducerSweepMs = nowMs;
    }
    const state = this.sql.exec(`select epoch, last_seq from producers where id = ?`, p.id).toArray()[0];
    if (!state) {
      if (p.seq !== 0) throw producerGap(0, p.seq);
      return { kind: "accept" };
    }
    const epoch = state.epoch as number;
    const lastSeq = state.last_seq as number;
    if (p.epoch < epoch) {
      throw new ApiError("stale_producer_epoch", "stale producer epoch", undefined, { "Producer-Epoch": String(epoch) });
    }
    if (p.epoch > epoch) {
      if (p.seq !== 0) throw new ApiError("bad_request", "a new producer epoch must start at sequence 0");
      return { kind: "accept" };
    }
    if (p.seq <= lastSeq) return { kind: "duplicate", lastSeq };
    if (p.seq === lastSeq + 1) return { kind: "accept" };
    throw producerGap(lastSeq + 1, p.seq);
  }

  private commitProducer(p: ProducerTuple, nowMs: number): void {
    this.producers.ensure();
    this.sql.exec(
      `insert into producers (id, epoch, last_seq, updated_at) values (?, ?, ?, ?)
       on conflict(id) do update set epoch = excluded.epoch, last_seq = excluded.last_seq, updated_at = excluded.updated_at`,
      p.id, p.epoch, p.seq, nowMs,
    );
  }
}

function producerGap(expected: number, received: number): ApiError {
  return new ApiError("producer_sequence_gap", "producer sequence gap", { expected, received }, {
    "Producer-Expected-Seq": String(expected),
    "Producer-Received-Seq": String(received),
  });
}

export function isExpired(meta: Pick<StreamMeta, "expiresAt" | "ttlSeconds" | "lastAccessAt">, nowMs: number): boolean {
  if (meta.expiresAt) {
    const at = Date.parse(meta.expiresAt);
    if (!Number.isFinite(at) || nowMs >= at) return true;
  }
  return meta.ttlSeconds !== null && nowMs >= meta.lastAccessAt + meta.ttlSeconds * 1000;
}

/** Most bytes one SQLite value of a page holds: well under a Durable Object's 2 MB string/BLOB limit. */
const JOIN_MAX_BYTES = 1024 * 1024;

/** SQLite in a Durable Object takes at most 100 bound parameters a statement: first seq, time, then one a row. */
const ROWS_PER_INSERT = 98;
const rowPlaceholders = new Map<number, string>();
/** `(?1, ?3, null, ?2), (?1 + 1, ?4, null, ?2), …`: row k has seq ?1 + k and data ?(k + 3). */
function insertRows(n: number): string {
  let sql = rowPlaceholders.get(n);
  if (!sql) {
    sql = Array.from({ length: n }, (_, k) => `(${k === 0 ? "?1" : `?1 + ${k}`}, ?${k + 3}, null, ?2)`).join(", ");
    rowPlaceholders.set(n, sql);
  }
  return sql;
}

/** `[` + the parts joined by `,` + `]`: a JSON read's body from joined messages. */
function bracketed(parts: Uint8Array[]): Uint8Array {
  const filled = parts.filter((p) => p.byteLength > 0);
  let total = 2 + Math.max(0, filled.length - 1);
  for (const p of filled) total += p.byteLength;
  const out = new Uint8Array(total);
  out[0] = 0x5b;
  let at = 1;
  filled.forEach((p, k) => {
    if (k > 0) out[at++] = 0x2c;
    out.set(p, at);
    at += p.byteLength;
  });
  out[at] = 0x5d;
  return out;
}

/** A `messages` row (`seq, data, entry_id`) as a stored message. */
export function storedMessage(row: Record<string, SqlStorageValue>): StoredMessage {
  return { seq: row.seq as number, data: new Uint8Array(row.data as ArrayBuffer), entryId: row.entry_id as string | null };
}
