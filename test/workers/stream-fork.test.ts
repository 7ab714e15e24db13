import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { ThreadActor } from "./test-worker";
import { plainStreamKey } from "../../src/http/actors";
import { call, createThread, houseToken } from "./helpers";

const TEXT = { "content-type": "text/plain" };
let counter = 0;
const unique = (label: string) => `${label}-${Date.now()}-${counter++}`;

async function put(token: string, name: string, headers: Record<string, string> = TEXT, body?: string) {
  return call(`/v1/stream/${name}`, { method: "PUT", token, headers, body });
}
async function append(token: string, name: string, body: string, headers: Record<string, string> = TEXT) {
  const r = await call(`/v1/stream/${name}`, { method: "POST", token, headers, body });
  expect(r.status).toBe(204);
  return r.headers.get("Stream-Next-Offset")!;
}
async function fork(token: string, name: string, source: string, extra: Record<string, string> = {}, body?: string) {
  return put(token, name, { ...TEXT, "Stream-Forked-From": `/v1/stream/${source}`, ...extra }, body);
}
async function readText(token: string, name: string, offset = "-1") {
  const r = await call(`/v1/stream/${name}?offset=${offset}`, { token });
  expect(r.status).toBe(200);
  return { text: await r.text(), next: r.headers.get("Stream-Next-Offset"), upToDate: r.headers.get("Stream-Up-To-Date") };
}
const status = async (token: string, name: string, method = "HEAD") => (await call(`/v1/stream/${name}`, { method, token })).status;

/** Runs the stream's expiry check as if `aheadMs` had passed (no sleeping in tests). */
async function expireAhead(houseId: string, name: string, aheadMs: number) {
  const threads = (env as unknown as { THREADS: DurableObjectNamespace<ThreadActor> }).THREADS;
  const stub = threads.get(threads.idFromName(plainStreamKey(houseId, name)));
  await runInDurableObject(stub, (actor: ThreadActor) => { actor.testExpireCheck(aheadMs); });
}

describe("forking a plain stream", () => {
  it("a fork reads the source's prefix, then its own appends; later source appends stay out", async () => {
    const token = await houseToken("fork-house");
    const src = unique("src");
    const f = unique("fork");
    expect((await put(token, src, TEXT, "A")).status).toBe(201);
    const forkPoint = await append(token, src, "B");

    const created = await fork(token, f, src);
    expect(created.status).toBe(201);
    expect(created.headers.get("Stream-Next-Offset")).toBe(forkPoint);
    expect(created.headers.get("content-type")).toBe("text/plain");
    expect(created.headers.get("Stream-Forked-From")).toBeNull();

    await append(token, f, "C");
    await append(token, src, "D");
    expect((await readText(token, f)).text).toBe("ABC");
    expect((await readText(token, src)).text).toBe("ABD");
    // Reading from the fork point returns only the fork's own data; before it, across the boundary.
    expect((await readText(token, f, forkPoint)).text).toBe("C");
    // A repeated identical fork PUT is idempotent; another source under the same name is a conflict.
    expect((await fork(token, f, src)).status).toBe(200);
    expect((await fork(token, f, unique("other"))).status).toBe(409);
  });

  it("forks at an explicit offset, at -1 (nothing inherited), at now (the tail); beyond the tail is 400", async () => {
    const token = await houseToken("fork-house");
    const src = unique("src");
    const afterA = (await put(token, src, TEXT, "A")).headers.get("Stream-Next-Offset")!;
    await append(token, src, "B");

    const mid = unique("mid");
    expect((await fork(token, mid, src, { "Stream-Fork-Offset": afterA })).status).toBe(201);
    expect((await readText(token, mid)).text).toBe("A");

    const start = unique("start");
    expect((await fork(token, start, src, { "Stream-Fork-Offset": "-1" })).status).toBe(201);
    const empty = await readText(token, start);
    expect(empty.text).toBe("");
    expect(empty.upToDate).toBe("true");

    const tail = unique("tail");
    expect((await fork(token, tail, src, { "Stream-Fork-Offset": "now" })).status).toBe(201);
    expect((await readText(token, tail)).text).toBe("AB");

    const beyond = await fork(token, unique("beyond"), src, { "Stream-Fork-Offset": "0000000000000000_0000000000000009" });
    expect(beyond.status).toBe(400);
    expect(((await beyond.json()) as { error: { code: string } }).error.code).toBe("invalid_offset");
  });

  it("sub-offsets cut inside a binary message or count JSON values; overshooting is 400", async () => {
    const token = await houseToken("fork-house");
    const bin = unique("bin");
    await put(token, bin, TEXT, "hello");
    const cut = unique("cut");
    const zero = "0000000000000000_0000000000000000";
    expect((await fork(token, cut, bin, { "Stream-Fork-Offset": zero, "Stream-Fork-Sub-Offset": "3" }, "XY")).status).toBe(201);
    expect((await readText(token, cut)).text).toBe("helXY");
    expect((await fork(token, unique("over"), bin, { "Stream-Fork-Offset": zero, "Stream-Fork-Sub-Offset": "6" })).status).toBe(400);

    const json = unique("json");
    await put(token, json, { "content-type": "application/json" }, `[{"a":1},{"b":2},{"c":3}]`);
    const two = unique("two");
    // No Content-Type: the fork inherits the source's.
    const r = await put(token, two, { "Stream-Forked-From": `/v1/stream/${json}`, "Stream-Fork-Offset": zero, "Stream-Fork-Sub-Offset": "2" });
    expect(r.status).toBe(201);
    expect(r.headers.get("content-type")).toBe("application/json");
    expect(await (await call(`/v1/stream/${two}?offset=-1`, { token })).json()).toEqual([{ a: 1 }, { b: 2 }]);
    expect((await put(token, unique("over"), { "Stream-Forked-From": `/v1/stream/${json}`, "Stream-Fork-Offset": zero, "Stream-Fork-Sub-Offset": "4" })).status).toBe(400);
  });

  it("refuses fork headers that make no sense", async () => {
    const token = await houseToken("fork-house");
    const src = unique("src");
    await put(token, src, TEXT, "data");
    const zero = "0000000000000000_0000000000000000";
    expect((await put(token, unique("x"), { ...TEXT, "Stream-Fork-Sub-Offset": "0" })).status).toBe(400);
    expect((await put(token, unique("x"), { ...TEXT, "Stream-Fork-Offset": zero })).status).toBe(400);
    expect((await fork(token, unique("x"), src, { "Stream-Fork-Sub-Offset": "1" })).status).toBe(400);
    for (const bad of ["-1", "abc", "1.5", "05", "+1"]) {
      expect((await fork(token, unique("x"), src, { "Stream-Fork-Offset": zero, "Stream-Fork-Sub-Offset": bad })).status).toBe(400);
    }
    expect((await fork(token, unique("x"), src, { "Stream-Fork-Offset": "garbage" })).status).toBe(400);
    // A stream cannot fork itself: missing, it has no source (404); existing, it is not that fork (409).
    const self = unique("self");
    expect((await fork(token, self, self)).status).toBe(404);
    expect((await fork(token, src, src)).status).toBe(409);
    const notAPath = await put(token, unique("x"), { ...TEXT, "Stream-Forked-From": "somewhere-else" });
    expect(notAPath.status).toBe(400);
    expect(((await notAPath.json()) as { error: { code: string } }).error.code).toBe("bad_request");
    // A different content type than the source's is a conflict, and takes no reference.
    expect((await fork(token, unique("x"), src, { "content-type": "application/json" })).status).toBe(409);
    expect((await call(`/v1/stream/${src}`, { method: "DELETE", token })).status).toBe(204);
    expect(await status(token, src)).toBe(404);

    // A body the fork cannot take fails after the source counted the fork: the count is given back.
    const json = unique("json");
    await put(token, json, { "content-type": "application/json" }, "[1]");
    const badBody = await put(token, unique("x"), { "content-type": "application/json", "Stream-Forked-From": `/v1/stream/${json}` }, "{not json");
    expect(badBody.status).toBe(400);
    expect((await call(`/v1/stream/${json}`, { method: "DELETE", token })).status).toBe(204);
    expect(await status(token, json)).toBe(404);
  });

  it("a missing source or another house's source is 404, and the other house's stream is untouched", async () => {
    const owner = await houseToken("fork-owner");
    const outsider = await houseToken("fork-outsider");
    const src = unique("secret");
    await put(owner, src, TEXT, "payroll");
    expect((await fork(outsider, unique("steal"), src)).status).toBe(404);
    expect((await fork(outsider, unique("steal"), unique("missing"))).status).toBe(404);
    // The full URL form resolves in the caller's house too.
    const viaUrl = await put(outsider, unique("steal"), { ...TEXT, "Stream-Forked-From": `http://threadbox.test/api/stream/${src}` });
    expect(viaUrl.status).toBe(404);
    // No reference was taken: deleting the owner's stream removes it outright (404, not 410).
    expect((await call(`/v1/stream/${src}`, { method: "DELETE", token: owner })).status).toBe(204);
    expect(await status(owner, src)).toBe(404);
  });

  it("a thread's stream is neither a source nor a fork", async () => {
    const token = await houseToken("fork-house");
    const t = await createThread(token);
    const asSource = await fork(token, unique("x"), `thread-${t.id}`);
    expect(asSource.status).toBe(400);
    expect(((await asSource.json()) as { error: { message: string } }).error.message).toMatch(/thread/);
    const src = unique("src");
    await put(token, src, TEXT, "data");
    const asFork = await call(`/v1/stream/thread-${t.id}`, { method: "PUT", token, headers: { ...TEXT, "Stream-Forked-From": `/v1/stream/${src}` } });
    expect(asFork.status).toBe(400);
  });

  it("a fork of a closed source starts open", async () => {
    const token = await houseToken("fork-house");
    const src = unique("src");
    await put(token, src, { ...TEXT, "Stream-Closed": "true" }, "final");
    const f = unique("fork");
    const r = await fork(token, f, src);
    expect(r.status).toBe(201);
    expect(r.headers.get("Stream-Closed")).toBeNull();
    await append(token, f, "+more");
    expect((await readText(token, f)).text).toBe("final+more");
  });

  it("a deleted source with forks is a 410 tombstone the forks still read; the last fork removes it", async () => {
    const token = await houseToken("fork-house");
    const src = unique("src");
    await put(token, src, TEXT, "kept");
    const f1 = unique("f1");
    const f2 = unique("f2");
    expect((await fork(token, f1, src)).status).toBe(201);
    expect((await fork(token, f2, f1)).status).toBe(201);

    expect((await call(`/v1/stream/${src}`, { method: "DELETE", token })).status).toBe(204);
    expect(await status(token, src)).toBe(410);
    expect((await call(`/v1/stream/${src}?offset=-1`, { token })).status).toBe(410);
    expect((await call(`/v1/stream/${src}`, { method: "POST", token, headers: TEXT, body: "x" })).status).toBe(410);
    expect(await status(token, src, "DELETE")).toBe(410);
    expect((await put(token, src)).status).toBe(409);
    expect((await fork(token, unique("late"), src)).status).toBe(409);
    expect((await readText(token, f2)).text).toBe("kept");

    // Deleting the middle of the chain keeps the data for the last fork.
    expect((await call(`/v1/stream/${f1}`, { method: "DELETE", token })).status).toBe(204);
    expect(await status(token, f1)).toBe(410);
    expect((await readText(token, f2)).text).toBe("kept");

    expect((await call(`/v1/stream/${f2}`, { method: "DELETE", token })).status).toBe(204);
    expect(await status(token, f2)).toBe(404);
    expect(await status(token, f1)).toBe(404);
    expect(await status(token, src)).toBe(404);
    expect((await put(token, src)).status).toBe(201);
  });

  it("an expired source with a fork becomes a tombstone; an expired fork gives its reference back", async () => {
    const token = await houseToken("fork-expiry");
    const src = unique("src");
    await put(token, src, { ...TEXT, "Stream-TTL": "60" }, "short-lived");
    const f = unique("fork");
    expect((await fork(token, f, src, { "Stream-TTL": "3600" })).status).toBe(201);
    const inherited = unique("inherits");
    expect((await fork(token, inherited, src)).status).toBe(201);
    expect((await call(`/v1/stream/${inherited}`, { method: "HEAD", token })).headers.get("Stream-TTL")).toBe("60");

    await expireAhead("fork-expiry", src, 61_000);
    expect(await status(token, src)).toBe(410);
    expect((await readText(token, f)).text).toBe("short-lived");

    await expireAhead("fork-expiry", inherited, 61_000);
    expect(await status(token, inherited)).toBe(404); // this request also sends its release
    expect(await status(token, src)).toBe(410); // `f` still holds the source
    expect((await call(`/v1/stream/${f}`, { method: "DELETE", token })).status).toBe(204);
    expect(await status(token, src)).toBe(404);

    // An expired source without forks is simply gone: nothing to fork.
    const lapsed = unique("lapsed");
    await put(token, lapsed, { ...TEXT, "Stream-TTL": "60" }, "old");
    await expireAhead("fork-expiry", lapsed, 61_000);
    expect((await fork(token, unique("late"), lapsed)).status).toBe(404);
  });

  it("an expired fork nobody touches again gives its reference back on its own alarm", async () => {
    const token = await houseToken("fork-alarm");
    const src = unique("src");
    await put(token, src, TEXT, "kept for the fork");
    const f = unique("fork");
    expect((await fork(token, f, src, { "Stream-TTL": "60" })).status).toBe(201);
    expect((await call(`/v1/stream/${src}`, { method: "DELETE", token })).status).toBe(204);
    expect(await status(token, src)).toBe(410); // held by the fork

    const threads = (env as unknown as { THREADS: DurableObjectNamespace<ThreadActor> }).THREADS;
    const forkActor = threads.get(threads.idFromName(plainStreamKey("fork-alarm", f)));
    await runInDurableObject(forkActor, (a: ThreadActor) => a.advanceClock(61_000));
    expect(await runDurableObjectAlarm(forkActor)).toBe(true);
    // Nobody asked for the fork: its alarm purged it and released the source.
    expect(await status(token, src)).toBe(404);
    await runInDurableObject(forkActor, (a: ThreadActor) => a.advanceClock(-61_000));
    expect(await status(token, f)).toBe(404);
  });

  it("two concurrent PUTs of the same fork make one fork holding one reference", async () => {
    const token = await houseToken("fork-house");
    const src = unique("src");
    await put(token, src, TEXT, "x");
    const f = unique("fork");
    const statuses = (await Promise.all([fork(token, f, src), fork(token, f, src)])).map((r) => r.status).sort();
    expect(statuses).toEqual([200, 201]);
    await call(`/v1/stream/${src}`, { method: "DELETE", token });
    expect(await status(token, src)).toBe(410);
    await call(`/v1/stream/${f}`, { method: "DELETE", token });
    expect(await status(token, src)).toBe(404);
  });

  it("a prefix larger than one read page is read in bounded pages through the source", async () => {
    const token = await houseToken("fork-house");
    const src = unique("big");
    const chunk = "x".repeat(1024 * 1024 - 16);
    await put(token, src, TEXT);
    for (let i = 0; i < 5; i++) await append(token, src, `${i}${chunk}`);
    const f = unique("fork");
    expect((await fork(token, f, src)).status).toBe(201);
    await append(token, f, "own");

    let offset = "-1";
    let total = "";
    let pages = 0;
    for (;;) {
      const page = await readText(token, f, offset);
      pages += 1;
      total += page.text;
      offset = page.next!;
      if (page.upToDate === "true") break;
    }
    expect(pages).toBeGreaterThan(1);
    expect(total.length).toBe(5 * (chunk.length + 1) + 3);
    expect(total.endsWith("4" + chunk + "own")).toBe(true);
  });
});
