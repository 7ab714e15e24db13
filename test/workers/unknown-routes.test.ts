import { describe, expect, it } from "vitest";
import { createExecutionContext, env } from "cloudflare:test";
import worker from "../../src/worker";
import { call, createThread, houseToken, streamToken, WEBSOCKET_HANDSHAKE } from "./helpers";

describe("a path that matches no route", () => {
  it("answers 401 for a missing or bad token, before saying the route does not exist", async () => {
    for (const path of ["/api/threads//entries", "/api/nope", "/v1/nope"]) {
      const none = await call(path, { method: "POST" });
      expect(none.status, path).toBe(401);
      expect(((await none.json()) as { error: { code: string } }).error.code).toBe("unauthorized");
      const bad = await call(path, { method: "GET", token: "not-a-token" });
      expect(bad.status, path).toBe(401);
      await bad.body?.cancel();
    }
  });

  it("answers 404 no such route with a valid token, and outside the API without one", async () => {
    const token = await houseToken();
    const r = await call("/api/threads//entries", { method: "POST", token });
    expect(r.status).toBe(404);
    expect(await r.json()).toEqual({ error: { code: "not_found", message: "no such route" } });
    const outside = await call("/favicon.ico");
    expect(outside.status).toBe(404);
    await outside.body?.cancel();
  });

  it("answers 405 with Allow for a known path and a method it does not take, after the token check", async () => {
    const token = await houseToken();
    const put = await call("/api/threads/th_x/config", { method: "PUT", token, body: "{}" });
    expect(put.status).toBe(405);
    expect(put.headers.get("allow")).toBe("GET, PATCH, HEAD, OPTIONS");
    expect(((await put.json()) as { error: { code: string } }).error.code).toBe("method_not_allowed");
    const del = await call("/api/threads", { method: "DELETE", token });
    expect(del.status).toBe(405);
    expect(del.headers.get("allow")).toBe("POST, GET, HEAD, OPTIONS");
    // HEAD answers wherever GET does, as GET would but without the body.
    const head = await call("/api/threads", { method: "HEAD", token });
    expect([head.status, head.headers.get("content-type"), await head.text()]).toEqual([200, "application/json", ""]);
    expect((await call("/api/threads/th_nope/entries", { method: "HEAD", token })).status).toBe(404);
    // Not an upgrade: that would open a socket (and send it the whole log) only to drop it.
    // (Handed to the worker as the runtime hands it a HEAD; a test client's fetch turns an upgrade into a GET.)
    const t = await createThread(token);
    const upgrade = await worker.fetch(new Request(`https://threadbox.test/api/threads/${t.id}/subscribe?offset=-1`, {
      method: "HEAD", headers: { upgrade: "websocket", authorization: `Bearer ${token}` },
    }), env as never, createExecutionContext());
    expect([upgrade.status, upgrade.headers.get("allow"), upgrade.webSocket ?? null]).toEqual([405, "GET, OPTIONS", null]);
    await del.body?.cancel();
    // Without a token, the token problem comes first.
    const anon = await call("/api/threads/th_x/config", { method: "PUT" });
    expect(anon.status).toBe(401);
    await anon.body?.cancel();
    // Outside the API, and for the admin route that takes no token, the method is the answer.
    const health = await call("/health", { method: "POST" });
    expect(health.status).toBe(405);
    await health.body?.cancel();
    const mint = await call("/api/admin/tokens", { method: "GET" });
    expect(mint.status).toBe(405);
    expect(mint.headers.get("allow")).toBe("POST, OPTIONS");
    await mint.body?.cancel();
  });
});

describe("a path a route names word for word", () => {
  it("is that route's only: GET or DELETE /api/sandboxes/reconcile is a 405 (Allow: POST), not a 404 for a box called reconcile", async () => {
    const token = await houseToken("house-405-reconcile");
    for (const method of ["GET", "DELETE", "HEAD"]) {
      const r = await call("/api/sandboxes/reconcile", { method, token });
      expect({ method, status: r.status, allow: r.headers.get("allow") }).toEqual({ method, status: 405, allow: "POST, OPTIONS" });
      await r.body?.cancel();
    }
    const post = await call("/api/sandboxes/reconcile", { method: "POST", token });
    expect(post.status).toBe(200);
    expect(await post.json()).toEqual({ probed: 0, dead: [], results: [] });
    const box = await call("/api/sandboxes/box_nope", { token });
    expect(box.status).toBe(404);
    await box.body?.cancel();
  });
});

describe("405 under the stream base", () => {
  it("a thread's log, a stream token's renewal and the __ds routes answer a wrong method with Allow, after the token check", async () => {
    const token = await houseToken("house-405-streams");
    const t = await createThread(token);
    const cases: [string, string, string][] = [
      [`/api/stream/thread-${t.id}`, "DELETE", "GET, HEAD, POST, PUT, OPTIONS"],
      [`/api/stream/thread-${t.id}`, "PATCH", "GET, HEAD, POST, PUT, OPTIONS"],
      ["/v1/stream/__ds/jwks.json", "PATCH", "GET, HEAD, OPTIONS"],
      ["/v1/stream/__ds/subscriptions", "POST", "GET, HEAD, OPTIONS"],
      ["/v1/stream/__ds/subscriptions/s1/claim", "GET", "POST, OPTIONS"],
      ["/v1/stream/__ds/subscriptions/s1", "PATCH", "PUT, GET, DELETE, HEAD, OPTIONS"],
    ];
    for (const [path, method, allow] of cases) {
      const r = await call(path, { method, token, ...(method === "GET" ? {} : { body: "{}", headers: { "content-type": "application/json" } }) });
      expect({ path, method, status: r.status, allow: r.headers.get("allow") }).toEqual({ path, method, status: 405, allow });
      await r.body?.cancel();
      const anon = await call(path, { method });
      expect({ path, method, status: anon.status }).toEqual({ path, method, status: 401 });
      await anon.body?.cancel();
    }
    const st = await streamToken("house-405-streams", t.id);
    const renew = await call(`/api/stream/thread-${t.id}/token`, { token: st });
    expect([renew.status, renew.headers.get("allow")]).toEqual([405, "POST, OPTIONS"]);
    // What every Allow names, OPTIONS included, is answered: the preflight of a browser client.
    for (const path of [`/api/stream/thread-${t.id}/token`, "/v1/stream/__ds/subscriptions/s1/claim"]) {
      const preflight = await call(path, { method: "OPTIONS", headers: { origin: "https://app.example", "access-control-request-method": "POST" } });
      expect({ path, status: preflight.status, methods: preflight.headers.get("access-control-allow-methods") }).toEqual({ path, status: 204, methods: expect.stringContaining("POST") });
      await preflight.body?.cancel();
    }
    await renew.body?.cancel();
    // HEAD is a GET without its body here too.
    const head = await call("/v1/stream/__ds/jwks.json", { method: "HEAD", token });
    expect(head.status).toBe(200);
  });

  it("checks the token before judging an id or a name in the path: a malformed one is a 401 without a valid token", async () => {
    const paths: [string, string][] = [
      ["GET", "/api/threads/@@@"], ["GET", "/api/threads/@@@/entries"], ["POST", "/api/threads/@@@/entries"],
      ["GET", "/api/threads/@@@/subscribe"], ["POST", "/api/threads/@@@/tokens"], ["POST", "/api/threads/@@@/stop"],
      ["POST", "/api/threads/@@@/interrupt"], ["POST", "/api/threads/@@@/delegate"], ["POST", "/api/threads/@@@/resume"],
      ["GET", "/api/threads/@@@/config"], ["PATCH", "/api/threads/@@@/config"], ["GET", "/api/threads/@@@/dispatch"],
      ["GET", "/api/threads/@@@/artifacts"],
      ["GET", "/v1/stream/@@@"], ["GET", "/v1/stream/%E0%A4%A"], ["GET", "/v1/stream/a..b"],
      ["GET", "/v1/stream/__ds/nope"], ["GET", "/v1/stream/__ds/subscriptions/@@@"], ["PUT", "/v1/stream/__ds/subscriptions/@@@"],
    ];
    const token = await houseToken();
    for (const [method, path] of paths) {
      for (const bad of [undefined, "not-a-token"]) {
        const r = await call(path, { method, ...(bad ? { token: bad } : {}) });
        expect([method, path, bad ?? "none", r.status]).toEqual([method, path, bad ?? "none", 401]);
        await r.body?.cancel();
      }
      // With a valid token the path is judged as before.
      const ok = await call(path, { method, token });
      expect([method, path, ok.status >= 400 && ok.status < 500 && ok.status !== 401]).toEqual([method, path, true]);
      await ok.body?.cancel();
    }
  });

  it("checks the token before judging the query: a repeated parameter is a 401 without a valid token, a 400 with one", async () => {
    const token = await houseToken("house-query-order");
    const t = await createThread(token);
    const st = await streamToken("house-query-order", t.id);
    const cases: [string, string, string][] = [
      ["GET", "/api/threads?limit=1&limit=2", token], ["POST", "/api/threads?x=1&x=2", token],
      ["GET", `/api/threads/${t.id}/entries?offset=-1&offset=0`, token], ["GET", "/api/threads/@@@?x=1&x=2", token],
      ["GET", `/api/threads/${t.id}/subscribe?offset=-1&offset=now`, token],
      ["GET", "/api/sandboxes?state=live&state=dead", token], ["DELETE", "/api/environments/e1?a=1&a=2", token],
      ["GET", "/api/nope?a=1&a=2", token], ["GET", "/v1/nope?a=1&a=2", token],
      ["GET", `/api/stream/thread-${t.id}?offset=-1&offset=0`, st], ["POST", `/v1/stream/thread-${t.id}/token?a=1&a=2`, st],
      ["GET", "/v1/stream/q?offset=-1&offset=0", token], ["GET", "/v1/stream/__ds/jwks.json?a=1&a=2", token],
      ["GET", "/v1/stream/__ds/subscriptions/s1?a=1&a=2", token],
    ];
    for (const [method, path, good] of cases) {
      for (const bad of [undefined, "not-a-token"]) {
        const r = await call(path, { method, ...(bad ? { token: bad } : {}) });
        expect([method, path, bad ?? "none", r.status]).toEqual([method, path, bad ?? "none", 401]);
        await r.body?.cancel();
      }
      const ok = await call(path, { method, token: good });
      expect([method, path, ok.status]).toEqual([method, path, 400]);
      await ok.body?.cancel();
    }
    // The routes that take their own credentials check those first; the one that takes none judges the query at once.
    const mint = await call("/api/admin/tokens?a=1&a=2", { method: "POST", token: "not-the-secret", json: { houseId: "h", subject: "s" } });
    expect(mint.status).toBe(401);
    await mint.body?.cancel();
    const mintOk = await call("/api/admin/tokens?a=1&a=2", { method: "POST", token: "test-admin-secret", json: { houseId: "h", subject: "s" } });
    expect(mintOk.status).toBe(400);
    await mintOk.body?.cancel();
    const wake = await call("/v1/stream/__ds/subscriptions/s1/ack?a=1&a=2", { method: "POST", token: "not-a-token", json: {} });
    expect([wake.status, ((await wake.json()) as { error: { code: string } }).error.code]).toEqual([401, "TOKEN_INVALID"]);
    const health = await call("/health?a=1&a=2");
    expect(health.status).toBe(400);
    await health.body?.cancel();
    // A preflight carries no token and is answered the same on every path.
    const preflight = await call("/api/threads?a=1&a=2", { method: "OPTIONS" });
    expect(preflight.status).toBe(204);
  });
});

describe("a path with trailing slashes", () => {
  // The router serves `/api/threads/:id/subscribe/` as `/api/threads/:id/subscribe`: every check
  // made before or beside it must read the path the same way, or a valid credential in its right
  // place is answered as no credential at all.
  it("is the route's path to the token check too: its own credential is taken there, and the query then judged", async () => {
    const token = await houseToken("house-trailing-slash");
    const t = await createThread(token);
    for (const slashes of ["/", "//"]) {
      const served = await call(`/api/threads/${t.id}/subscribe${slashes}?offset=-1&token=${token}`, { headers: { ...WEBSOCKET_HANDSHAKE } });
      expect(served.status).toBe(101);
      served.webSocket!.accept();
      served.webSocket!.close();
      const repeated = await call(`/api/threads/${t.id}/subscribe${slashes}?offset=-1&offset=0&token=${token}`, { headers: { ...WEBSOCKET_HANDSHAKE } });
      expect([slashes, repeated.status, ((await repeated.json()) as { error: { code: string } }).error.code]).toEqual([slashes, 400, "invalid_offset"]);
      const mint = await call(`/api/admin/tokens${slashes}?a=1&a=2`, { method: "POST", token: "test-admin-secret", json: { houseId: "h", subject: "s" } });
      expect([slashes, mint.status, ((await mint.json()) as { error: { code: string } }).error.code]).toEqual([slashes, 400, "bad_request"]);
      const get = await call(`/api/admin/tokens${slashes}`, { token: "test-admin-secret" });
      expect([slashes, get.status, get.headers.get("allow")]).toEqual([slashes, 405, "POST, OPTIONS"]);
      await get.body?.cancel();
      const reconcile = await call(`/api/sandboxes/reconcile${slashes}`, { token });
      expect([slashes, reconcile.status, reconcile.headers.get("allow")]).toEqual([slashes, 405, "POST, OPTIONS"]);
      await reconcile.body?.cancel();
    }
    const minted = await call("/api/admin/tokens/", { method: "POST", token: "test-admin-secret", json: { houseId: "h", subject: "s" } });
    expect(minted.status).toBe(201);
    await minted.body?.cancel();
  });
});
