// A WebSocket subscriber that stops reading must not make its thread's actor hold every entry
// written meanwhile: the actor's memory is bounded (workerd's, measured), and once the subscriber
// reads again it gets everything, in order, once. Real wrangler dev, raw TCP clients.
import { execFileSync } from "node:child_process";
import { connect, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

type Worker = { url: string; port: number; pid: number; mintHouseToken(houseId?: string, subject?: string, role?: string): Promise<string>; stop(): Promise<void> };
const { startWorker } = (await import("../../scripts/lib/wrangler-dev.mjs" as string)) as { startWorker(o?: object): Promise<Worker> };

const ENTRIES = 40;
const STALLED = 10;
const ENTRY_BYTES = 1_000_000;
const MiB = 1024 * 1024;

/** Resident memory of the workerd processes under this wrangler dev (its own process group). */
function workerdRssBytes(pgid: number): number {
  const out = execFileSync("ps", ["-eo", "pgid=,rss=,comm="], { encoding: "utf8" });
  let kb = 0;
  for (const line of out.split("\n")) {
    const [g, rss, comm] = line.trim().split(/\s+/);
    if (Number(g) === pgid && comm?.startsWith("workerd")) kb += Number(rss);
  }
  return kb * 1024;
}

/** A subscriber over a raw socket: it reads the handshake, then stops reading until told. */
function stalledSubscriber(port: number, path: string): Promise<{ socket: Socket; resume(): Promise<string[]> }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => {
      socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`);
    });
    socket.on("error", reject);
    let buf = Buffer.alloc(0);
    const onHandshake = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const end = buf.indexOf("\r\n\r\n");
      if (end < 0) return;
      const head = buf.subarray(0, end).toString();
      if (!head.startsWith("HTTP/1.1 101")) return reject(new Error(head));
      socket.off("data", onHandshake);
      socket.pause();
      let rest = buf.subarray(end + 4);
      resolve({
        socket,
        // Reads frames until `ENTRIES` text messages came (or the socket ends); returns their texts.
        resume: () => new Promise((done) => {
          const texts: string[] = [];
          const parse = () => {
            for (;;) {
              if (rest.length < 2) return;
              let len = rest[1] & 0x7f;
              let at = 2;
              if (len === 126) { if (rest.length < 4) return; len = rest.readUInt16BE(2); at = 4; }
              else if (len === 127) { if (rest.length < 10) return; len = Number(rest.readBigUInt64BE(2)); at = 10; }
              if (rest.length < at + len) return;
              const opcode = rest[0] & 0x0f;
              if (opcode === 1) texts.push(rest.subarray(at, at + len).toString());
              rest = rest.subarray(at + len);
              if (opcode === 8) { socket.destroy(); done(texts); return; }
            }
          };
          socket.on("data", (d: Buffer) => {
            rest = Buffer.concat([rest, d]);
            parse();
            if (texts.length >= ENTRIES) { socket.destroy(); done(texts); }
          });
          socket.on("close", () => done(texts));
          parse();
          socket.resume();
        }),
      });
    };
    socket.on("data", onHandshake);
  });
}

describe("a WebSocket subscriber that stops reading", () => {
  let worker: Worker;
  let token: string;
  beforeAll(async () => {
    worker = await startWorker();
    token = await worker.mintHouseToken("house-slow", "alice", "owner");
  }, 180_000);
  afterAll(async () => { await worker?.stop(); });

  it("holds back at most a bounded buffer in the actor, and gets every entry in order once it reads again", async () => {
    const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };
    const thread = (await (await fetch(`${worker.url}/api/threads`, { method: "POST", headers, body: JSON.stringify({ title: "slow" }) })).json()) as { id: string };
    const path = `/api/threads/${thread.id}/subscribe?offset=-1&token=${token}`;
    const stalled = await Promise.all(Array.from({ length: STALLED }, () => 0).map(() => stalledSubscriber(worker.port, path)));
    const live: string[] = [];
    const reader = new WebSocket(`${worker.url.replace("http", "ws")}${path}`);
    reader.addEventListener("message", (e) => live.push(String(e.data)));
    await new Promise((r) => reader.addEventListener("open", r, { once: true }));

    const before = workerdRssBytes(worker.pid);
    let peak = before;
    for (let i = 0; i < ENTRIES; i++) {
      const body = JSON.stringify({ id: `big-${i}`, payload: { type: "pi.blob", n: i, blob: "x".repeat(ENTRY_BYTES) } });
      const r = await fetch(`${worker.url}/api/threads/${thread.id}/entries`, { method: "POST", headers, body });
      expect(r.status).toBe(201);
      peak = Math.max(peak, workerdRssBytes(worker.pid));
    }
    const deadline = Date.now() + 30_000;
    while (live.length < ENTRIES && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    peak = Math.max(peak, workerdRssBytes(worker.pid));
    // The reader that reads got all of it, whatever the stalled ones do.
    expect(live.map((m) => (JSON.parse(m) as { payload: { n: number } }).payload.n)).toEqual([...Array(ENTRIES).keys()]);
    // Ten stalled subscribers and 40 MB written: held for them, it would be 400 MB more.
    const grownMiB = (peak - before) / MiB;
    expect(grownMiB, `workerd grew by ${grownMiB.toFixed(0)} MiB`).toBeLessThan(220);

    for (const s of stalled) {
      const got = (await s.resume()).map((t) => JSON.parse(t) as { offset: string; payload: { n: number } });
      expect(got.map((e) => e.payload.n)).toEqual([...Array(ENTRIES).keys()]);
      expect([...got.map((e) => e.offset)].sort()).toEqual(got.map((e) => e.offset));
    }
    reader.close();
  }, 180_000);
});
