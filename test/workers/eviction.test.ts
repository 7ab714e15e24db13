// What must survive the thread actor being evicted (a deploy, a restart, memory pressure) and
// what must hold under concurrent writers: ids, runs, subscriptions.
import { describe, expect, it, vi } from "vitest";
import { SELF, env, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import type { ThreadActor } from "./test-worker";
import { BASE, call, chat, createThread, houseToken, post, readAll, WEBSOCKET_HANDSHAKE } from "./helpers";

const E = env as unknown as { THREADS: DurableObjectNamespace<ThreadActor>; SANDBOXES: DurableObjectNamespace };
const threadStub = (id: string) => E.THREADS.get(E.THREADS.idFromName(`thread:${id}`));
const signal = (status: string, extra: Record<string, unknown> = {}) => ({ payload: { type: "signal.thread.status_changed", status, ...extra } });
const row = async (token: string, id: string) =>
  (await (await call(`/api/threads/${id}`, { token })).json()) as { status: string; reason: string | null; detail: string | null; lastLivenessAt: string | null };

describe("the thread actor evicted mid-run", () => {
  it("keeps the run, its dedup and its run matching across the restart", async () => {
    const token = await houseToken("house-evict");
    const t = await createThread(token);
    expect((await post(token, t.id, signal("running", { runId: "run-1" }))).status).toBe(201);
    expect((await post(token, t.id, chat("before", "e-1"))).status).toBe(201);
    const stub = threadStub(t.id);
    await evictDurableObject(stub);

    // A new instance: same run, same alarm, and the entry id still deduplicates.
    expect((await row(token, t.id)).status).toBe("running");
    const again = (await (await post(token, t.id, chat("before", "e-1"))).json()) as { entries: { duplicate: boolean }[] };
    expect(again.entries[0].duplicate).toBe(true);
    // The run's own late signal after a restart is still matched to the run.
    expect((await post(token, t.id, signal("stopped", { runId: "run-0" }))).status).toBe(201);
    expect((await row(token, t.id)).status).toBe("running");
    expect((await post(token, t.id, signal("completed", { runId: "run-1", reason: "done" }))).status).toBe(201);
    expect((await row(token, t.id)).status).toBe("completed");
    expect((await readAll(token, t.id)).entries.map((e) => e.id)).toEqual([expect.any(String), "e-1", expect.any(String), expect.any(String)]);
  });

  it("a silent run is still orphaned by the alarm of the restarted actor", async () => {
    const token = await houseToken("house-evict");
    const t = await createThread(token);
    await post(token, t.id, signal("running", { runId: "run-s" }));
    const stub = threadStub(t.id);
    await evictDurableObject(stub);
    await runInDurableObject(stub, (a: ThreadActor) => a.advanceClock(300_000 + 1_000));
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const r = await row(token, t.id);
    expect([r.status, r.reason]).toEqual(["failed", "pi_session_orphaned"]);
    expect(r.detail).toMatch(/^no heartbeat or entry for \d+s/);
  });
});

describe("concurrent writers", () => {
  it("the same id posted concurrently is stored once; every writer gets its offset", async () => {
    const token = await houseToken("house-dup");
    const t = await createThread(token);
    const answers = await Promise.all(Array.from({ length: 8 }, () => post(token, t.id, chat("same", "dup-1"))));
    const bodies = await Promise.all(answers.map(async (r) => {
      expect(r.status).toBe(201);
      return ((await r.json()) as { entries: { id: string; offset: string; duplicate: boolean }[] }).entries[0];
    }));
    expect(bodies.filter((b) => !b.duplicate)).toHaveLength(1);
    expect(new Set(bodies.map((b) => b.offset)).size).toBe(1);
    expect((await readAll(token, t.id)).entries.map((e) => e.id)).toEqual(["dup-1"]);
  });

  it("a duplicate id inside one batch is stored once, in the first one's place (the answer names each id once)", async () => {
    const token = await houseToken("house-dup");
    const t = await createThread(token);
    const r = await post(token, t.id, [chat("first", "b-1"), chat("other", "b-2"), chat("second", "b-1")]);
    expect(r.status).toBe(201);
    const body = (await r.json()) as { entries: { id: string; offset: string; duplicate: boolean }[] };
    expect(body.entries.map((e) => [e.id, e.duplicate])).toEqual([["b-1", false], ["b-2", false]]);
    const stored = (await readAll(token, t.id)).entries;
    expect(stored.map((e) => [e.id, e.payload.text])).toEqual([["b-1", "first"], ["b-2", "other"]]);
  });
});

describe("WebSocket subscribers across hibernation", () => {
  it("a subscriber keeps its place when the actor is evicted and its socket hibernated", async () => {
    const token = await houseToken("house-ws");
    const t = await createThread(token);
    await post(token, t.id, [chat("a1"), chat("a2")]);
    const res = await SELF.fetch(`${BASE}/api/threads/${t.id}/subscribe?offset=-1`, { headers: { ...WEBSOCKET_HANDSHAKE, "sec-websocket-protocol": `bearer.${token}` } });
    expect(res.status).toBe(101);
    const ws = res.webSocket!;
    const got: string[] = [];
    ws.addEventListener("message", (e) => {
      got.push((JSON.parse(e.data as string) as { payload: { text: string } }).payload.text);
    });
    ws.accept();
    const until = (n: number) => vi.waitFor(() => expect(got.length).toBeGreaterThanOrEqual(n), { timeout: 5000, interval: 10 });
    await until(2);
    await evictDurableObject(threadStub(t.id), { webSockets: "hibernate" });
    await post(token, t.id, [chat("b1"), chat("b2")]);
    await until(4);
    expect(got).toEqual(["a1", "a2", "b1", "b2"]);
    ws.close(1000, "done");
  });
});
