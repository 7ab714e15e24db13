import { describe, expect, it, vi } from "vitest";
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import type { HouseActor, SandboxActor, ThreadActor } from "./test-worker";
import { sharedTestProvider } from "./register-test-provider";
import { unwrapRpc } from "../../src/actors/rpc";
import { DELETE_BACKOFF_BASE_MS } from "../../src/actors/sandbox/sandbox-decisions";
import { call, chat, createThread, errorCode, houseToken, post, readAll, runToken } from "./helpers";

const SILENCE_MS = 300_000;
const PROBE_MS = 60_000;
const E = env as unknown as { THREADS: DurableObjectNamespace<ThreadActor>; SANDBOXES: DurableObjectNamespace<SandboxActor>; HOUSES: DurableObjectNamespace<HouseActor> };

const threadStub = (id: string) => E.THREADS.get(E.THREADS.idFromName(`thread:${id}`));
const boxStub = (id: string) => E.SANDBOXES.get(E.SANDBOXES.idFromName(id));

async function newBox(token: string, ephemeral: boolean) {
  const r = await call("/api/sandboxes", { method: "POST", token, json: { provider: "test", ephemeral } });
  expect(r.status).toBe(201);
  return (await r.json()) as { id: string; providerRef: string; state: string };
}

const signal = (status: string, extra: Record<string, unknown> = {}) => ({ payload: { type: "signal.thread.status_changed", status, ...extra } });

async function claim(token: string, threadId: string, boxId?: string) {
  const r = await post(token, threadId, signal("running", boxId ? { boxId } : {}));
  expect(r.status).toBe(201);
}

async function row(token: string, id: string) {
  return (await (await call(`/api/threads/${id}`, { token })).json()) as { status: string; reason: string | null; boxId: string | null; lastLivenessAt: string | null };
}

async function box(token: string, id: string) {
  return (await (await call(`/api/sandboxes/${id}`, { token })).json()) as { state: string; threads: string[]; deleteAttempts: number };
}

/** Moves the thread's clock forward and runs its alarm, as if that much time had passed. */
async function advance(threadId: string, ms: number) {
  const stub = threadStub(threadId);
  await runInDurableObject(stub, (actor: ThreadActor) => { actor.advanceClock(ms); });
  return runDurableObjectAlarm(stub);
}

const statusSignals = async (token: string, id: string) =>
  (await readAll(token, id)).entries.filter((e) => e.payload.type === "signal.thread.status_changed").map((e) => e.payload.status);

describe("run state machine", () => {
  it("adopts the first finished-signal and ignores later ones", async () => {
    const token = await houseToken("house-run");
    const t = await createThread(token);
    await claim(token, t.id);
    expect((await row(token, t.id)).status).toBe("running");
    await post(token, t.id, signal("completed", { reason: "done" }));
    await post(token, t.id, signal("pi_failed", { reason: "late" }));
    const r = await row(token, t.id);
    expect(r.status).toBe("completed");
    expect(await statusSignals(token, t.id)).toEqual(["running", "completed", "pi_failed"]);
    const listed = (await (await call("/api/threads?status=completed", { token })).json()) as { threads: { id: string }[] };
    expect(listed.threads.map((x) => x.id)).toContain(t.id);
  });

  it("orphans a run that goes silent past the threshold, even one that died in bootstrap", async () => {
    const token = await houseToken("house-run");
    const t = await createThread(token);
    await claim(token, t.id); // claimed, then not a single mirror entry
    await advance(t.id, SILENCE_MS - 10_000);
    expect((await row(token, t.id)).status).toBe("running");
    await advance(t.id, 11_000); // the alarm runs on time, a second past the threshold
    const r = await row(token, t.id);
    expect(r.status).toBe("failed");
    expect(r.reason).toBe("pi_session_orphaned");
    expect(await statusSignals(token, t.id)).toEqual(["running", "pi_session_orphaned"]);
    // The alarm running again does not write a second finished-signal.
    await advance(t.id, SILENCE_MS);
    expect(await statusSignals(token, t.id)).toEqual(["running", "pi_session_orphaned"]);
  });

  it("a silence found by an alarm that ran late (the server was down) gets one grace: a box heard in it keeps its run, one still silent is orphaned after it", async () => {
    const token = await houseToken("house-run-late");
    const heard = await createThread(token);
    const silent = await createThread(token);
    for (const t of [heard, silent]) {
      await claim(token, t.id);
      // The server was down from the claim until 2 minutes past the threshold: its alarm runs that late.
      await advance(t.id, SILENCE_MS + 120_000);
      expect((await row(token, t.id)).status).toBe("running");
    }
    // The box gets through once the server is back (its writer retries every few seconds).
    const hb = await call(`/api/stream/thread-${heard.id}`, { method: "POST", token, json: { payload: { type: "signal.heartbeat" } } });
    expect(hb.status).toBe(204);
    for (const t of [heard, silent]) await advance(t.id, 61_000);
    expect((await row(token, heard.id)).status).toBe("running");
    const r = await row(token, silent.id);
    expect([r.status, r.reason]).toEqual(["failed", "pi_session_orphaned"]);
    expect(await statusSignals(token, silent.id)).toEqual(["running", "pi_session_orphaned"]);
  });

  it("a silent run's leftover processes on a live box are ended before the box is released", async () => {
    const token = await houseToken("house-run");
    const b = await newBox(token, false);
    const t = await createThread(token);
    await claim(token, t.id, b.id);
    await advance(t.id, SILENCE_MS + 1000);
    expect((await row(token, t.id)).reason).toBe("pi_session_orphaned");
    const provider = sharedTestProvider();
    await vi.waitFor(() => {
      const execs = provider.calls.filter((c) => c.op === "exec" && c.ref === b.providerRef).map((c) => JSON.stringify(c.args));
      expect(execs.some((a) => a.includes("kill -KILL"))).toBe(true);
    }, { timeout: 5000 });
    await vi.waitFor(async () => expect((await box(token, b.id)).threads).toEqual([]), { timeout: 5000 });
  });

  it("keeps a heartbeating run alive for many thresholds without growing the log", async () => {
    const token = await houseToken("house-run");
    const t = await createThread(token);
    await claim(token, t.id);
    const before = (await readAll(token, t.id)).entries.length;
    for (let i = 0; i < 12; i++) {
      await runInDurableObject(threadStub(t.id), (a: ThreadActor) => { a.advanceClock(SILENCE_MS / 2); });
      const hb = await call(`/api/stream/thread-${t.id}`, { method: "POST", token, json: { payload: { type: "signal.heartbeat" } } });
      expect(hb.status).toBe(204);
      await runDurableObjectAlarm(threadStub(t.id));
    }
    expect((await row(token, t.id)).status).toBe("running");
    expect((await readAll(token, t.id)).entries.length).toBe(before);
  });

  it("a new run's claim does not re-attach the previous run's box, and an attach to a box that is gone is not retried forever", async () => {
    const token = await houseToken("house-run-reclaim");
    const b = await newBox(token, true);
    const t = await createThread(token);
    await claim(token, t.id, b.id);
    await post(token, t.id, signal("completed", { reason: "done" }));
    await vi.waitFor(async () => expect((await box(token, b.id)).state).toBe("deleted"), { timeout: 5000 });
    // The next run (a resume) claims without naming a box: its launch assigns the one it gets.
    await claim(token, t.id);
    const owed = await runInDurableObject(threadStub(t.id), (a: ThreadActor) => a.testOutboxKeys());
    expect(owed.filter((k) => k.startsWith("attach:"))).toEqual([]);
    // An attach owed to a box deleted meanwhile is dropped, not retried with backoff for good.
    await runInDurableObject(threadStub(t.id), (a: ThreadActor) => a.testEnqueue("attach:gone", "attach", { boxId: b.id }));
    await runDurableObjectAlarm(threadStub(t.id));
    expect(await runInDurableObject(threadStub(t.id), (a: ThreadActor) => a.testOutboxKeys())).not.toContain("attach:gone");
  });

  it("a claim naming a box that does not exist: the run's end owes that box nothing for good (no detach retried forever)", async () => {
    const token = await houseToken("house-run-unknown-box");
    const t = await createThread(token);
    await claim(token, t.id, "box_never_registered");
    await post(token, t.id, signal("completed", { reason: "done" }));
    await runDurableObjectAlarm(threadStub(t.id));
    const owed = await runInDurableObject(threadStub(t.id), (a: ThreadActor) => a.testOutboxKeys());
    expect(owed).toEqual([]);
    expect((await row(token, t.id)).status).toBe("completed");
  });

  it("a forced delete tells a run that attached while it was ending the box's other runs: that run ends orphaned too, not left running on a deleted box", async () => {
    const houseId = "house-force-delete-while-attaching";
    const token = await houseToken(houseId);
    const b = await newBox(token, false);
    const first = await createThread(token);
    await claim(token, first.id, b.id);
    // The forced delete waits on the first thread while the second attaches.
    await runInDurableObject(threadStub(first.id), (a: ThreadActor) => a.delayBoxDied(1_500));
    const deleting = call(`/api/sandboxes/${b.id}?force=true`, { method: "DELETE", token });
    await new Promise((r) => setTimeout(r, 300));
    const second = await createThread(token);
    await claim(token, second.id, b.id);
    expect((await deleting).status).toBe(200);
    expect((await box(token, b.id)).state).toBe("deleted");
    expect(await row(token, first.id)).toMatchObject({ status: "failed", reason: "pi_session_orphaned" });
    expect(await row(token, second.id)).toMatchObject({ status: "failed", reason: "pi_session_orphaned" });
  });

  it("a box whose delete is under way cannot be reserved or attached by a launch meanwhile (the launch takes a fresh box)", async () => {
    const token = await houseToken("house-delete-under-way");
    const b = await newBox(token, true);
    const t = await createThread(token);
    const provider = sharedTestProvider();
    let release!: () => void;
    provider.deleteGate = new Promise<void>((r) => { release = r; });
    try {
      const deleting = call(`/api/sandboxes/${b.id}`, { method: "DELETE", token });
      await vi.waitFor(() => expect(provider.calls.some((c) => c.op === "delete" && c.ref === b.providerRef)).toBe(true), { timeout: 5000, interval: 20 });
      const reserved = await unwrapRpc(boxStub(b.id).reserve("house-delete-under-way", t.id, "run-late")).then(() => "reserved", (e: Error) => e.message);
      expect(reserved).toMatch(/conflict: box is being deleted/);
      const attached = await unwrapRpc(boxStub(b.id).attach("house-delete-under-way", t.id)).then(() => "attached", (e: Error) => e.message);
      expect(attached).toMatch(/conflict: box is being deleted/);
      release();
      expect((await deleting).status).toBe(200);
    } finally {
      provider.deleteGate = null;
      release();
    }
    expect((await box(token, b.id)).state).toBe("deleted");
  });

  it("a plain delete whose checks wait on another actor while a run attaches is a 409, and the box stays with its run", async () => {
    const houseId = "house-delete-while-attaching";
    const token = await houseToken(houseId);
    const b = await newBox(token, true);
    const stale = await createThread(token);
    const runner = await createThread(token);
    // A reservation of a run that is not current: the delete asks that thread before it decides.
    await unwrapRpc(boxStub(b.id).reserve(houseId, stale.id, "run-not-current"));
    const deleting = unwrapRpc(boxStub(b.id).destroy(houseId, false)).then(() => "deleted", (e: Error) => e.message);
    const attached = unwrapRpc(boxStub(b.id).attach(houseId, runner.id)).then(() => "attached", (e: Error) => e.message);
    expect(await attached).toBe("attached");
    expect(await deleting).toMatch(/conflict: 1 thread\(s\) are running on this box/);
    expect(await box(token, b.id)).toMatchObject({ state: "live", threads: [runner.id] });
  });

  it("an ephemeral box whose last attached run ends while another thread's run launches onto it is kept for that run", async () => {
    const houseId = "house-reap-reserved";
    const token = await houseToken(houseId);
    const b = await newBox(token, true);
    const ending = await createThread(token);
    const launching = await createThread(token);
    await claim(token, ending.id, b.id);
    // The other thread's launch picked the box (a resume of a run that was on it) and has not attached yet.
    expect((await post(token, launching.id, signal("running", { runId: "run-launching" }))).status).toBe(201);
    await unwrapRpc(boxStub(b.id).reserve(houseId, launching.id, "run-launching"));
    await post(token, ending.id, signal("completed", { reason: "done" }));
    await vi.waitFor(async () => expect((await box(token, b.id)).threads).toEqual([]), { timeout: 5000 });
    expect((await box(token, b.id)).state).toBe("live");
    // The launch attaches its run, and the box goes when that run ends.
    await unwrapRpc(boxStub(b.id).attach(houseId, launching.id));
    await unwrapRpc(boxStub(b.id).detach(houseId, launching.id));
    expect((await box(token, b.id)).state).toBe("deleted");
  });

  it("stop ends a running run with reason `stopped` and keeps the box", async () => {
    const token = await houseToken("house-run");
    const b = await newBox(token, true);
    const t = await createThread(token);
    await claim(token, t.id, b.id);
    const stopped = await call(`/api/threads/${t.id}/stop`, { method: "POST", token });
    expect(stopped.status).toBe(200);
    const r = (await stopped.json()) as { status: string; reason: string };
    expect([r.status, r.reason]).toEqual(["failed", "stopped"]);
    expect((await box(token, b.id)).state).toBe("live");
    expect((await call(`/api/threads/${t.id}/stop`, { method: "POST", token })).status).toBe(409);
  });

  it("interrupt marks the running run's turn for abort and leaves the run running; an idle thread answers 409", async () => {
    const token = await houseToken("house-run-interrupt");
    const b = await newBox(token, true);
    const t = await createThread(token);
    expect((await call(`/api/threads/${t.id}/interrupt`, { method: "POST", token })).status).toBe(409);
    await claim(token, t.id, b.id);
    const r = await call(`/api/threads/${t.id}/interrupt`, { method: "POST", token });
    expect(r.status).toBe(202);
    const body = (await r.json()) as { threadId: string; entryId: string };
    expect(body.threadId).toBe(t.id);
    const { entries } = await readAll(token, t.id);
    const mark = entries.find((e) => e.id === body.entryId)!;
    expect(mark.payload.type).toBe("signal.run.interrupt");
    expect(mark.authorId).toBe("alice");
    expect((await row(token, t.id)).status).toBe("running");
    const reader = await houseToken("house-run-interrupt", "rita", "reader");
    expect((await call(`/api/threads/${t.id}/interrupt`, { method: "POST", token: reader })).status).toBe(403);
  });

  it("stop tells the box to end the run's detached command", async () => {
    const token = await houseToken("house-run");
    const b = await newBox(token, true);
    const t = await createThread(token);
    await claim(token, t.id, b.id);
    const provider = sharedTestProvider();
    const handle = await provider.startDetached(b.providerRef, "node runner.mjs");
    const attached = await (boxStub(b.id) as unknown as { attach(h: string, t: string, d: unknown): Promise<{ ok: boolean }> }).attach("house-run", t.id, handle);
    expect(attached.ok).toBe(true);
    expect((await call(`/api/threads/${t.id}/stop`, { method: "POST", token })).status).toBe(200);
    // The stop (with its grace period) runs from the alarm, which may already be under way.
    await runDurableObjectAlarm(threadStub(t.id));
    await vi.waitFor(() => expect(provider.calls.filter((c) => c.op === "killDetached" && c.ref === b.providerRef)).toHaveLength(1), { timeout: 5000 });
    const ops = provider.calls.filter((c) => c.ref === b.providerRef).map((c) => (c.op === "exec" ? JSON.stringify(c.args).match(/kill -(TERM|KILL)/)?.[0] : c.op));
    // Graceful first, then the sweep, then the session; the box is not deleted by a stop.
    expect(ops).toEqual(["startDetached", "kill -TERM", "detachedStatus", "kill -KILL", "killDetached"]);
    expect((await box(token, b.id)).state).toBe("live");
  });
});

describe("finished-signals of another run", () => {
  it("a stopped run's late `stopped` signal does not end the run that resumed after it", async () => {
    const token = await houseToken("house-run");
    const t = await createThread(token);
    expect((await post(token, t.id, signal("running", { runId: "run-a" }))).status).toBe(201);
    expect((await call(`/api/threads/${t.id}/stop`, { method: "POST", token })).status).toBe(200);
    const stop = (await readAll(token, t.id)).entries.find((e) => e.payload.status === "stopped");
    expect(stop?.payload.runId).toBe("run-a"); // the control plane's own signal names the run it ends
    expect((await post(token, t.id, signal("running", { runId: "run-b" }))).status).toBe(201);
    // Run A's runner got its SIGTERM and reports only now.
    const runA = await runToken("house-run", t.id, "run-a");
    expect((await post(runA, t.id, { id: `${t.id}:finished:run-a`, ...signal("stopped", { runId: "run-a", reason: "stopped by request" }) })).status).toBe(201);
    expect((await row(token, t.id)).status).toBe("running");
    expect((await post(token, t.id, signal("completed", { runId: "run-b", reason: "done" }))).status).toBe(201);
    const r = await row(token, t.id);
    expect([r.status, r.reason]).toEqual(["completed", "completed"]);
  });
});

describe("a run that claims no box, after a run on a box", () => {
  it("is not on the previous run's box: neither shown on it, nor orphaned when that box is gone", async () => {
    const token = await houseToken("house-run-next-claim");
    const b = await newBox(token, true);
    const t = await createThread(token);
    await claim(token, t.id, b.id);
    await post(token, t.id, signal("completed", { reason: "done" }));
    await vi.waitFor(async () => expect((await box(token, b.id)).state).toBe("deleted"), { timeout: 5000 });
    // A run driven from outside (src/sandbox/run.ts) claims without naming a box.
    await claim(token, t.id);
    expect((await row(token, t.id)).boxId).toBeNull();
    for (let i = 0; i < 3; i++) {
      await post(token, t.id, { payload: { type: "pi.progress", i } });
      await advance(t.id, PROBE_MS + 5_000);
    }
    const r = await row(token, t.id);
    expect([r.status, r.reason]).toEqual(["running", null]);
  });
});

describe("what an ended run owed its box, carried out only after the thread's next run is on that box (a retry)", () => {
  it("neither stops that next run nor releases the box from under it", async () => {
    const token = await houseToken("house-late-owed");
    const b = await newBox(token, true);
    const t = await createThread(token);
    const stub = threadStub(t.id);
    expect((await post(token, t.id, signal("running", { runId: "run-2", boxId: b.id }))).status).toBe(201);
    await vi.waitFor(async () => expect((await box(token, b.id)).threads).toEqual([t.id]), { timeout: 5000 });
    // run-1 ended on this box; its stop and its release failed once and are due again now.
    await runInDurableObject(stub, (a: ThreadActor) => {
      a.testEnqueue("stop:1", "stop_harness", { boxId: b.id, runId: "run-1" });
      a.testEnqueue(`detach:${b.id}:1`, "detach", { boxId: b.id, keepBox: false });
    });
    await runDurableObjectAlarm(stub);
    await vi.waitFor(async () => {
      const owed = await runInDurableObject(stub, (a: ThreadActor) => a.testOutboxKeys());
      expect(owed.filter((k) => k.startsWith("stop:") || k.startsWith("detach:"))).toEqual([]);
    }, { timeout: 5000 });
    const execs = sharedTestProvider().calls.filter((c) => c.op === "exec" && c.ref === b.providerRef).map((c) => JSON.stringify(c.args));
    expect(execs.filter((a) => a.includes("kill -"))).toEqual([]);
    expect(await box(token, b.id)).toMatchObject({ state: "live", threads: [t.id] });
    expect((await row(token, t.id)).status).toBe("running");
  });
});

describe("a thread's alarm whose bots cannot be decided (the house unreachable)", () => {
  it("still keeps the run's liveness alarm: the run is orphaned once silent, not left running", async () => {
    const houseId = "house-alarm-step-fails";
    const token = await houseToken(houseId);
    const t = await createThread(token);
    const stub = threadStub(t.id);
    await claim(token, t.id);
    await runInDurableObject(E.HOUSES.get(E.HOUSES.idFromName(houseId)), (h: HouseActor) => h.failAgentSets(1_000));
    expect((await post(token, t.id, chat("@coder anyone there?"))).status).toBe(201);
    // Every alarm from now on finds the house unreachable (the runtime's own retries of a failed alarm run out).
    await runDurableObjectAlarm(stub).catch(() => {});
    // The runtime may be running that alarm itself (it was due at once): the alarm is set again when that one ends.
    await vi.waitFor(async () => expect(await runInDurableObject(stub, (_a: ThreadActor, state) => state.storage.getAlarm())).not.toBeNull(), { timeout: 5000 });
    await advance(t.id, SILENCE_MS + 1000).catch(() => {});
    expect(await row(token, t.id)).toMatchObject({ status: "failed", reason: "pi_session_orphaned" });
    await runInDurableObject(E.HOUSES.get(E.HOUSES.idFromName(houseId)), (h: HouseActor) => h.failAgentSets(0));
  });
});

/** Moves a box actor's clock forward, as if that much time had passed. */
async function advanceBoxClock(boxId: string, ms: number) {
  await runInDurableObject(boxStub(boxId), (actor: SandboxActor) => { actor.advanceClock(ms); });
}

describe("stopped-box grace", () => {
  const GRACE_MS = 15 * 60_000; // STOPPED_BOX_GRACE_MS default; the test config does not set it

  async function stopOnBox(house: string) {
    const token = await houseToken(house);
    const b = await newBox(token, true);
    const t = await createThread(token);
    await claim(token, t.id, b.id);
    const stoppedAt = Date.now();
    expect((await call(`/api/threads/${t.id}/stop`, { method: "POST", token })).status).toBe(200);
    // The detach waits behind the stop's grace period, which only the thread's alarm runs.
    await runDurableObjectAlarm(threadStub(t.id));
    await vi.waitFor(async () => expect((await box(token, b.id)).threads).toEqual([]), { timeout: 5000 });
    return { token, b, t, stoppedAt };
  }

  it("a stopped run's ephemeral box is kept for the grace period, then deleted", async () => {
    const { token, b, stoppedAt } = await stopOnBox("house-grace");
    expect((await box(token, b.id)).state).toBe("live");
    const alarmAt = await runInDurableObject(boxStub(b.id), (_a: unknown, state) => state.storage.getAlarm());
    expect(alarmAt).toBeGreaterThanOrEqual(stoppedAt + GRACE_MS);
    expect(alarmAt).toBeLessThan(Date.now() + GRACE_MS + 1000);
    // The grace period is over.
    await advanceBoxClock(b.id, GRACE_MS);
    expect(await runDurableObjectAlarm(boxStub(b.id))).toBe(true);
    expect((await box(token, b.id)).state).toBe("deleted");
    await expect(sharedTestProvider().get(b.providerRef)).rejects.toMatchObject({ code: "not_found" });
  });

  it("a delete whose check of a launch that reserved the box fails (the thread unreachable) is tried again, not dropped", async () => {
    const house = "house-grace-check-fails";
    const token = await houseToken(house);
    const b = await newBox(token, true);
    const t = await createThread(token);
    await claim(token, t.id, b.id);
    // Another thread's launch picked the box; that thread cannot be asked when the box's delete is due.
    const other = await createThread(token);
    expect((await post(token, other.id, signal("running", { runId: "run-other" }))).status).toBe(201);
    await unwrapRpc(boxStub(b.id).reserve(house, other.id, "run-other"));
    expect((await call(`/api/threads/${t.id}/stop`, { method: "POST", token })).status).toBe(200);
    await runDurableObjectAlarm(threadStub(t.id));
    await vi.waitFor(async () => expect((await box(token, b.id)).threads).toEqual([]), { timeout: 5000 });
    await runInDurableObject(threadStub(other.id), (a: ThreadActor) => a.failRunIsCurrent(true));
    await advanceBoxClock(b.id, GRACE_MS);
    await runDurableObjectAlarm(boxStub(b.id)).catch(() => {});
    expect(await runInDurableObject(boxStub(b.id), (_a: unknown, state) => state.storage.getAlarm())).not.toBeNull();
    // The thread answers again; its launch ended without taking the box: the next try deletes it.
    await runInDurableObject(threadStub(other.id), (a: ThreadActor) => a.failRunIsCurrent(false));
    await post(token, other.id, signal("pi_failed", { runId: "run-other", reason: "launch failed" }));
    await advanceBoxClock(b.id, 10 * 60_000);
    expect(await runDurableObjectAlarm(boxStub(b.id))).toBe(true);
    expect((await box(token, b.id)).state).toBe("deleted");
  });

  it("an alarm that comes before the grace period is over deletes nothing and re-arms for the deadline", async () => {
    const { token, b } = await stopOnBox("house-grace");
    const alarmAt = await runInDurableObject(boxStub(b.id), (_a: unknown, state) => state.storage.getAlarm());
    await advanceBoxClock(b.id, GRACE_MS - 60_000);
    await runDurableObjectAlarm(boxStub(b.id));
    expect((await box(token, b.id)).state).toBe("live");
    expect((await sharedTestProvider().get(b.providerRef)).state).toBe("started");
    expect(await runInDurableObject(boxStub(b.id), (_a: unknown, state) => state.storage.getAlarm())).toBe(alarmAt);
    await advanceBoxClock(b.id, 60_000);
    await runDurableObjectAlarm(boxStub(b.id));
    expect((await box(token, b.id)).state).toBe("deleted");
  });

  it("an ephemeral box made through the API that no run takes is deleted after the grace period; a non-ephemeral one is kept", async () => {
    const token = await houseToken("house-unused-box");
    const b = await newBox(token, true);
    const kept = await newBox(token, false);
    expect(await runInDurableObject(boxStub(kept.id), (_a: unknown, state) => state.storage.getAlarm())).toBeNull();
    await advanceBoxClock(b.id, GRACE_MS - 60_000);
    await runDurableObjectAlarm(boxStub(b.id));
    expect((await box(token, b.id)).state).toBe("live");
    await advanceBoxClock(b.id, 60_000);
    expect(await runDurableObjectAlarm(boxStub(b.id))).toBe(true);
    expect((await box(token, b.id)).state).toBe("deleted");
    await expect(sharedTestProvider().get(b.providerRef)).rejects.toMatchObject({ code: "not_found" });
    expect((await box(token, kept.id)).state).toBe("live");
  });

  it("a run that takes an ephemeral box made through the API keeps it past the grace period", async () => {
    const token = await houseToken("house-unused-box-taken");
    const b = await newBox(token, true);
    const t = await createThread(token);
    await claim(token, t.id, b.id);
    await vi.waitFor(async () => expect((await box(token, b.id)).threads).toEqual([t.id]), { timeout: 5000 });
    await advanceBoxClock(b.id, GRACE_MS);
    await runDurableObjectAlarm(boxStub(b.id));
    expect((await box(token, b.id)).state).toBe("live");
  });

  it("a run attached within the grace period keeps the box", async () => {
    const { token, b } = await stopOnBox("house-grace");
    const t2 = await createThread(token);
    await claim(token, t2.id, b.id);
    await vi.waitFor(async () => expect((await box(token, b.id)).threads).toEqual([t2.id]), { timeout: 5000 });
    await runDurableObjectAlarm(boxStub(b.id)); // whatever was due
    expect((await box(token, b.id)).state).toBe("live");
    expect((await sharedTestProvider().get(b.providerRef)).state).toBe("started");
  });
});

describe("a box whose run ended waits for its runner", () => {
  const DRAIN_MS = 60_000; // RUNNER_DRAIN_MS default; the test config does not set it

  /** A running thread on an ephemeral box whose runner (a detached command) is still alive. */
  async function runOnBox(house: string) {
    const token = await houseToken(house);
    const b = await newBox(token, true);
    const t = await createThread(token);
    await claim(token, t.id, b.id);
    await vi.waitFor(async () => expect((await box(token, b.id)).threads).toEqual([t.id]), { timeout: 5000 });
    const handle = await sharedTestProvider().startDetached(b.providerRef, "node runner.mjs");
    await runInDurableObject(boxStub(b.id), (a: SandboxActor) => a.attach(house, t.id, handle));
    // The mirror reports the failure while the runner is still posting the run's artifacts.
    expect((await post(token, t.id, signal("pi_failed", { reason: "model error" }))).status).toBe(201);
    await vi.waitFor(async () => expect((await box(token, b.id)).threads).toEqual([]), { timeout: 5000 });
    return { token, b, handle };
  }

  it("is kept while its runner still runs, and deleted at the first look after the runner exited", async () => {
    const { token, b, handle } = await runOnBox("house-drain");
    expect((await box(token, b.id)).state).toBe("live");
    await advanceBoxClock(b.id, 1_000);
    expect(await runDurableObjectAlarm(boxStub(b.id))).toBe(true);
    expect((await box(token, b.id)).state).toBe("live");
    expect((await sharedTestProvider().get(b.providerRef)).state).toBe("started");

    sharedTestProvider().finishDetached(handle, 0);
    await advanceBoxClock(b.id, 1_000);
    // The box's own alarm (due every RUNNER_DRAIN_POLL_MS of wall time) may take this look first.
    await runDurableObjectAlarm(boxStub(b.id));
    expect((await box(token, b.id)).state).toBe("deleted");
    await expect(sharedTestProvider().get(b.providerRef)).rejects.toMatchObject({ code: "not_found" });
  });

  it("is deleted once RUNNER_DRAIN_MS has passed, even if its runner never exits", async () => {
    const { token, b } = await runOnBox("house-drain");
    // The deadline counts from the hold in wall time, and the box's own alarm looks every second:
    // a margin of 10 s, not 1 s, so that a slow machine's real time does not cross it first.
    await advanceBoxClock(b.id, DRAIN_MS - 10_000);
    await runDurableObjectAlarm(boxStub(b.id));
    expect((await box(token, b.id)).state).toBe("live");
    await advanceBoxClock(b.id, 10_000);
    await runDurableObjectAlarm(boxStub(b.id));
    expect((await box(token, b.id)).state).toBe("deleted");
  });
});

describe("box liveness", () => {
  it("a box killed mid-run is confirmed dead by two probes and the thread is orphaned before the silence threshold", async () => {
    const token = await houseToken("house-box");
    const b = await newBox(token, true);
    const t = await createThread(token);
    await claim(token, t.id, b.id);
    expect((await box(token, b.id)).threads).toEqual([t.id]);
    sharedTestProvider().kill(b.providerRef);
    await advance(t.id, PROBE_MS); // first probe: dead, not yet confirmed
    expect((await row(token, t.id)).status).toBe("running");
    await advance(t.id, 5_000); // confirmation probe
    const r = await row(token, t.id);
    expect(r.status).toBe("failed");
    expect(r.reason).toBe("pi_session_orphaned");
    expect(await statusSignals(token, t.id)).toEqual(["running", "pi_session_orphaned"]);
    const v = await box(token, b.id);
    expect(["dead", "deleted"]).toContain(v.state);
    expect(v.threads).toEqual([]);
  });

  it("a single dead answer or a network error does not orphan", async () => {
    const token = await houseToken("house-box");
    const b = await newBox(token, false);
    const t = await createThread(token);
    await claim(token, t.id, b.id);
    const provider = sharedTestProvider();
    provider.scriptProbe(b.providerRef, "dead", "live", "dead", "unknown", "dead", "live");
    for (let i = 0; i < 6; i++) {
      await post(token, t.id, { payload: { type: "pi.progress", i } }); // stays alive by silence rules
      await advance(t.id, PROBE_MS);
    }
    provider.setUnreachable(true);
    for (let i = 0; i < 3; i++) {
      await post(token, t.id, { payload: { type: "pi.progress", i } });
      await advance(t.id, PROBE_MS);
    }
    provider.setUnreachable(false);
    expect((await row(token, t.id)).status).toBe("running");
    expect((await box(token, b.id)).state).toBe("live");
  });

  it("reconcile settles a dead box nobody was watching", async () => {
    const token = await houseToken("house-reconcile");
    const b = await newBox(token, false);
    const t = await createThread(token);
    await claim(token, t.id, b.id);
    sharedTestProvider().kill(b.providerRef);
    const r = await call("/api/sandboxes/reconcile", { method: "POST", token });
    expect(r.status).toBe(200);
    const body = (await r.json()) as { dead: string[] };
    expect(body.dead).toEqual([b.id]);
    expect((await row(token, t.id)).reason).toBe("pi_session_orphaned");
    const listed = (await (await call("/api/sandboxes?state=live", { token })).json()) as { sandboxes: unknown[] };
    expect(listed.sandboxes).toEqual([]);
  });
});

describe("reconcile while the provider is slow", () => {
  it("probes the house's boxes side by side: it answers after about one slow probe, not one per box", async () => {
    const token = await houseToken("house-reconcile-slow");
    const boxes = [];
    for (let i = 0; i < 8; i++) boxes.push(await newBox(token, false));
    const provider = sharedTestProvider();
    const probe = provider.probe;
    // Each probe takes as long as a provider that hangs until the request times out (scaled down).
    provider.probe = async function (this: typeof provider, ref: string) {
      await new Promise((r) => setTimeout(r, 500));
      return probe.call(this, ref);
    };
    try {
      const t0 = Date.now();
      const r = await call("/api/sandboxes/reconcile", { method: "POST", token });
      const took = Date.now() - t0;
      expect(r.status).toBe(200);
      const body = (await r.json()) as { probed: number; dead: string[] };
      expect(body).toMatchObject({ probed: 8, dead: [] });
      expect(took).toBeLessThan(2_500); // one after another: 8 x 500 ms = 4 s
    } finally {
      provider.probe = probe;
    }
  });
});

describe("idle reaping", () => {
  it("deletes an ephemeral box once its last thread ends, exactly once, retrying a failed delete", async () => {
    const token = await houseToken("house-reap");
    const b = await newBox(token, true);
    const provider = sharedTestProvider();
    const [t1, t2] = [await createThread(token), await createThread(token)];
    await claim(token, t1.id, b.id);
    await claim(token, t2.id, b.id);
    await post(token, t1.id, signal("completed"));
    expect((await box(token, b.id)).state).toBe("live"); // t2 still runs on it
    provider.failDeletes(1, "unavailable", b.providerRef);
    // The retry is due DELETE_BACKOFF_BASE_MS after the failure on the box's clock; an hour ahead,
    // its alarm is an hour of wall time away, so a stall cannot let it retry before the checks.
    await advanceBoxClock(b.id, 60 * 60_000);
    await post(token, t2.id, signal("completed"));
    let v = await box(token, b.id);
    expect(v.state).toBe("live");
    expect(v.deleteAttempts).toBe(1);
    await advanceBoxClock(b.id, DELETE_BACKOFF_BASE_MS); // the first retry is due
    expect(await runDurableObjectAlarm(boxStub(b.id))).toBe(true);
    v = await box(token, b.id);
    expect(v.state).toBe("deleted");
    // A late detach (the terminal path running again) does not delete twice.
    await runInDurableObject(threadStub(t2.id), (a: ThreadActor) => a.testEnqueue("detach-again", "detach", { boxId: b.id, keepBox: false }));
    await runDurableObjectAlarm(threadStub(t2.id));
    const deletes = provider.calls.filter((c) => c.op === "delete" && c.ref === b.providerRef);
    expect(deletes.length).toBe(2); // the failed attempt and the one that succeeded
    expect((await box(token, b.id)).state).toBe("deleted");
  });

  it("never reaps a shared box, and refuses an explicit delete while threads run unless forced", async () => {
    const token = await houseToken("house-reap");
    const b = await newBox(token, false);
    const t = await createThread(token);
    await claim(token, t.id, b.id);
    expect((await call(`/api/sandboxes/${b.id}`, { method: "DELETE", token })).status).toBe(409);
    await post(token, t.id, signal("completed"));
    expect((await box(token, b.id)).state).toBe("live");
    const t2 = await createThread(token);
    await claim(token, t2.id, b.id);
    // force is true or false; anything else is a mistake to point out, not a quiet "no".
    for (const q of ["force=maybe", "force=1", "force="]) {
      const r = await call(`/api/sandboxes/${b.id}?${q}`, { method: "DELETE", token });
      expect(r.status, q).toBe(400);
      expect(await errorCode(r)).toBe("validation_failed");
    }
    expect((await call(`/api/sandboxes/${b.id}?force=false`, { method: "DELETE", token })).status).toBe(409);
    const forced = await call(`/api/sandboxes/${b.id}?force=true`, { method: "DELETE", token });
    expect(forced.status).toBe(200);
    expect((await box(token, b.id)).state).toBe("deleted");
    expect((await row(token, t2.id)).reason).toBe("pi_session_orphaned");
  });
});

describe("parent notification", () => {
  it("a child's terminal posts exactly one child_finished and one brain chat on the parent, even when it runs twice", async () => {
    const token = await houseToken("house-parent");
    const parent = await createThread(token);
    const child = await createThread(await houseToken("house-parent", "bot-brain", "bot"), { parent: { kind: "thread", id: parent.id }, brainId: "bot-brain" });
    await claim(token, child.id);
    await post(token, child.id, { payload: { type: "pi.assistant", text: "the answer is 42", stopReason: "stop" } });
    await post(token, child.id, signal("completed"));
    await post(token, child.id, signal("completed")); // a second finished-signal
    await runInDurableObject(threadStub(child.id), (a: ThreadActor) => {
      const runKey = a.testRow()!.runStartedAt!;
      a.testEnqueue(`notify_parent:${runKey}:again`, "notify_parent", {
        parentId: parent.id, runKey, status: "completed", reason: null, resultText: "the answer is 42", brainId: "bot-brain",
      });
    });
    await runDurableObjectAlarm(threadStub(child.id));
    const entries = (await readAll(token, parent.id)).entries;
    const finished = entries.filter((e) => e.payload.type === "signal.thread.child_finished");
    const chats = entries.filter((e) => e.payload.type === "chat");
    expect(finished).toHaveLength(1);
    expect(finished[0].payload).toMatchObject({ childThreadId: child.id, status: "completed" });
    expect(chats).toHaveLength(1);
    expect(chats[0].authorId).toBe("bot-brain");
    expect(chats[0].payload.text).toBe("the answer is 42");
    expect((await row(token, parent.id)).status).toBe("idle"); // no run was started on the parent
  });

  it("a child's run that ends without an answer reports that, not the answer of the run before it", async () => {
    const token = await houseToken("house-parent");
    const parent = await createThread(token);
    const child = await createThread(token, { parent: { kind: "thread", id: parent.id } });
    await claim(token, child.id);
    await post(token, child.id, { payload: { type: "pi.assistant", text: "the first run's answer", stopReason: "stop" } });
    await post(token, child.id, signal("completed"));
    await runDurableObjectAlarm(threadStub(child.id));
    await claim(token, child.id);
    await post(token, child.id, signal("completed"));
    await runDurableObjectAlarm(threadStub(child.id));
    const chats = (await readAll(token, parent.id)).entries.filter((e) => e.payload.type === "chat").map((e) => e.payload.text);
    expect(chats).toEqual(["the first run's answer", `Task ${child.id} completed.`]);
  });

  it("a failed child reports its failure reason", async () => {
    const token = await houseToken("house-parent");
    const parent = await createThread(token);
    const child = await createThread(token, { parent: { kind: "thread", id: parent.id } });
    await claim(token, child.id);
    await advance(child.id, SILENCE_MS + 1000);
    const entries = (await readAll(token, parent.id)).entries;
    const finished = entries.find((e) => e.payload.type === "signal.thread.child_finished")!;
    expect(finished.payload.status).toBe("pi_session_orphaned");
    const text = entries.find((e) => e.payload.type === "chat")!.payload.text as string;
    expect(text).toContain("pi_session_orphaned");
    await post(token, parent.id, chat("still writable"));
  });
});

describe("launch", () => {
  it("delegate with an Idempotency-Key: a retry gets the same child and run, starts nothing more; the key with another task is a 409", async () => {
    const token = await houseToken("house-delegate-idem");
    const envRes = await call("/api/environments", { method: "POST", token, json: { name: "t", provider: "test" } });
    const envId = ((await envRes.json()) as { id: string }).id;
    const parent = await createThread(token, { environmentId: envId });
    const delegate = (task: string, key: string, parentId = parent.id) =>
      call(`/api/threads/${parentId}/delegate`, { method: "POST", token, json: { task, model: "local/m" }, headers: { "idempotency-key": key } });
    const first = await delegate("do it", "k-1");
    expect(first.status).toBe(202);
    const a = (await first.json()) as { childThreadId: string; runId: string };
    const again = await delegate("do it", "k-1");
    expect(again.status).toBe(202);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(await again.json()).toMatchObject({ childThreadId: a.childThreadId, runId: a.runId });
    const children = (await (await call("/api/threads", { token })).json()) as { threads: { id: string; parent: { id: string | null } }[] };
    expect(children.threads.filter((t) => t.parent.id === parent.id).map((t) => t.id)).toEqual([a.childThreadId]);
    const prompts = (await readAll(token, a.childThreadId)).entries.filter((e) => e.id.startsWith("prompt:"));
    expect(prompts).toHaveLength(1);
    const other = await delegate("do something else", "k-1");
    expect(other.status).toBe(409);
    expect(await errorCode(other)).toBe("conflict");
    // The same key on another parent is another delegation.
    const parent2 = await createThread(token, { environmentId: envId });
    const elsewhere = (await (await delegate("do it", "k-1", parent2.id)).json()) as { childThreadId: string };
    expect(elsewhere.childThreadId).not.toBe(a.childThreadId);
  });

  it("a delegate retried with its Idempotency-Key after the child was resumed is still a replay, and starts nothing", async () => {
    const token = await houseToken("house-delegate-idem-resumed");
    const envRes = await call("/api/environments", { method: "POST", token, json: { name: "t", provider: "test" } });
    const envId = ((await envRes.json()) as { id: string }).id;
    const parent = await createThread(token, { environmentId: envId });
    const delegate = () => call(`/api/threads/${parent.id}/delegate`, { method: "POST", token, json: { task: "do it", model: "local/m" }, headers: { "idempotency-key": "k-resumed" } });
    const a = (await (await delegate()).json()) as { childThreadId: string; runId: string };
    // The first run ends (here its launch fails: no stream URL), then the child is resumed.
    await vi.waitFor(async () => {
      const child = (await (await call(`/api/threads/${a.childThreadId}`, { token })).json()) as { status: string };
      expect(child.status).not.toBe("running");
    }, { timeout: 10_000, interval: 100 });
    expect((await call(`/api/threads/${a.childThreadId}/resume`, { method: "POST", token, json: { message: "again", model: "local/m" } })).status).toBe(202);
    const claimsBefore = (await readAll(token, a.childThreadId)).entries.filter((e) => e.id.startsWith("claim:")).length;
    const again = await delegate();
    expect(again.status).toBe(202);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(await again.json()).toMatchObject({ childThreadId: a.childThreadId, runId: a.runId });
    expect((await readAll(token, a.childThreadId)).entries.filter((e) => e.id.startsWith("claim:")).length).toBe(claimsBefore);
  });

  it("resume with an Idempotency-Key: a retry answers the run the first one started and starts nothing more; the key with another message is a 409; without a key, nothing changes", async () => {
    const token = await houseToken("house-resume-idem");
    const envRes = await call("/api/environments", { method: "POST", token, json: { name: "t", provider: "test" } });
    const envId = ((await envRes.json()) as { id: string }).id;
    const parent = await createThread(token, { environmentId: envId });
    const d = (await (await call(`/api/threads/${parent.id}/delegate`, { method: "POST", token, json: { task: "do it", model: "local/m" } })).json()) as { childThreadId: string; runId: string };
    const child = d.childThreadId;
    // Each run ends at once here (its launch fails: no stream URL).
    const settled = () => vi.waitFor(async () => expect((await row(token, child)).status).not.toBe("running"), { timeout: 10_000, interval: 100 });
    const claims = async () => (await readAll(token, child)).entries.filter((e) => e.id.startsWith("claim:")).map((e) => e.id);
    const resume = (message: string, key?: string) =>
      call(`/api/threads/${child}/resume`, { method: "POST", token, json: { message }, headers: key === undefined ? {} : { "idempotency-key": key } });
    await settled();
    const first = await resume("again", "k-r1");
    expect([first.status, first.headers.get("idempotent-replayed")]).toEqual([202, null]);
    const a = (await first.json()) as { threadId: string; runId: string; status: string };
    expect(a).toMatchObject({ threadId: child, status: "running" });
    // Retried (its answer was lost) while the run may still go on: the same run, never a 409 "already running".
    const again = await resume("again", "k-r1");
    expect([again.status, again.headers.get("idempotent-replayed")]).toEqual([202, "true"]);
    expect(await again.json()).toMatchObject({ threadId: child, runId: a.runId });
    await settled();
    // Retried after that run ended: still a replay, and no third run.
    const late = await resume("again", "k-r1");
    expect([late.status, late.headers.get("idempotent-replayed")]).toEqual([202, "true"]);
    expect(((await late.json()) as { runId: string }).runId).toBe(a.runId);
    expect(await claims()).toEqual([`claim:${d.runId}`, `claim:${a.runId}`]);
    // The same key with another message is refused, as for delegate and POST /api/threads.
    const other = await resume("something else", "k-r1");
    expect([other.status, await errorCode(other)]).toEqual([409, "conflict"]);
    expect(await claims()).toHaveLength(2);
    // Without a key: a new run each time, as before.
    const plain = await resume("once more");
    expect([plain.status, plain.headers.get("idempotent-replayed")]).toEqual([202, null]);
    const p = (await plain.json()) as { runId: string };
    expect(p.runId).not.toBe(a.runId);
    expect(await claims()).toEqual([`claim:${d.runId}`, `claim:${a.runId}`, `claim:${p.runId}`]);
    await settled();
  });

  it("a launch that cannot start settles the run visibly (pi_failed with the reason), creating no box", async () => {
    const token = await houseToken("house-launch");
    const envRes = await call("/api/environments", { method: "POST", token, json: { name: "t", provider: "test" } });
    const envId = ((await envRes.json()) as { id: string }).id;
    const parent = await createThread(token, { environmentId: envId });
    const d = await call(`/api/threads/${parent.id}/delegate`, { method: "POST", token, json: { task: "do it", model: "local/m" } });
    expect(d.status).toBe(202);
    const { childThreadId, status } = (await d.json()) as { childThreadId: string; status: string };
    expect(status).toBe("running"); // claimed before the response; the alarm may fail it right after
    // This test worker has no THREADBOX_STREAM_URL: the launch (run by the alarm) must fail loudly.
    await vi.waitFor(async () => expect((await row(token, childThreadId)).status).toBe("failed"), { timeout: 5000 });
    const r = (await (await call(`/api/threads/${childThreadId}`, { token })).json()) as { reason: string; detail: string };
    expect(r.reason).toBe("pi_failed");
    expect(r.detail).toContain("THREADBOX_STREAM_URL");
    const boxes = (await (await call("/api/sandboxes", { token })).json()) as { sandboxes: unknown[] };
    expect(boxes.sandboxes).toEqual([]);
    const parentEntries = (await readAll(token, parent.id)).entries;
    expect(parentEntries.filter((e) => e.payload.type === "signal.thread.child_finished")).toHaveLength(1);
  });
});

