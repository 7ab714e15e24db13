import { describe, expect, it, vi } from "vitest";
import { env } from "cloudflare:test";
import type { Env } from "../../src/env";
import { ApiError } from "../../src/errors";
import { errorMessage } from "../../src/domain/log-event";
import { retireSharedBox } from "../../src/workspace/shared-box";

describe("an ApiError in a log line", () => {
  it("is logged as its code and words, not with the NUL and JSON an actor call carries its details in", async () => {
    const warned = vi.spyOn(console, "warn").mockImplementation(() => {});
    try {
      // No actor has this box: its retire answers not_found across the actor call.
      await retireSharedBox(env as unknown as Env, "house-error-logs", "env_logs", "box_nobody_has");
      const lines = warned.mock.calls.map((c) => c.map(String).join(" ")).filter((l) => l.includes("shared_box_retire_failed"));
      expect(lines).toHaveLength(1);
      expect(lines[0]).not.toMatch(/\u0000|\\u0000/);
      expect((JSON.parse(lines[0]) as { error: string }).error).toMatch(/^not_found: [^{}]+$/);
    } finally {
      warned.mockRestore();
    }
  });

  it("keeps the words of an error whatever carried it: thrown here, rebuilt from an actor's answer, or only its message kept", () => {
    const e = new ApiError("validation_failed", "invalid environment", [{ path: "name", message: "required" }], { "retry-after": "1" });
    expect(e.message).toContain("\u0000");
    expect(errorMessage(e)).toBe("validation_failed: invalid environment");
    // An actor method that throws (no settle) hands its caller a plain Error with the message only.
    expect(errorMessage(new Error(e.message))).toBe("validation_failed: invalid environment");
    expect(errorMessage(new Error("plain words"))).toBe("plain words");
    expect(errorMessage("a string")).toBe("a string");
  });
});
