/** StreamWriter against the reference Durable Streams server, with injected faults. */
import { DurableStreamTestServer } from "@durable-streams/server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readThread, StreamWriter } from "../../src/runner/stream-writer";

let server: DurableStreamTestServer;
let base: string;
let n = 0;

beforeAll(async () => {
  server = new DurableStreamTestServer({ port: 0, host: "127.0.0.1" });
  base = `${await server.start()}/v1/stream`;
});
afterAll(async () => {
  await server?.stop();
});

async function newStream(): Promise<string> {
  const url = `${base}/thread-w${n++}`;
  const r = await fetch(url, { method: "PUT", headers: { "content-type": "application/json" } });
  expect(r.status).toBe(201);
  return url;
}
const e = (i: number) => ({ id: `e${i}`, payload: { type: "pi.user", text: `m${i}` } });
const quiet = () => {};

describe("StreamWriter", () => {
  it("posts in order with producer headers; a lost response is retried and not duplicated", async () => {
    const url = await newStream();
    let calls = 0;
    const seen: string[] = [];
    // the first POST reaches the server but its response is "lost"; then a 503; then normal
    const flaky: typeof fetch = async (input, init) => {
      calls++;
      const h = new Headers(init?.headers);
      seen.push(`${h.get("producer-id")}/${h.get("producer-epoch")}/${h.get("producer-seq")}`);
      if (calls === 1) {
        await fetch(input, init);
        throw new TypeError("fetch failed");
      }
      if (calls === 2) return new Response("busy", { status: 503 });
      return fetch(input, init);
    };
    const w = new StreamWriter({ url, token: "tok", producerId: "p1", fetchImpl: flaky, baseDelayMs: 10, log: quiet });
    w.append(e(0), e(1));
    expect(await w.flush(5_000)).toBe(true);
    w.append(e(2));
    expect(await w.flush(5_000)).toBe(true);
    const got = await readThread(url, undefined);
    expect(got.map((x) => x.id)).toEqual(["e0", "e1", "e2"]);
    expect(seen).toEqual(["p1/0/0", "p1/0/0", "p1/0/0", "p1/0/1"]);
    expect(w.acked).toBe(3);
  });

  it("flush is bounded when the stream is unreachable, and drains once it is back", async () => {
    const url = await newStream();
    let down = true;
    const f: typeof fetch = async (input, init) => {
      if (down) throw new TypeError("fetch failed: ECONNREFUSED");
      return fetch(input, init);
    };
    const w = new StreamWriter({ url, producerId: "p2", fetchImpl: f, baseDelayMs: 10, maxDelayMs: 50, log: quiet });
    for (let i = 0; i < 120; i++) w.append(e(i));
    const t0 = Date.now();
    expect(await w.flush(200)).toBe(false);
    // 200 ms plus what a loaded machine adds; a flush that ignored its bound would not return at all.
    expect(Date.now() - t0).toBeLessThan(5_000);
    down = false;
    expect(await w.flush(5_000)).toBe(true);
    const got = await readThread(url, undefined);
    expect(got.map((x) => x.id)).toEqual(Array.from({ length: 120 }, (_, i) => `e${i}`));
  });

  it("a permanently rejected batch is dropped without consuming a seq; a fenced producer stops", async () => {
    const url = await newStream();
    let calls = 0;
    const f: typeof fetch = async (input, init) => {
      calls++;
      if (calls === 1) return new Response("bad", { status: 400 });
      return fetch(input, init);
    };
    const w = new StreamWriter({ url, producerId: "p3", fetchImpl: f, baseDelayMs: 10, log: quiet });
    w.append(e(0));
    await w.flush(2_000);
    w.append(e(1));
    expect(await w.flush(2_000)).toBe(true);
    expect((await readThread(url, undefined)).map((x) => x.id)).toEqual(["e1"]);
    expect(w.dropped).toBe(1);

    // a newer epoch of the same producer fences the old one (403 + Producer-Epoch)
    const newer = new StreamWriter({ url, producerId: "p3", epoch: 1, log: quiet });
    newer.append(e(2));
    expect(await newer.flush(2_000)).toBe(true);
    w.append(e(3));
    await w.flush(2_000);
    expect(w.isStopped).toBe(true);
    expect((await readThread(url, undefined)).map((x) => x.id)).toEqual(["e1", "e2"]);
  });
});

describe("an entry over the size the box posts", () => {
  it("lands cut, not dropped: its long strings cut to one length (the text and its raw copy keep the same part), short ones and signatures whole", async () => {
    const url = await newStream();
    const long = "é".repeat(300_000);
    const signature = "s".repeat(5_000);
    const w = new StreamWriter({ url, producerId: "p-big", log: () => {} });
    w.append({ id: "big", payload: { type: "pi.assistant", text: long, stopReason: "stop", raw: { role: "assistant", content: [{ type: "thinking", thinking: "t", thinkingSignature: signature }, { type: "text", text: long }] } } });
    expect(await w.flush(10_000)).toBe(true);
    const [e] = (await readThread(url, undefined)) as any[];
    expect(Buffer.byteLength(JSON.stringify(e))).toBeLessThanOrEqual(256 * 1024);
    expect(e.payload.type).toBe("pi.assistant");
    expect(e.payload.truncated).toBe(true);
    expect(e.payload.text).toMatch(/^é+\n…\[cut by threadbox: \d+ of 300000 characters\]$/);
    expect(e.payload.raw.content[1].text).toBe(e.payload.text);
    expect(e.payload.raw.content[0].thinkingSignature).toBe(signature);
    // cut to what fits, not far below it
    expect(Buffer.byteLength(JSON.stringify(e))).toBeGreaterThan(250 * 1024);
  });
});
