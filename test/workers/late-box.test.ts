// A create the provider never answered may still be carried out: the box it brings later is deleted.
import { describe, expect, it, vi } from "vitest";
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import type { SandboxActor, ThreadActor } from "./test-worker";
import { sharedTestProvider } from "./register-test-provider";
import { LABEL_HOUSE } from "../../src/sandbox/provider";
import { unwrapRpc } from "../../src/actors/rpc";
import { LATE_BOX_WATCH_MS, lateBoxWatchId } from "../../src/actors/sandbox/late-box";
import { call, createThread, houseToken } from "./helpers";

const E = env as unknown as { THREADS: DurableObjectNamespace<ThreadActor>; SANDBOXES: DurableObjectNamespace<SandboxActor> };
const watchOf = (name: string) => E.SANDBOXES.get(E.SANDBOXES.idFromName(lateBoxWatchId("test", name)));

/** The one box of `house` whose create timed out, once its create has given up. */
async function lateBoxOf(house: string): Promise<string> {
  const provider = sharedTestProvider();
  let name = "";
  await vi.waitFor(() => {
    const names = [...provider.lateBoxes.entries()].filter(([, b]) => b.labels[LABEL_HOUSE] === house).map(([n]) => n);
    expect(names).toHaveLength(1);
    name = names[0];
  }, { timeout: 10_000, interval: 50 });
  return name;
}

const boxesOf = async (house: string) => (await sharedTestProvider().list({ [LABEL_HOUSE]: house })).map((b) => b.ref);

/** The box appears at the provider after the create gave up; the watch's next look deletes it. */
async function expectDeletedWhenItAppears(house: string, name: string) {
  const watch = watchOf(name);
  expect(await unwrapRpc(watch.lateBoxWatch())).toMatchObject({ houseId: house, provider: "test", name });
  // Not there yet: the watch looks again later.
  expect(await runDurableObjectAlarm(watch)).toBe(true);
  expect(await unwrapRpc(watch.lateBoxWatch())).toMatchObject({ name });
  sharedTestProvider().appearLate(name);
  expect(await boxesOf(house)).toEqual([name]);
  expect(await runDurableObjectAlarm(watch)).toBe(true);
  expect(await boxesOf(house)).toEqual([]);
  expect(await unwrapRpc(watch.lateBoxWatch())).toBeNull();
}

describe("a box whose create the provider did not answer", () => {
  it("POST /api/sandboxes: the create fails, and the box it later brings is deleted by its name", async () => {
    const house = "house-late-box-route";
    const token = await houseToken(house);
    sharedTestProvider().hangCreates(house);
    try {
      const r = await call("/api/sandboxes", { method: "POST", token, json: { provider: "test" } });
      expect(r.status).toBe(502);
      await expectDeletedWhenItAppears(house, await lateBoxOf(house));
    } finally {
      sharedTestProvider().hangCreates(house, false);
    }
  });

  it("a run's launch: the run fails, and the box its create later brings is deleted", async () => {
    const house = "house-late-box-launch";
    const token = await houseToken(house);
    const envRes = await call("/api/environments", { method: "POST", token, json: { name: "late", provider: "test" } });
    const environmentId = ((await envRes.json()) as { id: string }).id;
    const t = await createThread(token, { environmentId });
    const stub = E.THREADS.get(E.THREADS.idFromName(`thread:${t.id}`));
    await runInDurableObject(stub, (a: ThreadActor) => a.setTestEnv({ THREADBOX_STREAM_URL: "http://stream.test/api/stream" }));
    sharedTestProvider().hangCreates(house);
    try {
      await unwrapRpc(stub.startRun(house, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
      await vi.waitFor(async () => {
        const row = (await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string; detail: string };
        expect(row).toMatchObject({ status: "failed" });
        expect(row.detail).toMatch(/launch failed/);
      }, { timeout: 10_000, interval: 50 });
      await expectDeletedWhenItAppears(house, await lateBoxOf(house));
    } finally {
      sharedTestProvider().hangCreates(house, false);
    }
  });

  it("an environment's shared box: the command fails, and the box its create later brings is deleted", async () => {
    const house = "house-late-box-shared";
    const token = await houseToken(house);
    expect((await call("/api/environments", { method: "POST", token, json: { id: "env_late", name: "s", provider: "test", sharedBox: true } })).status).toBe(201);
    sharedTestProvider().hangCreates(house);
    try {
      const r = await call("/api/environments/env_late/exec", { method: "POST", token, json: { command: "true" } });
      expect(r.status).toBe(502);
      await expectDeletedWhenItAppears(house, await lateBoxOf(house));
    } finally {
      sharedTestProvider().hangCreates(house, false);
    }
  });

  it("is looked for for an hour at most: a watch whose time has passed ends", async () => {
    const house = "house-late-box-never";
    const token = await houseToken(house);
    sharedTestProvider().hangCreates(house);
    try {
      expect((await call("/api/sandboxes", { method: "POST", token, json: { provider: "test" } })).status).toBe(502);
      const watch = watchOf(await lateBoxOf(house));
      expect(await runDurableObjectAlarm(watch)).toBe(true);
      await runInDurableObject(watch, (a: SandboxActor) => a.advanceClock(LATE_BOX_WATCH_MS));
      expect(await runDurableObjectAlarm(watch)).toBe(true);
      expect(await unwrapRpc(watch.lateBoxWatch())).toBeNull();
      expect(await runDurableObjectAlarm(watch)).toBe(false);
    } finally {
      sharedTestProvider().hangCreates(house, false);
    }
  });
});
