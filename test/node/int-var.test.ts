// The worker's numeric settings: a value it cannot use is ignored out loud, once, not silently.
import { afterEach, describe, expect, it, vi } from "vitest";
import { intVar } from "../../src/env";

describe("numeric settings", () => {
  afterEach(() => vi.restoreAllMocks());

  it("uses a positive whole number, and the default when unset or blank", () => {
    expect(intVar({ LONG_POLL_TIMEOUT_MS: "5000" }, "LONG_POLL_TIMEOUT_MS", 20_000)).toBe(5000);
    expect(intVar({}, "LONG_POLL_TIMEOUT_MS", 20_000)).toBe(20_000);
    expect(intVar({ LONG_POLL_TIMEOUT_MS: " " }, "LONG_POLL_TIMEOUT_MS", 20_000)).toBe(20_000);
  });

  it("a value it cannot use ('5s', '0.5', '0', '-1') gets the default and one warning naming the variable", () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    for (const bad of ["5s", "0.5", "0", "-1"]) {
      expect(intVar({ ORPHAN_SILENCE_MS: bad }, "ORPHAN_SILENCE_MS", 300_000), bad).toBe(300_000);
      expect(intVar({ ORPHAN_SILENCE_MS: bad }, "ORPHAN_SILENCE_MS", 300_000), bad).toBe(300_000);
    }
    const lines = warn.mock.calls.map((c) => JSON.parse(String(c[0])));
    expect(lines).toEqual(["5s", "0.5", "0", "-1"].map((value) => ({
      event: "config_value_ignored", name: "ORPHAN_SILENCE_MS", value, using: 300_000, reason: "not a positive whole number",
    })));
  });

  it("a stream token's lifetime outside 2 s–24 h is ignored the same way", () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    expect(intVar({ STREAM_TOKEN_TTL_SECONDS: "1h" }, "STREAM_TOKEN_TTL_SECONDS", 7200, { min: 2, max: 86_400 })).toBe(7200);
    expect(intVar({ STREAM_TOKEN_TTL_SECONDS: "100000" }, "STREAM_TOKEN_TTL_SECONDS", 7200, { min: 2, max: 86_400 })).toBe(7200);
    expect(intVar({ STREAM_TOKEN_TTL_SECONDS: "600" }, "STREAM_TOKEN_TTL_SECONDS", 7200, { min: 2, max: 86_400 })).toBe(600);
    expect(warn.mock.calls.map((c) => JSON.parse(String(c[0])).reason)).toEqual(["not a whole number from 2 to 86400", "not a whole number from 2 to 86400"]);
  });
});
