import { describe, expect, it, vi } from "vitest";
import { env, runInDurableObject } from "cloudflare:test";
import { decodeJwt } from "jose";
import type { ThreadActor } from "./test-worker";
import { mintHouseToken, mintStreamToken } from "../../src/auth/tokens";
import { call, chat, createThread, errorCode, houseToken, post, readAll, runToken, streamToken } from "./helpers";

const producer = (id: string, epoch: number, seq: number) => ({ "Producer-Id": id, "Producer-Epoch": String(epoch), "Producer-Seq": String(seq) });

describe("Durable Streams on a thread", () => {
  it("appends envelopes, reads them from -1, 0, now and returned offsets", async () => {
    const token = await houseToken();
    const t = await createThread(token);
    const st = await streamToken("house-a", t.id);
    const path = `/api/stream/thread-${t.id}`;
    const w = await call(path, { method: "POST", token: st, json: [chat("a"), chat("b")] });
    expect(w.status).toBe(204);
    const afterTwo = w.headers.get("Stream-Next-Offset")!;
    const all = await call(`${path}?offset=-1`, { token: st });
    expect(all.status).toBe(200);
    expect(((await all.json()) as { payload: { text: string } }[]).map((e) => e.payload.text)).toEqual(["a", "b"]);
    expect(all.headers.get("Stream-Up-To-Date")).toBe("true");
    expect(all.headers.get("Stream-Next-Offset")).toBe(afterTwo);
    await call(path, { method: "POST", token: st, json: chat("c") });
    const fromOffset = await call(`${path}?offset=${afterTwo}`, { token: st });
    expect(((await fromOffset.json()) as { payload: { text: string } }[]).map((e) => e.payload.text)).toEqual(["c"]);
    const fromZero = await call(`${path}?offset=0`, { token: st });
    expect((await fromZero.json()) as unknown[]).toHaveLength(3);
    const now = await call(`${path}?offset=now`, { token: st });
    expect(await now.json()).toEqual([]);
    expect((await call(`${path}?offset=garbage`, { token: st })).status).toBe(400);
    // A thread stream rejects invalid envelopes like the entries API does.
    const bad = await call(path, { method: "POST", token: st, json: { payload: { type: "nope" } } });
    expect(bad.status).toBe(400);
    const wrongType = await call(path, { method: "POST", token: st, body: "raw", headers: { "content-type": "text/plain" } });
    expect(wrongType.status).toBe(409);
    // A thread's log cannot be closed or deleted through the protocol.
    const close = await call(path, { method: "POST", token: st, headers: { "Stream-Closed": "true" } });
    expect(close.status).toBe(403);
    expect((await call(path, { method: "DELETE", token })).status).toBe(405);
    expect((await call(path, { method: "PUT", token, headers: { "content-type": "application/json" } })).status).toBe(200);
    expect((await readAll(token, t.id)).entries).toHaveLength(3);
    expect((await post(token, t.id, chat("still open"))).status).toBe(201);
  });

  it("appends sent at once all land once each, in offset order, and a bad one among them fails alone", async () => {
    const token = await houseToken();
    const t = await createThread(token);
    const st = await streamToken("house-a", t.id);
    const path = `/api/stream/thread-${t.id}`;
    const texts = Array.from({ length: 24 }, (_, i) => `burst ${i}`);
    const [answers, invalid, mismatch] = await Promise.all([
      Promise.all(texts.map((text) => call(path, { method: "POST", token: st, json: chat(text) }))),
      call(path, { method: "POST", token: st, json: { payload: { type: "nope" } } }),
      call(path, { method: "POST", token: st, body: "raw", headers: { "content-type": "text/plain" } }),
    ]);
    expect(answers.map((r) => r.status)).toEqual(texts.map(() => 204));
    expect(invalid.status).toBe(400);
    expect(mismatch.status).toBe(409);
    const offsets = answers.map((r) => r.headers.get("Stream-Next-Offset")!);
    expect(new Set(offsets).size).toBe(texts.length);
    const read = (await (await call(`${path}?offset=-1`, { token: st })).json()) as { payload: { text: string } }[];
    expect(read.map((e) => e.payload.text).sort()).toEqual([...texts].sort());
    // Each answer's offset is where its own entry ends: the log's order is the answers' order.
    const byOffset = texts.map((text, i) => ({ text, offset: offsets[i] })).sort((a, b) => (a.offset < b.offset ? -1 : 1));
    expect(read.map((e) => e.payload.text)).toEqual(byOffset.map((x) => x.text));
  });

  it("an idempotent producer retry lands once; gaps and stale epochs are refused", async () => {
    const token = await houseToken();
    const t = await createThread(token);
    const st = await streamToken("house-a", t.id);
    const path = `/api/stream/thread-${t.id}`;
    const first = await call(path, { method: "POST", token: st, json: chat("once"), headers: producer("mirror-1", 0, 0) });
    expect(first.status).toBe(200);
    const retry = await call(path, { method: "POST", token: st, json: chat("once"), headers: producer("mirror-1", 0, 0) });
    expect(retry.status).toBe(204);
    const gap = await call(path, { method: "POST", token: st, json: chat("gap"), headers: producer("mirror-1", 0, 5) });
    expect(gap.status).toBe(409);
    expect(gap.headers.get("Producer-Expected-Seq")).toBe("1");
    const next = await call(path, { method: "POST", token: st, json: chat("two"), headers: producer("mirror-1", 1, 0) });
    expect(next.status).toBe(200);
    const stale = await call(path, { method: "POST", token: st, json: chat("zombie"), headers: producer("mirror-1", 0, 1) });
    expect(stale.status).toBe(403);
    const texts = (await readAll(token, t.id)).entries.map((e) => (e.payload as unknown as { text: string }).text);
    expect(texts).toEqual(["once", "two"]);
  });

  it("a producer's heartbeat-only POST takes its seq: the next seq is accepted, a stale epoch is fenced", async () => {
    const token = await houseToken();
    const t = await createThread(token);
    const st = await streamToken("house-a", t.id);
    const path = `/api/stream/thread-${t.id}`;
    const beat = { payload: { type: "signal.heartbeat" } };
    const hb = await call(path, { method: "POST", token: st, json: beat, headers: producer("p-hb", 0, 0) });
    expect(hb.status).toBe(200);
    expect(hb.headers.get("Producer-Seq")).toBe("0");
    const next = await call(path, { method: "POST", token: st, json: chat("after the beat"), headers: producer("p-hb", 0, 1) });
    expect(next.status, await next.clone().text()).toBe(200);
    const again = await call(path, { method: "POST", token: st, json: beat, headers: producer("p-hb", 0, 1) });
    expect(again.status).toBe(204);
    const gap = await call(path, { method: "POST", token: st, json: beat, headers: producer("p-hb", 0, 7) });
    expect(gap.status).toBe(409);
    expect(gap.headers.get("Producer-Expected-Seq")).toBe("2");
    expect((await call(path, { method: "POST", token: st, json: chat("new epoch"), headers: producer("p-hb", 1, 0) })).status).toBe(200);
    const zombie = await call(path, { method: "POST", token: st, json: beat, headers: producer("p-hb", 0, 2) });
    expect(zombie.status).toBe(403);
    expect(zombie.headers.get("Producer-Epoch")).toBe("1");
    const texts = (await readAll(token, t.id)).entries.map((e) => (e.payload as unknown as { text: string }).text);
    expect(texts).toEqual(["after the beat", "new epoch"]);
  });

  it("heartbeats refresh liveness without growing the log", async () => {
    const token = await houseToken();
    const t = await createThread(token);
    const st = await streamToken("house-a", t.id);
    for (let i = 0; i < 20; i++) {
      const r = await call(`/api/stream/thread-${t.id}`, { method: "POST", token: st, json: { payload: { type: "signal.heartbeat" } } });
      expect(r.status).toBe(204);
    }
    expect((await readAll(token, t.id)).entries).toHaveLength(0);
    const row = (await (await call(`/api/threads/${t.id}`, { token })).json()) as { lastLivenessAt: string | null };
    expect(row.lastLivenessAt).not.toBeNull();
  });

  it("a long-poll wakes up on an append and times out with 204 when nothing comes", async () => {
    const token = await houseToken();
    const t = await createThread(token);
    const path = `/api/stream/thread-${t.id}`;
    const tail = (await call(`${path}?offset=now`, { token })).headers.get("Stream-Next-Offset")!;
    const stub = (env as unknown as { THREADS: DurableObjectNamespace<ThreadActor> }).THREADS.get((env as unknown as { THREADS: DurableObjectNamespace<ThreadActor> }).THREADS.idFromName(`thread:${t.id}`));
    // The configured 1.5 s is the idle case's wait below; the wake must not depend on the append
    // arriving within it (a stalled machine timed the reader out first and saw a 204).
    await runInDurableObject(stub, (a: ThreadActor) => a.setLongPollTimeout(60_000));
    const waiting = call(`${path}?offset=${tail}&live=long-poll`, { token });
    // Post only once the reader is parked: an append before that would be caught up, not woken up.
    await vi.waitFor(async () => expect(await runInDurableObject(stub, (a: ThreadActor) => a.testWaiterCount())).toBe(1), { timeout: 5000, interval: 10 });
    await call(path, { method: "POST", token, json: chat("wake") });
    const woke = await waiting;
    expect(woke.status).toBe(200);
    expect(((await woke.json()) as { payload: { text: string } }[])[0].payload.text).toBe("wake");
    const next = woke.headers.get("Stream-Next-Offset")!;
    await runInDurableObject(stub, (a: ThreadActor) => a.setLongPollTimeout(1500));
    const idle = await call(`${path}?offset=${next}&live=long-poll`, { token });
    expect(idle.status).toBe(204);
    expect(idle.headers.get("Stream-Up-To-Date")).toBe("true");
  });

  it("a thread's contents are never stored by a browser or proxy cache: every read says Cache-Control: no-store", async () => {
    const token = await houseToken();
    const t = await createThread(token);
    const path = `/api/stream/thread-${t.id}`;
    await call(path, { method: "POST", token, json: chat("private") });
    const catchUp = await call(`${path}?offset=-1`, { token });
    expect(catchUp.status).toBe(200);
    const next = catchUp.headers.get("Stream-Next-Offset")!;
    const idle = await call(`${path}?offset=${next}&live=long-poll`, { token });
    expect(idle.status).toBe(204);
    const entries = await call(`/api/threads/${t.id}/entries?offset=-1`, { token });
    const ndjson = await call(`/api/threads/${t.id}/entries?offset=-1`, { token, headers: { accept: "application/x-ndjson" } });
    const row = await call(`/api/threads/${t.id}`, { token });
    for (const [what, r] of Object.entries({ catchUp, idle, entries, ndjson, row })) {
      expect(r.status, what).toBeLessThan(300);
      expect(r.headers.get("cache-control"), what).toContain("no-store");
    }
  });

  it("an SSE read ends when its token expires, delivering nothing appended after that", async () => {
    const token = await houseToken();
    const t = await createThread(token);
    const path = `/api/stream/thread-${t.id}`;
    await call(path, { method: "POST", token, json: chat("before") });
    const short = await streamToken("house-a", t.id, "stream:read", 2);
    const res = await call(`${path}?offset=-1&live=sse`, { token: short });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let text = "";
    const started = Date.now();
    const ended = (async () => {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return true;
        text += dec.decode(value);
      }
    })();
    await new Promise((r) => setTimeout(r, 2100));
    await call(path, { method: "POST", token, json: chat("after expiry") });
    const outcome = await Promise.race([ended, new Promise((r) => setTimeout(() => r("still open"), 3000))]);
    await reader.cancel().catch(() => {});
    expect(outcome).toBe(true);
    expect(Date.now() - started).toBeLessThan(4000);
    expect(text).toContain('"text":"before"');
    expect(text).not.toContain("after expiry");
  });

  it("SSE delivers catch-up then live data with control events", async () => {
    const token = await houseToken();
    const t = await createThread(token);
    const path = `/api/stream/thread-${t.id}`;
    await call(path, { method: "POST", token, json: chat("before") });
    const ac = new AbortController();
    const res = await call(`${path}?offset=-1&live=sse`, { token, signal: ac.signal });
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let text = "";
    const readUntil = async (needle: string) => {
      while (!text.includes(needle)) {
        const { value, done } = await reader.read();
        if (done) throw new Error("sse ended early");
        text += dec.decode(value);
      }
    };
    await readUntil('"upToDate":true');
    expect(text).toContain('"text":"before"');
    await call(path, { method: "POST", token, json: chat("live one") });
    await readUntil("live one");
    const events = text.split("\n\n").filter(Boolean).map((b) => b.split("\n")[0]);
    expect(events.filter((e) => e === "event: data")).toHaveLength(2);
    ac.abort();
    await reader.cancel().catch(() => {});
  });
});

describe("plain streams", () => {
  it("a page's ETag changes once the page is no longer the tail: a 304 never brings back a stale Stream-Up-To-Date", async () => {
    const token = await houseToken("house-etag-tail");
    const path = "/api/stream/etag-tail";
    expect((await call(path, { method: "PUT", token, headers: { "content-type": "application/json" } })).status).toBe(201);
    // Four ~1 MB messages fill a read page (4 MiB); a fifth does not fit in it.
    const big = (c: string) => ({ method: "POST", token, body: JSON.stringify(c.repeat(1_000_000)), headers: { "content-type": "application/json" } });
    for (const c of "abcd") expect((await call(path, big(c))).status).toBe(204);
    const first = await call(`${path}?offset=-1`, { token });
    await first.arrayBuffer();
    expect(first.headers.get("Stream-Up-To-Date")).toBe("true");
    const etag = first.headers.get("etag")!;
    expect((await call(path, big("e"))).status).toBe(204);
    const again = await call(`${path}?offset=-1`, { token, headers: { "if-none-match": etag } });
    await again.arrayBuffer();
    // The same page (it still ends at the fourth message), but no longer up to date.
    expect([again.status, again.headers.get("Stream-Next-Offset"), again.headers.get("Stream-Up-To-Date")])
      .toEqual([200, first.headers.get("Stream-Next-Offset"), null]);
  });

  it("are namespaced by house: two houses' `foo` are different streams", async () => {
    const a = await houseToken("house-p1");
    const b = await houseToken("house-p2");
    for (const tok of [a, b]) {
      const r = await call("/api/stream/foo", { method: "PUT", token: tok, headers: { "content-type": "application/json" } });
      expect(r.status).toBe(201);
    }
    await call("/api/stream/foo", { method: "POST", token: a, json: { from: "a" } });
    const readB = await call("/api/stream/foo?offset=-1", { token: b });
    expect(await readB.json()).toEqual([]);
    const readA = await call("/v1/stream/foo?offset=-1", { token: a });
    expect(await readA.json()).toEqual([{ from: "a" }]);
    expect((await call("/api/stream/foo?offset=-1")).status).toBe(401);
  });

  it("a binary stream's SSE read lets a cross-origin browser client see that its data is base64", async () => {
    const a = await houseToken("house-sse-bin");
    await call("/api/stream/bin", { method: "PUT", token: a, headers: { "content-type": "application/octet-stream" } });
    await call("/api/stream/bin", { method: "POST", token: a, body: new Uint8Array([0, 255, 10, 13]), headers: { "content-type": "application/octet-stream" } });
    const ac = new AbortController();
    const r = await call("/api/stream/bin?offset=-1&live=sse", { token: a, signal: ac.signal, headers: { origin: "https://app.example" } });
    expect(r.headers.get("Stream-SSE-Data-Encoding")).toBe("base64");
    // A browser hands a cross-origin script only the headers named here: without it, base64 text reads as the bytes.
    const exposed = (r.headers.get("access-control-expose-headers") ?? "").toLowerCase().split(/,\s*/);
    ac.abort();
    await r.body?.cancel().catch(() => {});
    expect(exposed).toContain("stream-sse-data-encoding");
  });

  it("rejects an oversize append with 413 and keeps the stream unchanged", async () => {
    const a = await houseToken("house-big");
    await call("/api/stream/big", { method: "PUT", token: a, headers: { "content-type": "application/octet-stream" } });
    const r = await call("/api/stream/big", { method: "POST", token: a, body: new Uint8Array(1024 * 1024 + 1), headers: { "content-type": "application/octet-stream" } });
    expect(r.status).toBe(413);
    const ok = await call("/api/stream/big", { method: "POST", token: a, body: new Uint8Array(1024 * 1024), headers: { "content-type": "application/octet-stream" } });
    expect(ok.status).toBe(204);
    const head = await call("/api/stream/big", { method: "HEAD", token: a });
    expect(head.headers.get("Stream-Next-Offset")).toBe(ok.headers.get("Stream-Next-Offset"));
  });
});

describe("plain stream mistakes", () => {
  it("an expiry past what an alarm can hold is a 400, and nothing is created", async () => {
    const a = await houseToken("house-far");
    const json = { "content-type": "application/json" };
    for (const [name, headers] of [
      ["far-ttl", { ...json, "Stream-TTL": "99999999999999999999" }],
      ["far-date", { ...json, "Stream-Expires-At": "3000-01-01T00:00:00Z" }],
    ] as const) {
      const r = await call(`/api/stream/${name}`, { method: "PUT", token: a, headers });
      expect(r.status, name).toBe(400);
      expect(((await r.json()) as { error: { code: string } }).error.code).toBe("bad_request");
      expect((await call(`/api/stream/${name}?offset=-1`, { token: a })).status, name).toBe(404);
    }
    // A long but possible one is fine.
    expect((await call("/api/stream/far-ok", { method: "PUT", token: a, headers: { ...json, "Stream-TTL": String(50 * 365 * 24 * 3600) } })).status).toBe(201);
  });

  it("an oversized Stream-Seq or Producer-Id is a 400, neither stored nor echoed; one at the limit is fine", async () => {
    const a = await houseToken("house-long-headers");
    const json = { "content-type": "application/json" };
    await call("/api/stream/long-headers", { method: "PUT", token: a, headers: json });
    const huge = "9".repeat(10_000);
    for (const [name, headers] of [
      ["Stream-Seq", { ...json, "Stream-Seq": huge }],
      ["Producer-Id", { ...json, ...producer(huge, 0, 0) }],
      ["Stream-Seq one past the limit", { ...json, "Stream-Seq": "9".repeat(257) }],
    ] as const) {
      const r = await call("/api/stream/long-headers", { method: "POST", token: a, json: { n: 1 }, headers });
      expect(r.status, name).toBe(400);
      const body = (await r.json()) as { error: { code: string; message: string } };
      expect(body.error.code, name).toBe("bad_request");
      expect(body.error.message, name).not.toContain("99999");
    }
    expect(await (await call("/api/stream/long-headers?offset=-1", { token: a })).json()).toEqual([]);
    // A later Stream-Seq conflict must not echo a huge stored value: none was stored.
    const ok = await call("/api/stream/long-headers", { method: "POST", token: a, json: { n: 2 }, headers: { ...json, "Stream-Seq": "5".repeat(256), ...producer("p".repeat(256), 0, 0) } });
    expect(ok.status).toBe(200);
    const again = await call("/api/stream/long-headers", { method: "POST", token: a, json: { n: 3 }, headers: { ...json, "Stream-Seq": "1" } });
    expect(again.status).toBe(409);
    expect(await (await call("/api/stream/long-headers?offset=-1", { token: a })).json()).toEqual([{ n: 2 }]);
  });

  it("JSON that is not UTF-8 is refused on a plain stream and on a thread, not stored", async () => {
    const a = await houseToken("house-utf8");
    await call("/api/stream/u8", { method: "PUT", token: a, headers: { "content-type": "application/json" } });
    const bad = new Uint8Array([...new TextEncoder().encode('{"t":"'), 0xff, 0xfe, ...new TextEncoder().encode('"}')]);
    const r = await call("/api/stream/u8", { method: "POST", token: a, body: bad, headers: { "content-type": "application/json" } });
    expect(r.status).toBe(400);
    expect(((await r.json()) as { error: { code: string; message: string } }).error).toEqual({ code: "invalid_json", message: "body is not valid UTF-8" });
    expect(await (await call("/api/stream/u8?offset=-1", { token: a })).json()).toEqual([]);
    const t = await createThread(a);
    const body = new Uint8Array([...new TextEncoder().encode('{"payload":{"type":"chat","text":"'), 0xc3, ...new TextEncoder().encode('"}}')]);
    const viaRest = await call(`/api/threads/${t.id}/entries`, { method: "POST", token: a, body, headers: { "content-type": "application/json" } });
    expect(viaRest.status).toBe(400);
    expect((await readAll(a, t.id)).entries).toEqual([]);
  });
});

describe("stream token renewal", () => {
  it("a box renews its token through the stream path, only while its thread runs", async () => {
    const token = await houseToken("house-renew");
    const t = await createThread(token);
    const other = await createThread(token);
    const st = await streamToken("house-renew", t.id, "stream:write", undefined, Date.now() - 600_000); // issued 10 min ago
    const renew = (tok: string, id = t.id) => call(`/api/stream/thread-${id}/token`, { method: "POST", token: tok });
    expect((await renew(st)).status).toBe(409); // idle: nothing to keep alive
    await post(token, t.id, { payload: { type: "signal.thread.status_changed", status: "running" } });
    const r = await renew(st);
    expect(r.status).toBe(201);
    const fresh = ((await r.json()) as { token: string; scope: string }).token;
    expect(fresh).not.toBe(st);
    expect((await call(`/api/stream/thread-${t.id}`, { method: "POST", token: fresh, json: chat("with the renewed token") })).status).toBe(204);
    expect((await renew(st, other.id)).status).toBe(403); // another thread's token
    expect((await renew(token)).status).toBe(403); // house tokens use POST /api/threads/:id/tokens
    const expired = await streamToken("house-renew", t.id, "stream:write", 60, Date.now() - 3 * 3600_000);
    expect((await renew(expired)).status).toBe(401); // an expired token cannot be revived
    expect((await call(`/api/stream/thread-${t.id}/token`, { token: st })).status).toBe(405);
    await post(token, t.id, { payload: { type: "signal.thread.status_changed", status: "completed" } });
    expect((await renew(fresh)).status).toBe(409);
  });

  it("a token minted by a user is renewed for a day from its first minting, not for good", async () => {
    const house = "house-renew-span";
    const token = await houseToken(house);
    const t = await createThread(token);
    const renew = (tok: string) => call(`/api/stream/thread-${t.id}/token`, { method: "POST", token: tok });
    // Such a token may claim its idle thread itself, and heartbeats keep the claim alive.
    const minted = ((await (await call(`/api/threads/${t.id}/tokens`, { method: "POST", token, json: {} })).json()) as { token: string }).token;
    expect((await call(`/api/stream/thread-${t.id}`, { method: "POST", token: minted, json: { payload: { type: "signal.thread.status_changed", status: "running" } } })).status).toBe(204);
    const secret = (env as unknown as { THREADBOX_TOKEN_SECRET: string }).THREADBOX_TOKEN_SECRET;
    const nowS = Math.floor(Date.now() / 1000);
    const hours = (h: number) => nowS - h * 3600;
    // A renewal carries the first minting's time on: renewing the renewed token counts from there.
    const young = (await mintStreamToken(secret, house, t.id, "stream:write", "alice", undefined, undefined, { firstMintedAt: hours(23) })).token;
    const r = await renew(young);
    expect(r.status).toBe(201);
    const renewed = ((await r.json()) as { token: string }).token;
    expect(decodeJwt(renewed).first).toBe(hours(23));
    const old = (await mintStreamToken(secret, house, t.id, "stream:write", "alice", undefined, undefined, { firstMintedAt: hours(25) })).token;
    const refused = await renew(old);
    expect(refused.status).toBe(403);
    expect(((await refused.json()) as { error: { message: string } }).error.message).toMatch(/first minted over 24 h ago.*POST \/api\/threads\/:id\/tokens/);
    // A token from before renewals carried the time counts from its own issue time.
    expect((await renew(minted)).status).toBe(201);
  });

  it("a token minted with a short-lived house token, and each renewal of it, expires no later than that house token", async () => {
    const house = "house-renew-cap";
    const secret = (env as unknown as { THREADBOX_TOKEN_SECRET: string }).THREADBOX_TOKEN_SECRET;
    const short = await mintHouseToken(secret, house, "alice", "owner", 300);
    const t = await createThread(short.token);
    const m = await call(`/api/threads/${t.id}/tokens`, { method: "POST", token: short.token, json: {} });
    expect(m.status).toBe(201);
    const minted = (await m.json()) as { token: string; expiresAt: string };
    expect(Date.parse(minted.expiresAt)).toBeLessThanOrEqual(Date.parse(short.expiresAt));
    expect(decodeJwt(minted.token).exp! * 1000).toBeLessThanOrEqual(Date.parse(short.expiresAt));
    // The token may claim its thread and renew itself, but its line stops with the house token.
    expect((await call(`/api/stream/thread-${t.id}`, { method: "POST", token: minted.token, json: { payload: { type: "signal.thread.status_changed", status: "running" } } })).status).toBe(204);
    const r = await call(`/api/stream/thread-${t.id}/token`, { method: "POST", token: minted.token });
    expect(r.status).toBe(201);
    const renewed = (await r.json()) as { token: string; expiresAt: string };
    expect(Date.parse(renewed.expiresAt)).toBeLessThanOrEqual(Date.parse(short.expiresAt));
    const again = await call(`/api/stream/thread-${t.id}/token`, { method: "POST", token: renewed.token });
    expect(Date.parse(((await again.json()) as { expiresAt: string }).expiresAt)).toBeLessThanOrEqual(Date.parse(short.expiresAt));
    // A long-lived house token leaves the stream token its usual lifetime.
    const long = await call(`/api/threads/${t.id}/tokens`, { method: "POST", token: await houseToken(house), json: {} });
    expect(Date.parse(((await long.json()) as { expiresAt: string }).expiresAt)).toBeGreaterThan(Date.parse(short.expiresAt));
  });

  it("a run's token is renewed as that run's, and not once another run of the thread holds it", async () => {
    const house = "house-renew-run";
    const token = await houseToken(house);
    const t = await createThread(token);
    const renew = (tok: string) => call(`/api/stream/thread-${t.id}/token`, { method: "POST", token: tok });
    await post(token, t.id, { payload: { type: "signal.thread.status_changed", status: "running", runId: "run1" } });
    const r = await renew(await runToken(house, t.id, "run1"));
    expect(r.status).toBe(201);
    const fresh = ((await r.json()) as { token: string }).token;
    // The renewed token still writes run1's artifacts.
    const put = await call(`/api/stream/thread-${t.id}/artifacts/run1/diff`, { method: "PUT", token: fresh, headers: { "content-type": "text/plain" } });
    expect(put.status).toBe(201);
    await post(token, t.id, { payload: { type: "signal.thread.status_changed", status: "completed", runId: "run1" } });
    await post(token, t.id, { payload: { type: "signal.thread.status_changed", status: "running", runId: "run2" } });
    const late = await renew(fresh);
    expect(late.status).toBe(409);
    expect(await errorCode(late)).toBe("conflict");
  });

  it("an ended run's token can neither claim its run again (to be renewed) nor end the thread's next run", async () => {
    const house = "house-renew-stale";
    const token = await houseToken(house);
    const t = await createThread(token);
    const signal = (status: string, extra: Record<string, unknown> = {}) => ({ payload: { type: "signal.thread.status_changed", status, ...extra } });
    const viaStream = (tok: string, body: unknown) => call(`/api/stream/thread-${t.id}`, { method: "POST", token: tok, json: body });
    const row = async () => (await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string; runId: string | null };
    const run1 = await runToken(house, t.id, "run1");
    // A run driven from outside claims its run with its own token, under claim:<runId>.
    expect((await viaStream(run1, { id: "claim:run1", ...signal("running", { runId: "run1" }) })).status).toBe(204);
    expect((await viaStream(run1, signal("completed", { runId: "run1" }))).status).toBe(204);
    expect(await row()).toMatchObject({ status: "completed", runId: "run1" });

    // The ended run's token, still valid for hours, claims its run again: the thread stays settled
    // and the token cannot be renewed.
    for (const claim of [signal("running", { runId: "run1" }), { id: "claim:run1", ...signal("running", { runId: "run1" }) }, signal("running", { runId: "run9" })]) {
      const r = await viaStream(run1, claim);
      expect([204, 403]).toContain(r.status);
      await r.body?.cancel();
    }
    expect(await row()).toMatchObject({ status: "completed", runId: "run1" });
    const renewed = await call(`/api/stream/thread-${t.id}/token`, { method: "POST", token: run1 });
    expect(renewed.status).toBe(409);
    await renewed.body?.cancel();

    // The next run (a resume) is not the old token's to end, with its run id or without one.
    await post(token, t.id, signal("running", { runId: "run2" }));
    for (const forged of [signal("completed", { reason: "forged" }), signal("pi_failed", { runId: "run2", reason: "forged" })]) {
      const r = await viaStream(run1, forged);
      expect(r.status).toBe(403);
      expect(await errorCode(r)).toBe("forbidden");
    }
    expect(await row()).toMatchObject({ status: "running", runId: "run2" });
    expect((await viaStream(await runToken(house, t.id, "run2"), signal("completed", { runId: "run2" }))).status).toBe(204);
    expect(await row()).toMatchObject({ status: "completed", runId: "run2" });
  });
});

