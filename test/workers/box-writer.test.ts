/**
 * The box's writer (src/runner/stream-writer.ts, used by the mirror and the runner) against the
 * real worker's stream route and its limits.
 */
import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { StreamWriter } from "../../src/runner/stream-writer";
import { BASE, createThread, houseToken, readAll, streamToken } from "./helpers";

const selfFetch: typeof fetch = (input, init) => SELF.fetch(input as RequestInfo, init);

describe("StreamWriter against the worker", () => {
  it("entries queued together past the 1 MiB append limit all land, in order (none dropped by a 413)", async () => {
    const house = await houseToken("house-bw");
    const thread = await createThread(house);
    const token = await streamToken("house-bw", thread.id);
    const logged: string[] = [];
    const w = new StreamWriter({
      url: `${BASE}/api/stream/thread-${thread.id}`, token, producerId: "mirror-big", fetchImpl: selfFetch,
      baseDelayMs: 10, log: (m) => logged.push(m),
    });
    // What a mirror queues while one POST is in flight: a few tool results of some 300 KiB each.
    const big = (i: number) => ({ id: `${thread.id}:m:s:${i}`, payload: { type: "pi.tool_result", toolCallId: `c${i}`, output: `${i}`.repeat(300 * 1024) } });
    w.append(big(0), big(1), big(2), big(3), big(4));
    expect(await w.flush(20_000)).toBe(true);
    expect(w.dropped).toBe(0);
    const ids = (await readAll(house, thread.id)).entries.map((e) => e.id);
    expect(ids).toEqual([0, 1, 2, 3, 4].map((i) => `${thread.id}:m:s:${i}`));
    expect(logged.filter((m) => /rejected/.test(m))).toEqual([]);
  });
});
