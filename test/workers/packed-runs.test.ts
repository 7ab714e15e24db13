// A plain JSON stream stores an append's id-less messages as packed runs (src/streams/packed-runs.ts):
// every read, from any offset, through any path, must see exactly the messages one row each would give.
import { describe, expect, it } from "vitest";
import { env, runInDurableObject } from "cloudflare:test";
import { plainStreamKey } from "../../src/http/actors";
import { formatOffset } from "../../src/streams/protocol";
import { StreamLog } from "../../src/streams/log";
import { RUN_MAX_BYTES } from "../../src/streams/packed-runs";
import { call, chat, createThread, houseToken, streamToken } from "./helpers";

const E = env as unknown as { THREADS: DurableObjectNamespace };
const JSON_TYPE = { "content-type": "application/json" };
let counter = 0;
const unique = (label: string) => `${label}-${Date.now()}-${counter++}`;
const rowCount = (sql: SqlStorage) => sql.exec(`select count(*) as n from messages`).one().n as number;

/** Messages of varied sizes (8 to ~300 bytes), each naming its 1-based position. */
function messages(count: number, from = 1): { n: number; pad: string }[] {
  return Array.from({ length: count }, (_, k) => ({ n: from + k, pad: "x".repeat(((from + k) * 37) % 290) }));
}

async function read(token: string, name: string, offset: string, live?: string) {
  const r = await call(`/v1/stream/${name}?offset=${offset}${live ? `&live=${live}` : ""}`, { token });
  expect(r.status).toBe(200);
  return { items: (await r.json()) as { n: number }[], next: r.headers.get("Stream-Next-Offset"), upToDate: r.headers.get("Stream-Up-To-Date") };
}

describe("a plain JSON stream's large appends", () => {
  it("are stored as a few packed rows and read back exactly from every offset, by catch-up and by long-poll", async () => {
    const houseId = "house-packed";
    const token = await houseToken(houseId);
    const name = unique("packed");
    expect((await call(`/v1/stream/${name}`, { method: "PUT", token, headers: JSON_TYPE })).status).toBe(201);
    const first = messages(2500);
    expect((await call(`/v1/stream/${name}`, { method: "POST", token, json: first })).status).toBe(204);
    expect((await call(`/v1/stream/${name}`, { method: "POST", token, json: { n: 2501, pad: "" } })).status).toBe(204);
    const last = await call(`/v1/stream/${name}`, { method: "POST", token, json: messages(3, 2502) });
    expect(last.headers.get("Stream-Next-Offset")).toBe(formatOffset(2504));
    const all = [...first, { n: 2501, pad: "" }, ...messages(3, 2502)];

    const stub = E.THREADS.get(E.THREADS.idFromName(plainStreamKey(houseId, name)));
    await runInDurableObject(stub, (_a, state) => {
      // 2,500 messages of ~150 bytes: a handful of rows of at most RUN_MAX_BYTES, not 2,500.
      expect(rowCount(state.storage.sql)).toBeLessThanOrEqual(Math.ceil(JSON.stringify(first).length / RUN_MAX_BYTES) + 3);
    });

    const whole = await read(token, name, "-1");
    expect(whole.items).toEqual(all);
    expect(whole.next).toBe(formatOffset(2504));
    // Offsets at, just before and just after run boundaries are among these.
    for (let seq = 0; seq < 2504; seq += seq < 40 ? 1 : 61) {
      const page = await read(token, name, formatOffset(seq));
      expect(page.items.map((m) => m.n), `catch-up after ${seq}`).toEqual(all.slice(seq).map((m) => m.n));
      expect(page.upToDate).toBe("true");
      const live = await read(token, name, formatOffset(seq), "long-poll");
      expect(live.items.map((m) => m.n), `long-poll after ${seq}`).toEqual(all.slice(seq).map((m) => m.n));
    }
  });

  it("a fork cut inside a packed run reads the source's messages up to the cut, then its own", async () => {
    const token = await houseToken("house-packed-fork");
    const source = unique("packed-src");
    const fork = unique("packed-fork");
    expect((await call(`/v1/stream/${source}`, { method: "PUT", token, headers: JSON_TYPE })).status).toBe(201);
    const src = messages(1500);
    expect((await call(`/v1/stream/${source}`, { method: "POST", token, json: src })).status).toBe(204);
    const made = await call(`/v1/stream/${fork}`, {
      method: "PUT", token, headers: { ...JSON_TYPE, "Stream-Forked-From": `/v1/stream/${source}`, "Stream-Fork-Offset": formatOffset(1234) },
    });
    expect(made.status).toBe(201);
    expect((await call(`/v1/stream/${fork}`, { method: "POST", token, json: messages(2, 5000) })).status).toBe(204);
    const expected = [...src.slice(0, 1234), ...messages(2, 5000)].map((m) => m.n);
    expect((await read(token, fork, "-1")).items.map((m) => m.n)).toEqual(expected);
    for (const seq of [0, 1, 700, 1233, 1234, 1235]) {
      expect((await read(token, fork, formatOffset(seq))).items.map((m) => m.n), `fork after ${seq}`).toEqual(expected.slice(seq));
    }
  });

  it("a thread's log keeps one row per entry (its readers look rows up by entry id and content)", async () => {
    const token = await houseToken("house-packed-thread");
    const t = await createThread(token);
    const st = await streamToken("house-packed-thread", t.id);
    const batch = Array.from({ length: 50 }, (_, k) => chat(`m${k}`));
    expect((await call(`/api/stream/thread-${t.id}`, { method: "POST", token: st, json: batch })).status).toBe(204);
    await runInDurableObject(E.THREADS.get(E.THREADS.idFromName(`thread:${t.id}`)), (_a, state) => {
      expect(rowCount(state.storage.sql)).toBe(50);
    });
  });
});

describe("pages of a log with packed runs", () => {
  it("every page from every offset, at any page size, is the next messages in order, and paging reaches the tail", async () => {
    const stub = E.THREADS.get(E.THREADS.idFromName(unique("packed-pages")));
    await runInDurableObject(stub, (_a, state) => {
      const log = new StreamLog(state.storage);
      log.packsRuns = () => true;
      const enc = new TextEncoder();
      const msg = (n: number) => ({ data: enc.encode(JSON.stringify({ n, pad: "y".repeat((n * 53) % 700) })) });
      log.create("pages", { contentType: "application/json", ttlSeconds: null, expiresAt: null, closed: false }, []);
      let n = 0;
      // Runs of different lengths, single messages between them, and runs that split over RUN_MAX_BYTES.
      for (const size of [1, 300, 1, 1, 40, 250, 2]) {
        log.append({ messages: Array.from({ length: size }, () => msg(++n)) });
      }
      const total = n;
      expect(rowCount(state.storage.sql)).toBeLessThan(total / 4);
      const dec = new TextDecoder();
      for (const maxBytes of [1, 200, 5_000, 70_000, 4 * 1024 * 1024]) {
        for (let after = 0; after <= total; after += after < 10 ? 1 : 7) {
          // readJoined, page after page
          const seen: number[] = [];
          let at = after;
          for (let pages = 0; pages <= total; pages++) {
            const page = log.readJoined(at, maxBytes);
            const items = (JSON.parse(dec.decode(page.body)) as { n: number }[]).map((m) => m.n);
            seen.push(...items);
            expect(page.count).toBe(items.length);
            if (items.length > 0) expect(page.lastSeq).toBe(items[items.length - 1]);
            if (page.upToDate) break;
            expect(items.length, `an unfinished page is never empty (after ${at}, ${maxBytes} bytes)`).toBeGreaterThan(0);
            at = page.lastSeq;
          }
          expect(seen, `readJoined after ${after}, pages of ${maxBytes} bytes`).toEqual(Array.from({ length: total - after }, (_, k) => after + k + 1));
          // read, bounded by a count and an upper seq
          const upto = Math.min(total, after + 137);
          const part = log.read(after, maxBytes, 25, upto);
          const got = part.messages.map((m) => m.seq);
          expect(got).toEqual(Array.from({ length: got.length }, (_, k) => after + k + 1));
          expect(got.length).toBeLessThanOrEqual(25);
          if (after < upto) expect(got.length).toBeGreaterThan(0);
          if (part.upToDate) expect(got.length).toBe(upto - after);
          for (const m of part.messages) expect((JSON.parse(dec.decode(m.data)) as { n: number }).n).toBe(m.seq);
        }
      }
    });
  });
});

/** SQL as a deployed Durable Object's SQLite limits it: a string or BLOB over 2 MB is refused (SQLITE_TOOBIG). */
function storageWithValueLimit(storage: DurableObjectStorage, limitBytes = 2_000_000): DurableObjectStorage {
  const tooBig = (v: SqlStorageValue) => (v instanceof ArrayBuffer ? v.byteLength : typeof v === "string" ? v.length : 0) > limitBytes;
  const sql = {
    exec: (query: string, ...args: unknown[]) => {
      const cursor = storage.sql.exec(query, ...args);
      const columns = cursor.columnNames;
      const rows = [...cursor.raw()];
      if (rows.some((row) => row.some(tooBig))) throw new Error("string or blob too big: SQLITE_TOOBIG");
      const objects = () => rows.map((row) => Object.fromEntries(columns.map((c, i) => [c, row[i]])));
      return {
        columnNames: columns, rowsWritten: cursor.rowsWritten, raw: () => rows[Symbol.iterator](), toArray: objects,
        one: () => { const all = objects(); if (all.length !== 1) throw new Error(`expected one row, got ${all.length}`); return all[0]; },
      };
    },
  } as unknown as SqlStorage;
  return { sql, transactionSync: <T>(fn: () => T) => storage.transactionSync(fn) } as unknown as DurableObjectStorage;
}

describe("a catch-up page larger than one SQLite value may be", () => {
  for (const packed of [false, true]) {
    it(`is joined in parts each under the 2 MB a deployed Durable Object's SQLite takes (${packed ? "packed runs" : "a row per message"})`, async () => {
      await runInDurableObject(E.THREADS.get(E.THREADS.idFromName(unique("join-limit"))), (_a, state) => {
        const log = new StreamLog(storageWithValueLimit(state.storage));
        log.packsRuns = () => packed;
        log.create("big", { contentType: "application/json", ttlSeconds: null, expiresAt: null, closed: false }, []);
        const enc = new TextEncoder();
        const all: number[] = [];
        // 3 MB of ~100-byte messages, in appends of 1,000.
        for (let b = 0; b < 30; b++) {
          log.append({ messages: Array.from({ length: 1000 }, (_, k) => { const n = b * 1000 + k + 1; all.push(n); return { data: enc.encode(JSON.stringify({ n, pad: "z".repeat(80) })) }; }) });
        }
        const page = log.readJoined(0, 4 * 1024 * 1024);
        expect(page.upToDate).toBe(true);
        expect(page.count).toBe(all.length);
        expect((JSON.parse(new TextDecoder().decode(page.body)) as { n: number }[]).map((m) => m.n)).toEqual(all);
        // From inside the log, too.
        const rest = log.readJoined(12_345, 4 * 1024 * 1024);
        expect((JSON.parse(new TextDecoder().decode(rest.body)) as { n: number }[]).map((m) => m.n)).toEqual(all.slice(12_345));
      });
    });
  }
});
