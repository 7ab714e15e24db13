/**
 * A store's tables: the DDL (idempotent `create ... if not exists` statements, `;`-separated) and
 * the in-place migrations of older actors' tables.
 */
export type Schema = { name: string; ddl: string; migrate?: (sql: SqlStorage) => void };

const prepared = new WeakMap<SqlStorage, Set<string>>();
/** The tables an actor had when it started (read by prepareSchemas): committed, so they stay. */
const tablesAtStart = new WeakMap<SqlStorage, Set<string>>();
/** Lazy tables this incarnation created (see LazySchema). */
const createdHere = new WeakMap<SqlStorage, Set<string>>();

function preparedFor(sql: SqlStorage): Set<string> {
  let done = prepared.get(sql);
  if (!done) prepared.set(sql, (done = new Set()));
  return done;
}

/** Creates one store's tables unless its actor has already prepared them (a store built alone does it itself). */
export function ensureSchema(sql: SqlStorage, schema: Schema): void {
  const done = preparedFor(sql);
  if (done.has(schema.name)) return;
  sql.exec(schema.ddl);
  schema.migrate?.(sql);
  done.add(schema.name);
}

/**
 * Prepares every store of an actor at once. A new actor gets all its tables from one batch of
 * statements; an actor whose tables are already at `version` (a marker table says so) only reads
 * that marker. Every schema change of the stores must bump `version`.
 */
export function prepareSchemas(sql: SqlStorage, version: string, schemas: Schema[]): void {
  const done = preparedFor(sql);
  const marker = `schema_${version}`;
  const tables = sql.exec(`select name from sqlite_master where type = 'table'`).toArray().map((r) => r.name as string);
  tablesAtStart.set(sql, new Set(tables));
  if (!tables.includes(marker)) {
    sql.exec(schemas.map((s) => s.ddl).join(";\n"));
    // A new actor's tables were just created as they are now: only an older actor's need migrating.
    const fresh = !tables.some((t) => !t.startsWith("_cf") && !t.startsWith("sqlite_"));
    if (!fresh) for (const s of schemas) s.migrate?.(sql);
    sql.exec(`create table if not exists ${marker} (id integer primary key)`);
  }
  for (const s of schemas) done.add(s.name);
}

/**
 * A store's tables that most actors never use (forks, producer state, bots' turns, a launch's
 * progress), created by the first write that needs them rather than with the actor: every table a
 * new actor creates costs it CPU, and creating all of them was about a third of a thread's
 * creation. Until then a read has no rows to find and skips SQLite. A new actor's lazy tables are
 * created whole, as they are now; an older actor's are migrated (`migrate`) when the store is
 * built, if it has them (with the actor, outside any transaction: no rollback undoes it).
 */
export class LazySchema {
  private known = false;
  private readonly table: string;

  constructor(private readonly sql: SqlStorage, private readonly schema: Schema) {
    const first = /create table if not exists (\w+)/.exec(schema.ddl);
    if (!first) throw new Error(`lazy schema ${schema.name} creates no table`);
    this.table = first[1]!;
    if (schema.migrate && this.exists()) schema.migrate(sql);
  }

  /** Whether its tables exist (they are created together, so the first one tells). */
  exists(): boolean {
    if (this.known) return true;
    const atStart = tablesAtStart.get(this.sql);
    if (atStart?.has(this.table)) return (this.known = true);
    // Only this actor writes its database: a table it did not have at start and never created is not there.
    if (atStart && !createdHere.get(this.sql)?.has(this.table)) return false;
    // Created by this incarnation: asked each time, since a transaction rolled back takes the
    // tables it created with it.
    return this.sql.exec(`select 1 from sqlite_master where type = 'table' and name = ?`, this.table).toArray().length > 0;
  }

  /** Before a write. */
  ensure(): void {
    if (this.exists()) return;
    this.sql.exec(this.schema.ddl);
    let created = createdHere.get(this.sql);
    if (!created) createdHere.set(this.sql, (created = new Set()));
    created.add(this.table);
  }
}

/** Adds a column an older actor's table lacks. */
export function addColumnIfMissing(sql: SqlStorage, table: string, column: string, type: string): void {
  const columns = sql.exec(`pragma table_info(${table})`).toArray().map((c) => c.name as string);
  if (!columns.includes(column)) sql.exec(`alter table ${table} add column ${column} ${type}`);
}
