/**
 * stream-proxy (supabase/functions/stream-proxy) in real Deno on loopback, in front of the worker
 * under `wrangler dev`. Also the pure mapping in forward.ts, and a small Node upstream for what the
 * worker cannot show (exact headers received, a hung upstream, a slow streaming body).
 */
import { createServer, request as httpRequest, type IncomingHttpHeaders, type Server } from "node:http";
import { connect, type AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readThread, StreamWriter, threadStreamUrl } from "../../src/runner/stream-writer";
import {
  DEFAULT_UPSTREAM_TIMEOUT_MS,
  downstreamResponseHeaders,
  stripFunctionPrefix,
  upstreamRequestHeaders,
  upstreamTimeoutMs,
  upstreamUrl,
} from "../../supabase/functions/stream-proxy/forward";

type Worker = {
  url: string;
  mintHouseToken(houseId?: string, subject?: string, role?: string): Promise<string>;
  stop(): Promise<void>;
};
type Proxy = { url: string; port: number; output(): string; stop(): Promise<void> };
type ProxyOpts = { port?: number; workerUrl?: string | null; env?: Record<string, string | undefined>; quiet?: boolean };

// .mjs helpers have no type declarations; a non-literal specifier keeps tsc out of them.
const { startWorker, freePort } = (await import("../../scripts/lib/wrangler-dev.mjs" as string)) as {
  startWorker(o?: { vars?: Record<string, string> }): Promise<Worker>;
  freePort(): Promise<number>;
};
const { startStreamProxy } = (await import("../../scripts/stream-proxy.mjs" as string)) as {
  startStreamProxy(o?: ProxyOpts): Promise<Proxy>;
};

const MiB = 1024 * 1024;

describe("forward.ts (pure mapping)", () => {
  it("drops everything up to and including /stream-proxy and appends the rest with the query", () => {
    const base = "https://worker.example/api/stream";
    expect(upstreamUrl("http://127.0.0.1:54321/stream-proxy/thread-abc?offset=-1&live=sse", base)).toEqual({
      ok: true,
      url: "https://worker.example/api/stream/thread-abc?offset=-1&live=sse",
    });
    expect(upstreamUrl("https://x.supabase.co/functions/v1/stream-proxy/thread-abc", base)).toEqual({
      ok: true,
      url: "https://worker.example/api/stream/thread-abc",
    });
    expect(upstreamUrl("http://127.0.0.1:54321/thread-abc?offset=now", `${base}/`)).toEqual({
      ok: true,
      url: "https://worker.example/api/stream/thread-abc?offset=now",
    });
    // raw percent-encoding is kept; a name merely containing "stream-proxy" is not a prefix
    expect(upstreamUrl("http://h/stream-proxy/a%2Fb%20c", base)).toMatchObject({ url: `${base}/a%2Fb%20c` });
    expect(upstreamUrl("http://h/thread-stream-proxy", base)).toMatchObject({ url: `${base}/thread-stream-proxy` });
    expect(stripFunctionPrefix("/stream-proxy")).toBe("");
    expect(stripFunctionPrefix("/")).toBe("");
    expect(stripFunctionPrefix("/stream-proxy/")).toBe("/");
  });

  it("names THREADBOX_WORKER_URL when it is missing or unusable", () => {
    for (const bad of [undefined, "", "   "]) {
      const r = upstreamUrl("http://h/stream-proxy/thread-a", bad);
      expect(r).toMatchObject({ ok: false, status: 500 });
      expect(!r.ok && r.message).toContain("THREADBOX_WORKER_URL");
    }
    for (const bad of ["not a url", "ftp://x/api/stream", "https://x/api/stream?a=1"]) {
      const r = upstreamUrl("http://h/stream-proxy/thread-a", bad);
      expect(r.ok).toBe(false);
      expect(!r.ok && r.message).toContain("THREADBOX_WORKER_URL");
    }
  });

  it("request headers: keeps Authorization, Stream-*, Producer-*; drops hop-by-hop, Proxy and Proxy-*, host, length, cf-*", () => {
    const h = upstreamRequestHeaders(
      new Headers({
        host: "proxy.example",
        connection: "keep-alive, x-hop",
        "x-hop": "1",
        "keep-alive": "timeout=5",
        "transfer-encoding": "chunked",
        "content-length": "12",
        "accept-encoding": "gzip, br",
        "proxy-authorization": "Basic eA==",
        "proxy-connection": "keep-alive",
        proxy: "http://attacker.example:1",
        "proxy-foo": "1",
        "cf-connecting-ip": "1.2.3.4",
        authorization: "Bearer tok",
        "content-type": "application/json",
        "if-none-match": '"e"',
        "Producer-Id": "p",
        "Producer-Epoch": "0",
        "Producer-Seq": "3",
        "Stream-Seq": "9",
        "Stream-TTL": "60",
        "Stream-Expires-At": "2030-01-01T00:00:00Z",
        "Stream-Closed": "true",
        "x-custom": "kept",
      }),
    );
    const got = Object.fromEntries(h.entries());
    expect(got).toEqual({
      authorization: "Bearer tok",
      "content-type": "application/json",
      "if-none-match": '"e"',
      "producer-id": "p",
      "producer-epoch": "0",
      "producer-seq": "3",
      "stream-seq": "9",
      "stream-ttl": "60",
      "stream-expires-at": "2030-01-01T00:00:00Z",
      "stream-closed": "true",
      "x-custom": "kept",
      "accept-encoding": "identity",
    });
  });

  it("response headers: keeps the protocol's, drops hop-by-hop (Proxy-* too) and content-length", () => {
    const h = downstreamResponseHeaders(
      new Headers({
        connection: "close",
        "transfer-encoding": "chunked",
        "content-length": "5",
        "content-type": "application/json",
        etag: '"x"',
        location: "https://worker/api/stream/foo",
        "cache-control": "no-store",
        "Stream-Next-Offset": "0000000000000000_0000000000000002",
        "Stream-Up-To-Date": "true",
        "Stream-Cursor": "7",
        "Stream-Closed": "true",
        "Stream-SSE-Data-Encoding": "base64",
        "Producer-Epoch": "1",
        "Producer-Seq": "2",
        "Producer-Expected-Seq": "3",
        "Producer-Received-Seq": "5",
        "access-control-expose-headers": "Stream-Next-Offset",
        "proxy-authenticate": "Basic",
        "proxy-foo": "1",
      }),
    );
    const got = Object.fromEntries(h.entries());
    expect(got["content-length"]).toBeUndefined();
    expect(got.connection).toBeUndefined();
    expect(got["transfer-encoding"]).toBeUndefined();
    expect(Object.keys(got).sort()).toEqual(
      [
        "access-control-expose-headers", "cache-control", "content-type", "etag", "location",
        "producer-epoch", "producer-expected-seq", "producer-received-seq", "producer-seq",
        "stream-closed", "stream-cursor", "stream-next-offset", "stream-sse-data-encoding", "stream-up-to-date",
      ].sort(),
    );
  });

  it("upstream timeout: default, explicit, 0 = none, garbage -> default", () => {
    expect(upstreamTimeoutMs(undefined)).toBe(DEFAULT_UPSTREAM_TIMEOUT_MS);
    expect(upstreamTimeoutMs("2500")).toBe(2500);
    expect(upstreamTimeoutMs("0")).toBe(0);
    expect(upstreamTimeoutMs("-5")).toBe(DEFAULT_UPSTREAM_TIMEOUT_MS);
    expect(upstreamTimeoutMs("soon")).toBe(DEFAULT_UPSTREAM_TIMEOUT_MS);
    // must outlast the worker's default long-poll (20 s)
    expect(DEFAULT_UPSTREAM_TIMEOUT_MS).toBeGreaterThan(20_000);
  });
});

describe("stream-proxy in Deno in front of wrangler dev", () => {
  let worker: Worker;
  let proxy: Proxy; // -> worker
  let noConfig: Proxy; // THREADBOX_WORKER_URL unset
  let deadUpstream: Proxy; // -> a port nobody listens on
  let houseToken: string;
  const proxies: Proxy[] = [];

  const start = async (o: ProxyOpts) => {
    const p = await startStreamProxy({ quiet: true, port: await freePort(), ...o });
    proxies.push(p);
    return p;
  };

  beforeAll(async () => {
    const deadPort = await freePort();
    [worker, noConfig, deadUpstream] = await Promise.all([
      startWorker({ vars: { LONG_POLL_TIMEOUT_MS: "1500" } }),
      start({ workerUrl: null }),
      start({ workerUrl: `http://127.0.0.1:${deadPort}/api/stream` }),
    ]);
    proxy = await start({ workerUrl: `${worker.url}/api/stream`, env: { STREAM_PROXY_UPSTREAM_TIMEOUT_MS: "10000" } });
    houseToken = await worker.mintHouseToken("house-proxy", "alice", "owner");
  });
  afterAll(async () => {
    await Promise.all(proxies.map((p) => p.stop()));
    await worker?.stop();
  });

  const createThread = async () => {
    const r = await fetch(`${worker.url}/api/threads`, {
      method: "POST",
      headers: { authorization: `Bearer ${houseToken}`, "content-type": "application/json" },
      body: JSON.stringify({ title: "proxy" }),
    });
    expect(r.status).toBe(201);
    return ((await r.json()) as { id: string }).id;
  };
  const streamToken = async (threadId: string, scope = "stream:write") => {
    const r = await fetch(`${worker.url}/api/threads/${threadId}/tokens`, {
      method: "POST",
      headers: { authorization: `Bearer ${houseToken}`, "content-type": "application/json" },
      body: JSON.stringify({ scope }),
    });
    expect(r.status).toBeLessThan(300);
    return ((await r.json()) as { token: string }).token;
  };
  const via = (threadId: string, query = "") => `${proxy.url}/stream-proxy/thread-${threadId}${query}`;
  const direct = (threadId: string, query = "") => `${worker.url}/api/stream/thread-${threadId}${query}`;
  const post = (url: string, token: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(url, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json", ...headers },
      body: typeof body === "string" || body instanceof Uint8Array ? body : JSON.stringify(body),
    });
  const texts = async (threadId: string, token: string) => {
    const r = await fetch(direct(threadId, "?offset=-1"), { headers: { authorization: `Bearer ${token}` } });
    expect(r.status).toBe(200);
    return ((await r.json()) as { payload: { text?: string } }[]).map((e) => e.payload.text);
  };
  const chat = (text: string) => ({ payload: { type: "chat", text } });

  it("an append through the proxy lands in the thread; reads pass back with protocol headers", async () => {
    const id = await createThread();
    const st = await streamToken(id);
    const w = await post(via(id), st, chat("hi via proxy"));
    expect([200, 204]).toContain(w.status);
    expect(w.headers.get("stream-next-offset")).toMatch(/^\d+_\d+$/);
    // without the function prefix too (local runs)
    const w2 = await post(`${proxy.url}/thread-${id}`, st, chat("no prefix"));
    expect([200, 204]).toContain(w2.status);
    expect(await texts(id, st)).toEqual(["hi via proxy", "no prefix"]);

    const r = await fetch(via(id, "?offset=-1"), { headers: { authorization: `Bearer ${st}` } });
    expect(r.status).toBe(200);
    expect(r.headers.get("content-type")).toContain("application/json");
    expect(r.headers.get("stream-up-to-date")).toBe("true");
    expect(r.headers.get("stream-next-offset")).toBe(w2.headers.get("stream-next-offset"));
    expect(r.headers.get("access-control-expose-headers")).toContain("Stream-Next-Offset");
    const etag = r.headers.get("etag");
    expect(((await r.json()) as { payload: { text: string } }[]).map((e) => e.payload.text)).toEqual(["hi via proxy", "no prefix"]);
    // conditional GET: If-None-Match reaches the worker and its 304 comes back
    const again = await fetch(via(id, "?offset=-1"), { headers: { authorization: `Bearer ${st}`, "if-none-match": etag! } });
    expect(again.status).toBe(304);
  });

  it("the worker refuses a cross-thread token with 403 and the proxy passes it through; no token -> 401", async () => {
    const a = await createThread();
    const b = await createThread();
    const tokenA = await streamToken(a);
    const viaProxy = await post(via(b), tokenA, chat("sneaky"));
    const straight = await post(direct(b), tokenA, chat("sneaky"));
    expect(viaProxy.status).toBe(403);
    expect(straight.status).toBe(403);
    expect(await viaProxy.json()).toEqual(await straight.json());
    expect(viaProxy.headers.get("x-stream-proxy-error")).toBeNull();
    const read = await fetch(via(b, "?offset=-1"), { headers: { authorization: `Bearer ${tokenA}` } });
    expect(read.status).toBe(403);
    await read.body?.cancel();
    const anon = await fetch(via(b, "?offset=-1"));
    expect(anon.status).toBe(401);
    await anon.body?.cancel();
    expect(await texts(b, houseToken)).toEqual([]);
  });

  it("Producer-* headers pass through: a retried POST lands once, a gap gets Producer-Expected-Seq back", async () => {
    const id = await createThread();
    const st = await streamToken(id);
    const producer = (seq: number) => ({ "Producer-Id": "mirror-p", "Producer-Epoch": "0", "Producer-Seq": String(seq) });
    const first = await post(via(id), st, chat("once"), producer(0));
    expect(first.status).toBe(200);
    const retry = await post(via(id), st, chat("once"), producer(0));
    expect(retry.status).toBe(204);
    const gap = await post(via(id), st, chat("gap"), producer(5));
    expect(gap.status).toBe(409);
    expect(gap.headers.get("producer-expected-seq")).toBe("1");
    expect(gap.headers.get("producer-received-seq")).toBe("5");
    await gap.body?.cancel();
    expect(await texts(id, st)).toEqual(["once"]);

    // The box's own writer, pointed at the proxy: the first response is "lost" after the worker
    // appended, the writer retries with the same Producer-Seq, and the entry lands once.
    let calls = 0;
    const lossy: typeof fetch = async (input, init) => {
      calls++;
      const res = await fetch(input, init);
      if (calls === 1) {
        await res.body?.cancel();
        throw new TypeError("fetch failed");
      }
      return res;
    };
    const url = threadStreamUrl(`${proxy.url}/stream-proxy`, id);
    const w = new StreamWriter({ url, token: st, producerId: "mirror-q", fetchImpl: lossy, baseDelayMs: 10, log: () => {} });
    w.append({ id: "e1", payload: { type: "chat", text: "from writer" } });
    expect(await w.flush(10_000)).toBe(true);
    expect(calls).toBeGreaterThanOrEqual(2);
    const all = await readThread(url, st);
    expect(all.map((e) => e.payload.text)).toEqual(["once", "from writer"]);
  });

  it("a long-poll passes through live, and its idle 204 too", async () => {
    const id = await createThread();
    const st = await streamToken(id);
    const auth = { authorization: `Bearer ${st}` };
    const now = await fetch(via(id, "?offset=now"), { headers: auth });
    await now.body?.cancel();
    // The worker answers a parked read with a 204 after LONG_POLL_TIMEOUT_MS (1.5 s): an append
    // that comes later (a stalled machine) cannot wake it, so that round is tried again.
    let tail = now.headers.get("stream-next-offset")!;
    let woke: Response | undefined;
    for (let round = 0; round < 5 && !woke; round++) {
      const waiting = fetch(via(id, `?offset=${tail}&live=long-poll`), { headers: auth });
      // Held, not answered: the read is parked at the tail (an answer now would be a 204 or data
      // that was already there), so what follows can only be the append waking it.
      const early = await Promise.race([waiting.then(() => "answered"), new Promise((r) => setTimeout(() => r("held"), 300))]);
      if (early === "answered") {
        const timedOut = await waiting;
        expect(timedOut.status).toBe(204);
        continue;
      }
      const appended = await post(direct(id), st, chat(`wake ${round}`));
      expect(appended.status).toBeLessThan(300);
      const answer = await waiting;
      if (answer.status === 204) {
        tail = appended.headers.get("stream-next-offset")!;
        continue;
      }
      // Answered by the append, not by the long-poll timeout (that would be a 204 without entries).
      expect(answer.status).toBe(200);
      const got = (await answer.json()) as { payload: { text: string } }[];
      expect(got.map((e) => e.payload.text)).toEqual([`wake ${round}`]);
      woke = answer;
    }
    if (!woke) throw new Error("every long-poll timed out before its append arrived");
    const next = woke.headers.get("stream-next-offset")!;
    const idle = await fetch(via(id, `?offset=${next}&live=long-poll`), { headers: auth });
    expect(idle.status).toBe(204);
    expect(idle.headers.get("stream-up-to-date")).toBe("true");
  });

  it("an SSE read passes through live", async () => {
    const id = await createThread();
    const st = await streamToken(id);
    await post(via(id), st, chat("before"));
    const ac = new AbortController();
    const res = await fetch(via(id, "?offset=-1&live=sse"), { headers: { authorization: `Bearer ${st}` }, signal: ac.signal });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let text = "";
    // Live means delivered while the stream stays open, not in a set time: a proxy that held the
    // stream back would deliver nothing here (the worker never ends an SSE read by itself).
    const readUntil = async (needle: string) => {
      const deadline = Date.now() + 15_000;
      while (!text.includes(needle)) {
        const left = deadline - Date.now();
        const next = await Promise.race([reader.read(), new Promise<null>((r) => setTimeout(() => r(null), Math.max(0, left)))]);
        if (!next) throw new Error(`no ${needle} within 15 s in ${text}`);
        if (next.done) throw new Error("sse ended early");
        text += dec.decode(next.value, { stream: true });
      }
    };
    await readUntil('"upToDate":true');
    expect(text).toContain('"text":"before"');
    await post(direct(id), st, chat("live one"));
    await readUntil("live one");
    await post(via(id), st, chat("live two"));
    await readUntil("live two");
    const events = text.split("\n\n").filter(Boolean).map((b) => b.split("\n")[0]);
    expect(events.filter((e) => e === "event: data")).toHaveLength(3);
    ac.abort();
    await reader.cancel().catch(() => {});
  });

  it("a body of exactly 1 MiB passes (also as a streamed upload); 1 MiB + 1 gets the worker's 413", async () => {
    const id = await createThread();
    const st = await streamToken(id);
    const sized = (bytes: number, tag: string) => {
      // a JSON array of two chat envelopes, padded to an exact byte size
      const skeleton = JSON.stringify([chat(`${tag}:`), chat(`${tag}:`)]);
      const pad = bytes - skeleton.length;
      const half = Math.floor(pad / 2);
      const body = JSON.stringify([chat(`${tag}:${"a".repeat(half)}`), chat(`${tag}:${"b".repeat(pad - half)}`)]);
      expect(Buffer.byteLength(body)).toBe(bytes);
      return body;
    };
    const ok = await post(via(id), st, sized(MiB, "max"));
    expect(ok.status).toBe(204);

    const enc = new TextEncoder().encode(sized(MiB, "streamed"));
    const chunks = Array.from({ length: 16 }, (_, i) => enc.subarray((i * enc.length) / 16, ((i + 1) * enc.length) / 16));
    const streamed = await fetch(via(id), {
      method: "POST",
      headers: { authorization: `Bearer ${st}`, "content-type": "application/json" },
      body: new ReadableStream<Uint8Array>({
        async pull(c) {
          const next = chunks.shift();
          if (next) c.enqueue(next);
          else c.close();
          await new Promise((r) => setTimeout(r, 5));
        },
      }),
      duplex: "half",
    } as RequestInit);
    expect(streamed.status).toBe(204);

    const tooBig = await post(via(id), st, sized(MiB + 1, "over"));
    expect(tooBig.status).toBe(413);
    expect(((await tooBig.json()) as { error: { code: string } }).error.code).toBe("payload_too_large");
    // reads are paged at 1 MiB: follow Stream-Next-Offset
    const all = (await readThread(direct(id), st)).map((e) => ({ payload: { text: String(e.payload.text) } }));
    expect(all.map((e) => e.payload.text.split(":")[0])).toEqual(["max", "max", "streamed", "streamed"]);
    expect(all.reduce((n, e) => n + e.payload.text.length, 0)).toBeGreaterThan(2 * MiB - 200);
  });

  it("a streamed upload far over the limit gets the worker's 413 every time, not a 502", async () => {
    const id = await createThread();
    const st = await streamToken(id);
    const chunk = new TextEncoder().encode(`[${JSON.stringify(chat("x".repeat(64 * 1024)))}`);
    for (let attempt = 0; attempt < 8; attempt++) {
      let sent = 0;
      const r = await fetch(via(id), {
        method: "POST",
        headers: { authorization: `Bearer ${st}`, "content-type": "application/json" },
        // 6 MiB without a Content-Length: the proxy streams it on as it comes
        body: new ReadableStream<Uint8Array>({
          pull(c) {
            if (sent >= 6 * MiB) return c.close();
            c.enqueue(chunk);
            sent += chunk.byteLength;
          },
        }),
        duplex: "half",
      } as RequestInit);
      expect(r.status, `attempt ${attempt}: ${r.headers.get("x-stream-proxy-error") ?? ""}`).toBe(413);
      expect(((await r.json()) as { error: { code: string } }).error.code).toBe("payload_too_large");
    }
  });

  it("the worker down -> 502 with a JSON error", async () => {
    const r = await fetch(`${deadUpstream.url}/stream-proxy/thread-x?offset=-1`, { headers: { authorization: "Bearer t" } });
    expect(r.status).toBe(502);
    expect(r.headers.get("content-type")).toBe("application/json");
    expect(await r.json()).toEqual({ error: { code: "upstream_unreachable", message: expect.any(String) } });
    const w = await post(`${deadUpstream.url}/stream-proxy/thread-x`, "t", chat("x"));
    expect(w.status).toBe(502);
    await w.body?.cancel();
  });

  it("missing THREADBOX_WORKER_URL -> 500 naming it", async () => {
    const r = await fetch(`${noConfig.url}/stream-proxy/thread-x?offset=-1`);
    expect(r.status).toBe(500);
    const body = (await r.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("proxy_misconfigured");
    expect(body.error.message).toContain("THREADBOX_WORKER_URL");
    expect(noConfig.output()).toContain("THREADBOX_WORKER_URL");
  });
});

describe("stream-proxy against a scripted upstream", () => {
  let upstream: Server;
  let upstreamUrlBase: string;
  let proxy: Proxy;
  let seen: { method: string; url: string; headers: IncomingHttpHeaders; body: string }[] = [];

  beforeAll(async () => {
    upstream = createServer((req, res) => {
      req.on("error", () => {}); // a client that goes away mid-upload aborts the forwarded request
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        seen.push({ method: req.method!, url: req.url!, headers: req.headers, body: Buffer.concat(chunks).toString() });
        if (req.url!.includes("/hang")) return; // never answers
        if (req.url!.includes("/trickle")) {
          // headers at once, then a body that takes longer than the proxy's header timeout
          res.writeHead(200, { "content-type": "text/plain", "Stream-Next-Offset": "x_1" });
          let i = 0;
          const t = setInterval(() => {
            res.write(`part${i} `);
            if (++i === 6) {
              clearInterval(t);
              res.end("done");
            }
          }, 150);
          return;
        }
        res.writeHead(201, "Created", {
          "content-type": "application/json",
          "content-length": "11",
          connection: "keep-alive",
          "Stream-Next-Offset": "0000000000000000_0000000000000001",
          "Producer-Expected-Seq": "4",
          location: "http://worker.internal/api/stream/foo",
          "x-upstream": "yes",
        });
        res.end('{"ok":true}');
      });
    });
    await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", () => r()));
    upstreamUrlBase = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/api/stream`;
    proxy = await startStreamProxy({
      quiet: true,
      port: await freePort(),
      workerUrl: upstreamUrlBase,
      env: { STREAM_PROXY_UPSTREAM_TIMEOUT_MS: "400" },
    });
  });
  afterAll(async () => {
    await proxy?.stop();
    upstream?.closeAllConnections();
    await new Promise((r) => upstream?.close(r));
  });

  it("forwards method, mapped path, raw query, body and end-to-end headers; drops hop-by-hop", async () => {
    seen = [];
    const target = new URL(`${proxy.url}/stream-proxy/some%2Fname/thread-1?offset=0000_1&x=a%20b`);
    const status = await new Promise<{ status: number; headers: IncomingHttpHeaders; body: string }>((resolve, reject) => {
      const req = httpRequest(
        target,
        {
          method: "PUT",
          headers: {
            connection: "keep-alive, x-hop",
            "x-hop": "drop me",
            "cf-ray": "abc",
            authorization: "Bearer scoped.jwt.token",
            "content-type": "application/json",
            "Producer-Id": "p1",
            "Producer-Epoch": "2",
            "Producer-Seq": "7",
            "Stream-TTL": "3600",
            "x-box": "b1",
            // httpoxy: a `Proxy:` header must never reach the worker, nor any Proxy-* one
            proxy: "http://attacker.example:1",
            "proxy-foo": "1",
            "proxy-authorization": "Basic eA==",
          },
        },
        (res) => {
          let body = "";
          res.on("data", (c) => (body += c));
          res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body }));
        },
      );
      req.on("error", reject);
      req.end('{"hello":1}');
    });
    expect(seen).toHaveLength(1);
    const got = seen[0];
    expect(got.method).toBe("PUT");
    expect(got.url).toBe("/api/stream/some%2Fname/thread-1?offset=0000_1&x=a%20b");
    expect(got.body).toBe('{"hello":1}');
    expect(got.headers.host).toBe(new URL(upstreamUrlBase).host);
    expect(got.headers.authorization).toBe("Bearer scoped.jwt.token");
    expect(got.headers["producer-id"]).toBe("p1");
    expect(got.headers["producer-epoch"]).toBe("2");
    expect(got.headers["producer-seq"]).toBe("7");
    expect(got.headers["stream-ttl"]).toBe("3600");
    expect(got.headers["x-box"]).toBe("b1");
    expect(got.headers["accept-encoding"]).toBe("identity");
    expect(got.headers["x-hop"]).toBeUndefined();
    expect(got.headers["cf-ray"]).toBeUndefined();
    expect(Object.keys(got.headers).filter((k) => k === "proxy" || k.startsWith("proxy-"))).toEqual([]);

    expect(status.status).toBe(201);
    expect(status.body).toBe('{"ok":true}');
    expect(status.headers["stream-next-offset"]).toBe("0000000000000000_0000000000000001");
    expect(status.headers["producer-expected-seq"]).toBe("4");
    expect(status.headers.location).toBe("http://worker.internal/api/stream/foo");
    expect(status.headers["x-upstream"]).toBe("yes");
  });

  it("a method fetch cannot send (TRACE, TRACK) gets the proxy's 405 with Allow, not a 502 blaming the worker", async () => {
    seen = [];
    for (const method of ["TRACE", "TRACK"]) {
      const r = await new Promise<{ status: number; headers: IncomingHttpHeaders; body: string }>((resolve, reject) => {
        const req = httpRequest(`${proxy.url}/stream-proxy/thread-1`, { method, headers: { authorization: "Bearer t" } }, (res) => {
          let body = "";
          res.on("data", (c) => (body += c));
          res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body }));
        });
        req.on("error", reject);
        req.end();
      });
      expect(r.status, method).toBe(405);
      expect(r.headers.allow).toBe("GET, HEAD, POST, PUT, DELETE, OPTIONS");
      expect(r.headers["x-stream-proxy-error"]).toBe("method_not_allowed");
      expect(JSON.parse(r.body).error.message).toContain(method);
    }
    expect(seen).toEqual([]);
    expect(proxy.output()).not.toContain("unreachable");
  });

  it("a client that goes away mid-upload is logged as such, not as an unreachable worker", async () => {
    const { port } = new URL(proxy.url);
    // a small body, and one past the worker's limit (which the proxy streams on as it arrives)
    for (const size of [40, MiB + 100 * 1024]) {
      const before = proxy.output().length;
      await new Promise<void>((resolve, reject) => {
        const s = connect(Number(port), "127.0.0.1", () => {
          s.write("POST /stream-proxy/thread-1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\n" +
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
          const part = `[{"payload":{"type":"chat","text":"${"c".repeat(size)}`;
          s.write(`${part.length.toString(16)}\r\n${part}\r\n`);
          setTimeout(() => {
            s.destroy();
            resolve();
          }, 300);
        });
        s.on("error", reject);
      });
      const deadline = Date.now() + 5_000;
      while (!proxy.output().slice(before).includes("client closed") && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      const log = proxy.output().slice(before);
      expect(log, `${size}`).toContain("stream-proxy: the client closed the request (POST)");
      expect(log, `${size}`).not.toContain("unreachable");
    }
  });

  it("an upstream that sends no headers -> 504 after STREAM_PROXY_UPSTREAM_TIMEOUT_MS, not a hang", async () => {
    const t0 = Date.now();
    const r = await fetch(`${proxy.url}/stream-proxy/hang`);
    expect(r.status).toBe(504);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe("upstream_timeout");
    expect(Date.now() - t0).toBeLessThan(5_000);
  });

  /** A POST whose body of `bytes` bytes arrives in 8 parts spread over `ms`; resolves with the answer. */
  const slowUpload = async (path: string, bytes: number, ms: number) => {
    const part = Math.ceil(bytes / 8);
    let sent = 0;
    const t0 = Date.now();
    const r = await fetch(`${proxy.url}/stream-proxy/${path}`, {
      method: "POST",
      headers: { authorization: "Bearer t", "content-type": "application/json" },
      body: new ReadableStream<Uint8Array>({
        async pull(c) {
          if (sent >= bytes) return c.close();
          await new Promise((res) => setTimeout(res, ms / 8));
          const n = Math.min(part, bytes - sent);
          c.enqueue(new TextEncoder().encode("a".repeat(n)));
          sent += n;
        },
      }),
      duplex: "half",
    } as RequestInit);
    return { status: r.status, error: r.headers.get("x-stream-proxy-error"), text: await r.text(), ms: Date.now() - t0 };
  };

  it("the timeout does not count the client's upload: a body trickling in for longer than it still reaches the worker", async () => {
    // STREAM_PROXY_UPSTREAM_TIMEOUT_MS is 400 here; each upload takes ~1.2 s.
    for (const bytes of [20_000, MiB + 64 * 1024]) {
      seen = [];
      const r = await slowUpload("thread-slow", bytes, 1_200);
      expect(r.status, `${bytes} bytes: ${r.error ?? ""} ${r.text.slice(0, 120)}`).toBe(201);
      expect(r.text).toBe('{"ok":true}');
      expect(seen).toHaveLength(1);
      expect(seen[0].body.length).toBe(bytes);
    }
  });

  it("after a slow upload the timeout still bounds the wait for the worker's headers", async () => {
    const r = await slowUpload("hang", 20_000, 1_200);
    expect(r.status).toBe(504);
    expect(r.error).toBe("upstream_timeout");
    // the upload (~1.2 s), then the 400 ms timeout
    expect(r.ms).toBeGreaterThan(1_400);
    expect(r.ms).toBeLessThan(5_000);
  });

  it("the timeout covers time-to-headers only: a body streaming longer than it arrives whole", async () => {
    const t0 = Date.now();
    const r = await fetch(`${proxy.url}/stream-proxy/trickle`);
    expect(r.status).toBe(200);
    expect(r.headers.get("stream-next-offset")).toBe("x_1");
    expect(await r.text()).toBe("part0 part1 part2 part3 part4 part5 done");
    expect(Date.now() - t0).toBeGreaterThan(600);
  });
});
