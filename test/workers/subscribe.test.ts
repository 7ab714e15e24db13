import { describe, expect, it } from "vitest";
import { SELF, env, runInDurableObject } from "cloudflare:test";
import type { ThreadActor } from "./test-worker";
import { BASE, call, chat, createThread, errorCode, houseToken, post, streamToken, WEBSOCKET_HANDSHAKE } from "./helpers";

type Msg = { offset: string; id: string; payload: { text?: string; type: string } };

async function connect(threadId: string, token: string, offset = "-1", via: "query" | "protocol" = "query") {
  const url = via === "query" ? `${BASE}/api/threads/${threadId}/subscribe?offset=${offset}&token=${token}` : `${BASE}/api/threads/${threadId}/subscribe?offset=${offset}`;
  const headers: Record<string, string> = { ...WEBSOCKET_HANDSHAKE };
  if (via === "protocol") headers["sec-websocket-protocol"] = `bearer.${token}`;
  const res = await SELF.fetch(url, { headers });
  const closed: { code: number; reason: string }[] = [];
  if (res.status !== 101) return { status: res.status, ws: null, got: [] as Msg[], closed, waitFor: async () => {} };
  const ws = res.webSocket!;
  const got: Msg[] = [];
  const waiters: (() => void)[] = [];
  ws.addEventListener("message", (e) => {
    got.push(JSON.parse(e.data as string));
    waiters.splice(0).forEach((w) => w());
  });
  ws.addEventListener("close", (e) => { closed.push({ code: e.code, reason: e.reason }); });
  ws.accept();
  const waitFor = async (n: number) => {
    const deadline = Date.now() + 5000;
    while (got.length < n) {
      if (Date.now() > deadline) throw new Error(`only ${got.length}/${n} messages`);
      await new Promise<void>((r) => { waiters.push(r); setTimeout(r, 100); });
    }
  };
  return { status: 101, ws, got, closed, waitFor };
}

const texts = (msgs: Msg[]) => msgs.map((m) => m.payload.text);

describe("WebSocket subscriptions", () => {
  it("3+ subscribers get catch-up then live entries in order, and reconnect from their last offset without gap or duplicate", async () => {
    const token = await houseToken();
    const t = await createThread(token);
    await post(token, t.id, [chat("e1"), chat("e2")]);
    const subs = await Promise.all([connect(t.id, token), connect(t.id, token), connect(t.id, token, "-1", "protocol")]);
    for (const s of subs) expect(s.status).toBe(101);
    for (const s of subs) await s.waitFor(2);
    await post(token, t.id, chat("e3"));
    await post(token, t.id, [chat("e4"), chat("e5")]);
    for (const s of subs) {
      await s.waitFor(5);
      expect(texts(s.got)).toEqual(["e1", "e2", "e3", "e4", "e5"]);
      const offsets = s.got.map((m) => m.offset);
      expect([...offsets].sort()).toEqual(offsets);
    }
    // Subscriber 0 drops after e5; entries land while it is away; it resumes from its last offset.
    const last = subs[0].got[subs[0].got.length - 1].offset;
    subs[0].ws!.close(1000, "bye");
    await post(token, t.id, [chat("e6"), chat("e7")]);
    const again = await connect(t.id, token, last);
    await again.waitFor(2);
    await post(token, t.id, chat("e8"));
    await again.waitFor(3);
    expect(texts(again.got)).toEqual(["e6", "e7", "e8"]);
    for (const s of subs.slice(1)) {
      await s.waitFor(8);
      expect(texts(s.got)).toEqual(["e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8"]);
    }
    for (const s of [...subs.slice(1), again]) s.ws!.close(1000, "done");
  });

  it("from an offset past the tail, starts at the tail and gets what comes next", async () => {
    const token = await houseToken();
    const t = await createThread(token);
    await post(token, t.id, chat("before"));
    for (const offset of ["0000000000000000_0000000000000099", "0000000000000001_0000000000000000"]) {
      const s = await connect(t.id, token, offset);
      expect(s.status, offset).toBe(101);
      await post(token, t.id, chat(`after ${offset}`));
      await s.waitFor(1);
      expect(texts(s.got), offset).toEqual([`after ${offset}`]);
      s.ws!.close(1000, "done");
    }
  });

  it("checks the token before the upgrade", async () => {
    const token = await houseToken();
    const t = await createThread(token);
    const other = await createThread(token);
    expect((await connect(t.id, "garbage")).status).toBe(401);
    expect((await connect(t.id, await houseToken("house-other"))).status).toBe(404);
    expect((await connect(t.id, await streamToken("house-a", other.id, "stream:read"))).status).toBe(403);
    const noUpgrade = await call(`/api/threads/${t.id}/subscribe?token=${token}`);
    expect(noUpgrade.status).toBe(426);
    const scoped = await connect(t.id, await streamToken("house-a", t.id, "stream:read"));
    expect(scoped.status).toBe(101);
    scoped.ws!.close(1000, "done");
  });
});

describe("a WebSocket request without a complete handshake", () => {
  it("gets the API's JSON 426 upgrade_required, and the thread's actor never opens a socket for it", async () => {
    const token = await houseToken();
    const t = await createThread(token);
    const { "sec-websocket-key": key, "sec-websocket-version": version } = WEBSOCKET_HANDSHAKE;
    const cases: Record<string, Record<string, string>> = {
      "no key, no version": { upgrade: "websocket" },
      "no version": { upgrade: "websocket", "sec-websocket-key": key },
      "no key": { upgrade: "websocket", "sec-websocket-version": version },
      "version 8": { upgrade: "websocket", "sec-websocket-key": key, "sec-websocket-version": "8" },
      "no upgrade": {},
    };
    for (const [name, headers] of Object.entries(cases)) {
      const r = await SELF.fetch(`${BASE}/api/threads/${t.id}/subscribe?offset=-1&token=${token}`, { headers });
      expect({ name, status: r.status, type: r.headers.get("content-type") }).toEqual({ name, status: 426, type: "application/json" });
      expect(await errorCode(r)).toBe("upgrade_required");
      if (name !== "no upgrade") expect(r.headers.get("sec-websocket-version")).toBe("13");
    }
    const threads = (env as unknown as { THREADS: DurableObjectNamespace<ThreadActor> }).THREADS;
    const sockets = await runInDurableObject(threads.get(threads.idFromName(`thread:${t.id}`)), (_a: ThreadActor, state) => state.getWebSockets().length);
    expect(sockets).toBe(0);
  });
});

describe("a subscriber whose token expires while subscribed", () => {
  it("gets nothing more: the next entry closes its socket with 4001 instead, and so does a ping", async () => {
    const token = await houseToken();
    const t = await createThread(token);
    const [a, b] = [await streamToken("house-a", t.id, "stream:read", 2), await streamToken("house-a", t.id, "stream:read", 2)];
    const live = await connect(t.id, a);
    const pinger = await connect(t.id, b, "-1", "protocol");
    const watcher = await connect(t.id, token);
    await post(token, t.id, chat("while valid"));
    for (const s of [live, pinger, watcher]) await s.waitFor(1);
    await new Promise((r) => setTimeout(r, 2100));
    // The HTTP read with the same token is refused by now.
    expect((await call(`/api/stream/thread-${t.id}?offset=-1`, { token: a })).status).toBe(401);
    pinger.ws!.send("ping");
    await post(token, t.id, chat("after expiry"));
    await watcher.waitFor(2);
    const deadline = Date.now() + 3000;
    while ((live.closed.length === 0 || pinger.closed.length === 0) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(texts(live.got)).toEqual(["while valid"]);
    expect(live.closed).toEqual([{ code: 4001, reason: "token expired" }]);
    expect(pinger.got.map((m) => m.payload?.text ?? m)).toEqual(["while valid"]);
    expect(pinger.closed).toEqual([{ code: 4001, reason: "token expired" }]);
    expect(texts(watcher.got)).toEqual(["while valid", "after expiry"]);
    watcher.ws!.close(1000, "done");
  });
});

describe("a subscriber whose socket refuses a send", () => {
  it("is closed (1011) so it reconnects from its last offset; the other subscribers still get every entry", async () => {
    const { runInDurableObject, env } = await import("cloudflare:test");
    const { Fanout } = await import("../../src/actors/thread/fanout");
    const { StreamLog } = await import("../../src/streams/log");
    const E = env as unknown as { THREADS: DurableObjectNamespace };
    // A socket whose send() throws (gone, or refusing more) is closed; the others are not held up.
    const fake = (fails: boolean) => {
      const sock = {
        sent: [] as string[], closed: null as null | { code: number; reason: string }, attachment: { seq: 0 } as unknown,
        send(f: string) { if (fails) throw new Error("WebSocket send buffer is full"); sock.sent.push(f); },
        close(code: number, reason: string) { sock.closed = { code, reason }; },
        serializeAttachment(a: unknown) { sock.attachment = structuredClone(a); },
        deserializeAttachment() { return sock.attachment; },
      };
      return sock;
    };
    const slow = fake(true);
    const ok = fake(false);
    await runInDurableObject(E.THREADS.get(E.THREADS.idFromName(`fanout-unit-${Date.now()}`)), async (_a, state) => {
      const log = new StreamLog(state.storage);
      const ctx = { getWebSockets: () => [slow, ok] } as unknown as DurableObjectState;
      const fanout = new Fanout(ctx, log);
      const entry = (seq: number) => ({ offset: `o${seq}`, id: `e${seq}`, payload: { type: "chat", text: `m${seq}` } });
      fanout.deliver([{ seq: 1, data: new Uint8Array(), entryId: "e1" }], [entry(1)] as never);
      fanout.deliver([{ seq: 2, data: new Uint8Array(), entryId: "e2" }], [entry(2)] as never);
    });
    expect(slow.closed).toEqual({ code: 1011, reason: "send failed" });
    expect(ok.sent.map((f) => JSON.parse(f).id)).toEqual(["e1", "e2"]);
    expect(ok.attachment).toEqual({ seq: 2 });
  });
});

describe("a subscriber that never reads", () => {
  it("is held back at a full send buffer, then closed (1013) once it has read nothing for a while; a reading one gets everything", async () => {
    const { runInDurableObject, env } = await import("cloudflare:test");
    const { Fanout, SUBSCRIBER_BUFFER_BYTES } = await import("../../src/actors/thread/fanout");
    const { StreamLog } = await import("../../src/streams/log");
    const E = env as unknown as { THREADS: DurableObjectNamespace };
    // bufferedAmount is what workerd reports as still unsent; the stalled socket's never goes down.
    const fake = (stalled: boolean) => {
      const sock = {
        sent: [] as string[], closed: null as null | { code: number; reason: string }, attachment: null as unknown,
        bufferedAmount: stalled ? SUBSCRIBER_BUFFER_BYTES : 0,
        send(f: string) { sock.sent.push(f); },
        close(code: number, reason: string) { sock.closed = { code, reason }; },
        serializeAttachment(a: unknown) { sock.attachment = structuredClone(a); },
        deserializeAttachment() { return sock.attachment; },
      };
      return sock;
    };
    const stalled = fake(true);
    const reading = fake(false);
    const enc = new TextEncoder();
    const message = (i: number) => ({ data: enc.encode(JSON.stringify({ id: `e${i}`, ts: 0, payload: { type: "chat", text: `m${i}` } })), entryId: `e${i}` });
    await runInDurableObject(E.THREADS.get(E.THREADS.idFromName(`fanout-stall-${Date.now()}`)), async (_a, state) => {
      const log = new StreamLog(state.storage);
      log.create("thread-stall", { contentType: "application/json", ttlSeconds: null, expiresAt: null, closed: false }, []);
      const ctx = { getWebSockets: () => [stalled, reading] } as unknown as DurableObjectState;
      const fanout = new Fanout(ctx, log, { stalledAfterMs: 300 });
      for (const s of [stalled, reading]) s.serializeAttachment({ seq: 0 });
      for (let i = 1; i <= 3; i++) {
        const out = log.append({ messages: [message(i)] });
        if (out.kind !== "appended") throw new Error(out.kind);
        fanout.deliver(out.fresh, out.fresh.map((m) => ({ offset: `o${m.seq}`, id: `e${m.seq}`, payload: { type: "chat", text: `m${m.seq}` } })) as never);
      }
      const deadline = Date.now() + 5000;
      while (stalled.closed === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    });
    expect(stalled.sent).toEqual([]);
    expect(stalled.closed).toEqual({ code: 1013, reason: "subscriber too slow: reconnect from your last offset" });
    expect(reading.sent.map((f) => JSON.parse(f).id)).toEqual(["e1", "e2", "e3"]);
    expect(reading.closed).toBeNull();
  });
});
