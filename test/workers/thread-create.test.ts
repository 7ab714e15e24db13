import { describe, expect, it } from "vitest";
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import type { HouseActor, ThreadActor } from "./test-worker";
import { call, houseToken, post } from "./helpers";

const E = env as unknown as { THREADS: DurableObjectNamespace<ThreadActor>; HOUSES: DurableObjectNamespace<HouseActor> };
const threadStub = (id: string) => E.THREADS.get(E.THREADS.idFromName(`thread:${id}`));
const houseStub = (id: string) => E.HOUSES.get(E.HOUSES.idFromName(id));

type Thread = { id: string; title: string | null; status: string; reason: string | null; detail: string | null; createdAt: string };

const create = (token: string, body: unknown, key?: string) =>
  call("/api/threads", { method: "POST", token, json: body, headers: key === undefined ? {} : { "idempotency-key": key } });

async function listed(token: string): Promise<string[]> {
  const r = await call("/api/threads?limit=1000", { token });
  expect(r.status).toBe(200);
  return ((await r.json()) as { threads: { id: string }[] }).threads.map((t) => t.id);
}

describe("POST /api/threads with an Idempotency-Key", () => {
  it("creates once (201) and answers a retry with the same row", async () => {
    const token = await houseToken("house-idem");
    const first = await create(token, { title: "build it" }, "retry-me-1");
    expect(first.status).toBe(201);
    const a = (await first.json()) as Thread;
    const again = await create(token, { title: "build it" }, "retry-me-1");
    expect(again.status).toBe(200);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    const b = (await again.json()) as Thread;
    expect(b.id).toBe(a.id);
    expect(b.createdAt).toBe(a.createdAt);
    expect((await listed(token)).filter((id) => id === a.id)).toHaveLength(1);
    expect((await listed(token)).length).toBe(1);
  });

  it("refuses the same key with a different body, and makes distinct threads for distinct keys, subjects and houses", async () => {
    const token = await houseToken("house-idem2", "alice");
    const a = (await (await create(token, { title: "one" }, "k")).json()) as Thread;
    const conflict = await create(token, { title: "two" }, "k");
    expect(conflict.status).toBe(409);
    expect(((await conflict.json()) as { error: { code: string } }).error.code).toBe("conflict");
    const other = await create(token, { title: "one" }, "k2");
    expect(other.status).toBe(201);
    expect(((await other.json()) as Thread).id).not.toBe(a.id);
    const bob = await create(await houseToken("house-idem2", "bob"), { title: "one" }, "k");
    expect(bob.status).toBe(201);
    expect(((await bob.json()) as Thread).id).not.toBe(a.id);
    const elsewhere = await create(await houseToken("house-idem3", "alice"), { title: "one" }, "k");
    expect(elsewhere.status).toBe(201);
    expect(((await elsewhere.json()) as Thread).id).not.toBe(a.id);
    // Without a key every POST is a new thread.
    const plain1 = (await (await create(token, { title: "one" })).json()) as Thread;
    const plain2 = (await (await create(token, { title: "one" })).json()) as Thread;
    expect(plain1.id).not.toBe(plain2.id);
  });

  it("refuses a malformed key with 400 and creates nothing", async () => {
    const token = await houseToken("house-idem4");
    for (const key of ["", "has space", "x".repeat(256), "caf\u00e9"]) {
      const r = await call("/api/threads", { method: "POST", token, json: {}, headers: { "idempotency-key": key } }).catch(() => null);
      if (r === null) continue; // a header value fetch itself refuses never reaches the worker
      expect(r.status, JSON.stringify(key)).toBe(400);
    }
    expect(await listed(token)).toEqual([]);
  });
});

describe("house index updates go through the outbox", () => {
  it("a thread is created (201) while the index fails; the index catches up from the thread's alarm", async () => {
    const token = await houseToken("house-index-down");
    await runInDurableObject(houseStub("house-index-down"), (h: HouseActor) => h.failThreadUpserts(1));
    const r = await create(token, { title: "survives" }, "while-down");
    expect(r.status).toBe(201);
    const t = (await r.json()) as Thread;
    expect((await call(`/api/threads/${t.id}`, { token })).status).toBe(200);
    expect(await listed(token)).not.toContain(t.id);
    // The client's retry finds the thread it created instead of making another.
    const retry = await create(token, { title: "survives" }, "while-down");
    expect(retry.status).toBe(200);
    expect(((await retry.json()) as Thread).id).toBe(t.id);
    await runInDurableObject(threadStub(t.id), (a: ThreadActor) => a.advanceClock(10_000));
    expect(await runDurableObjectAlarm(threadStub(t.id))).toBe(true);
    expect(await listed(token)).toEqual([t.id]);
  });

  it("a status change made while the index fails reaches it with the next change, and the retry keeps the newest", async () => {
    const token = await houseToken("house-index-flaky");
    const r = await create(token, { title: "flaky" });
    const t = (await r.json()) as Thread;
    await runInDurableObject(houseStub("house-index-flaky"), (h: HouseActor) => h.failThreadUpserts(1));
    expect((await post(token, t.id, { payload: { type: "signal.thread.status_changed", status: "running" } })).status).toBe(201);
    const running = await call("/api/threads?status=running", { token });
    expect(((await running.json()) as { threads: unknown[] }).threads).toEqual([]);
    expect((await post(token, t.id, { payload: { type: "signal.thread.status_changed", status: "completed" } })).status).toBe(201);
    const done = await call("/api/threads?status=completed", { token });
    expect(((await done.json()) as { threads: { id: string }[] }).threads.map((x) => x.id)).toEqual([t.id]);
    await runInDurableObject(threadStub(t.id), (a: ThreadActor) => a.advanceClock(10_000));
    await runDurableObjectAlarm(threadStub(t.id));
    const after = await call("/api/threads?status=completed", { token });
    expect(((await after.json()) as { threads: { id: string }[] }).threads.map((x) => x.id)).toEqual([t.id]);
  });
});

describe("a running thread's detail", () => {
  it("follows the run from the claim through the box assignment to the harness running", async () => {
    const token = await houseToken("house-detail");
    const t = (await (await create(token, {})).json()) as Thread;
    const detail = async () => ((await (await call(`/api/threads/${t.id}`, { token })).json()) as Thread).detail;
    await post(token, t.id, { payload: { type: "signal.thread.status_changed", status: "running", reason: "launching" } });
    expect(await detail()).toBe("launching");
    // The launch's milestones are the control plane's own entries.
    const milestone = (id: string, payload: Record<string, unknown>) =>
      runInDurableObject(threadStub(t.id), (a: ThreadActor) => a.testAppendAsControlPlane([{ id, ts: Date.now(), authorId: "threadbox", payload: payload as never }]));
    await milestone("box:r1", { type: "signal.thread.box_assigned", boxId: "box_d1", runId: "r1" });
    expect(await detail()).toBe("preparing box box_d1");
    await milestone("launched:r1", { type: "signal.run.launched", runId: "r1", harness: "pi", boxId: "box_d1", boxReused: false, session: "new" });
    expect(await detail()).toBe("pi running on box box_d1");
    await post(token, t.id, { payload: { type: "signal.thread.status_changed", status: "completed", reason: "done" } });
    const row = (await (await call(`/api/threads/${t.id}`, { token })).json()) as Thread;
    expect(row).toMatchObject({ status: "completed", reason: "completed", detail: "done" });
  });
});
