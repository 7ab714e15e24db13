// A box this code made and then found not needed (a `POST /api/sandboxes` that lost an
// Idempotency-Key race, a shared box its actor could not register), or one whose create the provider
// did not answer, is had by no box actor: a delete the provider fails must still be retried until
// it is gone, or the box named to the client as one that may be left.
import { describe, expect, it } from "vitest";
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import type { SandboxActor } from "./test-worker";
import { call, houseToken } from "./helpers";
import { sharedTestProvider } from "./register-test-provider";
import { lateBoxWatchId } from "../../src/actors/sandbox/late-box";
import { unwrapRpc } from "../../src/actors/rpc";
import { within } from "./inside-request";

const E = env as unknown as { SANDBOXES: DurableObjectNamespace<SandboxActor> };
const actor = (id: string) => E.SANDBOXES.get(E.SANDBOXES.idFromName(id));

type Answer = { status: number; location: string | null; body: { id: string; providerRef: string; error?: { code: string; message: string; details?: unknown } } };

/**
 * Runs `post` so that it loses its key's race: its provider create first sends `post` again (the
 * same key) and waits for that answer, so the second request makes and registers its box before
 * the first has one. All of it is done inside the first request, one step after another: no two
 * requests in flight share anything. Returns both answers.
 */
async function raceLostBy(post: () => Promise<Response>): Promise<{ first: Answer; second: Answer | undefined }> {
  const provider = sharedTestProvider();
  const create = provider.create;
  let second: Answer | undefined;
  provider.create = async function (this: typeof provider, opts) {
    provider.create = create; // the second request's create is the provider's own
    const r = await post();
    second = { status: r.status, location: r.headers.get("location"), body: (await r.json()) as Answer["body"] };
    return create.call(this, opts);
  };
  try {
    const r = await within(post(), "the request that lost the race");
    return { first: { status: r.status, location: r.headers.get("location"), body: (await r.json()) as Answer["body"] }, second };
  } finally {
    provider.create = create;
  }
}

describe("the box a request that lost an Idempotency-Key race made", () => {
  it("whose delete the provider fails twice is deleted by a watch that retries with backoff", async () => {
    const houseId = "house-dup-box";
    const token = await houseToken(houseId);
    const provider = sharedTestProvider();
    const liveAtProvider = async () => (await provider.list({ "threadbox.house": houseId })).filter((b) => b.state !== "destroyed").map((b) => b.ref);
    const post = () => call("/api/sandboxes", { method: "POST", token, json: { provider: "test", ephemeral: false }, headers: { "idempotency-key": "dup-race" } });
    provider.failDeletes(2, "unavailable");
    const { first, second } = await raceLostBy(post);
    expect(second?.status).toBe(201);
    const won = second!.body;
    expect(first.status).toBe(200);
    expect(first.location).toBe(`/api/sandboxes/${won.id}`);
    const dropped = (await liveAtProvider()).filter((r) => r !== won.providerRef);
    expect(dropped).toHaveLength(1); // its delete failed: still there
    const watch = actor(lateBoxWatchId("test", dropped[0]));
    for (let look = 1; look <= 2; look++) {
      await runInDurableObject(watch, (a: SandboxActor) => { a.advanceClock(10 * 60_000); });
      expect(await runDurableObjectAlarm(watch), `look ${look}`).toBe(true);
    }
    expect(await liveAtProvider()).toEqual([won.providerRef]);
    expect(await runDurableObjectAlarm(watch)).toBe(false); // the watch has ended
    expect((await call(`/api/sandboxes/${won.id}`, { method: "DELETE", token })).status).toBe(200);
  });

  it("whose delete fails and whose watch cannot be started: the answer names the box that may be left, and a retry answers the box that won", async () => {
    const houseId = "house-dup-box-watch-fails";
    const token = await houseToken(houseId);
    const provider = sharedTestProvider();
    const liveAtProvider = async () => (await provider.list({ "threadbox.house": houseId })).filter((b) => b.state !== "destroyed").map((b) => b.ref);
    const post = () => call("/api/sandboxes", { method: "POST", token, json: { provider: "test", ephemeral: false }, headers: { "idempotency-key": "dup-race-left" } });
    provider.failDeletes(1, "unavailable");
    await runInDurableObject(actor("any-box"), (a: SandboxActor) => a.failLateBoxWatches(1));
    let raced;
    try {
      raced = await raceLostBy(post);
    } finally {
      await runInDurableObject(actor("any-box"), (a: SandboxActor) => a.failLateBoxWatches(0));
    }
    expect(raced.second?.status).toBe(201);
    const won = raced.second!.body;
    const dropped = (await liveAtProvider()).filter((r) => r !== won.providerRef);
    expect(dropped).toHaveLength(1);
    expect(raced.first.status).toBe(502);
    expect(raced.first.body.error).toMatchObject({ code: "provider_unavailable", details: { provider: "test", providerRef: dropped[0] } });
    expect(raced.first.body.error?.message).toContain(dropped[0]);
    const again = await within(post(), "the retry");
    expect(again.status).toBe(200);
    expect(again.headers.get("location")).toBe(`/api/sandboxes/${won.id}`);
    await provider.delete(dropped[0]);
    expect((await call(`/api/sandboxes/${won.id}`, { method: "DELETE", token })).status).toBe(200);
  });
});

describe("a shared box its actor could not register", () => {
  it("whose delete fails and whose watch cannot be started: the first use fails naming the box that may be left, and the next makes one afresh", async () => {
    const houseId = "house-shared-left";
    const token = await houseToken(houseId);
    const provider = sharedTestProvider();
    provider.execHandler = () => ({ exitCode: 0, output: "ok" });
    const liveAtProvider = async () => (await provider.list({ "threadbox.house": houseId })).filter((b) => b.state !== "destroyed").map((b) => b.ref);
    expect((await call("/api/environments", { method: "POST", token, json: { id: "env_left", name: "s", provider: "test", sharedBox: true } })).status).toBe(201);
    const exec = () => within(call("/api/environments/env_left/exec", { method: "POST", token, json: { command: "true" } }), "the command");
    provider.failDeletes(1, "unavailable");
    await runInDurableObject(actor("any-box"), (a: SandboxActor) => { a.failRegistersOfAnyBox(1); a.failLateBoxWatches(1); });
    let failed: Response;
    try {
      failed = await exec();
    } finally {
      await runInDurableObject(actor("any-box"), (a: SandboxActor) => { a.failRegistersOfAnyBox(0); a.failLateBoxWatches(0); });
    }
    const [left] = await liveAtProvider();
    expect(left).toBeDefined();
    expect(failed.status).toBe(502);
    const body = (await failed.json()) as { error: { code: string; message: string; details: unknown } };
    expect(body.error).toMatchObject({ code: "provider_unavailable", details: { provider: "test", providerRef: left } });
    expect(body.error.message).toContain(left);
    expect((await exec()).status).toBe(200);
    expect(await liveAtProvider()).toHaveLength(2);
    await provider.delete(left);
  });
});

describe("a box whose create the provider did not answer, when the watch for it cannot be started", () => {
  it("POST /api/sandboxes answers 502 naming the box that may still appear", async () => {
    const houseId = "house-late-box-unwatched";
    const token = await houseToken(houseId);
    const provider = sharedTestProvider();
    provider.hangCreates(houseId);
    await runInDurableObject(actor("any-box"), (a: SandboxActor) => a.failLateBoxWatches(1));
    let r: Response;
    try {
      r = await within(call("/api/sandboxes", { method: "POST", token, json: { provider: "test" } }), "the create");
    } finally {
      provider.hangCreates(houseId, false);
      await runInDurableObject(actor("any-box"), (a: SandboxActor) => a.failLateBoxWatches(0));
    }
    const names = [...provider.lateBoxes.entries()].filter(([, b]) => b.labels["threadbox.house"] === houseId).map(([n]) => n);
    expect(names).toHaveLength(1);
    expect(r.status).toBe(502);
    const body = (await r.json()) as { error: { code: string; message: string; details: unknown } };
    expect(body.error).toMatchObject({ code: "provider_unavailable", details: { provider: "test", providerRef: names[0] } });
    expect(body.error.message).toContain(names[0]);
    expect(await unwrapRpc(actor(lateBoxWatchId("test", names[0])).lateBoxWatch())).toBeNull(); // nothing watches it
    provider.lateBoxes.delete(names[0]);
  });
});
