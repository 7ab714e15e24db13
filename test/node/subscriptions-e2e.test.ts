// Webhook subscriptions against the worker under `wrangler dev`, with a real HTTP receiver that
// fails before it succeeds: retries with backoff, signatures that verify against the house's
// JWKS, and the cursor moving only when the receiver says it is done.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { createPublicKey, verify } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jsonApi } from "../support/json-api";

type Worker = { url: string; mintHouseToken(houseId?: string, subject?: string, role?: string): Promise<string>; stop(): Promise<void> };
const { startWorker } = (await import("../../scripts/lib/wrangler-dev.mjs" as string)) as { startWorker(o?: { vars?: Record<string, string> }): Promise<Worker> };

let worker: Worker;
let token: string;
beforeAll(async () => {
  worker = await startWorker();
  token = await worker.mintHouseToken("house-webhooks", "alice", "owner");
}, 120_000);
afterAll(async () => {
  await worker?.stop();
});

type Delivery = { at: number; raw: string; body: any; signature: string };

/**
 * Answers 500 to the first `failures` deliveries, then `{done: true}`, but no success before
 * `release()`: until then the subscription stays failed, however late the test looks.
 */
async function receiver(failures: number) {
  const got: Delivery[] = [];
  let release = () => {};
  const released = new Promise<void>((r) => { release = r; });
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const raw = Buffer.concat(chunks).toString("utf8");
      got.push({ at: Date.now(), raw, body: JSON.parse(raw), signature: String(req.headers["webhook-signature"] ?? "") });
      if (got.length <= failures) res.writeHead(500).end("not yet");
      else void released.then(() => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ done: true })));
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, got, release, close: () => new Promise<void>((r) => server.close(() => r())) };
}

const api = jsonApi(() => ({ url: worker.url, token }));

async function waitFor<T>(what: string, fn: () => Promise<T | null | undefined | false> | T | null | undefined | false, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("webhook subscriptions", () => {
  it("a failing receiver is retried with growing delays; every delivery is signed with the house's key; done moves the cursor", async () => {
    const hook = await receiver(2);
    try {
      const created = await api("/v1/stream/__ds/subscriptions/retrying", { method: "PUT", json: { type: "webhook", pattern: "orders/*", webhook: { url: hook.url }, lease_ttl_ms: 30_000 } });
      expect(created.status).toBe(201);
      const jwks = (await api("/v1/stream/__ds/jwks.json")).body as { keys: any[] };
      expect((await api("/v1/stream/orders/1", { method: "PUT", json: { order: 1 } })).status).toBe(201);

      await waitFor("the first (failed) delivery", () => hook.got.length >= 1);
      await waitFor("the subscription to show the failure", async () => (await api("/v1/stream/__ds/subscriptions/retrying")).body.status === "failed");
      hook.release();
      await waitFor("two retries", () => hook.got.length >= 3);
      // About 1 s, then about 2 s (±20 % each): lower bounds only, which a loaded machine cannot
      // break (it makes gaps longer, and not always the second: 1.2 times the first was too tight).
      const gaps = [hook.got[1].at - hook.got[0].at, hook.got[2].at - hook.got[1].at];
      expect(gaps[0]).toBeGreaterThanOrEqual(700);
      expect(gaps[1]).toBeGreaterThanOrEqual(1500);
      // The same wake each time: one generation, one wake id.
      expect(new Set(hook.got.map((d) => `${d.body.generation}/${d.body.wake_id}`)).size).toBe(1);
      for (const d of hook.got) {
        const m = /^t=(\d+),kid=([^,]+),ed25519=([A-Za-z0-9_-]+)$/.exec(d.signature)!;
        const key = jwks.keys.find((k) => k.kid === m[2]);
        expect(verify(null, Buffer.from(`${m[1]}.${d.raw}`), createPublicKey({ key, format: "jwk" }), Buffer.from(m[3], "base64url"))).toBe(true);
        // Tampering breaks it.
        expect(verify(null, Buffer.from(`${m[1]}.${d.raw.replace("orders/1", "orders/2")}`), createPublicKey({ key, format: "jwk" }), Buffer.from(m[3], "base64url"))).toBe(false);
      }
      const tail = hook.got[2].body.streams[0].tail_offset as string;
      const done = await waitFor("the cursor at the tail", async () => {
        const s = (await api("/v1/stream/__ds/subscriptions/retrying")).body;
        return s.streams[0]?.acked_offset === tail && s.status === "active" ? s : null;
      });
      expect(done.streams).toEqual([{ path: "orders/1", link_type: "glob", acked_offset: tail }]);

      // More work: a new wake, the next generation, delivered at once.
      expect((await api("/v1/stream/orders/1", { method: "POST", json: { order: 2 } })).status).toBe(204);
      const next = await waitFor("the next wake", () => hook.got[3]);
      expect(next.body.generation).toBe(hook.got[0].body.generation + 1);
      expect(next.body.callback_url).toBe(`${worker.url}/v1/stream/__ds/subscriptions/retrying/callback`);
    } finally {
      await api("/v1/stream/__ds/subscriptions/retrying", { method: "DELETE" });
      await hook.close();
    }
  });

  it("a receiver's redirect is not followed: the webhook goes only to the URL that was checked, and the delivery counts as failed", async () => {
    // Where the redirect points is never checked against the webhook URL rules (here a second
    // local server stands for a private address the rules would refuse).
    const behind: string[] = [];
    const inner: Server = createServer((req, res) => {
      behind.push(`${req.method} ${req.url}`);
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ done: true }));
    });
    await new Promise<void>((r) => inner.listen(0, "127.0.0.1", r));
    const target = `http://127.0.0.1:${(inner.address() as AddressInfo).port}/internal`;
    let redirected = 0;
    const outer: Server = createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        redirected += 1;
        res.writeHead(307, { location: target }).end();
      });
    });
    await new Promise<void>((r) => outer.listen(0, "127.0.0.1", r));
    try {
      const url = `http://127.0.0.1:${(outer.address() as AddressInfo).port}/hook`;
      expect((await api("/v1/stream/__ds/subscriptions/redirected", { method: "PUT", json: { type: "webhook", pattern: "moved/*", webhook: { url } } })).status).toBe(201);
      expect((await api("/v1/stream/moved/1", { method: "PUT", json: { n: 1 } })).status).toBe(201);
      await waitFor("the delivery to the named URL", () => redirected >= 1);
      // A retry comes after about a second: by then a followed redirect would have arrived.
      await waitFor("a retry, or the redirect followed", () => redirected >= 2 || behind.length > 0);
      expect(behind).toEqual([]);
      expect((await api("/v1/stream/__ds/subscriptions/redirected")).body.status).toBe("failed");
    } finally {
      await api("/v1/stream/__ds/subscriptions/redirected", { method: "DELETE" });
      await new Promise<void>((r) => outer.close(() => r()));
      await new Promise<void>((r) => inner.close(() => r()));
    }
  });
});
