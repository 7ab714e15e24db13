/**
 * A store's tables: the DDL (idempotent `create ... if not exists` statements, `;`-separated) and
 * the in-place migrations of older actors' tables.
 */
export type Schema = { name: string; ddl: string; migrate?: (sql: SqlStorage) => void };

const prepared = new WeakMap<SqlStorage, Set<string>>();

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
  if (!tables.includes(marker)) {
    sql.exec(schemas.map((s) => s.ddl).join(";\n"));
    // A new actor's tables were just created as they are now: only an older actor's need migrating.
    const fresh = !tables.some((t) => !t.startsWith("_cf") && !t.startsWith("sqlite_"));
    if (!fresh) for (const s of schemas) s.migrate?.(sql);
    sql.exec(`create table if not exists ${marker} (id integer primary key)`);
  }
  for (const s of schemas) done.add(s.name);
}

/** Adds a column an older actor's table lacks. */
export function addColumnIfMissing(sql: SqlStorage, table: string, column: string, type: string): void {
  const columns = sql.exec(`pragma table_info(${table})`).toArray().map((c) => c.name as string);
  if (!columns.includes(column)) sql.exec(`alter table ${table} add column ${column} ${type}`);
}
