// run() (src/sandbox/run.ts), the driver outside the actor system, deletes the box it made for the
// run; no actor knows of that box, so a delete the provider fails is asked again, and one that
// keeps failing is named to the caller instead of only logged.
import { afterEach, describe, expect, it, vi } from "vitest";
import { SELF } from "cloudflare:test";
import { BoxLeftError, run } from "../../src/sandbox/run";
import { TestSandboxProvider } from "../../src/sandbox/test-provider";
import { MIRROR_BUNDLE, RUNNER_BUNDLE } from "../../src/sandbox/harness";
import { BASE, createThread, houseToken, runToken } from "./helpers";

afterEach(() => {
  vi.unstubAllGlobals();
});

/** A run() of a fresh thread of `houseId` on a box it makes at `provider`; its HTTP goes to the worker. */
async function hostRun(houseId: string, provider: TestSandboxProvider) {
  vi.stubGlobal("fetch", (input: RequestInfo | URL, init?: RequestInit) => SELF.fetch(input, init));
  const t = await createThread(await houseToken(houseId));
  const runId = crypto.randomUUID();
  return run({
    provider, streamUrl: `${BASE}/api/stream`, streamToken: await runToken(houseId, t.id, runId), runId,
    houseId, threadId: t.id, task: "do it",
    bundles: { [RUNNER_BUNDLE]: "// runner", [MIRROR_BUNDLE]: "// mirror" },
  });
}

const liveBoxes = (provider: TestSandboxProvider) => [...provider.boxes.keys()];
const deletes = (provider: TestSandboxProvider) => provider.calls.filter((c) => c.op === "delete");

describe("run(): the box it made", () => {
  it("is deleted when the provider fails the delete twice: it is asked again", async () => {
    const provider = new TestSandboxProvider();
    provider.failDeletes(2);
    const result = await hostRun("house-host-run-retry", provider);
    expect(result.boxLeft).toBeUndefined();
    expect(liveBoxes(provider)).toEqual([]);
    expect(deletes(provider)).toHaveLength(3);
  }, 30_000);

  it("whose delete keeps failing is named in the result: the caller learns the box may still be live", async () => {
    const provider = new TestSandboxProvider();
    provider.failDeletes(100);
    const result = await hostRun("house-host-run-left", provider);
    expect(liveBoxes(provider)).toEqual([result.boxRef]);
    expect(result.boxLeft).toEqual({ boxRef: result.boxRef, error: expect.stringContaining("scripted delete failure") });
    expect(deletes(provider)).toHaveLength(4);
  }, 30_000);

  it("of a run that fails, whose delete keeps failing, is named by the error, which keeps the run's own failure", async () => {
    const provider = new TestSandboxProvider();
    provider.execHandler = () => ({ exitCode: 1, output: "no" }); // pi is not there, and its install fails
    provider.failDeletes(100);
    const err = await hostRun("house-host-run-fails", provider).then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(BoxLeftError);
    const [ref] = liveBoxes(provider);
    expect((err as BoxLeftError).boxRef).toBe(ref);
    expect((err as BoxLeftError).code).toBe("box_left");
    expect((err as Error).message).toContain("installing pi failed (exit 1)");
    expect((err as Error).message).toContain(ref);
  }, 30_000);

  it("of a run that fails is deleted, and the run's own failure is what is thrown", async () => {
    const provider = new TestSandboxProvider();
    provider.execHandler = () => ({ exitCode: 1, output: "no" });
    await expect(hostRun("house-host-run-fails-deleted", provider)).rejects.toThrow(/^installing pi failed \(exit 1\)$/);
    expect(liveBoxes(provider)).toEqual([]);
  }, 30_000);
});
