// The test-output filter drops only workerd's report of a refused loopback connection.
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
});
