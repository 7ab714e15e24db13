import type { ThreadStatus } from "../entries/schema";
import { addColumnIfMissing, ensureSchema, type Schema } from "../domain/sql-schema";

export type ParentRef = { kind: "none" | "agent" | "thread"; id: string | null };

export type ThreadRow = {
  id: string;
  houseId: string;
  parent: ParentRef;
  environmentId: string | null;
  title: string | null;
  status: ThreadStatus;
  statusReason: string | null;
  statusDetail: string | null;
  boxId: string | null;
  lastLivenessAt: number | null;
  runStartedAt: number | null;
  /** The current (or last) run's id, from its claim; finished-signals of other runs are ignored. */
  runId: string | null;
  brainId: string | null;
  createdBy: string;
  createdAt: number;
  updatedAt: number;
};

export const THREAD_ROW_SCHEMA: Schema = {
  name: "thread_row",
  ddl: `create table if not exists thread_row (
      id integer primary key check (id = 1), thread_id text not null, house_id text not null,
      parent_kind text not null, parent_id text, environment_id text, title text,
      status text not null, status_reason text, status_detail text, box_id text, last_liveness_at integer, run_started_at integer,
      brain_id text, created_by text not null, created_at integer not null, updated_at integer not null, run_id text)`,
  // Rows written before runs had ids lack the column.
  migrate: (sql) => addColumnIfMissing(sql, "thread_row", "run_id", "text"),
};

/** The thread's single row, next to its log in the same actor's SQLite. */
export class ThreadRowStore {
  constructor(private readonly sql: SqlStorage) {
    ensureSchema(sql, THREAD_ROW_SCHEMA);
  }

  /**
   * The row as last written, kept in memory (this actor is its only writer); `undefined` = not
   * loaded. Callers get a copy, so nothing they do changes it behind storage's back.
   */
  private cached: ThreadRow | null | undefined;

  get(): ThreadRow | null {
    if (this.cached === undefined) this.cached = this.load();
    return this.cached && { ...this.cached, parent: { ...this.cached.parent } };
  }

  /** Drops the in-memory copy: after a transaction that wrote the row was rolled back. */
  forget(): void {
    this.cached = undefined;
  }

  private load(): ThreadRow | null {
    const r = this.sql.exec(`select * from thread_row where id = 1`).toArray()[0];
    if (!r) return null;
    return {
      id: r.thread_id as string,
      houseId: r.house_id as string,
      parent: { kind: r.parent_kind as ParentRef["kind"], id: (r.parent_id as string | null) ?? null },
      environmentId: r.environment_id as string | null,
      title: r.title as string | null,
      status: r.status as ThreadStatus,
      statusReason: r.status_reason as string | null,
      statusDetail: r.status_detail as string | null,
      boxId: r.box_id as string | null,
      lastLivenessAt: r.last_liveness_at as number | null,
      runStartedAt: r.run_started_at as number | null,
      runId: (r.run_id as string | null) ?? null,
      brainId: r.brain_id as string | null,
      createdBy: r.created_by as string,
      createdAt: r.created_at as number,
      updatedAt: r.updated_at as number,
    };
  }

  insert(row: ThreadRow): void {
    this.sql.exec(
      `insert into thread_row (id, thread_id, house_id, parent_kind, parent_id, environment_id, title, status, status_reason, status_detail,
        box_id, last_liveness_at, run_started_at, run_id, brain_id, created_by, created_at, updated_at)
       values (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      row.id, row.houseId, row.parent.kind, row.parent.id, row.environmentId, row.title, row.status, row.statusReason, row.statusDetail,
      row.boxId, row.lastLivenessAt, row.runStartedAt, row.runId, row.brainId, row.createdBy, row.createdAt, row.updatedAt,
    );
    this.cached = { ...row, parent: { ...row.parent } };
  }

  update(patch: Partial<Pick<ThreadRow, "status" | "statusReason" | "statusDetail" | "boxId" | "lastLivenessAt" | "runStartedAt" | "runId" | "title">>, nowMs = Date.now()): void {
    const cols: Record<string, string> = {
      status: "status", statusReason: "status_reason", statusDetail: "status_detail", boxId: "box_id", lastLivenessAt: "last_liveness_at",
      runStartedAt: "run_started_at", runId: "run_id", title: "title",
    };
    const sets: string[] = [];
    const values: unknown[] = [];
    for (const [k, v] of Object.entries(patch)) {
      if (v === undefined) continue;
      sets.push(`${cols[k]} = ?`);
      values.push(v);
    }
    if (sets.length === 0) return;
    sets.push("updated_at = ?");
    values.push(nowMs);
    this.sql.exec(`update thread_row set ${sets.join(", ")} where id = 1`, ...values);
    const current = this.get();
    if (current) {
      for (const [k, v] of Object.entries(patch)) if (v !== undefined) (current as Record<string, unknown>)[k] = v;
      this.cached = { ...current, updatedAt: nowMs };
    }
  }

  /** Liveness is a column, not log entries: heartbeats must not grow the log. */
  touchLiveness(nowMs: number): void {
    this.sql.exec(`update thread_row set last_liveness_at = ? where id = 1`, nowMs);
    if (this.cached) this.cached = { ...this.cached, lastLivenessAt: nowMs };
  }
}

export function publicThread(row: ThreadRow) {
  return {
    id: row.id,
    houseId: row.houseId,
    parent: row.parent,
    environmentId: row.environmentId,
    title: row.title,
    status: row.status,
    reason: row.statusReason,
    detail: row.statusDetail,
    boxId: row.boxId,
    /** The current run's id, or the last one's once it ended. */
    runId: row.runId,
    lastLivenessAt: row.lastLivenessAt === null ? null : new Date(row.lastLivenessAt).toISOString(),
    createdBy: row.createdBy,
    createdAt: new Date(row.createdAt).toISOString(),
    updatedAt: new Date(row.updatedAt).toISOString(),
  };
}
