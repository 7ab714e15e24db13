import { describe, expect, it } from "vitest";
import { ThreadWatch } from "../../src/runner/thread-watch";

const page = (entries: unknown[], upToDate: boolean) =>
  new Response(JSON.stringify(entries), { headers: { "stream-next-offset": "1", ...(upToDate ? { "stream-up-to-date": "true" } : {}) } });

/** A read that only an abort ends (a long-poll, or a connection that died without closing). */
const untilAborted = (init: RequestInit) =>
  new Promise<Response>((_, reject) => init.signal!.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError"))));

/** A watch on a fake stream: `answer` gets the 1-based number of each read; urls and entries seen are recorded. */
function recordingWatch(answer: (n: number, init: RequestInit) => Promise<Response> | Response, extra: { requestTimeoutMs?: number } = {}) {
  const urls: string[] = [];
  const seen: [string, boolean][] = [];
  const watch = new ThreadWatch({
    url: "http://stream/thread-t",
    token: () => "tok",
    onEntries: (es, live) => es.forEach((e: any) => seen.push([e.id, live])),
    ...extra,
    fetchImpl: (async (url: string, init: RequestInit) => {
      urls.push(url);
      return answer(urls.length, init);
    }) as typeof fetch,
  });
  return { watch, urls, seen };
}

describe("the runner's watch on its thread", () => {
  it("catches up, then long-polls; stop ends the read in flight", async () => {
    const { watch, urls, seen } = recordingWatch((n, init) => (n === 1 ? page([{ id: "a" }], true) : untilAborted(init)));
    watch.start();
    while (urls.length < 2) await new Promise((r) => setTimeout(r, 5));
    expect(await watch.stop(1_000)).toBe(true);
    expect(seen).toEqual([["a", false]]);
    expect(urls[1]).toContain("live=long-poll");
  });

  it("a read that ignores the abort does not hold the run: stop gives up after its grace", async () => {
    let calls = 0;
    const watch = new ThreadWatch({
      url: "http://stream/thread-t",
      token: () => undefined,
      onEntries: () => {},
      fetchImpl: (async () => {
        calls++;
        return new Promise(() => {}); // never settles, abort or not
      }) as typeof fetch,
    });
    watch.start();
    while (calls < 1) await new Promise((r) => setTimeout(r, 5));
    expect(await watch.stop(100)).toBe(false);
  });

  it("a read that hangs (a connection that died without closing) is abandoned after requestTimeoutMs, and the watch goes on from the same offset", async () => {
    // The 2nd read hangs; the 3rd, made again from the same offset, brings the next entry.
    const { watch, urls, seen } = recordingWatch(
      (n, init) => (n === 1 ? page([{ id: "a" }], true) : n === 3 ? page([{ id: "b" }], true) : untilAborted(init)),
      { requestTimeoutMs: 200 },
    );
    watch.start();
    const deadline = Date.now() + 10_000;
    while (seen.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await watch.stop(1_000);
    expect(seen).toEqual([["a", false], ["b", true]]);
    expect(urls[2]).toBe(urls[1]);
  });
});
