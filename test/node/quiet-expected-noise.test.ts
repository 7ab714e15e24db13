// The test-output filter drops only workerd's report of a refused loopback connection or of a test hook's failure.
import { describe, expect, it } from "vitest";
import { isExpectedWorkerdNoise } from "../support/quiet-expected-noise.mjs";

const STACK = "stack: /x/workerd@28a3c60 /x/workerd@3ac7580";

describe("expected workerd noise", () => {
  it("drops the refused-connection messages workerd logs for a handled fetch to a closed port", () => {
    for (const m of [
      `exception = rust/worker/ffi.rs:110: disconnected: Connection refused (os error 111)\n${STACK}\n`,
      "uncaught exception; source = Uncaught (in promise); stack = Error: Network connection lost.\n",
      `uncaught exception; exception = workerd/jsg/value.h:1535: disconnected: jsg.Error: Network connection lost.\n${STACK}\n`,
    ]) {
      expect(isExpectedWorkerdNoise(m)).toBe(true);
      expect(isExpectedWorkerdNoise(Buffer.from(m))).toBe(true);
    }
  });

  it("keeps everything else, including other uncaught exceptions and messages that merely mention it", () => {
    for (const m of [
      "uncaught exception; source = Uncaught (in promise); stack = Error: boom\n",
      "uncaught exception; source = Uncaught (in promise); stack = Error: Network connection lost.\n    at handler (src/worker.ts:10)\nmore\n",
      " ✓ workers test/workers/x.test.ts (1 test)\n",
      "FAIL Network connection lost. was expected\n",
    ]) expect(isExpectedWorkerdNoise(m)).toBe(false);
  });

  it("drops workerd's report of an error a test hook threw on purpose, with its stack, and nothing more", () => {
    const report = (message: string, frames: string[]) => `uncaught exception; source = Uncaught (in promise); stack = Error: ${message}\n${frames.map((f) => `    at ${f}\n`).join("")}`;
    const hookFrames = ["failIfArmed (/x/test/workers/test-worker.ts:51:45)", "HouseActor.upsertThread (/x/test/workers/test-worker.ts:385:5)", "/x/node_modules/@cloudflare/vitest-plugin/dist/worker/lib/cloudflare/test-internal.mjs:369:47"];
    // As the callee that threw reports it, and as an actor whose RPC method passed it on does.
    expect(isExpectedWorkerdNoise(report("house index unavailable (test)", hookFrames))).toBe(true);
    expect(isExpectedWorkerdNoise(Buffer.from(report("house index unavailable (test)", hookFrames)))).toBe(true);
    expect(isExpectedWorkerdNoise(report("house index unavailable (test)", ["unwrapRpc (/x/src/actors/rpc.ts:24:13)", "SandboxActor.syncIndex (/x/src/actors/sandbox/sandbox-actor.ts:750:5)"]))).toBe(true);
    expect(isExpectedWorkerdNoise(report("launch step after box_chosen failed (test)", hookFrames))).toBe(true);
    // A real error in the same shape still prints, as does one that wraps a hook's message, or a report with more after it.
    expect(isExpectedWorkerdNoise(report("upsertThread: cannot read properties of undefined", hookFrames))).toBe(false);
    expect(isExpectedWorkerdNoise(report("TypeError: x is not a function", hookFrames))).toBe(false);
    expect(isExpectedWorkerdNoise(report("sync failed: house index unavailable (test)", hookFrames))).toBe(false);
    expect(isExpectedWorkerdNoise(`${report("house index unavailable (test)", hookFrames)}Caused by: something else\n`)).toBe(false);
    expect(isExpectedWorkerdNoise("uncaught exception; exception = workerd/api/actor-state.c++:1249: failed: broken.outputGateBroken; jsg.Error: house index unavailable (test)\n")).toBe(false);
  });
});
