// A `POST /api/sandboxes` that loses an Idempotency-Key race drops the box it made: no box actor
// has that box, so a delete the provider fails must still be retried until it is gone.
import { describe, expect, it } from "vitest";
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import type { SandboxActor } from "./test-worker";
import { call, houseToken } from "./helpers";
import { sharedTestProvider } from "./register-test-provider";
import { lateBoxWatchId } from "../../src/actors/sandbox/late-box";

const E = env as unknown as { SANDBOXES: DurableObjectNamespace<SandboxActor> };
const actor = (id: string) => E.SANDBOXES.get(E.SANDBOXES.idFromName(id));

describe("the box a request that lost an Idempotency-Key race made", () => {
  it("whose delete the provider fails twice is deleted by a watch that retries with backoff", async () => {
    const houseId = "house-dup-box";
    const token = await houseToken(houseId);
    const provider = sharedTestProvider();
    const liveAtProvider = async () => (await provider.list({ "threadbox.house": houseId })).filter((b) => b.state !== "destroyed").map((b) => b.ref);
    const create = provider.create;
    let entered!: () => void;
    const reached = new Promise<void>((r) => { entered = r; });
    let release!: () => void;
    const gate = new Promise<void>((r) => { release = r; });
    let hold = true;
    // The first request's create waits while a second with the same key makes and registers its box.
    provider.create = async function (this: typeof provider, opts) {
      if (hold) {
        hold = false;
        entered();
        await gate;
      }
      return create.call(this, opts);
    };
    const post = () => call("/api/sandboxes", { method: "POST", token, json: { provider: "test", ephemeral: false }, headers: { "idempotency-key": "dup-race" } });
    let won: { id: string; providerRef: string };
    try {
      const first = post();
      await reached;
      const second = await post();
      expect(second.status).toBe(201);
      won = (await second.json()) as { id: string; providerRef: string };
      provider.failDeletes(2, "unavailable");
      release();
      const lost = await first;
      expect(lost.status).toBe(200);
      expect(lost.headers.get("location")).toBe(`/api/sandboxes/${won.id}`);
    } finally {
      provider.create = create;
      release();
    }
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
});
