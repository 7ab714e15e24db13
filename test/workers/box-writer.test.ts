/**
 * The box's writer (src/runner/stream-writer.ts, used by the mirror and the runner) against the
 * real worker's stream route and its limits.
 */
import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { StreamWriter } from "../../src/runner/stream-writer";
import { getCodingAgent } from "../../src/sandbox/harness";
import { BASE, createThread, houseToken, readAll, runToken } from "./helpers";

const selfFetch: typeof fetch = (input, init) => SELF.fetch(input as RequestInfo, init);

/** A box's writer on a new thread of house-bw, through the real worker route, its log lines kept. */
async function boxWriter(producerId: string) {
  const house = await houseToken("house-bw");
  const thread = await createThread(house);
  // The token a launch gives the box: it alone writes the ids the box writes under.
  const token = await runToken("house-bw", thread.id, "r1");
  const logged: string[] = [];
  const w = new StreamWriter({
    url: `${BASE}/api/stream/thread-${thread.id}`, token, producerId, fetchImpl: selfFetch,
    baseDelayMs: 10, log: (m) => logged.push(m),
  });
  return { house, thread, w, logged };
}

describe("StreamWriter against the worker", () => {
  it("entries queued together past the 1 MiB append limit all land, in order (none dropped by a 413)", async () => {
    const { house, thread, w, logged } = await boxWriter("mirror-big");
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

describe("StreamWriter and an entry the worker refuses", () => {
  it("only the refused entry is dropped: the entries sent with it land, in order", async () => {
    const { house, thread, w, logged } = await boxWriter("mirror-mixed");
    const good = (i: number) => ({ id: `${thread.id}:m:s:${i}`, payload: { type: "pi.assistant", text: `turn ${i}`, stopReason: "stop" } });
    // An id longer than the 200 characters an entry id may have: the worker refuses the POST that carries it.
    const bad = { id: `${thread.id}:m:${"x".repeat(200)}`, payload: { type: "pi.assistant", text: "never stored", stopReason: "stop" } };
    w.append(good(0), good(1), good(2), bad, good(3), good(4), good(5));
    expect(await w.flush(20_000)).toBe(true);
    expect(w.dropped).toBe(1);
    const ids = (await readAll(house, thread.id)).entries.map((e) => e.id);
    expect(ids).toEqual([0, 1, 2, 3, 4, 5].map((i) => `${thread.id}:m:s:${i}`));
    expect(logged.filter((m) => /dropping/.test(m))).toEqual([expect.stringMatching(/^POST rejected with 400; dropping the entry \(.*validation_failed/)]);
  });
});

describe("the finished-signal a box posts", () => {
  it("a harness's long failure message still ends the run pi_failed, with the message's start as the reason", async () => {
    const house = await houseToken("house-bw");
    const thread = await createThread(house);
    const token = await runToken("house-bw", thread.id, "r1");
    const url = `${BASE}/api/stream/thread-${thread.id}`;
    const claim = new StreamWriter({ url, token, producerId: "claim", fetchImpl: selfFetch, log: () => {} });
    claim.append({ id: "claim:r1", payload: { type: "signal.thread.status_changed", status: "running", runId: "r1" } });
    expect(await claim.flush(10_000)).toBe(true);
    // Claude Code's error result (an API error quoting a long body), as the runner sees it at exit.
    const message = `API Error: 400 ${JSON.stringify({ error: { message: "prompt too long", detail: "x".repeat(12_000) } })}`;
    const thread_ = [{ payload: { type: "signal.thread.status_changed", status: "running" } }, ...getCodingAgent("claude-code").createParser().push(JSON.stringify({ type: "result", subtype: "error_during_execution", is_error: true, result: message }))];
    const outcome = getCodingAgent("claude-code").decideOutcome(thread_ as never, 1, { signalId: `${thread.id}:finished:r1`, runId: "r1" });
    const logged: string[] = [];
    const w = new StreamWriter({ url, token, producerId: "runner", fetchImpl: selfFetch, baseDelayMs: 10, log: (m) => logged.push(m) });
    w.append(...(outcome.entries as never[]));
    expect(await w.flush(10_000)).toBe(true);
    expect(logged).toEqual([]);
    const row = (await (await SELF.fetch(`${BASE}/api/threads/${thread.id}`, { headers: { authorization: `Bearer ${house}` } })).json()) as { status: string; reason: string; detail: string };
    expect([row.status, row.reason]).toEqual(["failed", "pi_failed"]);
    expect(row.detail.startsWith("claude-code error_during_execution: API Error: 400")).toBe(true);
  });
});
