// Edges of a plain JSON stream's packed runs (src/streams/packed-runs.ts): whatever the storage
// layout, a client reading from any offset, by any path, sees exactly the messages it appended.
// Expected messages are derived from what each test appended, never from what the server stored.
import { describe, expect, it } from "vitest";
import { env, evictDurableObject, runInDurableObject } from "cloudflare:test";
import { plainStreamKey } from "../../src/http/actors";
import { formatOffset } from "../../src/streams/protocol";
import { RUN_MAX_BYTES } from "../../src/streams/packed-runs";
import { THREAD_ACTOR_SCHEMA_VERSION } from "../../src/actors/thread/thread-actor";
import type { ThreadActor } from "./test-worker";
import { call, chat, createThread, houseToken, post as postEntries, readAll, streamToken } from "./helpers";

const E = env as unknown as { THREADS: DurableObjectNamespace<ThreadActor> };
const JSON_TYPE = { "content-type": "application/json" };
let counter = 0;
const unique = (label: string) => `${label}-${Date.now()}-${counter++}`;
const stubOf = (houseId: string, name: string) => E.THREADS.get(E.THREADS.idFromName(plainStreamKey(houseId, name)));
const offsetSeq = (offset: string | null) => Number(offset!.split("_")[1]);

type Row = { first: number; last: number; packed: boolean };

/** The stream's stored rows (first and last seq of each): where the run boundaries are. */
async function rowsOf(houseId: string, name: string): Promise<Row[]> {
  return runInDurableObject(stubOf(houseId, name), (_a, state) =>
    state.storage.sql.exec(`select seq, lens from messages order by seq`).toArray().map((r) => {
      const count = r.lens === null ? 1 : (r.lens as ArrayBuffer).byteLength / 4;
      return { first: (r.seq as number) - count + 1, last: r.seq as number, packed: r.lens !== null };
    }));
}

/** Offsets at, just before and just after every row boundary, plus the start and the tail. */
function boundaryOffsets(rows: Row[], tail: number): number[] {
  const out = new Set<number>([0, tail]);
  for (const r of rows) for (const s of [r.first - 2, r.first - 1, r.first, r.first + 1, r.last - 1, r.last, r.last + 1]) {
    if (s >= 0 && s <= tail) out.add(s);
  }
  return [...out].sort((a, b) => a - b);
}

async function put(token: string, name: string, headers: Record<string, string> = JSON_TYPE, body?: string) {
  return call(`/v1/stream/${name}`, { method: "PUT", token, headers, body });
}

async function post(token: string, name: string, body: string, headers: Record<string, string> = {}) {
  return call(`/v1/stream/${name}`, { method: "POST", token, headers: { ...JSON_TYPE, ...headers }, body });
}

/** Every message after `seq`, page after page (catch-up or long-poll), checking each page's offsets. */
async function readPaged(token: string, name: string, seq: number, live?: "long-poll"): Promise<{ items: unknown[]; pages: number; closed: string | null }> {
  const items: unknown[] = [];
  let at = seq;
  for (let pages = 1; pages < 50; pages++) {
    const r = await call(`/v1/stream/${name}?offset=${formatOffset(at)}${live ? `&live=${live}` : ""}`, { token });
    expect(r.status, `${live ?? "catch-up"} after ${at}`).toBe(200);
    const page = (await r.json()) as unknown[];
    const next = offsetSeq(r.headers.get("Stream-Next-Offset"));
    expect(next - at, `a page's next offset counts its messages (${live ?? "catch-up"} after ${at})`).toBe(page.length);
    for (const v of page) items.push(v);
    at = next;
    if (r.headers.get("Stream-Up-To-Date") === "true") return { items, pages, closed: r.headers.get("Stream-Closed") };
    expect(page.length, `an unfinished page is not empty (after ${at})`).toBeGreaterThan(0);
  }
  throw new Error("paging never reached the tail");
}

/** An SSE read from `seq` until its control event says it is at the tail; data events as messages. */
async function readSse(token: string, name: string, seq: number): Promise<{ items: unknown[]; closed: boolean }> {
  const ac = new AbortController();
  const r = await call(`/v1/stream/${name}?offset=${formatOffset(seq)}&live=sse`, { token, signal: ac.signal });
  expect(r.status).toBe(200);
  const reader = r.body!.getReader();
  const dec = new TextDecoder();
  let buffer = "";
  const items: unknown[] = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`sse ended before the tail (after ${seq})`);
      buffer += dec.decode(value, { stream: true });
      let end: number;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const lines = block.split("\n");
        const data = lines.filter((l) => l.startsWith("data:")).map((l) => l.slice(5)).join("\n");
        if (lines[0] === "event: data") for (const v of JSON.parse(data) as unknown[]) items.push(v);
        else if (lines[0] === "event: control") {
          const control = JSON.parse(data) as { streamNextOffset: string; upToDate?: boolean; streamClosed?: boolean };
          const next = offsetSeq(control.streamNextOffset);
          expect(next - seq, `an SSE control offset counts the messages before it (after ${seq})`).toBe(items.length);
          if (control.upToDate || control.streamClosed) return { items, closed: !!control.streamClosed };
        }
      }
    }
  } finally {
    ac.abort();
    await reader.cancel().catch(() => {});
  }
}

/** Reads from each of `offsets` by catch-up, long-poll (below the tail) and SSE, against `expected`. */
async function expectEveryRead(token: string, name: string, expected: unknown[], offsets: number[], opts: { sse?: boolean } = {}) {
  for (const seq of offsets) {
    const want = expected.slice(seq);
    expect((await readPaged(token, name, seq)).items, `catch-up after ${seq}`).toEqual(want);
    if (seq < expected.length) expect((await readPaged(token, name, seq, "long-poll")).items, `long-poll after ${seq}`).toEqual(want);
    if (opts.sse !== false) expect((await readSse(token, name, seq)).items, `sse after ${seq}`).toEqual(want);
  }
}

const small = (n: number) => ({ n, pad: "s".repeat((n * 41) % 180) });
/** Strings a naive join or split by `,` `[` `]` `"` would break, and multi-byte UTF-8. */
const tricky = [
  "a,b", "[", "]", "],[", "\"", "\\\",\\\"", ",", "", "héllo wörld", "日本語,テキスト", "emoji 🎉,[🚀]", "\u2028\u2029", "tab\tcr\rlf\n",
  { "k,]": "[v,\"w\"]" }, [], {}, [[]], null, 0, -0.5, 1e21, true, false,
];

describe("packed runs: reads from every offset around run boundaries", () => {
  it("mixed sizes, a run cut by messages over 64 KiB, a 1 MiB message, nested arrays and tricky strings", async () => {
    const houseId = "house-packed-edges";
    const token = await houseToken(houseId);
    const name = unique("edges");
    expect((await put(token, name)).status).toBe(201);
    const expected: unknown[] = [];
    let n = 0;
    const append = async (values: unknown[], body = JSON.stringify(values)) => {
      const r = await post(token, name, body);
      expect(r.status, body.slice(0, 80)).toBe(204);
      expected.push(...values);
      expect(offsetSeq(r.headers.get("Stream-Next-Offset"))).toBe(expected.length);
    };
    // Small messages around two messages over RUN_MAX_BYTES, and one exactly at it.
    const big1 = "B".repeat(RUN_MAX_BYTES + 10);
    const atMax = "M".repeat(RUN_MAX_BYTES - 2); // serialized with its quotes: exactly RUN_MAX_BYTES
    await append([...Array.from({ length: 30 }, () => small(++n)), big1, small(++n), atMax, small(++n), small(++n), "C".repeat(100_000), small(++n)]);
    // A single message as large as a body may be.
    await append(["H".repeat(1024 * 1024 - 16)]);
    // An empty array is refused and stores nothing.
    const empty = await post(token, name, "[]");
    expect(empty.status).toBe(400);
    // Nested arrays: `[[1,2],[3]]` is two messages; the tricky strings; raw text with whitespace.
    await append([[1, 2], [3]]);
    await append(tricky);
    await append([{ a: [1, { b: "x,y" }] }, "z", [" , "]], ` [ {"a" : [1, {"b":"x,y"}]} ,\t"z" , [" , "] ] `);
    // Text with a line break is stored re-serialized: still the same messages.
    await append([1, "two", [3]], `[1,\n"two",\r\n[3]]`);
    // Enough small messages for several full runs, then singles.
    await append(Array.from({ length: 1500 }, () => small(++n)));
    await append([small(++n)]);
    await append([small(++n), small(++n)]);

    const rows = await rowsOf(houseId, name);
    expect(rows.filter((r) => r.packed).length).toBeGreaterThanOrEqual(4);
    expect(rows[rows.length - 1].last).toBe(expected.length);
    const head = await call(`/v1/stream/${name}`, { method: "HEAD", token });
    expect(offsetSeq(head.headers.get("Stream-Next-Offset"))).toBe(expected.length);
    await expectEveryRead(token, name, expected, boundaryOffsets(rows, expected.length));
  });

  it("pages past the read limit (4 MiB) split inside and between runs the same way for every path", async () => {
    const houseId = "house-packed-pages";
    const token = await houseToken(houseId);
    const name = unique("pages");
    expect((await put(token, name)).status).toBe(201);
    const expected: unknown[] = [];
    let n = 0;
    for (let k = 0; k < 5; k++) {
      const values = ["L".repeat(1_000_000 - 60_000), ...Array.from({ length: 400 }, () => small(++n))];
      expect((await post(token, name, JSON.stringify(values))).status).toBe(204);
      expected.push(...values);
    }
    const rows = await rowsOf(houseId, name);
    const offsets = boundaryOffsets(rows, expected.length).filter((_, k) => k % 3 === 0);
    const whole = await readPaged(token, name, 0);
    expect(whole.items).toEqual(expected);
    expect(whole.pages).toBeGreaterThan(1);
    await expectEveryRead(token, name, expected, offsets);

    // A fork cut inside the last run, read page by page while its source is deleted between pages.
    const lastRun = rows.filter((r) => r.packed).at(-1)!;
    const cut = lastRun.first + 3;
    const f = unique("pages-fork");
    expect((await put(token, f, { ...JSON_TYPE, "Stream-Forked-From": `/v1/stream/${name}`, "Stream-Fork-Offset": formatOffset(cut) })).status).toBe(201);
    const forkExpected = expected.slice(0, cut);
    const firstPage = await call(`/v1/stream/${f}?offset=-1`, { token });
    const items = (await firstPage.json()) as unknown[];
    expect(firstPage.headers.get("Stream-Up-To-Date")).toBeNull();
    expect(items).toEqual(forkExpected.slice(0, items.length));
    expect((await call(`/v1/stream/${name}`, { method: "DELETE", token })).status).toBe(204);
    const rest = await readPaged(token, f, offsetSeq(firstPage.headers.get("Stream-Next-Offset")));
    expect([...items, ...rest.items]).toEqual(forkExpected);
    expect((await readSse(token, f, cut - 2)).items).toEqual(forkExpected.slice(cut - 2));
  });
});

describe("packed runs: streams created with messages", () => {
  it("PUT with a JSON array body packs its messages, read back from every offset; an empty array creates an empty stream", async () => {
    const houseId = "house-packed-put";
    const token = await houseToken(houseId);
    const name = unique("put-body");
    const initial = [...Array.from({ length: 900 }, (_, k) => small(k + 1)), ...tricky, [[1], [2, [3]]]];
    const r = await put(token, name, JSON_TYPE, JSON.stringify(initial));
    expect(r.status).toBe(201);
    expect(offsetSeq(r.headers.get("Stream-Next-Offset"))).toBe(initial.length);
    const rows = await rowsOf(houseId, name);
    expect(rows.some((row) => row.packed)).toBe(true);
    await expectEveryRead(token, name, initial, boundaryOffsets(rows, initial.length));

    const blank = unique("put-empty");
    const made = await put(token, blank, JSON_TYPE, "[]");
    expect([made.status, made.headers.get("Stream-Next-Offset")]).toEqual([201, formatOffset(0)]);
    expect((await readPaged(token, blank, 0)).items).toEqual([]);
    const one = await post(token, blank, JSON.stringify([1, 2, 3]));
    expect(one.headers.get("Stream-Next-Offset")).toBe(formatOffset(3));
    expect((await readPaged(token, blank, 1)).items).toEqual([2, 3]);

    // Created closed with its messages: every reader ends at the tail with Stream-Closed.
    const sealed = unique("put-closed");
    const closed = await put(token, sealed, { ...JSON_TYPE, "Stream-Closed": "true" }, JSON.stringify(initial));
    expect([closed.status, closed.headers.get("Stream-Closed")]).toEqual([201, "true"]);
    for (const seq of [0, rows[1].first, rows[1].first + 1, initial.length - 1, initial.length]) {
      const page = await readPaged(token, sealed, seq);
      expect([page.items, page.closed], `closed catch-up after ${seq}`).toEqual([initial.slice(seq), "true"]);
      const sse = await readSse(token, sealed, seq);
      expect([sse.items, sse.closed], `closed sse after ${seq}`).toEqual([initial.slice(seq), true]);
    }
  });
});

describe("packed runs: appends that take the transaction path", () => {
  it("an idempotent producer's retried batch is stored once; Stream-Seq batches; a TTL stream's batches", async () => {
    const houseId = "house-packed-tx";
    const token = await houseToken(houseId);
    const name = unique("producer");
    expect((await put(token, name)).status).toBe(201);
    const producer = (seq: number) => ({ "Producer-Id": "p", "Producer-Epoch": "0", "Producer-Seq": String(seq) });
    const batch0 = Array.from({ length: 700 }, (_, k) => small(k + 1));
    const first = await post(token, name, JSON.stringify(batch0), producer(0));
    expect([first.status, first.headers.get("Stream-Next-Offset")]).toEqual([200, formatOffset(700)]);
    const retry = await post(token, name, JSON.stringify(batch0), producer(0));
    expect([retry.status, retry.headers.get("Stream-Next-Offset")]).toEqual([204, formatOffset(700)]);
    const batch1 = [...tricky, small(701)];
    expect((await post(token, name, JSON.stringify(batch1), producer(1))).status).toBe(200);
    // Stream-Seq with a batch: stored; a lower one refused and nothing stored.
    const batch2 = Array.from({ length: 300 }, (_, k) => small(1000 + k));
    expect((await post(token, name, JSON.stringify(batch2), { "Stream-Seq": "b" })).status).toBe(204);
    expect((await post(token, name, JSON.stringify(batch2), { "Stream-Seq": "a" })).status).toBe(409);
    const expected = [...batch0, ...batch1, ...batch2];
    const rows = await rowsOf(houseId, name);
    expect(rows[rows.length - 1].last).toBe(expected.length);
    await expectEveryRead(token, name, expected, boundaryOffsets(rows, expected.length).filter((_, k) => k % 2 === 0));

    const ttl = unique("ttl");
    expect((await put(token, ttl, { ...JSON_TYPE, "Stream-TTL": "3600" })).status).toBe(201);
    const t1 = Array.from({ length: 800 }, (_, k) => small(k));
    const t2 = [...tricky, "T".repeat(RUN_MAX_BYTES * 2)];
    expect((await post(token, ttl, JSON.stringify(t1))).status).toBe(204);
    expect((await post(token, ttl, JSON.stringify(t2))).status).toBe(204);
    const ttlRows = await rowsOf(houseId, ttl);
    expect(ttlRows.some((row) => row.packed)).toBe(true);
    await expectEveryRead(token, ttl, [...t1, ...t2], boundaryOffsets(ttlRows, t1.length + t2.length).filter((_, k) => k % 2 === 0));
  });

  it("close with a batch body stores the batch and closes at its end; readers from inside a run see Stream-Closed at the tail", async () => {
    const houseId = "house-packed-close";
    const token = await houseToken(houseId);
    const name = unique("close");
    expect((await put(token, name)).status).toBe(201);
    const before = Array.from({ length: 400 }, (_, k) => small(k + 1));
    expect((await post(token, name, JSON.stringify(before))).status).toBe(204);
    const last = [...Array.from({ length: 600 }, (_, k) => small(k + 401)), ...tricky];
    const closing = await post(token, name, JSON.stringify(last), { "Stream-Closed": "true" });
    expect([closing.status, closing.headers.get("Stream-Closed"), closing.headers.get("Stream-Next-Offset")])
      .toEqual([204, "true", formatOffset(before.length + last.length)]);
    expect((await post(token, name, JSON.stringify([1]))).status).toBe(409);
    const expected = [...before, ...last];
    const rows = await rowsOf(houseId, name);
    for (const seq of boundaryOffsets(rows, expected.length).filter((_, k) => k % 2 === 0)) {
      const page = await readPaged(token, name, seq);
      expect(page.items, `catch-up after ${seq}`).toEqual(expected.slice(seq));
      expect(page.closed, `closed after ${seq}`).toBe("true");
      if (seq < expected.length) expect((await readPaged(token, name, seq, "long-poll")).items).toEqual(expected.slice(seq));
      const sse = await readSse(token, name, seq);
      expect([sse.items, sse.closed], `sse after ${seq}`).toEqual([expected.slice(seq), true]);
    }
  });
});

describe("packed runs: ETags", () => {
  it("a page that starts inside a run has a validator: 304 while unchanged, a new page once the stream grows", async () => {
    const houseId = "house-packed-etag";
    const token = await houseToken(houseId);
    const name = unique("etag");
    expect((await put(token, name)).status).toBe(201);
    const values = Array.from({ length: 1200 }, (_, k) => small(k + 1));
    expect((await post(token, name, JSON.stringify(values))).status).toBe(204);
    const rows = await rowsOf(houseId, name);
    const packed = rows.find((r) => r.packed && r.last - r.first > 4)!;
    for (const seq of [packed.first, packed.first + 1, packed.last - 1]) {
      const path = `/v1/stream/${name}?offset=${formatOffset(seq)}`;
      const first = await call(path, { token });
      expect(await first.json()).toEqual(values.slice(seq));
      const etag = first.headers.get("etag")!;
      expect(etag).toBeTruthy();
      const again = await call(path, { token, headers: { "if-none-match": etag } });
      expect(again.status, `304 after ${seq}`).toBe(304);
      await again.arrayBuffer();
    }
    const seq = packed.first + 1;
    const path = `/v1/stream/${name}?offset=${formatOffset(seq)}`;
    const etag = (await call(path, { token })).headers.get("etag")!;
    expect((await post(token, name, JSON.stringify([small(5000), small(5001)]))).status).toBe(204);
    const grown = await call(path, { token, headers: { "if-none-match": etag } });
    expect(grown.status).toBe(200);
    expect(await grown.json()).toEqual([...values.slice(seq), small(5000), small(5001)]);
  });
});

describe("packed runs: forks", () => {
  it("forks cut inside runs (offset, sub-offset, of a fork, with a body) read exactly their prefix, also after the source is deleted", async () => {
    const houseId = "house-packed-forks";
    const token = await houseToken(houseId);
    const src = unique("src");
    expect((await put(token, src)).status).toBe(201);
    const source = [...Array.from({ length: 1200 }, (_, k) => small(k + 1)), ...tricky];
    expect((await post(token, src, JSON.stringify(source))).status).toBe(204);
    const srcRows = (await rowsOf(houseId, src)).filter((r) => r.packed && r.last - r.first > 4);
    expect(srcRows.length).toBeGreaterThan(1);
    const cut = srcRows[1].first + 2; // inside a run, not at its edges

    const fork = async (name: string, from: string, headers: Record<string, string>, body?: string) => {
      const r = await put(token, name, { ...JSON_TYPE, "Stream-Forked-From": `/v1/stream/${from}`, ...headers }, body);
      expect(r.status, await r.clone().text()).toBe(201);
      return offsetSeq(r.headers.get("Stream-Next-Offset"));
    };
    // F1: cut inside a run, then its own packed batch.
    const f1 = unique("f1");
    expect(await fork(f1, src, { "Stream-Fork-Offset": formatOffset(cut) })).toBe(cut);
    const own1 = Array.from({ length: 900 }, (_, k) => small(20_000 + k));
    expect((await post(token, f1, JSON.stringify(own1))).status).toBe(204);
    const f1Expected = [...source.slice(0, cut), ...own1];
    // F2: offset + sub-offset (whole messages in JSON mode) lands inside another run.
    const f2 = unique("f2");
    const subBase = srcRows[0].first + 1;
    const sub = srcRows[0].last - subBase + 5; // from inside one run into the next
    expect(await fork(f2, src, { "Stream-Fork-Offset": formatOffset(subBase), "Stream-Fork-Sub-Offset": String(sub) })).toBe(subBase + sub);
    const f2Expected = source.slice(0, subBase + sub);
    // F3: a fork of F1 cut inside F1's own packed run; F4: of F1, cut inside the inherited part, with a body.
    const f1Rows = (await rowsOf(houseId, f1)).filter((r) => r.packed && r.last - r.first > 4);
    const f3Cut = f1Rows[0].first + 3;
    const f3 = unique("f3");
    expect(await fork(f3, f1, { "Stream-Fork-Offset": formatOffset(f3Cut) })).toBe(f3Cut);
    const own3 = [...tricky, small(30_000)];
    expect((await post(token, f3, JSON.stringify(own3))).status).toBe(204);
    const f3Expected = [...f1Expected.slice(0, f3Cut), ...own3];
    const f4 = unique("f4");
    const f4Cut = srcRows[0].first + 7;
    const f4Body = Array.from({ length: 600 }, (_, k) => small(40_000 + k));
    expect(await fork(f4, f1, { "Stream-Fork-Offset": formatOffset(f4Cut) }, JSON.stringify(f4Body))).toBe(f4Cut + f4Body.length);
    const f4Expected = [...source.slice(0, f4Cut), ...f4Body];

    const around = (points: number[], tail: number) => [...new Set(points.flatMap((p) => [p - 1, p, p + 1]))].filter((s) => s >= 0 && s <= tail);
    const check = async (label: string, name: string, expected: unknown[], points: number[]) => {
      for (const seq of around([0, ...points, expected.length], expected.length)) {
        expect((await readPaged(token, name, seq)).items, `${label} catch-up after ${seq}`).toEqual(expected.slice(seq));
        if (seq < expected.length) expect((await readPaged(token, name, seq, "long-poll")).items, `${label} long-poll after ${seq}`).toEqual(expected.slice(seq));
        expect((await readSse(token, name, seq)).items, `${label} sse after ${seq}`).toEqual(expected.slice(seq));
      }
    };
    const srcEdges = (await rowsOf(houseId, src)).flatMap((r) => [r.first, r.last]).filter((s, k) => k % 3 === 0);
    const checkAll = async () => {
      await check("f1", f1, f1Expected, [cut, srcRows[1].first, ...srcEdges.slice(0, 6)]);
      await check("f2", f2, f2Expected, [subBase, srcRows[0].last, srcRows[1].first]);
      await check("f3", f3, f3Expected, [cut, f1Rows[0].first, f3Cut]);
      await check("f4", f4, f4Expected, [srcRows[0].first, f4Cut]);
    };
    await checkAll();
    // Cuts exactly at a run's edges: the last message before it, its first, its last.
    for (const at of [srcRows[1].first - 1, srcRows[1].first, srcRows[1].last]) {
      const edge = unique("edge");
      expect(await fork(edge, src, { "Stream-Fork-Offset": formatOffset(at) }, JSON.stringify(["own"]))).toBe(at + 1);
      await check(`edge fork at ${at}`, edge, [...source.slice(0, at), "own"], [at]);
    }
    // The source deleted: a tombstone its forks still read through, the same messages.
    expect((await call(`/v1/stream/${src}`, { method: "DELETE", token })).status).toBe(204);
    expect((await call(`/v1/stream/${src}`, { method: "HEAD", token })).status).toBe(410);
    // F1 deleted too: F3 and F4 still read F1's own packed messages and the source's through it.
    expect((await call(`/v1/stream/${f1}`, { method: "DELETE", token })).status).toBe(204);
    await check("f2 after delete", f2, f2Expected, [subBase, srcRows[0].last]);
    await check("f3 after delete", f3, f3Expected, [cut, f3Cut]);
    await check("f4 after delete", f4, f4Expected, [f4Cut]);
  });

  it("an expired source with a fork becomes a tombstone the fork reads through; without forks it is purged", async () => {
    const houseId = "house-packed-expiry";
    const token = await houseToken(houseId);
    const src = unique("ttl-src");
    expect((await put(token, src, { ...JSON_TYPE, "Stream-TTL": "60" })).status).toBe(201);
    const source = Array.from({ length: 1000 }, (_, k) => small(k + 1));
    expect((await post(token, src, JSON.stringify(source))).status).toBe(204);
    const run = (await rowsOf(houseId, src)).find((r) => r.packed && r.last - r.first > 4)!;
    const cut = run.first + 1;
    const f = unique("ttl-fork");
    expect((await put(token, f, { ...JSON_TYPE, "Stream-Forked-From": `/v1/stream/${src}`, "Stream-Fork-Offset": formatOffset(cut), "Stream-TTL": "3600" })).status).toBe(201);
    await runInDurableObject(stubOf(houseId, src), (a: ThreadActor) => { a.testExpireCheck(61_000); });
    expect((await call(`/v1/stream/${src}`, { method: "HEAD", token })).status).toBe(410);
    for (const seq of [0, cut - 1, cut]) {
      expect((await readPaged(token, f, seq)).items).toEqual(source.slice(seq, cut));
      expect((await readSse(token, f, seq)).items).toEqual(source.slice(seq, cut));
    }
    expect((await call(`/v1/stream/${f}`, { method: "DELETE", token })).status).toBe(204);
    expect((await call(`/v1/stream/${src}`, { method: "HEAD", token })).status).toBe(404);
    await runInDurableObject(stubOf(houseId, src), (_a, state) => {
      expect(state.storage.sql.exec(`select count(*) as n from messages`).one().n).toBe(0);
    });
  });
});

describe("packed runs: an actor from before them", () => {
  it("keeps reading its one-row-per-message log after the migration, and packs what is appended after it", async () => {
    const houseId = "house-packed-migrate";
    const token = await houseToken(houseId);
    const name = unique("old");
    expect((await put(token, name)).status).toBe(201);
    const old = [...tricky, ...Array.from({ length: 40 }, (_, k) => small(k + 1))];
    for (const v of old) expect((await post(token, name, JSON.stringify([v]))).status).toBe(204);
    const stub = stubOf(houseId, name);
    await runInDurableObject(stub, (_a, state) => {
      // What an actor written by a release before packed runs looks like.
      state.storage.sql.exec(`drop table schema_${THREAD_ACTOR_SCHEMA_VERSION}; alter table messages drop column lens`);
    });
    await evictDurableObject(stub);
    expect((await readPaged(token, name, 0)).items).toEqual(old);
    const fresh = Array.from({ length: 1500 }, (_, k) => small(1000 + k));
    expect((await post(token, name, JSON.stringify(fresh))).status).toBe(204);
    const rows = await rowsOf(houseId, name);
    expect(rows.slice(0, old.length).every((r) => !r.packed)).toBe(true);
    expect(rows.length).toBeLessThan(old.length + fresh.length / 10);
    await runInDurableObject(stub, (_a, state) => {
      const tables = state.storage.sql.exec(`select name from sqlite_master where type = 'table'`).toArray().map((r) => r.name);
      expect(tables).toContain(`schema_${THREAD_ACTOR_SCHEMA_VERSION}`);
    });
    const expected = [...old, ...fresh];
    await expectEveryRead(token, name, expected, boundaryOffsets(rows, expected.length).filter((s) => s <= old.length + 2 || s % 5 === 0));
  });
});

describe("packed runs: many tiny messages and live readers", () => {
  it("a 1 MiB body of 1-byte messages (rows cut by message count) reads back whole by every path and through a fork", async () => {
    const houseId = "house-packed-tiny";
    const token = await houseToken(houseId);
    const name = unique("tiny");
    expect((await put(token, name)).status).toBe(201);
    const values = Array.from({ length: 500_000 }, (_, k) => k % 10);
    expect((await post(token, name, JSON.stringify(values))).status).toBe(204);
    const rows = await rowsOf(houseId, name);
    expect(rows.length).toBeGreaterThan(100);
    const offsets = [0, 1, rows[0].last - 1, rows[0].last, rows[0].last + 1, rows[60].first, rows[60].first + 1, values.length - 1, values.length];
    await expectEveryRead(token, name, values, offsets, { sse: false });
    expect((await readSse(token, name, rows[rows.length - 2].first + 1)).items).toEqual(values.slice(rows[rows.length - 2].first + 1));

    const f = unique("tiny-fork");
    const cut = rows[99].first + 17;
    const made = await put(token, f, { ...JSON_TYPE, "Stream-Forked-From": `/v1/stream/${name}`, "Stream-Fork-Offset": formatOffset(cut) });
    expect(made.status).toBe(201);
    expect((await post(token, f, JSON.stringify(["end"]))).status).toBe(204);
    const forkExpected = [...values.slice(0, cut), "end"];
    for (const seq of [0, cut - 1, cut, cut + 1]) {
      expect((await readPaged(token, f, seq)).items, `fork catch-up after ${seq}`).toEqual(forkExpected.slice(seq));
    }
    expect((await readPaged(token, f, cut - 5, "long-poll")).items).toEqual(forkExpected.slice(cut - 5));
  });

  it("a long-poll and an SSE reader waiting at the tail get a batch that spans several runs, and the next one", async () => {
    const houseId = "house-packed-live";
    const token = await houseToken(houseId);
    const name = unique("live");
    expect((await put(token, name, JSON_TYPE, JSON.stringify([0]))).status).toBe(201);
    const batch = [...Array.from({ length: 1500 }, (_, k) => small(k + 1)), ...tricky];
    // SSE from the tail, then the batch appended while it waits.
    const ac = new AbortController();
    const sse = await call(`/v1/stream/${name}?offset=${formatOffset(1)}&live=sse`, { token, signal: ac.signal });
    const reader = sse.body!.getReader();
    const dec = new TextDecoder();
    let text = "";
    const waitFor = async (needle: string) => {
      while (!text.includes(needle)) {
        const { value, done } = await reader.read();
        if (done) throw new Error("sse ended early");
        text += dec.decode(value, { stream: true });
      }
    };
    await waitFor('"upToDate":true');
    const poll = call(`/v1/stream/${name}?offset=${formatOffset(1)}&live=long-poll`, { token });
    expect((await post(token, name, JSON.stringify(batch))).status).toBe(204);
    const polled = await poll;
    const first = polled.status === 200 ? ((await polled.json()) as unknown[]) : [];
    // A long-poll woken by the append gets it; one that timed out first (a loaded machine) got 204.
    if (polled.status === 200) expect(first).toEqual(batch.slice(0, first.length));
    else expect(polled.status).toBe(204);
    expect((await readPaged(token, name, 1, "long-poll")).items).toEqual(batch);
    const tail = formatOffset(1 + batch.length);
    await waitFor(`"streamNextOffset":"${tail}"`);
    ac.abort();
    await reader.cancel().catch(() => {});
    const events = text.split("\n\n").filter((b) => b.startsWith("event: data"));
    const got = events.flatMap((b) => JSON.parse(b.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5)).join("\n")) as unknown[]);
    expect(got).toEqual(batch);
  });

  it("concurrent batch appends each land whole and in one order, read back exactly", async () => {
    const houseId = "house-packed-concurrent";
    const token = await houseToken(houseId);
    const name = unique("concurrent");
    expect((await put(token, name)).status).toBe(201);
    const batches = Array.from({ length: 6 }, (_, b) => Array.from({ length: 300 + b * 97 }, (_, k) => ({ b, k, pad: "c".repeat((k * 13) % 120) })));
    const answers = await Promise.all(batches.map((batch) => post(token, name, JSON.stringify(batch))));
    const ends = answers.map((r, b) => {
      expect(r.status).toBe(204);
      return { b, end: offsetSeq(r.headers.get("Stream-Next-Offset")) };
    }).sort((x, y) => x.end - y.end);
    const expected = ends.flatMap(({ b }) => batches[b]);
    let at = 0;
    for (const { b, end } of ends) {
      expect(end - at, `batch ${b} lands whole`).toBe(batches[b].length);
      at = end;
    }
    const rows = await rowsOf(houseId, name);
    await expectEveryRead(token, name, expected, boundaryOffsets(rows, expected.length).filter((_, k) => k % 3 === 0));
  });
});

describe("packed runs: threads", () => {
  it("a thread's batches, by the entries API and by its stream, stay one row per entry and read back whole", async () => {
    const houseId = "house-packed-thread-edges";
    const token = await houseToken(houseId);
    const t = await createThread(token);
    const st = await streamToken(houseId, t.id);
    const viaApi = Array.from({ length: 120 }, (_, k) => chat(`api ${k}, [x]`));
    expect((await postEntries(token, t.id, viaApi)).status).toBe(201);
    const viaStream = Array.from({ length: 120 }, (_, k) => chat(`stream ${k} é`));
    expect((await call(`/api/stream/thread-${t.id}`, { method: "POST", token: st, json: viaStream })).status).toBe(204);
    await runInDurableObject(E.THREADS.get(E.THREADS.idFromName(`thread:${t.id}`)), (_a, state) => {
      const r = state.storage.sql.exec(`select count(*) as n, count(lens) as packed, count(entry_id) as ids from messages`).one();
      expect([r.packed, r.ids]).toEqual([0, r.n]);
    });
    const texts: unknown[] = [];
    for (let offset = "-1", pages = 0; pages < 20; pages++) {
      const page = await readAll(token, t.id, offset);
      for (const e of page.entries) if (e.payload.type === "chat") texts.push(e.payload.text);
      if (page.upToDate) break;
      offset = page.nextOffset;
    }
    expect(texts).toEqual([...viaApi, ...viaStream].map((e) => e.payload.text));
  });
});
