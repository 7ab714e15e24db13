import { describe, expect, it } from "vitest";
import { env, runInDurableObject } from "cloudflare:test";
import { LazySchema, prepareSchemas } from "../../src/domain/sql-schema";
import { THREAD_ACTOR_SCHEMAS, THREAD_ACTOR_SCHEMA_VERSION } from "../../src/actors/thread/thread-actor";
import { call, createThread, houseToken } from "./helpers";

const E = env as unknown as { THREADS: DurableObjectNamespace };
const columns = (sql: SqlStorage, table: string) => sql.exec(`pragma table_info(${table})`).toArray().map((c) => c.name as string);
const tables = (sql: SqlStorage) => sql.exec(`select name from sqlite_master where type = 'table'`).toArray().map((r) => r.name as string);

describe("a thread actor's tables", () => {
  it("a new thread gets only the tables every thread uses; the rest come with the first write that needs them", async () => {
    const token = await houseToken("house-schema");
    const t = await createThread(token);
    const stub = () => E.THREADS.get(E.THREADS.idFromName(`thread:${t.id}`));
    await runInDurableObject(stub(), (_a, state) => {
      const names = tables(state.storage.sql);
      for (const table of ["stream_meta", "messages", "thread_row", "outbox", "deadlines", `schema_${THREAD_ACTOR_SCHEMA_VERSION}`]) {
        expect(names, table).toContain(table);
      }
      for (const table of ["producers", "stream_fork", "launch_progress", "probe_state", "dispatch_turns", "dispatch_config", "stream_owner", "create_request", "run_request"]) {
        expect(names, table).not.toContain(table);
      }
      expect(columns(state.storage.sql, "thread_row")).toContain("run_id");
    });
    // Reads of the missing tables answer as empty ones would.
    expect((await call(`/api/threads/${t.id}/dispatch`, { token })).status).toBe(200);
    const producer = { "Producer-Id": "p1", "Producer-Epoch": "0", "Producer-Seq": "0", "Content-Type": "application/json" };
    const post = () => call(`/v1/stream/thread-${t.id}`, { method: "POST", token, headers: producer, body: JSON.stringify({ payload: { type: "chat", text: "once" } }) });
    expect((await post()).status).toBe(200);
    expect((await post()).status).toBe(204);
    await runInDurableObject(stub(), (_a, state) => {
      expect(tables(state.storage.sql)).toContain("producers");
      expect(state.storage.sql.exec(`select count(*) as n from messages`).one().n).toBe(1);
    });
  });

  it("a lazy table created in a transaction that rolls back is created again by the next write", async () => {
    await runInDurableObject(E.THREADS.get(E.THREADS.idFromName("lazy-rollback")), (_a, state) => {
      const sql = state.storage.sql;
      const lazy = new LazySchema(sql, { name: "lazy_t", ddl: `create table if not exists lazy_t (k text primary key)` });
      expect(lazy.exists()).toBe(false);
      expect(() => state.storage.transactionSync(() => {
        lazy.ensure();
        sql.exec(`insert into lazy_t (k) values ('a')`);
        throw new Error("rolled back");
      })).toThrow("rolled back");
      expect(lazy.exists()).toBe(false);
      lazy.ensure();
      sql.exec(`insert into lazy_t (k) values ('b')`);
      expect(lazy.exists()).toBe(true);
      expect(sql.exec(`select k from lazy_t`).toArray()).toEqual([{ k: "b" }]);
    });
  });

  it("an actor from before the marker (tables without later columns) is migrated in place, its data kept", async () => {
    const token = await houseToken("house-schema-old");
    const t = await createThread(token, { title: "old" });
    expect((await call(`/api/threads/${t.id}/entries`, { method: "POST", token, json: { id: "e1", payload: { type: "chat", text: "kept" } } })).status).toBe(201);
    await runInDurableObject(E.THREADS.get(E.THREADS.idFromName(`thread:${t.id}`)), (_a, state) => {
      const sql = state.storage.sql;
      // What an actor written by an older release looks like.
      sql.exec(`drop table schema_${THREAD_ACTOR_SCHEMA_VERSION}; alter table thread_row drop column run_id; alter table stream_meta drop column deleted_at; alter table messages drop column lens`);
      expect(columns(sql, "thread_row")).not.toContain("run_id");
      prepareSchemas(sql, THREAD_ACTOR_SCHEMA_VERSION, THREAD_ACTOR_SCHEMAS);
      expect(columns(sql, "thread_row")).toContain("run_id");
      expect(columns(sql, "stream_meta")).toContain("deleted_at");
      expect(columns(sql, "messages")).toContain("lens");
      expect(tables(sql)).toContain(`schema_${THREAD_ACTOR_SCHEMA_VERSION}`);
      expect(sql.exec(`select title from thread_row`).one().title).toBe("old");
      expect(sql.exec(`select count(*) as n from messages`).one().n).toBe(1);
    });
  });
});
