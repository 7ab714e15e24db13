import { describe, expect, it } from "vitest";
import { OVERSIZE_DRAIN_BYTES } from "../../src/http/bounded-body";
import { SELF, env, runInDurableObject } from "cloudflare:test";
import { BASE, call, chat, createThread, errorCode, houseToken, post, readAll, streamToken, WEBSOCKET_HANDSHAKE } from "./helpers";
import type { ThreadActor } from "./test-worker";
import { MAX_JSON_DEPTH } from "../../src/entries/json-limits";

const E = env as unknown as { THREADS: DurableObjectNamespace<ThreadActor> };
const threadStub = (id: string) => E.THREADS.get(E.THREADS.idFromName(`thread:${id}`));

/** A chat payload whose `deep` field nests `levels` arrays. */
function deepPayload(levels: number): string {
  return `{"type":"chat","text":"deep","deep":${"[".repeat(levels)}${"]".repeat(levels)}}`;
}
/** An envelope whose body nests exactly `depth` levels of arrays/objects in total. */
const envelopeOfDepth = (depth: number) => `{"payload":${deepPayload(depth - 2)}}`;

async function expectError(r: Response, status: number, code: string) {
  expect(r.status).toBe(status);
  expect(r.headers.get("content-type")).toContain("application/json");
  expect(await errorCode(r)).toBe(code);
}

describe("nesting depth limit", () => {
  it(`refuses entries nested deeper than ${MAX_JSON_DEPTH} levels on the REST path with 400 validation_failed; ${MAX_JSON_DEPTH} is accepted`, async () => {
    const token = await houseToken("house-depth");
    const t = await createThread(token);
    const send = (body: string) => call(`/api/threads/${t.id}/entries`, { method: "POST", token, body, headers: { "content-type": "application/json" } });
    expect((await send(envelopeOfDepth(MAX_JSON_DEPTH))).status).toBe(201);
    await expectError(await send(envelopeOfDepth(MAX_JSON_DEPTH + 1)), 400, "validation_failed");
    await expectError(await send(envelopeOfDepth(4000)), 400, "validation_failed");
    await expectError(await send(`[${envelopeOfDepth(10_000)}]`), 400, "validation_failed");
    // Brackets inside strings are text, not nesting.
    expect((await send(JSON.stringify({ payload: { type: "chat", text: "[".repeat(5000) } }))).status).toBe(201);
    expect((await readAll(token, t.id)).entries).toHaveLength(2);
  });

  it("refuses the same bodies on the stream path (what a box's stream:write token uses)", async () => {
    const token = await houseToken("house-depth-2");
    const t = await createThread(token);
    const st = await streamToken("house-depth-2", t.id);
    const send = (body: string) => call(`/api/stream/thread-${t.id}`, { method: "POST", token: st, body, headers: { "content-type": "application/json" } });
    expect((await send(envelopeOfDepth(MAX_JSON_DEPTH))).status).toBe(204);
    await expectError(await send(envelopeOfDepth(MAX_JSON_DEPTH + 1)), 400, "validation_failed");
    await expectError(await send(envelopeOfDepth(4000)), 400, "validation_failed");
    await expectError(await send(`[${envelopeOfDepth(10_000)}]`), 400, "validation_failed");
    expect((await readAll(token, t.id)).entries).toHaveLength(1);
  });

  it("reads never fail on an entry stored deep before the limit existed (JSON, NDJSON, WebSocket)", async () => {
    const token = await houseToken("house-depth-3");
    const t = await createThread(token);
    await post(token, t.id, chat("before"));
    // What an older version stored: bytes written straight into the thread's log.
    const levels = 10_000;
    await runInDurableObject(threadStub(t.id), (actor: ThreadActor) => {
      const data = new TextEncoder().encode(`{"id":"deep-1","ts":1,"authorId":"box","payload":${deepPayload(levels)}}`);
      actor.testAppendRaw("deep-1", data);
    });
    await post(token, t.id, chat("after"));

    const page = await readAll(token, t.id);
    expect(page.entries.map((e) => e.id).slice(1)).toEqual(["deep-1", page.entries[2].id]);
    const deep = page.entries[1];
    expect(deep.payload.type).toBe("chat");
    expect(deep.authorId).toBe("box");
    expect(JSON.stringify(deep.payload.deep)).toContain(`nested deeper than ${MAX_JSON_DEPTH} levels`);

    const nd = await call(`/api/threads/${t.id}/entries?offset=-1`, { token, headers: { accept: "application/x-ndjson" } });
    expect(nd.status).toBe(200);
    expect((await nd.text()).trim().split("\n")).toHaveLength(3);

    const res = await SELF.fetch(`${BASE}/api/threads/${t.id}/subscribe?offset=-1`, { headers: { ...WEBSOCKET_HANDSHAKE, authorization: `Bearer ${token}` } });
    expect(res.status).toBe(101);
    const ws = res.webSocket!;
    const got: { id: string }[] = [];
    const three = new Promise<void>((resolve) => ws.addEventListener("message", (e) => {
      got.push(JSON.parse(e.data as string));
      if (got.length === 3) resolve();
    }));
    ws.accept();
    await three;
    expect(got[1].id).toBe("deep-1");
    ws.close();

    // The Durable Streams read hands back the stored bytes as they are.
    expect((await call(`/api/stream/thread-${t.id}?offset=-1`, { token })).status).toBe(200);
  });
});

describe("an unknown field", () => {
  it("is reported at its own path, on every strict body", async () => {
    const token = await houseToken("house-unknown-field");
    for (const [path, body, field] of [
      ["/api/agents", { name: "x", handle: "x1", model: "a/b", extra: 1 }, "extra"],
      ["/api/environments", { name: "e", folders: [{ source: "n", path: "n", acess: "readwrite" }] }, "folders.0.acess"],
    ] as const) {
      const r = await call(path, { method: "POST", token, json: body });
      expect(r.status, path).toBe(400);
      const details = ((await r.json()) as { error: { details: { path: string; message: string }[] } }).error.details;
      expect(details, path).toContainEqual({ path: field, message: "unknown field" });
    }
  });
});

describe("names and references that cannot mean what they say", () => {
  it("a parent-less thread naming a parent, a reserved or control-character subject, a model with a space or line break: 400 at the field", async () => {
    const token = await houseToken("house-odd-names");
    const field = async (r: Response) => ({ status: r.status, paths: (((await r.json()) as { error: { details?: { path: string }[] } }).error.details ?? []).map((d) => d.path) });
    expect(await field(await call("/api/threads", { method: "POST", token, json: { parent: { kind: "none", id: "th_x" } } }))).toEqual({ status: 400, paths: ["parent.id"] });
    for (const subject of ["Threadbox", "THREADBOX", "alice\u0000", "bob\nroot", "threadbox ", "\u200bthreadbox", "ｔｈｒｅａｄｂｏｘ", "thread\u00adbox", "threadbo\u034fx", "threadbox\u0085", "thr\u0435adbox", "threadbox\u3164", "threadbox\u2800", "threadbox\ufe0f"]) {
      const r = await call("/api/admin/tokens", { method: "POST", headers: { authorization: "Bearer test-admin-secret" }, json: { houseId: "house-odd-names", subject } });
      expect({ subject, ...(await field(r)) }).toEqual({ subject, status: 400, paths: ["subject"] });
    }
    expect(await field(await call("/api/environments", { method: "POST", token, json: { name: "m", model: "local/m\nrm -rf" } }))).toEqual({ status: 400, paths: ["model"] });
    const t = await createThread(token);
    expect(await field(await call(`/api/threads/${t.id}/delegate`, { method: "POST", token, json: { task: "x", model: "local/a b" } }))).toEqual({ status: 400, paths: ["model"] });
    // No model and no environment to take one from: the answer says how to give one (naming an environment is one way).
    const noModel = await call(`/api/threads/${t.id}/delegate`, { method: "POST", token, json: { task: "x" } });
    expect(noModel.status).toBe(400);
    const said = ((await noModel.json()) as { error: { code: string; message: string } }).error;
    expect(said.code).toBe("validation_failed");
    expect(said.message).toContain("the thread has no environment");
    expect(said.message).toContain(`"environmentId" or "environmentName"`);
    expect(said.message).not.toContain(`set the environment's "model"`);
    // A control character is no part of a model's name either (a NUL cannot even reach a process's arguments).
    for (const model of ["\u0000", "local/m\u0000x", "local/\u0007m", "local/m\u007f"]) {
      expect(await field(await call(`/api/threads/${t.id}/delegate`, { method: "POST", token, json: { task: "x", model } })), JSON.stringify(model)).toEqual({ status: 400, paths: ["model"] });
    }
    // A token signed with the right key but a subject past any author's length is refused too.
    const long = await houseToken("house-odd-names", "x".repeat(201));
    expect((await call("/api/threads", { token: long })).status).toBe(401);
  });
});

describe("a __proto__ key in a map", () => {
  // JSON.parse makes it an own key; left to zod's record it vanished and the request was a 2xx.
  it("is a 400 at its path, not silently dropped", async () => {
    const token = await houseToken("house-proto-key");
    const t = await createThread(token);
    const env = await call("/api/environments", { method: "POST", token, json: { name: "proto-env" } });
    const envId = ((await env.json()) as { id: string }).id;
    const cases: [string, string, string, string][] = [
      ["POST", "/api/environments", '{"name":"p","env":{"__proto__":"x","OK":"1"}}', "env.__proto__"],
      ["POST", "/api/environments", '{"name":"p","secrets":{"__proto__":"s3cret"}}', "secrets.__proto__"],
      ["POST", "/api/environments", '{"name":"p","piModels":{"__proto__":{}}}', "piModels.__proto__"],
      ["POST", "/api/environments", '{"name":"p","plugins":{"mcpServers":{"__proto__":{"command":"x"}}}}', "plugins.mcpServers.__proto__"],
      ["PATCH", `/api/environments/${envId}`, '{"env":{"__proto__":"x"}}', "env.__proto__"],
      ["PATCH", `/api/environments/${envId}`, '{"secrets":{"__proto__":"x"}}', "secrets.__proto__"],
      ["PATCH", `/api/threads/${t.id}/config`, '{"dispatch":{"perAgent":{"__proto__":{"triggerMode":"always"}}}}', "dispatch.perAgent.__proto__"],
    ];
    for (const [method, path, body, field] of cases) {
      const r = await call(path, { method, token, body, headers: { "content-type": "application/json" } });
      const { error } = (await r.json()) as { error?: { details?: { path: string }[] } };
      expect({ body, status: r.status, paths: error?.details?.map((d) => d.path) }).toEqual({ body, status: 400, paths: [field] });
    }
  });
});

describe("plain stream creation that would already be expired", () => {
  it("answers 400 with the JSON error shape, never 500", async () => {
    const token = await houseToken("house-ttl");
    const put = (name: string, headers: Record<string, string>) =>
      call(`/api/stream/${name}`, { method: "PUT", token, headers: { "content-type": "text/plain", ...headers } });
    await expectError(await put("ttl-zero", { "Stream-TTL": "0" }), 400, "bad_request");
    await expectError(await put("expired-at", { "Stream-Expires-At": new Date(Date.now() - 60_000).toISOString() }), 400, "bad_request");
    await expectError(await put("expired-at-body", { "Stream-Expires-At": "2020-01-01T00:00:00Z" }), 400, "bad_request");
    // Not a real day (Date.parse rolls it over to March 2), not RFC 3339, no zone: refused, nothing created.
    for (const bad of ["2030-02-30T00:00:00Z", "Tue, 01 Jan 2030 00:00:00 GMT", "2030-01-01T00:00:00"]) {
      await expectError(await put("bad-date", { "Stream-Expires-At": bad }), 400, "bad_request");
    }
    expect((await put("good-date", { "Stream-Expires-At": "2030-02-28T23:59:59.5+01:00" })).status).toBe(201);
    expect((await put("ttl-one", { "Stream-TTL": "60" })).status).toBe(201);
    expect((await call("/api/stream/ttl-zero", { method: "HEAD", token })).status).toBe(404);
  });
});

/**
 * A chunked body (no Content-Length) of `totalBytes`, produced lazily; `pulled()` says how much
 * of it the server asked for.
 */
function chunkedBody(totalBytes: number, chunkBytes = 64 * 1024) {
  let produced = 0;
  const chunk = new TextEncoder().encode(" ".repeat(chunkBytes));
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (produced >= totalBytes) return controller.close();
      produced += chunk.byteLength;
      controller.enqueue(chunk);
    },
  }, { highWaterMark: 0 });
  return { stream, pulled: () => produced };
}

describe("chunked bodies are counted while they are read", () => {
  const LIMIT = 1024 * 1024;
  const TOTAL = 16 * LIMIT;

  it("every JSON route and the stream route stop near 1 MiB with 413 payload_too_large", async () => {
    const token = await houseToken("house-chunked");
    const t = await createThread(token);
    const envRes = await call("/api/environments", { method: "POST", token, json: { name: "e", provider: "test", sharedBox: true } });
    const e = (await envRes.json()) as { id: string };
    await call("/api/stream/chunky", { method: "PUT", token, headers: { "content-type": "application/json" } });
    const agentRes = await call("/api/agents", { method: "POST", token, json: { name: "a", handle: "chunky-bot", model: "local/m" } });
    const agent = (await agentRes.json()) as { id: string };
    const routes: [string, string, Record<string, string>, string?][] = [
      ["/api/threads", token, {}],
      [`/api/threads/${t.id}/config`, token, {}, "PATCH"],
      ["/api/agents", token, {}],
      [`/api/agents/${agent.id}`, token, {}, "PATCH"],
      [`/api/environments/${e.id}`, token, {}, "PATCH"],
      [`/api/threads/${t.id}/entries`, token, {}],
      [`/api/threads/${t.id}/tokens`, token, {}],
      [`/api/threads/${t.id}/delegate`, token, {}],
      [`/api/threads/${t.id}/resume`, token, {}],
      ["/api/environments", token, {}],
      [`/api/environments/${e.id}/exec`, token, {}],
      ["/api/sandboxes", token, {}],
      ["/api/admin/tokens", "test-admin-secret", {}],
      [`/api/stream/thread-${t.id}`, token, {}],
      ["/api/stream/chunky", token, {}],
    ];
    for (const [path, bearer, , method = "POST"] of routes) {
      const body = chunkedBody(TOTAL);
      const r = await SELF.fetch(`${BASE}${path}`, {
        method, body: body.stream, headers: { authorization: `Bearer ${bearer}`, "content-type": "application/json" },
      });
      expect({ path, status: r.status }).toEqual({ path, status: 413 });
      expect(await errorCode(r)).toBe("payload_too_large");
      // Read up to the limit and a bounded drain past it (so the client gets its 413), then cut: not the whole 16 MiB.
      expect({ path, bounded: body.pulled() < LIMIT + OVERSIZE_DRAIN_BYTES + 4 * 64 * 1024 }).toEqual({ path, bounded: true });
    }
    expect((await readAll(token, t.id)).entries).toHaveLength(0);
  });
});

describe("authorization before validation", () => {
  it("another house's thread or environment answers 404 whatever the body is", async () => {
    const owner = await houseToken("house-av-a");
    const intruder = await houseToken("house-av-b", "mallory");
    const t = await createThread(owner);
    const envRes = await call("/api/environments", { method: "POST", token: owner, json: { name: "e", provider: "test", sharedBox: true } });
    const e = (await envRes.json()) as { id: string };
    const bodies: [string, Record<string, string>][] = [
      ["{not json", { "content-type": "application/json" }],
      [JSON.stringify({ wrong: true }), { "content-type": "application/json" }],
      [envelopeOfDepth(500), { "content-type": "application/json" }],
      ["plain", { "content-type": "text/plain" }],
      [JSON.stringify({ payload: { type: "chat", text: "x" } }), { "content-type": "application/json; charset=latin1" }],
    ];
    const paths = [`/api/threads/${t.id}/entries`, `/api/threads/${t.id}/tokens`, `/api/threads/${t.id}/delegate`, `/api/threads/${t.id}/resume`, `/api/environments/${e.id}/exec`];
    for (const path of paths) {
      for (const [body, headers] of bodies) {
        const r = await call(path, { method: "POST", token: intruder, body, headers });
        expect({ path, body: body.slice(0, 20), status: r.status }).toEqual({ path, body: body.slice(0, 20), status: 404 });
        expect(await errorCode(r)).toBe("not_found");
      }
    }
  });
});

describe("authorship of entries", () => {
  it("a member writes only as its token's subject; only admin may name another author; nobody writes as threadbox", async () => {
    const member = await houseToken("house-author", "alice", "member");
    const bot = await houseToken("house-author", "bot-1", "bot");
    const admin = await houseToken("house-author", "root", "admin");
    const t = await createThread(member);
    expect((await post(member, t.id, { ...chat("mine"), authorId: "alice" })).status).toBe(201);
    expect((await post(member, t.id, chat("implicit"))).status).toBe(201);
    await expectError(await post(member, t.id, { ...chat("forged"), authorId: "bob" }), 403, "forbidden");
    await expectError(await post(bot, t.id, [chat("ok"), { ...chat("forged"), authorId: "alice" }]), 403, "forbidden");
    await expectError(await post(member, t.id, { payload: { type: "signal.thread.status_changed", status: "completed" }, authorId: "threadbox" }), 403, "forbidden");
    await expectError(await post(admin, t.id, { ...chat("system"), authorId: "threadbox" }), 403, "forbidden");
    // Nor in a spelling a reader takes for it: case, padding, full width, look-alike letters.
    for (const lookalike of ["Threadbox", "threadbox ", "ｔｈｒｅａｄｂｏｘ", "thrеadbox", "thread\u200bbox"]) {
      await expectError(await post(admin, t.id, { ...chat("system"), authorId: lookalike }), 403, "forbidden");
      const brain = await call("/api/threads", { method: "POST", token: admin, json: { brainId: lookalike } });
      expect(brain.status, lookalike).toBe(403);
      await brain.body?.cancel();
    }
    expect((await post(admin, t.id, { ...chat("on behalf"), authorId: "bob" })).status).toBe(201);
    const all = await readAll(member, t.id);
    expect(all.entries.map((e) => [e.payload.text, e.authorId])).toEqual([["mine", "alice"], ["implicit", "alice"], ["on behalf", "bob"]]);
  });

  it("on the stream path a token writes as its subject: a minted stream token as its minter, never as anyone else", async () => {
    const member = await houseToken("house-author-2", "alice", "member");
    const t = await createThread(member);
    const minted = (await (await call(`/api/threads/${t.id}/tokens`, { method: "POST", token: member, json: { scope: "stream:write" } })).json()) as { token: string };
    const send = (body: unknown) => call(`/api/stream/thread-${t.id}`, { method: "POST", token: minted.token, json: body });
    expect((await send(chat("via stream"))).status).toBe(204);
    await expectError(await send({ ...chat("forged"), authorId: "bob" }), 403, "forbidden");
    await expectError(await send({ ...chat("system"), authorId: "threadbox" }), 403, "forbidden");
    const all = await readAll(member, t.id);
    expect(all.entries.map((e) => [e.payload.text, e.authorId])).toEqual([["via stream", "alice"]]);
  });
});

describe("who a run writes as", () => {
  it("a thread's brain (what its box writes as) follows the same rule; no token is ever minted for threadbox", async () => {
    const member = await houseToken("house-author-3", "alice", "member");
    const admin = await houseToken("house-author-3", "root", "admin");
    const create = (token: string, brainId: string) => call("/api/threads", { method: "POST", token, json: { brainId } });
    await expectError(await create(member, "ceo"), 403, "forbidden");
    await expectError(await create(admin, "threadbox"), 403, "forbidden");
    expect((await create(member, "alice")).status).toBe(201);
    expect((await create(admin, "bot-7")).status).toBe(201);
    // The refusal names the field the caller sent, not authorId.
    expect(((await (await create(member, "ceo")).json()) as { error: { message: string } }).error.message)
      .toBe("this token writes entries as alice; only the admin role may set another brainId");
    expect(((await (await create(admin, "threadbox")).json()) as { error: { message: string } }).error.message)
      .toBe("brainId threadbox (in any spelling that looks like it) is reserved for the control plane");
    const mint = await call("/api/admin/tokens", { method: "POST", headers: { authorization: "Bearer test-admin-secret" }, json: { houseId: "house-author-3", subject: "threadbox" } });
    await expectError(mint, 400, "validation_failed");
  });
});

describe("query strings and charsets", () => {
  it("a repeated query parameter is a 400 on every route", async () => {
    const token = await houseToken("house-query");
    const t = await createThread(token);
    await call("/api/stream/q", { method: "PUT", token, headers: { "content-type": "text/plain" } });
    const paths = [
      "/api/threads?limit=1&limit=2",
      `/api/threads/${t.id}/entries?offset=-1&offset=0`,
      `/api/threads/${t.id}/entries?limit=1&limit=5`,
      `/api/threads/${t.id}?x=1&x=2`,
      "/api/sandboxes?state=live&state=dead",
      "/api/environments?a=1&a=1",
      `/api/stream/thread-${t.id}?offset=-1&offset=0`,
      "/api/stream/q?offset=-1&live=long-poll&live=sse",
    ];
    for (const path of paths) {
      const r = await call(path, { token });
      expect({ path, status: r.status }).toEqual({ path, status: 400 });
      expect(r.headers.get("content-type")).toContain("application/json");
    }
    const ws = await SELF.fetch(`${BASE}/api/threads/${t.id}/subscribe?offset=-1&offset=now`, { headers: { ...WEBSOCKET_HANDSHAKE, authorization: `Bearer ${token}` } });
    expect(ws.status).toBe(400);
  });

  it("a bad query parameter is a 400 whose details name it, on every route that takes one", async () => {
    const token = await houseToken("house-query-details");
    const t = await createThread(token);
    const envId = ((await (await call("/api/environments", { method: "POST", token, json: { name: "q" } })).json()) as { id: string }).id;
    const cases: [string, string][] = [
      [`/api/threads/${t.id}/dispatch?limit=abc`, "limit"],
      [`/api/threads/${t.id}/artifacts?limit=0`, "limit"],
      [`/api/threads/${t.id}/entries?limit=abc`, "limit"],
      // Number() would read these as 16, 100, 5 and 1: a limit is written in digits.
      ["/api/threads?limit=0x10", "limit"],
      [`/api/threads/${t.id}/entries?limit=1e2`, "limit"],
      [`/api/threads/${t.id}/artifacts?limit=%2B5`, "limit"],
      [`/api/threads/${t.id}/dispatch?limit=1.0`, "limit"],
      ["/api/threads?status=sleepy", "status"],
      ["/api/sandboxes?ephemeral=maybe", "ephemeral"],
      ["/api/sandboxes/box_x/ports/http/preview", "port"],
      [`/api/environments/${envId}/folders/-bad`, "name"],
      [`/api/environments/${envId}/folders/notes?version=0`, "version"],
    ];
    for (const [path, param] of cases) {
      const r = await call(path, { token });
      const { error } = (await r.json()) as { error: { code: string; details?: { path: string }[] } };
      expect({ path, status: r.status, code: error.code, paths: error.details?.map((d) => d.path) }).toEqual({ path, status: 400, code: "validation_failed", paths: [param] });
    }
    const idem = await call("/api/threads", { method: "POST", token, json: {}, headers: { "idempotency-key": "bad key" } });
    const { error } = (await idem.json()) as { error: { details?: { path: string }[] } };
    expect([idem.status, error.details?.map((d) => d.path)]).toEqual([400, ["Idempotency-Key"]]);
  });

  it("an unknown query parameter on a list route is a 400 naming it and what the route takes, not ignored (a misspelt filter listed everything)", async () => {
    const token = await houseToken("house-query-unknown");
    const t = await createThread(token);
    const envId = ((await (await call("/api/environments", { method: "POST", token, json: { name: "q" } })).json()) as { id: string }).id;
    const cases: [string, string, string][] = [
      ["/api/threads?statuss=running", "statuss", "query: parent is a thread id or none, parentKind none|agent|thread, status idle|running|completed|failed, limit an integer from 1 to 1000, before an ISO-8601 date-time, beforeId (with before) a thread id"],
      [`/api/threads/${t.id}/entries?offst=now`, "offst", "query: offset is -1, 0, now or an offset returned by the server, limit an integer from 1 to 10000 (long-poll and SSE reads are on /api/stream/thread-<id>)"],
      [`/api/threads/${t.id}/entries?offset=-1&live=long-poll`, "live", "query: offset is -1, 0, now or an offset returned by the server, limit an integer from 1 to 10000 (long-poll and SSE reads are on /api/stream/thread-<id>)"],
      [`/api/threads/${t.id}/dispatch?lmit=5`, "lmit", "query: limit is an integer from 1 to 500"],
      ["/api/sandboxes?status=live", "status", "query: state is provisioning|live|dead|deleted, ephemeral true|false"],
      ["/api/environments?limit=abc", "limit", "GET /api/environments takes no query parameters"],
      ["/api/agents?limit=-1", "limit", "GET /api/agents takes no query parameters"],
      [`/api/environments/${envId}/folders?limit=1e9`, "limit", "GET /api/environments/:id/folders takes no query parameters"],
    ];
    for (const [path, param, message] of cases) {
      const r = await call(path, { token });
      expect({ path, status: r.status, body: await r.json() }).toEqual({ path, status: 400, body: { error: { code: "validation_failed", message, details: [{ path: param, message: "unknown query parameter" }] } } });
    }
    // What the routes do take still works.
    for (const path of ["/api/threads?status=running&limit=5", `/api/threads/${t.id}/entries?offset=-1&limit=5`, `/api/threads/${t.id}/dispatch?limit=5`, "/api/sandboxes?state=live", "/api/environments", "/api/agents", `/api/environments/${envId}/folders`]) {
      expect({ path, status: (await call(path, { token })).status }).toEqual({ path, status: 200 });
    }
  });

  it("a POST whose body is all optional may send none at all; a body without a type is still 415", async () => {
    const token = await houseToken("house-no-body");
    const created = await call("/api/threads", { method: "POST", token });
    expect(created.status).toBe(201);
    const t = (await created.json()) as { id: string };
    const minted = await call(`/api/threads/${t.id}/tokens`, { method: "POST", token });
    expect(minted.status).toBe(201);
    expect(((await minted.json()) as { scope?: string; token: string }).token).toBeTruthy();
    const box = await call("/api/sandboxes", { method: "POST", token, headers: { "content-length": "0" } });
    expect(box.status).toBe(201);
    await box.body?.cancel();
    await expectError(await call("/api/threads", { method: "POST", token, body: "{}" }), 415, "unsupported_media_type");
    // A client that sets Content-Type: application/json on every request and sends no body.
    const typed = { "content-type": "application/json" };
    const typedEmpty = await call("/api/threads", { method: "POST", token, headers: typed });
    expect(typedEmpty.status).toBe(201);
    await typedEmpty.body?.cancel();
    const typedMint = await call(`/api/threads/${t.id}/tokens`, { method: "POST", token, headers: typed });
    expect(typedMint.status).toBe(201);
    await typedMint.body?.cancel();
    await expectError(await call("/api/threads", { method: "POST", token, headers: { "content-type": "text/plain" } }), 415, "unsupported_media_type");
    // Chunked with no chunks is no body too.
    const empty = new ReadableStream({ start: (c) => c.close() });
    const chunked = await call("/api/threads", { method: "POST", token, body: empty, duplex: "half" } as RequestInit);
    expect(chunked.status).toBe(201);
    await chunked.body?.cancel();
    const typeless = new ReadableStream({ start: (c) => { c.enqueue(new TextEncoder().encode("{}")); c.close(); } });
    await expectError(await call("/api/threads", { method: "POST", token, body: typeless, duplex: "half" } as RequestInit), 415, "unsupported_media_type");
  });

  it("a charset other than utf-8 is 415 on JSON bodies; utf-8 is accepted", async () => {
    const token = await houseToken("house-charset");
    const t = await createThread(token);
    const body = JSON.stringify(chat("hé"));
    const rest = (ct: string) => call(`/api/threads/${t.id}/entries`, { method: "POST", token, body, headers: { "content-type": ct } });
    await expectError(await rest("application/json; charset=iso-8859-1"), 415, "unsupported_media_type");
    await expectError(await rest('application/json; charset="utf-16"'), 415, "unsupported_media_type");
    expect((await rest("application/json; charset=UTF-8")).status).toBe(201);
    await expectError(await call("/api/threads", { method: "POST", token, body: "{}", headers: { "content-type": "application/json;charset=latin1" } }), 415, "unsupported_media_type");
    const st = await streamToken("house-charset", t.id);
    const stream = (ct: string) => call(`/api/stream/thread-${t.id}`, { method: "POST", token: st, body, headers: { "content-type": ct } });
    await expectError(await stream("application/json; charset=windows-1252"), 415, "unsupported_media_type");
    expect((await stream("application/json; charset=utf-8")).status).toBe(204);
    expect((await readAll(token, t.id)).entries.map((e) => e.payload.text)).toEqual(["hé", "hé"]);
  });
});

describe("WebSocket subprotocol", () => {
  it("selects the offered protocol name and never echoes the bearer token", async () => {
    const token = await houseToken("house-ws");
    const t = await createThread(token);
    const open = (protocols: string) => SELF.fetch(`${BASE}/api/threads/${t.id}/subscribe?offset=-1`, { headers: { ...WEBSOCKET_HANDSHAKE, "sec-websocket-protocol": protocols } });
    for (const offered of [`bearer.${token}, threadbox`, `threadbox, bearer.${token}`]) {
      const r = await open(offered);
      expect(r.status).toBe(101);
      expect(r.headers.get("sec-websocket-protocol")).toBe("threadbox");
      r.webSocket!.accept();
      r.webSocket!.close();
    }
    const only = await open(`bearer.${token}`);
    expect(only.status).toBe(101);
    expect(only.headers.get("sec-websocket-protocol") ?? "").not.toContain(token);
    only.webSocket!.accept();
    only.webSocket!.close();
  });
});

describe("entry ts", () => {
  it("accepts epoch milliseconds or an ISO-8601 date-time and stores epoch milliseconds", async () => {
    const token = await houseToken("house-ts");
    const t = await createThread(token);
    const iso = "2026-11-22T04:00:00Z";
    expect((await post(token, t.id, { ...chat("iso"), ts: iso })).status).toBe(201);
    expect((await post(token, t.id, { ...chat("offset"), ts: "2026-11-22T06:00:00+02:00" })).status).toBe(201);
    expect((await post(token, t.id, { ...chat("ms"), ts: 1_700_000_000_000 })).status).toBe(201);
    await expectError(await post(token, t.id, { ...chat("bad"), ts: "yesterday" }), 400, "validation_failed");
    await expectError(await post(token, t.id, { ...chat("no zone"), ts: "2026-11-22" }), 400, "validation_failed");
    // The message says which forms ts takes, not zod's "Invalid input".
    const bad = (await (await post(token, t.id, { ...chat("bad"), ts: "yesterday" })).json()) as { error: { details: { path: string; message: string }[] } };
    expect(bad.error.details).toEqual([{ path: "0.ts", message: 'ts is epoch milliseconds (a whole number from 0 to 8.64e15) or an ISO-8601 date-time with a zone (2026-11-22T04:00:00Z, 2026-11-22T06:00:00+02:00); got "yesterday"' }]);
    // Past what a Date holds, every reader's conversion would fail (the CLI's tail did).
    await expectError(await post(token, t.id, { ...chat("too late"), ts: 8_640_000_000_000_001 }), 400, "validation_failed");
    expect((await post(token, t.id, { ...chat("last ms"), ts: 8_640_000_000_000_000 })).status).toBe(201);
    const st = await streamToken("house-ts", t.id);
    expect((await call(`/api/stream/thread-${t.id}`, { method: "POST", token: st, json: { ...chat("stream iso"), ts: iso } })).status).toBe(204);
    const all = await readAll(token, t.id);
    expect(all.entries.map((e) => [e.payload.text, (e as unknown as { ts: unknown }).ts])).toEqual([
      ["iso", Date.parse(iso)], ["offset", Date.parse(iso)], ["ms", 1_700_000_000_000], ["last ms", 8_640_000_000_000_000], ["stream iso", Date.parse(iso)],
    ]);
  });

  it("a ts of neither form is refused saying what ts takes, not a bare \"Invalid input\"", async () => {
    const token = await houseToken("house-ts-message");
    const t = await createThread(token);
    for (const ts of ["yesterday", "1700000000000", 1.5, true, "2026-11-22T04:00Z"]) {
      const r = await post(token, t.id, { ...chat("bad"), ts });
      expect(r.status).toBe(400);
      const { error } = (await r.json()) as { error: { code: string; details: { path: string; message: string }[] } };
      expect({ ts, code: error.code, details: error.details }).toEqual({
        ts, code: "validation_failed",
        details: [{ path: "0.ts", message: `ts is epoch milliseconds (a whole number from 0 to 8.64e15) or an ISO-8601 date-time with a zone (2026-11-22T04:00:00Z, 2026-11-22T06:00:00+02:00); got ${typeof ts === "string" ? JSON.stringify(ts) : typeof ts === "number" ? String(ts) : typeof ts}` }],
      });
    }
  });
});

describe("text that says nothing", () => {
  type Refusal = { status: number; code: string; details: { path: string; message: string }[] };
  const refusal = async (r: Response): Promise<Refusal> => {
    const body = (await r.json()) as { error?: { code: string; details?: { path: string; message: string }[] } };
    return { status: r.status, code: body.error?.code ?? "", details: body.error?.details ?? [] };
  };
  const threadCount = async (token: string) => ((await (await call("/api/threads?limit=1000", { token })).json()) as { threads: unknown[] }).threads.length;

  it("a blank task (delegate) or message (resume) is a 400 at the field, and starts nothing", async () => {
    const token = await houseToken("house-blank-task");
    const t = await createThread(token);
    const before = await threadCount(token);
    for (const task of ["   ", "\n\t \u00a0", ""]) {
      const r = await refusal(await call(`/api/threads/${t.id}/delegate`, { method: "POST", token, json: { task, model: "local/m" } }));
      expect({ task, ...r }).toEqual({ task, status: 400, code: "validation_failed", details: [{ path: "task", message: "task is empty or only whitespace" }] });
      const m = await refusal(await call(`/api/threads/${t.id}/resume`, { method: "POST", token, json: { message: task } }));
      expect({ task, ...m }).toEqual({ task, status: 400, code: "validation_failed", details: [{ path: "message", message: "message is empty or only whitespace" }] });
    }
    expect(await threadCount(token)).toBe(before);
    expect((await readAll(token, t.id)).entries).toHaveLength(0);
  });

  it("a branch without a repo is a 400 at branch: there is nothing to check it out of", async () => {
    const token = await houseToken("house-branch-no-repo");
    const t = await createThread(token);
    const before = await threadCount(token);
    const r = await refusal(await call(`/api/threads/${t.id}/delegate`, { method: "POST", token, json: { task: "fix it", branch: "main", model: "local/m" } }));
    expect(r).toMatchObject({ status: 400, code: "validation_failed", details: [{ path: "branch", message: expect.stringContaining("branch needs repo") }] });
    expect(await threadCount(token)).toBe(before);
  });

  it("a blank chat is a 400 on the REST path and on the stream path; a chat with words is stored", async () => {
    const token = await houseToken("house-blank-chat");
    const t = await createThread(token);
    for (const text of ["  ", "\n\n", ""]) {
      const rest = await refusal(await call(`/api/threads/${t.id}/entries`, { method: "POST", token, json: { payload: { type: "chat", text } } }));
      expect({ text, ...rest }).toEqual({ text, status: 400, code: "validation_failed", details: [{ path: "0.payload.text", message: "a chat's text is empty or only whitespace" }] });
      const stream = await call(`/api/stream/thread-${t.id}`, { method: "POST", token: await streamToken("house-blank-chat", t.id), json: [{ payload: { type: "chat", text } }] });
      expect(stream.status).toBe(400);
      expect(await errorCode(stream)).toBe("validation_failed");
    }
    expect((await post(token, t.id, chat(" hi "))).status).toBe(201);
    expect((await readAll(token, t.id)).entries.map((e) => e.payload.text)).toEqual([" hi "]);
  });
});
