import { describe, expect, it } from "vitest";
import { env, runInDurableObject } from "cloudflare:test";
import { prepareSchemas } from "../../src/domain/sql-schema";
import { THREAD_ACTOR_SCHEMAS, THREAD_ACTOR_SCHEMA_VERSION } from "../../src/actors/thread/thread-actor";
import { call, createThread, houseToken } from "./helpers";

const E = env as unknown as { THREADS: DurableObjectNamespace };
const columns = (sql: SqlStorage, table: string) => sql.exec(`pragma table_info(${table})`).toArray().map((c) => c.name as string);
const tables = (sql: SqlStorage) => sql.exec(`select name from sqlite_master where type = 'table'`).toArray().map((r) => r.name as string);

describe("a thread actor's tables", () => {
  it("a new actor gets every table of every store and the version marker", async () => {
    const token = await houseToken("house-schema");
    const t = await createThread(token);
    await runInDurableObject(E.THREADS.get(E.THREADS.idFromName(`thread:${t.id}`)), (_a, state) => {
      const names = tables(state.storage.sql);
      for (const table of ["stream_meta", "messages", "producers", "stream_fork", "thread_row", "outbox", "launch_progress", "deadlines", "probe_state", "dispatch_turns", "dispatch_agents", "stream_owner", "create_request", `schema_${THREAD_ACTOR_SCHEMA_VERSION}`]) {
        expect(names, table).toContain(table);
      }
      expect(columns(state.storage.sql, "thread_row")).toContain("run_id");
    });
  });

  it("an actor from before the marker (tables without later columns) is migrated in place, its data kept", async () => {
    const token = await houseToken("house-schema-old");
    const t = await createThread(token, { title: "old" });
    expect((await call(`/api/threads/${t.id}/entries`, { method: "POST", token, json: { id: "e1", payload: { type: "chat", text: "kept" } } })).status).toBe(201);
    await runInDurableObject(E.THREADS.get(E.THREADS.idFromName(`thread:${t.id}`)), (_a, state) => {
      const sql = state.storage.sql;
      // What an actor written by an older release looks like.
      sql.exec(`drop table schema_${THREAD_ACTOR_SCHEMA_VERSION}; alter table thread_row drop column run_id; alter table stream_meta drop column deleted_at`);
      expect(columns(sql, "thread_row")).not.toContain("run_id");
      prepareSchemas(sql, THREAD_ACTOR_SCHEMA_VERSION, THREAD_ACTOR_SCHEMAS);
      expect(columns(sql, "thread_row")).toContain("run_id");
      expect(columns(sql, "stream_meta")).toContain("deleted_at");
      expect(tables(sql)).toContain(`schema_${THREAD_ACTOR_SCHEMA_VERSION}`);
      expect(sql.exec(`select title from thread_row`).one().title).toBe("old");
      expect(sql.exec(`select count(*) as n from messages`).one().n).toBe(1);
    });
  });
});
