import { describe, expect, it, vi } from "vitest";
import { env, runInDurableObject } from "cloudflare:test";
import type { ThreadActor } from "./test-worker";
import { plainStreamKey } from "../../src/actors/stubs";
import { call, errorCode, houseToken, streamToken, createThread } from "./helpers";
import { step, within } from "./inside-request";
import { checkWebhookUrl, globMatch, ackProblem, retryDelayMs } from "../../src/subscriptions/rules";

const sub = (id: string) => `/v1/stream/__ds/subscriptions/${id}`;
const put = (token: string, id: string, body: unknown) => call(sub(id), { method: "PUT", token, json: body });
const body = async (r: Response) => (await r.json()) as any;

async function pullWakeSetup(token: string, tag: string, leaseMs = 1000) {
  const wake = `wake/${tag}`;
  expect((await call(`/v1/stream/${wake}`, { method: "PUT", token, headers: { "content-type": "application/json" }, body: "[]" })).status).toBe(201);
  expect((await put(token, tag, { type: "pull-wake", pattern: `jobs-${tag}/*`, wake_stream: wake, lease_ttl_ms: leaseMs })).status).toBe(201);
  const path = `jobs-${tag}/a`;
  expect((await call(`/v1/stream/${path}`, { method: "PUT", token, json: { job: 1 } })).status).toBe(201);
  await vi.waitFor(async () => {
    const events = (await body(await call(`/v1/stream/${wake}`, { token }))) as { subscription_id: string }[];
    expect(events.some((e) => e.subscription_id === tag)).toBe(true);
  }, { timeout: 5000, interval: 50 });
  return { wake, path };
}

const claim = (token: string, id: string, worker: string) => call(`${sub(id)}/claim`, { method: "POST", token, json: { worker } });

describe("subscription rules", () => {
  it("globs: * is one segment, ** any number, literals exact", () => {
    expect(globMatch("events/*", "events/a")).toBe(true);
    expect(globMatch("events/*", "events/a/b")).toBe(false);
    expect(globMatch("events/**", "events/a/b")).toBe(true);
    expect(globMatch("events/**", "events")).toBe(true);
    expect(globMatch("**/log", "a/b/log")).toBe(true);
    expect(globMatch("events/x%2A", "events/x*")).toBe(true);
    expect(globMatch("events/x", "events/y")).toBe(false);
  });

  it("webhook URLs: https to public hosts, http only to loopback; never private, link-local, IPv6 literals or credentials", () => {
    expect(checkWebhookUrl("https://hooks.example.com/x").ok).toBe(true);
    expect(checkWebhookUrl("http://127.0.0.1:9000/hook").ok).toBe(true);
    expect(checkWebhookUrl("http://localhost/hook").ok).toBe(true);
    expect(checkWebhookUrl("https://8.8.8.8/hook").ok).toBe(true);
    expect(checkWebhookUrl("https://hooks.internal-tools.example.com/x").ok).toBe(true);
    for (const bad of ["http://10.0.0.1/hook", "http://example.com/hook", "https://192.168.1.2/x", "https://169.254.169.254/latest", "https://172.20.0.1/",
      "https://[::1]/x", "ftp://example.com/", "https://localhost/x", "https://user:pw@example.com/", "not a url", "https://100.64.0.1/",
      "https://224.0.0.1/", "https://255.255.255.255/", "https://198.18.0.1/", "https://240.1.2.3/", "https://192.0.2.10/", "https://0.0.0.0/",
      "https://2130706433/", "https://0x7f.1/", "https://metadata.google.internal/computeMetadata/v1/", "https://printer.local/", "https://intranet/",
      "https://api.localhost/"]) {
      expect(checkWebhookUrl(bad).ok, bad).toBe(false);
    }
  });

  it("acks may not name unknown streams, go back, use -1, or pass the tail", () => {
    const links = new Map([["s", { path: "s", explicit: true, acked: "0000000000000000_0000000000000002", tail: "0000000000000000_0000000000000005" }]]);
    expect(ackProblem([{ stream: "s", offset: "0000000000000000_0000000000000004" }], links)).toBeNull();
    expect(ackProblem([{ stream: "t", offset: "0000000000000000_0000000000000004" }], links)).toMatch(/unknown/);
    expect(ackProblem([{ stream: "s", offset: "0000000000000000_0000000000000001" }], links)).toMatch(/regresses/);
    expect(ackProblem([{ stream: "s", offset: "-1" }], links)).toMatch(/-1/);
    expect(ackProblem([{ stream: "s", offset: "0000000000000000_0000000000000006" }], links)).toMatch(/beyond/);
  });

  it("webhook retries back off exponentially up to a minute", () => {
    expect(retryDelayMs(1, 0.5)).toBe(1000);
    expect(retryDelayMs(3, 0.5)).toBe(4000);
    expect(retryDelayMs(30, 0.5)).toBe(60_000);
    expect(retryDelayMs(1, 0)).toBe(800);
  });
});

describe("subscriptions API", () => {
  it("a pull-wake claim lapses with its lease: another worker claims the next generation and the first worker's token is fenced", async () => {
    const token = await houseToken("house-subs-lease");
    // A lease long enough that the claims just below are surely inside it on a loaded machine.
    const { path } = await pullWakeSetup(token, "lease1", 3_000);
    const first = await claim(token, "lease1", "w1");
    expect(first.status).toBe(200);
    const c1 = await body(first);
    const busy = await claim(token, "lease1", "w2");
    expect(busy.status).toBe(409);
    expect((await body(busy)).error).toMatchObject({ code: "ALREADY_CLAIMED", current_holder: "w1" });

    // w1 goes silent; after its lease the work is offered again, under a new generation.
    const second = await vi.waitFor(async () => {
      const r = await claim(token, "lease1", "w2");
      expect(r.status).toBe(200);
      return body(r);
    }, { timeout: 15_000, interval: 200 });
    expect(second.generation).toBeGreaterThan(c1.generation);
    const tail = second.streams.find((s: any) => s.path === path).tail_offset;
    const late = await call(`${sub("lease1")}/ack`, { method: "POST", headers: { authorization: `Bearer ${c1.token}` }, json: { wake_id: c1.wake_id, generation: c1.generation, acks: [{ stream: path, offset: tail }], done: true } });
    expect(late.status).toBe(409);
    expect(await errorCode(late)).toBe("FENCED");
    const ok = await call(`${sub("lease1")}/ack`, { method: "POST", headers: { authorization: `Bearer ${second.token}` }, json: { wake_id: second.wake_id, generation: second.generation, acks: [{ stream: path, offset: tail }], done: true } });
    expect(await body(ok)).toEqual({ ok: true, next_wake: false });
    const after = await claim(token, "lease1", "w3");
    expect(after.status).toBe(409);
    expect(await errorCode(after)).toBe("NO_PENDING_WORK");
    const state = await body(await call(sub("lease1"), { token }));
    expect(state.streams).toEqual([{ path, link_type: "glob", acked_offset: tail }]);
  });

  it("a wake token that is not signed learns nothing: the same 401 whether the subscription exists, and of which type", async () => {
    const token = await houseToken("house-subs-probe");
    expect((await put(token, "probe-hook", { type: "webhook", pattern: "probe/*", webhook: { url: "http://127.0.0.1:9/hook" } })).status).toBe(201);
    await pullWakeSetup(token, "probe-pull");
    const b64 = (s: string) => btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
    const unsigned = (id: string) => `${b64(JSON.stringify({ house: "house-subs-probe", sub: id, epoch: 1, exp: 9_999_999_999 }))}.AAAA`;
    for (const id of ["probe-hook", "probe-pull", "probe-missing"]) {
      for (const action of ["ack", "callback", "release"]) {
        const r = await call(`${sub(id)}/${action}`, { method: "POST", headers: { authorization: `Bearer ${unsigned(id)}` }, json: { wake_id: "w", generation: 1 } });
        expect(r.status, `${id} ${action}`).toBe(401);
        expect(await errorCode(r)).toBe("TOKEN_INVALID");
      }
    }
  });

  it("bad acks and bad tokens are refused without moving the cursor", async () => {
    const token = await houseToken("house-subs-badack");
    const { path } = await pullWakeSetup(token, "bad1", 30_000);
    const c = await body(await claim(token, "bad1", "w1"));
    const ack = (auth: string, json: unknown) => call(`${sub("bad1")}/ack`, { method: "POST", headers: { authorization: `Bearer ${auth}` }, json });
    const beyond = await ack(c.token, { wake_id: c.wake_id, generation: c.generation, acks: [{ stream: path, offset: "0000000000000000_0000000000000099" }] });
    expect(beyond.status).toBe(409);
    expect(await errorCode(beyond)).toBe("INVALID_OFFSET");
    // A token whose payload was edited (another house, a later generation) fails its signature.
    const [payload, sig] = c.token.split(".");
    const claims = JSON.parse(atob(payload.replace(/-/g, "+").replace(/_/g, "/")));
    const forged = btoa(JSON.stringify({ ...claims, epoch: claims.epoch + 1 })).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
    const f = await ack(`${forged}.${sig}`, { wake_id: c.wake_id, generation: c.generation + 1, done: true });
    expect(f.status).toBe(401);
    expect(await errorCode(f)).toBe("TOKEN_INVALID");
    expect((await ack(token, { wake_id: c.wake_id, generation: c.generation, done: true })).status).toBe(401);
    expect((await ack(c.token, { wake_id: "w_other", generation: c.generation, done: true })).status).toBe(409);
    const state = await body(await call(sub("bad1"), { token }));
    expect(state.streams[0].acked_offset).toBe("-1");
    // Still claimed by w1: nothing above released it.
    expect((await claim(token, "bad1", "w2")).status).toBe(409);
  });

  it("a subscription is its house's: other houses and run tokens do not reach it", async () => {
    const a = await houseToken("house-subs-a");
    const b = await houseToken("house-subs-b");
    expect((await put(a, "mine", { type: "pull-wake", streams: ["x"], wake_stream: "w" })).status).toBe(201);
    for (const r of [await call(sub("mine"), { token: b }), await call(sub("mine"), { method: "DELETE", token: b }), await claim(b, "mine", "w")]) {
      expect(r.status).toBe(404);
      expect(await errorCode(r)).toBe("SUBSCRIPTION_NOT_FOUND");
    }
    // b's own subscription of the same id is another subscription.
    expect((await put(b, "mine", { type: "pull-wake", streams: ["y"], wake_stream: "w" })).status).toBe(201);
    expect((await body(await call(sub("mine"), { token: a }))).streams.map((s: any) => s.path)).toEqual(["x"]);
    const thread = await createThread(a);
    const run = await streamToken("house-subs-a", thread.id);
    expect((await call(sub("mine"), { token: run })).status).toBe(403);
    expect((await call(sub("mine"))).status).toBe(401);
    const reader = await houseToken("house-subs-a", "r", "reader");
    expect((await call(sub("mine"), { token: reader })).status).toBe(200);
    expect((await call(sub("mine"), { method: "DELETE", token: reader })).status).toBe(403);
  });

  it("refuses bad subscriptions with 4xx: config conflicts, unsafe webhooks, missing fields, bad ids and bodies", async () => {
    const token = await houseToken("house-subs-bad");
    expect((await put(token, "s1", { type: "pull-wake", pattern: "a/*", wake_stream: "w" })).status).toBe(201);
    expect((await put(token, "s1", { type: "pull-wake", pattern: "a/*", wake_stream: "w" })).status).toBe(200);
    const conflict = await put(token, "s1", { type: "pull-wake", pattern: "b/*", wake_stream: "w" });
    expect(conflict.status).toBe(409);
    expect(await errorCode(conflict)).toBe("SUBSCRIPTION_ALREADY_EXISTS");
    const unsafe = await put(token, "s2", { type: "webhook", pattern: "a/*", webhook: { url: "http://169.254.169.254/latest" } });
    expect(unsafe.status).toBe(400);
    expect(await errorCode(unsafe)).toBe("WEBHOOK_URL_REJECTED");
    expect(await errorCode(await put(token, "s3", { type: "webhook", pattern: "a/*" }))).toBe("INVALID_REQUEST");
    expect(await errorCode(await put(token, "s4", { type: "pull-wake", pattern: "a/*" }))).toBe("INVALID_REQUEST");
    // A body the protocol refuses is its INVALID_REQUEST, as in the reference server, whichever rule it breaks.
    const refused = async (r: Response) => [r.status, await errorCode(r)];
    expect(await refused(await put(token, "s5", { type: "carrier-pigeon" }))).toEqual([400, "INVALID_REQUEST"]);
    expect(await refused(await put(token, "s6", { type: "pull-wake", wake_stream: "w", lease_ttl_ms: 5 }))).toEqual([400, "INVALID_REQUEST"]);
    expect(await refused(await call(sub("s6"), { method: "PUT", token, body: "{not json", headers: { "content-type": "application/json" } }))).toEqual([400, "INVALID_REQUEST"]);
    expect(await refused(await call(`${sub("s1")}/claim`, { method: "POST", token, json: {} }))).toEqual([400, "INVALID_REQUEST"]);
    expect(await refused(await call(`${sub("s1")}/streams`, { method: "POST", token, json: { streams: [] } }))).toEqual([400, "INVALID_REQUEST"]);
    expect((await put(token, "s7", { type: "pull-wake", wake_stream: "w", streams: ["__ds/jwks.json"] })).status).toBe(400);
    // A thread's log is not a plain stream: it would never be linked, and wakes to it would be dropped.
    expect((await put(token, "s9", { type: "pull-wake", wake_stream: "thread-th_1" })).status).toBe(400);
    expect((await put(token, "s9", { type: "pull-wake", wake_stream: "w", streams: ["thread-th_1"] })).status).toBe(400);
    expect((await put(token, "s9", { type: "pull-wake", wake_stream: "thread-th_1/notes/wakes" })).status).toBe(201);
    // Wakes are appended by the control plane: never into what only it or a run's box may write.
    for (const protectedStream of ["thread-th_1/artifacts/run1/diff", "folders/env_1/data"]) {
      const r = await put(token, "s10", { type: "pull-wake", wake_stream: protectedStream });
      expect(r.status, protectedStream).toBe(400);
      await r.body?.cancel();
    }
    // Adding streams to one takes the same paths a PUT does: no thread log, nothing under __ds/.
    for (const bad of ["thread-th_1", "__ds/jwks.json"]) {
      const add = await call(`${sub("s9")}/streams`, { method: "POST", token, json: { streams: ["ok/one", bad] } });
      expect({ bad, status: add.status }).toEqual({ bad, status: 400 });
    }
    expect(((await body(await call(sub("s9"), { token }))).streams ?? []).map((x: { path: string }) => x.path)).not.toContain("ok/one");
    expect((await call(sub("bad%20id"), { method: "PUT", token, json: { type: "pull-wake", wake_stream: "w" } })).status).toBe(400);
    expect((await call(sub("s8"), { method: "PUT", token, body: "{not json", headers: { "content-type": "application/json" } })).status).toBe(400);
    expect((await call(sub("s8"), { method: "PATCH", token, json: {} })).status).toBe(405);
    expect((await call("/v1/stream/__ds/other", { token })).status).toBe(404);
    expect((await call(`${sub("nope")}/claim`, { method: "POST", token, json: { worker: "w" } })).status).toBe(404);
    const jwks = await call("/v1/stream/__ds/jwks.json", { token });
    expect(jwks.headers.get("content-type")).toContain("application/jwk-set+json");
    expect((await body(jwks)).keys[0]).toMatchObject({ kty: "OKP", crv: "Ed25519", alg: "EdDSA" });
  });

  it("a stream created empty under a pattern is linked with nothing pending and wakes no one; its first append does", async () => {
    const token = await houseToken("house-subs-empty");
    expect((await call("/v1/stream/wake/empty", { method: "PUT", token, headers: { "content-type": "application/json" }, body: "[]" })).status).toBe(201);
    expect((await put(token, "e1", { type: "pull-wake", pattern: "empty-jobs/*", wake_stream: "wake/empty" })).status).toBe(201);
    expect((await call("/v1/stream/empty-jobs/a", { method: "PUT", token, headers: { "content-type": "application/json" } })).status).toBe(201);
    expect((await body(await call(sub("e1"), { token }))).streams.map((l: any) => l.path)).toEqual(["empty-jobs/a"]);
    await new Promise((r) => setTimeout(r, 300));
    expect(await body(await call("/v1/stream/wake/empty", { token }))).toEqual([]);
    expect((await call("/v1/stream/empty-jobs/a", { method: "POST", token, json: { job: 1 } })).status).toBe(204);
    await vi.waitFor(async () => {
      const events = (await body(await call("/v1/stream/wake/empty", { token }))) as { subscription_id: string }[];
      expect(events.map((e) => e.subscription_id)).toEqual(["e1"]);
    }, { timeout: 5000, interval: 50 });
  });

  it("deleting a stream unlinks it; deleting a subscription forgets it", async () => {
    const token = await houseToken("house-subs-del");
    expect((await call("/v1/stream/logs/one", { method: "PUT", token, json: { a: 1 } })).status).toBe(201);
    expect((await put(token, "d1", { type: "pull-wake", pattern: "logs/*", wake_stream: "w" })).status).toBe(201);
    expect((await body(await call(sub("d1"), { token }))).streams.map((s: any) => s.path)).toEqual(["logs/one"]);
    expect((await call("/v1/stream/logs/one", { method: "DELETE", token })).status).toBe(204);
    expect((await body(await call(sub("d1"), { token }))).streams).toEqual([]);
    expect((await call(sub("d1"), { method: "DELETE", token })).status).toBe(204);
    expect((await call(sub("d1"), { token })).status).toBe(404);
  });

  it("a subscription deleted while its create still links its streams: both answer, and the same id made again links only the streams it names", async () => {
    const houseId = "house-subs-put-delete";
    const token = await houseToken(houseId);
    for (const path of ["race/old", "race/new"]) expect((await call(`/v1/stream/${path}`, { method: "PUT", token, json: { a: 1 } })).status).toBe(201);
    const threads = (env as unknown as { THREADS: DurableObjectNamespace<ThreadActor> }).THREADS;
    const old = threads.get(threads.idFromName(plainStreamKey(houseId, "race/old")));
    // The create has stored the subscription and is asking its stream for the tail to link it at.
    const deleted = step("the DELETE during the create's ask for the tail", async () => (await call(sub("racy"), { method: "DELETE", token })).status);
    await runInDurableObject(old, (a: ThreadActor) => a.duringNextSubscriptionTail(deleted));
    const created = await within(put(token, "racy", { type: "pull-wake", streams: ["race/old"], wake_stream: "w-racy" }), "the create");
    expect(deleted.value()).toBe(204);
    expect(created.status).toBe(201);
    expect((await call(sub("racy"), { token })).status).toBe(404);
    // Made again, for another stream: it links that one alone.
    expect((await put(token, "racy", { type: "pull-wake", streams: ["race/new"], wake_stream: "w-racy" })).status).toBe(201);
    expect((await body(await call(sub("racy"), { token }))).streams.map((s: any) => s.path)).toEqual(["race/new"]);
  });
});
