import { describe, expect, it } from "vitest";
import { createExecutionContext, env as testEnv, runInDurableObject } from "cloudflare:test";
import worker from "../../src/worker";
const env = testEnv as unknown as { HOUSES: DurableObjectNamespace };
import { BASE, call, chat, createThread, errorCode, houseToken, post, readAll, streamToken, ADMIN } from "./helpers";

describe("admin tokens", () => {
  it("mints a house token with the admin secret and refuses anything else", async () => {
    const ok = await call("/api/admin/tokens", { method: "POST", headers: { authorization: `Bearer ${ADMIN}` }, json: { houseId: "h1", subject: "u1", role: "member" } });
    expect(ok.status).toBe(201);
    const minted = (await ok.json()) as { token: string; expiresAt: string };
    expect(minted.token.split(".")).toHaveLength(3);
    expect(Date.parse(minted.expiresAt)).toBeGreaterThan(Date.now());
    const t = await createThread(minted.token);
    expect(t.houseId).toBe("h1");

    const wrong = await call("/api/admin/tokens", { method: "POST", headers: { authorization: "Bearer nope" }, json: { houseId: "h1", subject: "u1", role: "member" } });
    expect(wrong.status).toBe(401);
    const missing = await call("/api/admin/tokens", { method: "POST", json: { houseId: "h1", subject: "u1" } });
    expect(missing.status).toBe(401);
    const bad = await call("/api/admin/tokens", { method: "POST", headers: { authorization: `Bearer ${ADMIN}` }, json: { houseId: "", subject: "u1" } });
    expect(bad.status).toBe(400);
    expect(await errorCode(bad)).toBe("validation_failed");
    const badRole = await call("/api/admin/tokens", { method: "POST", headers: { authorization: `Bearer ${ADMIN}` }, json: { houseId: "h1", subject: "u1", role: "Not A Role" } });
    expect(badRole.status).toBe(400);
    // A role starting with a digit is refused saying that a role starts with a letter.
    const digitRole = await call("/api/admin/tokens", { method: "POST", headers: { authorization: `Bearer ${ADMIN}` }, json: { houseId: "h1", subject: "u1", role: "1abc" } });
    expect(((await digitRole.json()) as { error: { details: unknown } }).error.details).toEqual([{ path: "role", message: "role is 1-40 chars of [a-z0-9_-], starting with a letter" }]);
    const mint = async (role: string) => ((await (await call("/api/admin/tokens", { method: "POST", headers: { authorization: `Bearer ${ADMIN}` }, json: { houseId: "h1", subject: "u2", role } })).json()) as { token: string }).token;
    expect((await call("/api/threads", { method: "POST", token: await mint("admin"), json: {} })).status).toBe(201);
    const viewer = await mint("viewer");
    expect((await call("/api/threads", { method: "POST", token: viewer, json: {} })).status).toBe(403);
    expect((await call("/api/threads", { token: viewer })).status).toBe(200);
  });

  it("a short admin secret mints nothing, not even with the right secret: it says the secret is too short", async () => {
    for (const secret of ["admin", "fifteen-chars15"]) {
      const r = await worker.fetch(new Request(`${BASE}/api/admin/tokens`, {
        method: "POST", headers: { authorization: `Bearer ${secret}`, "content-type": "application/json" }, body: JSON.stringify({ houseId: "h1", subject: "u1" }),
      }), { ...testEnv, THREADBOX_ADMIN_SECRET: secret } as never, createExecutionContext());
      const body = (await r.json()) as { token?: string; error?: { code: string; message: string } };
      expect({ secret, status: r.status, token: body.token }).toEqual({ secret, status: 500, token: undefined });
      expect(body.error).toEqual({ code: "internal", message: "THREADBOX_ADMIN_SECRET is not configured (at least 16 characters)" });
    }
  });
});

describe("threads", () => {
  it("creates, reads and lists threads with parent and status filters", async () => {
    const token = await houseToken("house-list");
    const e = await call("/api/environments", { method: "POST", token, json: { id: "env-1", name: "e", provider: "test" } });
    expect(e.status).toBe(201);
    // An environment the house does not have is refused like another house's.
    expect((await call("/api/threads", { method: "POST", token, json: { environmentId: "env-none" } })).status).toBe(404);
    const parent = await createThread(token, { title: "parent", environmentId: "env-1" });
    expect(parent.status).toBe("idle");
    const child = await createThread(token, { title: "child", parent: { kind: "thread", id: parent.id } });
    expect(child.parent).toEqual({ kind: "thread", id: parent.id });
    expect((child as unknown as { environmentId: string }).environmentId).toBe("env-1");

    const got = await call(`/api/threads/${child.id}`, { token });
    expect(got.status).toBe(200);
    expect(((await got.json()) as { title: string }).title).toBe("child");

    const all = (await (await call("/api/threads", { token })).json()) as { threads: { id: string }[] };
    expect(all.threads.map((t) => t.id).sort()).toEqual([parent.id, child.id].sort());
    const children = (await (await call(`/api/threads?parent=${parent.id}`, { token })).json()) as { threads: { id: string }[] };
    expect(children.threads.map((t) => t.id)).toEqual([child.id]);
    const roots = (await (await call(`/api/threads?parent=none`, { token })).json()) as { threads: { id: string }[] };
    expect(roots.threads.map((t) => t.id)).toEqual([parent.id]);
    // Filters combine: a root has no parent of kind thread, so nothing matches both.
    const rootsOfThreads = (await (await call(`/api/threads?parent=none&parentKind=thread`, { token })).json()) as { threads: { id: string }[] };
    expect(rootsOfThreads.threads.map((t) => t.id)).toEqual([]);
    const childrenOfThreads = (await (await call(`/api/threads?parent=${parent.id}&parentKind=thread`, { token })).json()) as { threads: { id: string }[] };
    expect(childrenOfThreads.threads.map((t) => t.id)).toEqual([child.id]);
    const running = (await (await call(`/api/threads?status=running`, { token })).json()) as { threads: unknown[] };
    expect(running.threads).toEqual([]);
    const badStatus = await call(`/api/threads?status=bogus`, { token });
    expect(badStatus.status).toBe(400);
    // A parent left empty (an id a client did not have) names no thread: not the whole house.
    const noParent = await call(`/api/threads?parent=`, { token });
    expect(noParent.status).toBe(400);
    expect(await noParent.json()).toMatchObject({ error: { code: "validation_failed", details: [expect.objectContaining({ path: "parent" })] } });
  });

  it("pages through threads made in the same millisecond: before + beforeId resumes after the last one seen", async () => {
    const houseId = "house-paging";
    const token = await houseToken(houseId);
    const made = await Promise.all([1, 2, 3, 4, 5].map((i) => createThread(token, { title: `t${i}` })));
    // Threads created together often share their createdAt; make it certain.
    await runInDurableObject(env.HOUSES.get(env.HOUSES.idFromName(houseId)), (_a, state) => {
      state.storage.sql.exec(`update threads set created_at = '2026-01-01T00:00:00.000Z'`);
    });
    type Page = { threads: { id: string; createdAt: string }[] };
    const seen: string[] = [];
    let query = "limit=2";
    for (let i = 0; i < 5; i++) {
      const page = (await (await call(`/api/threads?${query}`, { token })).json()) as Page;
      if (page.threads.length === 0) break;
      seen.push(...page.threads.map((t) => t.id));
      const last = page.threads.at(-1)!;
      query = `limit=2&before=${encodeURIComponent(last.createdAt)}&beforeId=${last.id}`;
    }
    expect(seen).toEqual(made.map((t) => t.id).sort());
    // `before` alone means "created strictly before".
    expect(((await (await call(`/api/threads?before=2026-01-01T00:00:00.000Z`, { token })).json()) as Page).threads).toEqual([]);
    const lonely = await call(`/api/threads?beforeId=${made[0]!.id}`, { token });
    expect(lonely.status).toBe(400);
    expect(((await lonely.json()) as { error: { details: { path: string }[] } }).error.details[0]!.path).toBe("beforeId");
  });

  it("`before` is an instant: any ISO-8601 date-time with a zone compares as one; epoch milliseconds or a bare date are a 400, not an empty list", async () => {
    const houseId = "house-paging-before";
    const token = await houseToken(houseId);
    const [early, late] = await Promise.all([createThread(token, { title: "early" }), createThread(token, { title: "late" })]);
    await runInDurableObject(env.HOUSES.get(env.HOUSES.idFromName(houseId)), (_a, state) => {
      state.storage.sql.exec(`update threads set created_at = '2026-01-01T00:00:00.500Z' where id = ?`, early.id);
      state.storage.sql.exec(`update threads set created_at = '2026-01-01T00:00:01.000Z' where id = ?`, late.id);
    });
    const ids = async (before: string) => {
      const r = await call(`/api/threads?before=${encodeURIComponent(before)}`, { token });
      expect(r.status).toBe(200);
      return ((await r.json()) as { threads: { id: string }[] }).threads.map((t) => t.id);
    };
    expect(await ids("2026-01-01T00:00:00Z")).toEqual([]); // whole seconds: 00:00:00.500 is after it
    expect(await ids("2026-01-01T01:00:00.600+01:00")).toEqual([early.id]); // another zone, the same instant as 00:00:00.600Z
    expect(await ids("2026-01-01T00:00:01.000Z")).toEqual([early.id]);
    // `…+01:00` typed into the URL as it is: its `+` arrives as a space.
    const typed = await call(`/api/threads?before=2026-01-01T01:00:00.600+01:00`, { token });
    expect(typed.status).toBe(200);
    expect(((await typed.json()) as { threads: { id: string }[] }).threads.map((t) => t.id)).toEqual([early.id]);
    for (const bad of ["1767225600000", "2026-01-01", "yesterday", "2026-01-01T01:00:00 x1:00"]) {
      const r = await call(`/api/threads?before=${encodeURIComponent(bad)}`, { token });
      expect([bad, r.status]).toEqual([bad, 400]);
      expect(((await r.json()) as { error: { details: { path: string }[] } }).error.details[0]!.path).toBe("before");
    }
  });

  it("a `before` outside years 0000-9999 (UTC) is a 400, also when only its zone offset pushes it there", async () => {
    const token = await houseToken("house-paging-far");
    const t = await createThread(token);
    for (const bad of ["10000-01-01T00:00:00Z", "+010000-01-01T00:00:00Z", "9999-12-31T23:30:00-01:00", "0000-01-01T00:30:00+01:00"]) {
      const r = await call(`/api/threads?before=${encodeURIComponent(bad)}`, { token });
      expect([bad, r.status]).toEqual([bad, 400]);
      const err = ((await r.json()) as { error: { code: string; details: { path: string }[] } }).error;
      expect(err.code).toBe("validation_failed");
      expect(err.details[0]!.path).toBe("before");
    }
    // The edges themselves are instants like any other.
    const all = await call(`/api/threads?before=${encodeURIComponent("9999-12-31T22:30:00-01:00")}`, { token });
    expect(((await all.json()) as { threads: { id: string }[] }).threads.map((x) => x.id)).toEqual([t.id]);
    const none = await call(`/api/threads?before=${encodeURIComponent("0000-01-01T00:00:00Z")}`, { token });
    expect(((await none.json()) as { threads: unknown[] }).threads).toEqual([]);
  });

  it("never shows one house's threads to another", async () => {
    const a = await houseToken("house-x");
    const b = await houseToken("house-y");
    const t = await createThread(a);
    expect((await call(`/api/threads/${t.id}`, { token: b })).status).toBe(404);
    expect((await post(b, t.id, chat("intrusion"))).status).toBe(404);
    expect((await call(`/api/threads/${t.id}/entries`, { token: b })).status).toBe(404);
    expect((await call(`/api/stream/thread-${t.id}?offset=-1`, { token: b })).status).toBe(404);
    const listB = (await (await call("/api/threads", { token: b })).json()) as { threads: unknown[] };
    expect(listB.threads).toEqual([]);
    // A child cannot hang off another house's thread.
    const child = await call("/api/threads", { method: "POST", token: b, json: { parent: { kind: "thread", id: t.id } } });
    expect(child.status).toBe(404);
    expect((await readAll(a, t.id)).entries).toHaveLength(0);
  });
});

describe("entries", () => {
  it("appends one or a batch and reads them back from offsets as JSON and NDJSON", async () => {
    const token = await houseToken();
    const t = await createThread(token);
    const one = await post(token, t.id, chat("first"));
    expect(one.status).toBe(201);
    const batch = await post(token, t.id, [chat("second"), { payload: { type: "pi.assistant", text: "hi", stopReason: "stop" } }, { payload: { type: "signal.custom_thing", x: 1 } }]);
    expect(batch.status).toBe(201);
    const all = await readAll(token, t.id);
    expect(all.entries.map((e) => e.payload.type)).toEqual(["chat", "chat", "pi.assistant", "signal.custom_thing"]);
    expect(all.entries[0].authorId).toBe("alice");
    expect(all.upToDate).toBe(true);
    const offsets = all.entries.map((e) => e.offset);
    expect([...offsets].sort()).toEqual(offsets);

    const fromSecond = await readAll(token, t.id, offsets[1]);
    expect(fromSecond.entries.map((e) => (e.payload as { text?: string }).text ?? e.payload.type)).toEqual(["hi", "signal.custom_thing"]);
    expect((await readAll(token, t.id, "0")).entries).toHaveLength(4);
    expect((await readAll(token, t.id, "now")).entries).toHaveLength(0);

    const nd = await call(`/api/threads/${t.id}/entries?offset=-1`, { token, headers: { accept: "application/x-ndjson" } });
    expect(nd.headers.get("content-type")).toContain("application/x-ndjson");
    const lines = new TextDecoder().decode(await nd.arrayBuffer()).trim().split("\n").map((l) => JSON.parse(l));
    expect(lines.map((l) => l.offset)).toEqual(offsets);
    expect(nd.headers.get("Stream-Next-Offset")).toBe(offsets[3]);

    // Accept is read as HTTP reads it: media types in any letter case, q=0 meaning "not this",
    // and the form the client prefers.
    const cases: [string, string][] = [
      ["Application/X-NDJSON", "application/x-ndjson"],
      ["application/x-ndjson, application/json;q=0.5", "application/x-ndjson"],
      ["application/json, application/x-ndjson;q=0.1", "application/json"],
      ["application/x-ndjson;q=0, application/json", "application/json"],
      ["application/x-ndjson;q=0", "application/json"],
      ["*/*", "application/json"],
    ];
    for (const [accept, expected] of cases) {
      const r = await call(`/api/threads/${t.id}/entries?offset=-1`, { token, headers: { accept } });
      expect(`${accept} -> ${r.headers.get("content-type")}`).toBe(`${accept} -> ${expected}`);
      await r.body?.cancel();
    }
  });

  it("a client-supplied id makes a post idempotent", async () => {
    const token = await houseToken();
    const t = await createThread(token);
    const first = await post(token, t.id, chat("once", "entry-1"));
    const again = await post(token, t.id, chat("once", "entry-1"));
    expect(first.status).toBe(201);
    expect(again.status).toBe(201);
    const body = (await again.json()) as { entries: { duplicate: boolean; offset: string }[] };
    expect(body.entries[0].duplicate).toBe(true);
    expect((await readAll(token, t.id)).entries).toHaveLength(1);
  });

  it("rejects every class of bad input with a stable code and changes nothing", async () => {
    const token = await houseToken();
    const t = await createThread(token);
    const cases: [RequestInit & { token?: string; json?: unknown }, number, string][] = [
      [{ method: "POST", token, body: "{not json", headers: { "content-type": "application/json" } }, 400, "invalid_json"],
      [{ method: "POST", token, json: { payload: { type: "chat" } } }, 400, "validation_failed"],
      [{ method: "POST", token, json: { payload: { type: "bogus" } } }, 400, "validation_failed"],
      [{ method: "POST", token, json: { payload: { type: "signal.thread.status_changed", status: "exploded" } } }, 400, "validation_failed"],
      [{ method: "POST", token, json: [chat("fine"), { payload: { type: "chat", text: 5 } }] }, 400, "validation_failed"],
      [{ method: "POST", token, json: [] }, 400, "bad_request"],
      [{ method: "POST", token, body: "hello", headers: { "content-type": "text/plain" } }, 415, "unsupported_media_type"],
      [{ method: "POST", token, json: chat("x".repeat(1024 * 1024 + 10)) }, 413, "payload_too_large"],
      [{ method: "POST", json: chat("no token") }, 401, "unauthorized"],
      [{ method: "POST", token: "not.a.jwt", json: chat("bad token") }, 401, "unauthorized"],
    ];
    for (const [init, status, code] of cases) {
      const r = await call(`/api/threads/${t.id}/entries`, init);
      expect(r.status, JSON.stringify(init.json ?? init.body).slice(0, 80)).toBe(status);
      expect(r.headers.get("content-type")).toContain("application/json");
      expect(await errorCode(r)).toBe(code);
    }
    // The detail is about the payload's own kind: a chat without text is told so.
    const details = async (payload: unknown) =>
      ((await (await call(`/api/threads/${t.id}/entries`, { method: "POST", token, json: { payload } })).json()) as { error: { details: unknown } }).error.details;
    expect(await details({ type: "chat" })).toEqual([{ path: "0.payload.text", message: expect.stringMatching(/string/i) }]);
    expect(await details({ type: "chat", text: 5 })).toEqual([{ path: "0.payload.text", message: expect.stringMatching(/string/i) }]);
    expect(await details({ type: "bogus" })).toEqual([{ path: "0.payload.type", message: "payload.type must be chat, pi.*, signal.* or artifact.*" }]);
    expect(await details({ type: "signal.thread.status_changed", status: "exploded" })).toEqual([{ path: "0.payload.status", message: expect.any(String) }]);
    expect(await details("just text")).toEqual([{ path: "0.payload", message: "payload must be an object" }]);
    expect((await readAll(token, t.id)).entries).toHaveLength(0);
    // Unknown envelope fields are dropped, not stored (an entry read back can be re-posted as is).
    expect((await post(token, t.id, { offset: "0000000000000000_0000000000000009", extra: 1, payload: { type: "chat", text: "x" } })).status).toBe(201);
    const stored = (await readAll(token, t.id)).entries[0] as unknown as Record<string, unknown>;
    expect(stored.extra).toBeUndefined();
    expect(stored.offset).toBe("0000000000000000_0000000000000001");
    expect((await call("/api/threads/does-not-exist", { token })).status).toBe(404);
    expect((await call("/api/threads/..%2F..", { token })).status).toBe(404);
    expect((await call("/api/nothing-here", { token })).status).toBe(404);
    const badCreate = await call("/api/threads", { method: "POST", token, json: { parent: { kind: "thread" } } });
    expect(badCreate.status).toBe(400);
  });

  it("scopes tokens: stream tokens reach one thread, expired and forged tokens are 401, readers cannot write", async () => {
    const token = await houseToken("house-s");
    const a = await createThread(token);
    const b = await createThread(token);
    const forA = await streamToken("house-s", a.id);
    expect((await post(forA, a.id, chat("mine"))).status).toBe(201);
    expect((await post(forA, b.id, chat("not mine"))).status).toBe(403);
    expect((await call(`/api/stream/thread-${b.id}`, { method: "POST", token: forA, json: chat("x") })).status).toBe(403);
    expect((await call(`/api/threads/${b.id}/entries`, { token: forA })).status).toBe(403);
    // A stream token cannot list the house or touch plain streams.
    expect((await call("/api/threads", { token: forA })).status).toBe(403);
    expect((await call("/api/stream/plain-one", { method: "PUT", token: forA })).status).toBe(403);

    const expired = await streamToken("house-s", a.id, "stream:write", 60, Date.now() - 2 * 3600_000);
    const r = await post(expired, a.id, chat("late"));
    expect(r.status).toBe(401);
    const forged = forA.slice(0, -4) + (forA.endsWith("AAAA") ? "BBBB" : "AAAA");
    expect((await post(forged, a.id, chat("forged"))).status).toBe(401);

    const readOnly = await streamToken("house-s", a.id, "stream:read");
    expect((await post(readOnly, a.id, chat("ro"))).status).toBe(403);
    expect((await call(`/api/threads/${a.id}/entries`, { token: readOnly })).status).toBe(200);
    const reader = await houseToken("house-s", "rita", "reader");
    expect((await post(reader, a.id, chat("reader"))).status).toBe(403);

    const minted = await call(`/api/threads/${a.id}/tokens`, { method: "POST", token, json: { scope: "stream:write" } });
    expect(minted.status).toBe(201);
    const { token: scoped, expiresAt } = (await minted.json()) as { token: string; expiresAt: string };
    const ttl = Date.parse(expiresAt) - Date.now();
    expect(ttl).toBeGreaterThan(2 * 3600_000 - 60_000);
    expect(ttl).toBeLessThanOrEqual(2 * 3600_000 + 1000);
    expect((await post(scoped, a.id, chat("via minted"))).status).toBe(201);
    expect((await readAll(token, a.id)).entries.map((e) => (e.payload as unknown as { text: string }).text)).toEqual(["mine", "via minted"]);
  });
});

describe("health and CORS", () => {
  it("answers without a token", async () => {
    const r = await call("/health");
    expect(r.status).toBe(200);
    expect(((await r.json()) as { ok: boolean }).ok).toBe(true);
  });

  it("lets browsers call the API: preflights and CORS headers on answers and errors", async () => {
    const pre = await call("/api/threads", { method: "OPTIONS", headers: { origin: "https://app.example", "access-control-request-method": "POST" } });
    expect(pre.status).toBe(204);
    expect(pre.headers.get("access-control-allow-origin")).toBe("*");
    expect(pre.headers.get("access-control-allow-headers")).toContain("authorization");
    // Every request header the README has a client send, so a browser's preflight lets it through.
    const allowed = (pre.headers.get("access-control-allow-headers") ?? "").toLowerCase().split(/,\s*/);
    for (const h of ["authorization", "content-type", "idempotency-key"]) expect(allowed, h).toContain(h);
    const denied = await call("/api/threads");
    expect(denied.status).toBe(401);
    expect(denied.headers.get("access-control-allow-origin")).toBe("*");
    expect(denied.headers.get("x-content-type-options")).toBe("nosniff");
    // What a cross-origin client must read off an answer: a folder download's version, a replay.
    const exposed = (denied.headers.get("access-control-expose-headers") ?? "").toLowerCase().split(/,\s*/);
    for (const h of ["folder-version", "idempotent-replayed", "stream-next-offset", "allow"]) expect(exposed, h).toContain(h);
  });
});
