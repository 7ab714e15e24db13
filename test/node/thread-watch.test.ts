import { describe, expect, it } from "vitest";
import { ThreadWatch } from "../../src/runner/thread-watch";

const page = (entries: unknown[], upToDate: boolean) =>
  new Response(JSON.stringify(entries), { headers: { "stream-next-offset": "1", ...(upToDate ? { "stream-up-to-date": "true" } : {}) } });

describe("the runner's watch on its thread", () => {
  it("catches up, then long-polls; stop ends the read in flight", async () => {
    const urls: string[] = [];
    const seen: [string, boolean][] = [];
    const watch = new ThreadWatch({
      url: "http://stream/thread-t",
      token: () => "tok",
      onEntries: (es, live) => es.forEach((e: any) => seen.push([e.id, live])),
      fetchImpl: (async (url: string, init: RequestInit) => {
        urls.push(url);
        if (urls.length === 1) return page([{ id: "a" }], true);
        // a long-poll that only the abort ends
        return new Promise((_, reject) => init.signal!.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError"))));
      }) as typeof fetch,
    });
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
    const urls: string[] = [];
    const seen: [string, boolean][] = [];
    const watch = new ThreadWatch({
      url: "http://stream/thread-t",
      token: () => "tok",
      onEntries: (es, live) => es.forEach((e: any) => seen.push([e.id, live])),
      requestTimeoutMs: 200,
      fetchImpl: (async (url: string, init: RequestInit) => {
        urls.push(url);
        if (urls.length === 1) return page([{ id: "a" }], true);
        if (urls.length === 2) {
          // hung: only an abort ends it
          return new Promise((_, reject) => init.signal!.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError"))));
        }
        if (urls.length === 3) return page([{ id: "b" }], true);
        return new Promise((_, reject) => init.signal!.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError"))));
      }) as typeof fetch,
    });
    watch.start();
    const deadline = Date.now() + 10_000;
    while (seen.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await watch.stop(1_000);
    expect(seen).toEqual([["a", false], ["b", true]]);
    expect(urls[2]).toBe(urls[1]);
  });
});
