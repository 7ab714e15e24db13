import { describe, expect, it } from "vitest";
import { env, runInDurableObject } from "cloudflare:test";
import { StreamLog } from "../../src/streams/log";
import { ThreadRowStore, type ThreadRow } from "../../src/threads/thread-row";

// The stream's metadata and the thread's row are kept in memory by the actor that owns them;
// what a request sees must always be what storage holds, also after a rolled-back transaction.
const E = env as unknown as { THREADS: DurableObjectNamespace };
const actor = (name: string) => E.THREADS.get(E.THREADS.idFromName(`${name}-${crypto.randomUUID()}`));
const enc = new TextEncoder();
const msg = (s: string) => ({ data: enc.encode(JSON.stringify(s)) });

describe("a stream log's metadata in memory", () => {
  it("follows every append and close, and matches a fresh read of storage", async () => {
    await runInDurableObject(actor("meta-follow"), async (_a, state) => {
      const log = new StreamLog(state.storage);
      log.create("s", { contentType: "application/json", ttlSeconds: 60, expiresAt: null, closed: false }, [msg("a")], 1_000);
      log.append({ messages: [msg("b"), msg("c")], streamSeq: "0002" }, 2_000);
      expect(log.meta(3_000)).toMatchObject({ tailSeq: 3, lastStreamSeq: "0002", lastAccessAt: 2_000, closed: false });
      log.close({ id: "p", epoch: 0, seq: 0 }, 4_000);
      const fresh = new StreamLog(state.storage).meta(5_000);
      expect(log.meta(5_000)).toEqual(fresh);
      expect(fresh).toMatchObject({ tailSeq: 3, closed: true, closedBy: { id: "p", epoch: 0, seq: 0 } });
    });
  });

  it("is unchanged by an append whose transaction rolled back; the next append continues from storage's tail", async () => {
    await runInDurableObject(actor("meta-rollback"), async (_a, state) => {
      const log = new StreamLog(state.storage);
      log.create("s", { contentType: "application/json", ttlSeconds: null, expiresAt: null, closed: false }, [msg("a")]);
      log.onAppendInTransaction = () => { throw new Error("refused inside the transaction"); };
      expect(() => log.append({ messages: [msg("b")], streamSeq: "0009" })).toThrow("refused inside the transaction");
      expect(log.meta()).toEqual(new StreamLog(state.storage).meta());
      expect(log.meta()).toMatchObject({ tailSeq: 1, lastStreamSeq: null });
      log.onAppendInTransaction = null;
      const outcome = log.append({ messages: [msg("c")], streamSeq: "0001" });
      expect(outcome).toMatchObject({ kind: "appended", tailSeq: 2 });
      expect(log.read(0, 1 << 20).messages.map((m) => JSON.parse(new TextDecoder().decode(m.data)))).toEqual(["a", "c"]);
    });
  });

  it("sees a delete: the name reads as gone, and a new create starts afresh", async () => {
    await runInDurableObject(actor("meta-delete"), async (_a, state) => {
      const log = new StreamLog(state.storage);
      log.create("s", { contentType: "application/json", ttlSeconds: null, expiresAt: null, closed: false }, [msg("a")]);
      expect(log.delete()).toBe("purged");
      expect(log.meta()).toBeNull();
      expect(log.tailSeq()).toBe(0);
      log.create("s", { contentType: "text/plain", ttlSeconds: null, expiresAt: null, closed: false }, []);
      expect(log.meta()).toMatchObject({ contentType: "text/plain", tailSeq: 0 });
    });
  });
});

describe("a thread's row in memory", () => {
  it("follows updates and liveness, matches a fresh read, and cannot be changed through a copy", async () => {
    await runInDurableObject(actor("row-follow"), async (_a, state) => {
      const rows = new ThreadRowStore(state.storage.sql);
      const row: ThreadRow = {
        id: "th_1", houseId: "h", parent: { kind: "none", id: null }, environmentId: null, title: "t", status: "idle",
        statusReason: null, statusDetail: null, boxId: null, lastLivenessAt: null, runStartedAt: null, runId: null,
        brainId: null, createdBy: "u", createdAt: 1, updatedAt: 1,
      };
      rows.insert(row);
      rows.update({ status: "running", runId: "r1", runStartedAt: 10, statusDetail: "launching" }, 10);
      rows.touchLiveness(20);
      rows.update({ statusDetail: null }, 30);
      const copy = rows.get()!;
      copy.status = "failed";
      copy.parent.kind = "thread";
      expect(rows.get()).toEqual(new ThreadRowStore(state.storage.sql).get());
      expect(rows.get()).toMatchObject({ status: "running", runId: "r1", lastLivenessAt: 20, statusDetail: null, updatedAt: 30, parent: { kind: "none" } });
    });
  });
});

describe("a JSON page joined by SQLite", () => {
  it("is byte for byte the page read() returns, joined: same messages, same cut at the byte limit, at least one message", async () => {
    await runInDurableObject(actor("joined-page"), async (_a, state) => {
      const log = new StreamLog(state.storage);
      const values = Array.from({ length: 40 }, (_, i) => ({ i, text: "é✓".repeat(i % 7) + "x".repeat((i * 13) % 50) }));
      log.create("s", { contentType: "application/json", ttlSeconds: null, expiresAt: null, closed: false }, values.map((v) => ({ data: enc.encode(JSON.stringify(v)) })), 1_000);
      const joinedByJs = (after: number, max: number) => {
        const page = log.read(after, max);
        const body = "[" + page.messages.map((m) => new TextDecoder().decode(m.data)).join(",") + "]";
        return { body, lastSeq: page.messages.at(-1)?.seq ?? after, count: page.messages.length, upToDate: page.upToDate };
      };
      for (const after of [0, 1, 17, 39, 40]) {
        for (const max of [1, 30, 64, 100, 1_000, 1_000_000]) {
          const j = log.readJoined(after, max);
          expect({ after, max, ...j, body: new TextDecoder().decode(j.body) }).toEqual({ after, max, ...joinedByJs(after, max) });
        }
      }
      // Paging through with a small limit visits every message once, in order.
      const seen: number[] = [];
      for (let after = 0, guard = 0; guard < 100; guard++) {
        const j = log.readJoined(after, 120);
        seen.push(...(JSON.parse(new TextDecoder().decode(j.body)) as { i: number }[]).map((v) => v.i));
        after = j.lastSeq;
        if (j.upToDate) break;
      }
      expect(seen).toEqual(values.map((v) => v.i));
    });
  });
});
