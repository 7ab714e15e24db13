// A shared box the environment lets go (retired) must end deleted at the provider, whatever fails
// on the way: the provider refusing the delete, a thread that cannot be asked whether its launch
// still uses the box, the box's actor evicted meanwhile.
import { describe, expect, it } from "vitest";
import { env, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import type { HouseActor, SandboxActor, ThreadActor } from "./test-worker";
import { call, createThread, houseToken, post } from "./helpers";
import { sharedTestProvider } from "./register-test-provider";
import { unwrapRpc } from "../../src/actors/rpc";
import { DELETE_BACKOFF_MAX_MS } from "../../src/actors/sandbox/sandbox-decisions";

const E = env as unknown as { THREADS: DurableObjectNamespace<ThreadActor>; SANDBOXES: DurableObjectNamespace<SandboxActor>; HOUSES: DurableObjectNamespace<HouseActor> };
const houseStub = (id: string) => E.HOUSES.get(E.HOUSES.idFromName(id));
const boxStub = (id: string) => E.SANDBOXES.get(E.SANDBOXES.idFromName(id));
const threadStub = (id: string) => E.THREADS.get(E.THREADS.idFromName(`thread:${id}`));

type BoxView = { id: string; state: string; providerRef: string; deleteAttempts: number; lastError: string | null };

/** An environment of `houseId` with its shared box made (by a command). */
async function environmentWithSharedBox(houseId: string, envId: string) {
  const token = await houseToken(houseId);
  sharedTestProvider().execHandler = () => ({ exitCode: 0, output: "ok" });
  expect((await call("/api/environments", { method: "POST", token, json: { id: envId, name: "s", provider: "test", sharedBox: true } })).status).toBe(201);
  const r = await call(`/api/environments/${envId}/exec`, { method: "POST", token, json: { command: "true" } });
  expect(r.status).toBe(200);
  const { boxId } = (await r.json()) as { boxId: string };
  return { token, boxId, ref: (await box(token, boxId)).providerRef };
}

async function box(token: string, id: string): Promise<BoxView> {
  return (await (await call(`/api/sandboxes/${id}`, { token })).json()) as BoxView;
}

async function listed(token: string, id: string): Promise<string | undefined> {
  const { sandboxes } = (await (await call("/api/sandboxes", { token })).json()) as { sandboxes: BoxView[] };
  return sandboxes.find((b) => b.id === id)?.state;
}

/** Runs the box's alarm as if `ms` had passed since now; false when it has none. */
async function alarmAfter(boxId: string, ms: number): Promise<boolean> {
  await runInDurableObject(boxStub(boxId), (a: SandboxActor) => { a.advanceClock(ms); });
  return runDurableObjectAlarm(boxStub(boxId));
}

/** Runs the house's alarm as if `ms` had passed since now; false when it has none. */
async function houseAlarmAfter(houseId: string, ms: number): Promise<boolean> {
  await runInDurableObject(houseStub(houseId), (h: HouseActor) => { h.advanceClock(ms); });
  return runDurableObjectAlarm(houseStub(houseId));
}

async function retirementsPending(houseId: string): Promise<string[]> {
  return runInDurableObject(houseStub(houseId), (_h, state) => state.storage.sql.exec(`select box_id from box_retirements`).toArray().map((r) => r.box_id as string));
}

async function liveAtProvider(houseId: string): Promise<string[]> {
  return (await sharedTestProvider().list({ "threadbox.house": houseId })).filter((b) => b.state !== "destroyed").map((b) => b.ref);
}

describe("a retired shared box", () => {
  it("whose delete the provider refuses three times is retried with backoff until the provider confirms it gone", async () => {
    const houseId = "house-retire-delete-fails";
    const { token, boxId, ref } = await environmentWithSharedBox(houseId, "env_retire_fails");
    const provider = sharedTestProvider();
    provider.failDeletes(3, "unavailable", ref);
    // Keeping no shared box any more lets the box go: its delete fails at once.
    expect((await call("/api/environments/env_retire_fails", { method: "PATCH", token, json: { sharedBox: false } })).status).toBe(200);
    let v = await box(token, boxId);
    expect([v.state, v.deleteAttempts]).toEqual(["live", 1]);
    expect(v.lastError).toContain("delete failed");
    // An eviction between the retries loses nothing: the pending delete and its alarm are stored.
    await evictDurableObject(boxStub(boxId));
    for (let attempt = 2; attempt <= 4; attempt++) expect(await alarmAfter(boxId, 2 * 60 * 60_000), `retry ${attempt}`).toBe(true);
    v = await box(token, boxId);
    expect(v.state).toBe("deleted");
    expect(await listed(token, boxId)).toBe("deleted");
    expect(await liveAtProvider(houseId)).toEqual([]);
    expect(provider.calls.filter((c) => c.op === "delete" && c.ref === ref)).toHaveLength(4);
    expect(await runDurableObjectAlarm(boxStub(boxId))).toBe(false); // nothing more to do
  });

  it("whose in-use check cannot be answered (the launching thread unreachable) is not forgotten: its alarm asks again, then deletes it, across an eviction", async () => {
    const houseId = "house-retire-check-fails";
    const { token, boxId, ref } = await environmentWithSharedBox(houseId, "env_retire_check");
    const provider = sharedTestProvider();
    // A launch picked the box; its thread cannot be asked whether that run still goes on.
    const t = await createThread(token);
    await unwrapRpc(boxStub(boxId).reserve(houseId, t.id, "run-gone"));
    await runInDurableObject(threadStub(t.id), (a: ThreadActor) => { a.failRunIsCurrent(true); });
    provider.failDeletes(2, "unavailable", ref);
    try {
      expect((await call("/api/environments/env_retire_check", { method: "PATCH", token, json: { sharedBox: false } })).status).toBe(200);
      expect((await box(token, boxId)).state).toBe("live"); // it may be in use: not deleted yet
      await evictDurableObject(boxStub(boxId));
      // Still unreachable: the box stays, and is asked about again later.
      expect(await alarmAfter(boxId, 2 * 60 * 60_000)).toBe(true);
      expect((await box(token, boxId)).state).toBe("live");
    } finally {
      await runInDurableObject(threadStub(t.id), (a: ThreadActor) => { a.failRunIsCurrent(false); });
    }
    // The thread answers (that run is not its current one): the box goes, through two failed deletes.
    for (let i = 0; i < 6 && (await box(token, boxId)).state !== "deleted"; i++) {
      expect(await alarmAfter(boxId, DELETE_BACKOFF_MAX_MS + 60 * 60_000), `alarm ${i}`).toBe(true);
    }
    expect((await box(token, boxId)).state).toBe("deleted");
    expect(await listed(token, boxId)).toBe("deleted");
    expect(await liveAtProvider(houseId)).toEqual([]);
    expect(provider.calls.filter((c) => c.op === "delete" && c.ref === ref)).toHaveLength(3);
  });

  it("still reserved by a launch that goes on is deleted neither by the retire nor by an alarm: the end of that run (its detach) reaps it", async () => {
    const houseId = "house-retire-in-use";
    const { token, boxId } = await environmentWithSharedBox(houseId, "env_retire_in_use");
    const t = await createThread(token);
    // The thread's current run launches onto the box (reserved, not attached yet).
    expect((await post(token, t.id, { payload: { type: "signal.thread.status_changed", status: "running", runId: "run-on-box" } })).status).toBe(201);
    await unwrapRpc(boxStub(boxId).reserve(houseId, t.id, "run-on-box"));
    expect((await call("/api/environments/env_retire_in_use", { method: "PATCH", token, json: { sharedBox: false } })).status).toBe(200);
    expect((await box(token, boxId)).state).toBe("live");
    // No alarm deletes it from under the run either.
    await alarmAfter(boxId, 2 * 60 * 60_000);
    expect((await box(token, boxId)).state).toBe("live");
    expect((await post(token, t.id, { payload: { type: "signal.thread.status_changed", status: "completed", runId: "run-on-box" } })).status).toBe(201);
    await unwrapRpc(boxStub(boxId).detach(houseId, t.id));
    expect((await box(token, boxId)).state).toBe("deleted");
    expect(await liveAtProvider(houseId)).toEqual([]);
  });

  it("whose retire does not reach its actor is retried by the house's alarm, across an eviction of the house, until the box is deleted", async () => {
    const houseId = "house-retire-unreached";
    const { token, boxId, ref } = await environmentWithSharedBox(houseId, "env_retire_unreached");
    // The route's retire and the house's first retry both fail before the box actor writes anything.
    await runInDurableObject(boxStub(boxId), (a: SandboxActor) => { a.failRetires(2); });
    expect((await call("/api/environments/env_retire_unreached", { method: "PATCH", token, json: { sharedBox: false } })).status).toBe(200);
    expect((await box(token, boxId)).state).toBe("live");
    expect(await liveAtProvider(houseId)).toEqual([ref]);
    await evictDurableObject(houseStub(houseId));
    expect(await houseAlarmAfter(houseId, 60 * 60_000)).toBe(true);
    expect((await box(token, boxId)).state).toBe("live");
    expect(await houseAlarmAfter(houseId, 60 * 60_000)).toBe(true);
    expect((await box(token, boxId)).state).toBe("deleted");
    expect(await listed(token, boxId)).toBe("deleted");
    expect(await liveAtProvider(houseId)).toEqual([]);
    expect(await retirementsPending(houseId)).toEqual([]);
    expect(await runDurableObjectAlarm(houseStub(houseId))).toBe(false);
  });

  it("that its retire reached at once leaves the house nothing to retry (also when the environment is deleted)", async () => {
    const houseId = "house-retire-recorded";
    const { token, boxId } = await environmentWithSharedBox(houseId, "env_retire_recorded");
    expect((await call("/api/environments/env_retire_recorded", { method: "PATCH", token, json: { sharedBox: false } })).status).toBe(200);
    expect((await box(token, boxId)).state).toBe("deleted");
    expect(await retirementsPending(houseId)).toEqual([]);
    const again = await environmentWithSharedBox(houseId, "env_retire_deleted");
    expect((await call("/api/environments/env_retire_deleted", { method: "DELETE", token })).status).toBe(204);
    expect((await box(token, again.boxId)).state).toBe("deleted");
    expect(await retirementsPending(houseId)).toEqual([]);
    expect(await liveAtProvider(houseId)).toEqual([]);
  });

  it("made for an environment deleted while it was made, whose delete does not reach its actor, is retried by the house's alarm until it is deleted", async () => {
    const houseId = "house-orphan-unreached";
    const token = await houseToken(houseId);
    const provider = sharedTestProvider();
    provider.execHandler = () => ({ exitCode: 0, output: "ok" });
    expect((await call("/api/environments", { method: "POST", token, json: { id: "env_orphan", name: "s", provider: "test", sharedBox: true } })).status).toBe(201);
    const create = provider.create;
    // The delete lands while the provider makes the box; the box's actor is then unreachable once.
    provider.create = async function (this: typeof provider, opts) {
      provider.create = create;
      expect((await call("/api/environments/env_orphan", { method: "DELETE", token })).status).toBe(204);
      await runInDurableObject(boxStub("any-box"), (a: SandboxActor) => { a.failDeletesOfAnyBox(1); });
      return create.call(this, opts);
    };
    try {
      expect((await call("/api/environments/env_orphan/exec", { method: "POST", token, json: { command: "true" } })).status).toBe(404);
    } finally {
      provider.create = create;
      await runInDurableObject(boxStub("any-box"), (a: SandboxActor) => { a.failDeletesOfAnyBox(0); });
    }
    expect(await liveAtProvider(houseId)).toHaveLength(1);
    await evictDurableObject(houseStub(houseId));
    expect(await houseAlarmAfter(houseId, 60 * 60_000)).toBe(true);
    expect(await liveAtProvider(houseId)).toEqual([]);
    const { sandboxes } = (await (await call("/api/sandboxes", { token })).json()) as { sandboxes: BoxView[] };
    expect(sandboxes.map((b) => b.state)).toEqual(["deleted"]);
    expect(await retirementsPending(houseId)).toEqual([]);
  });

  it("made for an environment whose box actor cannot register it is deleted at the provider, not left live with no actor to reap it", async () => {
    const houseId = "house-shared-register-fails";
    const token = await houseToken(houseId);
    sharedTestProvider().execHandler = () => ({ exitCode: 0, output: "ok" });
    expect((await call("/api/environments", { method: "POST", token, json: { id: "env_unregistered", name: "s", provider: "test", sharedBox: true } })).status).toBe(201);
    await runInDurableObject(boxStub("any-box"), (a: SandboxActor) => { a.failRegistersOfAnyBox(1); });
    try {
      expect((await call("/api/environments/env_unregistered/exec", { method: "POST", token, json: { command: "true" } })).status).toBeGreaterThanOrEqual(500);
    } finally {
      await runInDurableObject(boxStub("any-box"), (a: SandboxActor) => { a.failRegistersOfAnyBox(0); });
    }
    expect(await liveAtProvider(houseId)).toEqual([]);
    // The next command makes the box afresh.
    expect((await call("/api/environments/env_unregistered/exec", { method: "POST", token, json: { command: "true" } })).status).toBe(200);
    expect(await liveAtProvider(houseId)).toHaveLength(1);
  });

  it("deleted while the house's index could not be told: the house's retry of the retire puts GET /api/sandboxes right", async () => {
    const houseId = "house-retire-index-down";
    const { token, boxId } = await environmentWithSharedBox(houseId, "env_retire_index");
    await runInDurableObject(houseStub(houseId), (h: HouseActor) => { h.failBoxUpserts(1); });
    expect((await call("/api/environments/env_retire_index", { method: "PATCH", token, json: { sharedBox: false } })).status).toBe(200);
    expect((await box(token, boxId)).state).toBe("deleted");
    expect(await liveAtProvider(houseId)).toEqual([]);
    expect(await listed(token, boxId)).toBe("live"); // the index missed it
    expect(await houseAlarmAfter(houseId, 60 * 60_000)).toBe(true);
    expect(await listed(token, boxId)).toBe("deleted");
    expect(await retirementsPending(houseId)).toEqual([]);
  });
});

describe("a shared box whose claim does not reach the house", () => {
  /** A first command of `envId` whose claim of the box it made meets `houseFails`, while the box's actor cannot be asked to retire it. */
  async function claimUnreached(houseId: string, envId: string, houseFails: (h: HouseActor) => void) {
    const token = await houseToken(houseId);
    sharedTestProvider().execHandler = () => ({ exitCode: 0, output: "ok" });
    expect((await call("/api/environments", { method: "POST", token, json: { id: envId, name: "s", provider: "test", sharedBox: true } })).status).toBe(201);
    await runInDurableObject(houseStub(houseId), houseFails);
    await runInDurableObject(boxStub("any-box"), (a: SandboxActor) => { a.failDeletesOfAnyBox(1); });
    try {
      expect((await call(`/api/environments/${envId}/exec`, { method: "POST", token, json: { command: "true" } })).status).toBeGreaterThanOrEqual(500);
    } finally {
      await runInDurableObject(boxStub("any-box"), (a: SandboxActor) => { a.failDeletesOfAnyBox(0); });
    }
    const { sandboxes } = (await (await call("/api/sandboxes", { token })).json()) as { sandboxes: BoxView[] };
    expect(sandboxes).toHaveLength(1);
    expect(await liveAtProvider(houseId)).toEqual([sandboxes[0].providerRef]);
    return { token, boxId: sandboxes[0].id };
  }

  it("nor its retire the box's actor (both unreachable at once) is retired by the box itself once it finds the environment does not name it, across an eviction", async () => {
    const houseId = "house-claim-unreached";
    const { token, boxId } = await claimUnreached(houseId, "env_claim_unreached", (h) => h.failClaims(1));
    expect(await retirementsPending(houseId)).toEqual([]); // the house never heard of it
    // The house cannot be asked at the box's first look either: it looks again later.
    await runInDurableObject(houseStub(houseId), (h: HouseActor) => { h.failEnvironmentReads(1); });
    expect(await alarmAfter(boxId, 60 * 60_000)).toBe(true);
    expect((await box(token, boxId)).state).toBe("live");
    // What it is to ask is stored with the box: an eviction loses nothing.
    await evictDurableObject(boxStub(boxId));
    expect(await alarmAfter(boxId, 2 * 60 * 60_000)).toBe(true);
    expect((await box(token, boxId)).state).toBe("deleted");
    expect(await listed(token, boxId)).toBe("deleted");
    expect(await liveAtProvider(houseId)).toEqual([]);
    expect(await runDurableObjectAlarm(boxStub(boxId))).toBe(false);
    // The next command makes the environment's box afresh.
    expect((await call("/api/environments/env_claim_unreached/exec", { method: "POST", token, json: { command: "true" } })).status).toBe(200);
    expect(await liveAtProvider(houseId)).toHaveLength(1);
  });

  it("that the house took (only its answer was lost) is kept by the box's look: it stays the environment's box", async () => {
    const houseId = "house-claim-answer-lost";
    const { token, boxId } = await claimUnreached(houseId, "env_claim_lost", (h) => h.loseClaimAnswers(1));
    expect(await alarmAfter(boxId, 60 * 60_000)).toBe(true);
    expect((await box(token, boxId)).state).toBe("live");
    expect(await runDurableObjectAlarm(boxStub(boxId))).toBe(false); // nothing more to ask
    const r = await call("/api/environments/env_claim_lost/exec", { method: "POST", token, json: { command: "true" } });
    expect(r.status).toBe(200);
    expect(((await r.json()) as { boxId: string }).boxId).toBe(boxId);
  });

  it("that the house took at once leaves the box nothing to ask", async () => {
    const houseId = "house-claim-confirmed";
    const { boxId } = await environmentWithSharedBox(houseId, "env_claim_confirmed");
    expect(await runDurableObjectAlarm(boxStub(boxId))).toBe(false);
  });
});
