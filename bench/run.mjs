// npm run bench — threadbox (on `npm run serve`'s plain workerd and under wrangler dev) vs the
// Durable Streams reference server (@durable-streams/server, Node; its file store and its memory
// store), same workloads, same client code, each workload repeated with the server order alternating.
// Knobs: env vars BENCH_* or flags --name=value (see bench/README.md). Writes bench/results.json.
import { writeFileSync, mkdirSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { cpus } from "node:os";
import { startBenchServe, startBenchWorker } from "./lib/worker.mjs";
import { startRefServer } from "./lib/ref-server.mjs";
import { Target, fetchUntil } from "./lib/client.mjs";
import { planPinning, pinPid, pinTree, affinityOf } from "./lib/pin.mjs";
import { now, sleep, percentile, pool, paddedJson, treeCpu, treeOpenFiles, treeRssMiB, summarize } from "./lib/stats.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));

// ---------- knobs ----------
const flags = Object.fromEntries(process.argv.slice(2).filter((a) => a.startsWith("--")).map((a) => {
  const [k, v] = a.slice(2).split("=");
  return [k.replace(/-/g, "_").toUpperCase(), v ?? "1"];
}));
function knob(name, def) {
  const raw = flags[name] ?? process.env[`BENCH_${name}`];
  if (raw === undefined) return def;
  return typeof def === "number" ? Number(raw) : raw;
}
const K = {
  REPEATS: Math.max(1, Math.floor(knob("REPEATS", 3))),
  ONLY: knob("ONLY", "1,2,3,4,5,6,7,ceil"),
  MSG_BYTES: knob("MSG_BYTES", 100),
  W1_APPENDS: knob("W1_APPENDS", 3000),
  W1_WRITERS: knob("W1_WRITERS", 16),
  W2_BATCHES: knob("W2_BATCHES", 500),
  W2_WARMUP: knob("W2_WARMUP", 20),
  W2_BATCH: knob("W2_BATCH", 100),
  W2_WRITERS: knob("W2_WRITERS", 4),
  W3_READERS: knob("W3_READERS", 50),
  W3_MESSAGES: knob("W3_MESSAGES", 40),
  W3_INTERVAL_MS: knob("W3_INTERVAL_MS", 100),
  W4_ENTRIES: knob("W4_ENTRIES", 100_000),
  W4_FILL_BATCH: knob("W4_FILL_BATCH", 1000),
  W4_REPS: knob("W4_REPS", 2),
  W5_THREADS: knob("W5_THREADS", 1000),
  W5_ENTRIES: knob("W5_ENTRIES", 20),
  W5_CONCURRENCY: knob("W5_CONCURRENCY", 64),
  W5_IDLE_MS: knob("W5_IDLE_MS", 15_000),
  W6_THREADS: knob("W6_THREADS", 500),
  W6_INTERVAL_MS: knob("W6_INTERVAL_MS", 5000),
  W6_DURATION_MS: knob("W6_DURATION_MS", 60_000),
  W7_APPENDS: knob("W7_APPENDS", 2000),
  W7_WRITERS: knob("W7_WRITERS", 4),
  W7_BOTS: knob("W7_BOTS", 10),
  CEIL_HEALTH_REQUESTS: knob("CEIL_HEALTH_REQUESTS", 3000),
  CEIL_HEALTH_CONCURRENCY: knob("CEIL_HEALTH_CONCURRENCY", 16),
  CEIL_ROWS: knob("CEIL_ROWS", 50_000),
  CEIL_REPS: knob("CEIL_REPS", 3),
  LONG_POLL_TIMEOUT_MS: knob("LONG_POLL_TIMEOUT_MS", 20_000),
  REF_STORE: knob("REF_STORE", "file,memory"),
  SERVE: knob("SERVE", 1),
  PIN: knob("PIN", 1),
  OUT: knob("OUT", join(HERE, "results.json")),
};
const only = new Set(String(K.ONLY).split(",").map((s) => s.trim()));
const refStores = new Set(String(K.REF_STORE).split(",").map((s) => s.trim()).filter((s) => s === "file" || s === "memory"));
if (refStores.size === 0) throw new Error(`REF_STORE=${K.REF_STORE}: expected file, memory or file,memory`);
const runId = Date.now().toString(36);
const log = (...a) => console.error(`[bench ${((now() - T0) / 1000).toFixed(1)}s]`, ...a);
const T0 = now();
/** Set in main: where the client and the servers run (bench/lib/pin.mjs). */
let pinning = { applied: false, reason: "not planned yet" };
/** Pins a server's process tree to the servers' core, when pinning applies. */
const pinServer = (pid) => (pinning.applied ? pinTree(pid, pinning.serverCpu) : []);

/** Columns of the table, in order: key in a row / in results.raw, and the header. */
const COLUMNS = [
  { key: "serve", head: "serve" },
  { key: "threadbox", head: "wrangler dev" },
  { key: "reference", head: "reference" },
  { key: "referenceMemory", head: "reference (memory)" },
];
/** Tags names created on a server, unique per run and repeat. */
const tag = (rep) => `${runId}-r${rep}`;

/**
 * rows: { id, workload, metric, unit, better: "higher"|"lower"|null, serve, threadbox, reference,
 * stats, note, goalRatio }. `threadbox` is wrangler dev, `serve` the same code on `npm run serve`'s
 * runtime, `reference` the reference server; each of those is the MEDIAN over the repeats (null when
 * not run), and `stats[key]` is { median, min, max, runs } for it.
 * @param {Record<string, number[]|number|null|undefined>} figs one value per repeat, per column key
 */
const rows = [];
function row(id, workload, metric, unit, better, figs, note = "", goalRatio = 1) {
  const stats = {};
  for (const { key } of COLUMNS) { const st = summarize(figs[key]); if (st) stats[key] = st; }
  const medians = Object.fromEntries(COLUMNS.map(({ key }) => [key, stats[key]?.median ?? null]));
  rows.push({ id, workload, metric, unit, better, ...medians, stats, note, goalRatio });
}
/** Per column key, `f` of every run: { serve: [f(run1), ...], ... }. */
const each = (byKey, f) => Object.fromEntries(Object.entries(byKey).map(([k, runs]) => [k, runs.map(f)]));
const median = (values) => summarize(values)?.median ?? NaN;
/** Short server names for notes. */
const short = (key) => ({ serve: "serve", threadbox: "dev", reference: "ref", referenceMemory: "ref mem" })[key] ?? key;
const sum = (values) => values.reduce((a, b) => a + (Number(b) || 0), 0);

// ---------- workloads ----------
async function w1(t, rep = 0) {
  const name = await t.createStream(`bench-w1-${tag(rep)}`);
  for (let i = 0; i < 50; i++) await t.append(name, paddedJson({ k: "warm", i }, K.MSG_BYTES)); // warm-up
  const lat = [];
  const t0 = now();
  await pool(K.W1_APPENDS, K.W1_WRITERS, async (i) => {
    lat.push(await t.append(name, paddedJson({ k: "w1", i }, K.MSG_BYTES)));
  });
  const sec = (now() - t0) / 1000;
  return { rate: K.W1_APPENDS / sec, p50: percentile(lat, 50), p99: percentile(lat, 99), seconds: sec };
}

async function w2(t, rep = 0) {
  const name = await t.createStream(`bench-w2-${tag(rep)}`);
  const batch = (b) => "[" + Array.from({ length: K.W2_BATCH }, (_, j) => paddedJson({ k: "w2", b, j }, K.MSG_BYTES)).join(",") + "]";
  // Warm-up on this workload's own path: right after #1 every server's JIT still has the single-append
  // shapes, and a few hundred timed batches would otherwise measure that transition.
  for (let i = 0; i < K.W2_WARMUP; i++) await t.append(name, batch(-1 - i));
  const lat = [];
  const t0 = now();
  await pool(K.W2_BATCHES, K.W2_WRITERS, async (b) => { lat.push(await t.append(name, batch(b))); });
  const sec = (now() - t0) / 1000;
  return { rate: (K.W2_BATCHES * K.W2_BATCH) / sec, p50: percentile(lat, 50), p99: percentile(lat, 99), seconds: sec };
}

/**
 * Workload 3's send schedule, shared by #3 and its ceilings C8/C9: W3_MESSAGES sends, one every
 * W3_INTERVAL_MS, each carrying the time it was sent (readers measure delivery from it).
 */
async function paced(send) {
  const t0 = now();
  for (let i = 0; i < K.W3_MESSAGES; i++) {
    const due = t0 + i * K.W3_INTERVAL_MS;
    if (due > now()) await sleep(due - now());
    await send(String(now()));
  }
}

async function w3(t, mode, rep = 0) {
  const name = await t.createThread(`w3-${mode}-r${rep}`);
  const envelope = (text) => JSON.stringify({ payload: { type: "chat", text } });
  await t.append(name, envelope("0")); // something to start after
  const start = await t.tail(name);
  const samples = [];
  let got = 0;
  const onMessage = (m) => {
    const sent = Number(m?.payload?.text);
    if (sent > 1) { samples.push(now() - sent); got++; }
  };
  const ac = new AbortController();
  (await import("node:events")).setMaxListeners(0, ac.signal);
  const readers = [];
  const sockets = [];
  let opened = 0;
  for (let r = 0; r < K.W3_READERS; r++) {
    if (mode === "long-poll") readers.push(t.longPoll(name, start, onMessage, ac.signal).catch((e) => { log(`reader error: ${e.message}`); }));
    else if (mode === "sse") readers.push(t.sse(name, start, onMessage, ac.signal, () => opened++).catch((e) => { log(`reader error: ${e.message}`); }));
    else sockets.push(await t.subscribe(name, onMessage));
  }
  // Let every reader park (long-poll has no open event; SSE and WS report theirs).
  for (let i = 0; i < 100 && mode === "sse" && opened < K.W3_READERS; i++) await sleep(50);
  await sleep(1000);
  const expected = K.W3_READERS * K.W3_MESSAGES;
  const appendLat = [];
  await paced(async (stamp) => { appendLat.push(await t.append(name, envelope(stamp))); });
  for (let i = 0; i < 200 && got < expected; i++) await sleep(50);
  ac.abort();
  for (const ws of sockets) try { ws.close(); } catch {}
  await Promise.race([Promise.all(readers), sleep(3000)]);
  return { p50: percentile(samples, 50), p99: percentile(samples, 99), received: got, expected, appendP50: percentile(appendLat, 50) };
}

async function w4(t, rep = 0) {
  const name = await t.createStream(`bench-w4-${tag(rep)}`);
  const fills = Math.ceil(K.W4_ENTRIES / K.W4_FILL_BATCH);
  const tf = now();
  await pool(fills, 2, async (b) => {
    const n = Math.min(K.W4_FILL_BATCH, K.W4_ENTRIES - b * K.W4_FILL_BATCH);
    await t.append(name, "[" + Array.from({ length: n }, (_, j) => paddedJson({ k: "w4", b, j }, K.MSG_BYTES)).join(",") + "]");
  });
  const fillSec = (now() - tf) / 1000;
  let best = null;
  for (let rep = 0; rep < K.W4_REPS; rep++) {
    const t0 = now();
    const r = await t.catchUp(name, "-1");
    const sec = (now() - t0) / 1000;
    if (r.entries !== K.W4_ENTRIES) throw new Error(`${t.label}: catch-up read ${r.entries} entries, expected ${K.W4_ENTRIES}`);
    const res = { rate: r.entries / sec, mbps: r.bytes / 1e6 / sec, pages: r.pages, seconds: sec, fillRate: K.W4_ENTRIES / fillSec };
    if (!best || res.rate > best.rate) best = res;
  }
  return best;
}

async function w5(t, rep = 0) {
  const names = [];
  const rss0 = t.pid ? treeRssMiB(t.pid) : null;
  const tc = now();
  // The reference's file store loses a stream now and then under concurrent PUTs (404 on the
  // first append), so its streams are created one at a time; a 404 is re-created once and counted.
  await pool(K.W5_THREADS, t.hasThreads ? 32 : 1, async (i) => { names[i] = await t.createThread(`${i}-r${rep}`); });
  const createRate = K.W5_THREADS / ((now() - tc) / 1000);
  const lat = [];
  let recreated = 0;
  const t0 = now();
  await pool(K.W5_THREADS, K.W5_CONCURRENCY, async (i) => {
    for (let j = 0; j < K.W5_ENTRIES; j++) {
      const body = JSON.stringify({ payload: { type: "chat", text: `thread ${i} entry ${j} ${"x".repeat(40)}` } });
      try {
        lat.push(await t.append(names[i], body));
      } catch (err) {
        // The reference's file store answers 404 on streams it just confirmed (PUT -> 200) once
        // ~hundreds of streams are open; count those appends as lost instead of aborting the run.
        if (t.hasThreads || !/-> 404/.test(err.message)) throw err;
        recreated++;
      }
    }
  });
  const sec = (now() - t0) / 1000;
  // Memory the new threads hold: right after, and (threadbox) after they sat idle for W5_IDLE_MS.
  const rss1 = t.pid ? treeRssMiB(t.pid) : null;
  // Every live thread actor holds its SQLite database open: open files count the actors in memory.
  const files1 = t.pid ? treeOpenFiles(t.pid) : null;
  let rssIdle = null;
  let filesIdle = null;
  if (t.pid && t.hasThreads && K.W5_IDLE_MS > 0) {
    await sleep(K.W5_IDLE_MS);
    rssIdle = treeRssMiB(t.pid);
    filesIdle = treeOpenFiles(t.pid);
  }
  const perThreadKiB = (mib) => (mib === null || rss0 === null ? null : ((mib - rss0) * 1024) / K.W5_THREADS);
  return {
    rate: (K.W5_THREADS * K.W5_ENTRIES - recreated) / sec, p50: percentile(lat, 50), p99: percentile(lat, 99), createRate, names, seconds: sec, recreated,
    rssBeforeMiB: rss0, rssAfterMiB: rss1, rssIdleMiB: rssIdle, kibPerThread: perThreadKiB(rss1), kibPerThreadIdle: perThreadKiB(rssIdle),
    openFiles: files1, openFilesIdle: filesIdle,
  };
}

async function w6(t, pid, reuse, rep = 0) {
  const names = reuse.slice(0, K.W6_THREADS);
  for (let i = names.length; i < K.W6_THREADS; i++) names.push(await t.createThread(`w6-${i}-r${rep}`));
  // Claim: idle -> running (one entry each, before the "before" count).
  await pool(names.length, 32, async (i) => {
    await t.append(names[i], JSON.stringify({ payload: { type: "signal.thread.status_changed", status: "running", reason: "bench" } }));
  });
  const tails = async () => { const out = []; await pool(names.length, 32, async (i) => { out[i] = await t.tail(names[i]); }); return out; };
  const before = await tails();
  // Idle baseline CPU (same length as one heartbeat interval).
  const idle0 = treeCpu(pid); const ti0 = now();
  await sleep(K.W6_INTERVAL_MS);
  const idle1 = treeCpu(pid); const idleSec = (now() - ti0) / 1000;
  const hb = JSON.stringify({ payload: { type: "signal.heartbeat" } });
  const lat = [];
  let sent = 0, failed = 0;
  const c0 = treeCpu(pid); const t0 = now();
  const rounds = Math.max(1, Math.floor(K.W6_DURATION_MS / K.W6_INTERVAL_MS));
  // Each thread beats every interval, phases spread evenly over the interval.
  await Promise.all(names.map(async (name, i) => {
    for (let k = 0; k < rounds; k++) {
      const due = t0 + (i / names.length) * K.W6_INTERVAL_MS + k * K.W6_INTERVAL_MS;
      if (due > now()) await sleep(due - now());
      try { lat.push(await t.append(name, hb)); sent++; } catch { failed++; }
    }
  }));
  const c1 = treeCpu(pid); const sec = (now() - t0) / 1000;
  const after = await tails();
  const grown = after.filter((a, i) => a !== before[i]).length;
  return {
    workerdCpuPct: ((c1.workerdSec - c0.workerdSec) / sec) * 100,
    treeCpuPct: ((c1.totalSec - c0.totalSec) / sec) * 100,
    idleWorkerdCpuPct: ((idle1.workerdSec - idle0.workerdSec) / idleSec) * 100,
    heartbeats: sent, failed, rate: sent / sec, p50: percentile(lat, 50), p99: percentile(lat, 99), grown, threads: names.length, seconds: sec,
    pids: c1.pids,
  };
}

/**
 * #7: what dispatch costs the append path. Chat appends to a thread of a house with W7_BOTS bots
 * none of which is triggered (mention mode, no mention), against the same appends of entries no
 * bot ever looks at (`pi.note`) in a house without bots. Each chat is recorded as a trigger and
 * decided by the thread's alarm, off the append's response path.
 */
async function w7(worker, rep = 0) {
  const lane = async (house, bots, type) => {
    const t = new Target({ label: house, url: worker.url, token: await worker.mintHouseToken(house), threads: true });
    for (let i = 0; i < bots; i++) {
      const r = await fetch(`${t.url}/api/agents`, {
        method: "POST", headers: t.h({ "content-type": "application/json" }),
        body: JSON.stringify({ name: `bot ${i}`, handle: `bot${i}`, model: "none/none" }),
      });
      if (r.status !== 201) throw new Error(`w7: create agent -> ${r.status} ${await r.text()}`);
    }
    const name = await t.createThread(`w7-${house}`);
    const body = (i) => JSON.stringify({ payload: type === "chat" ? { type, text: `no mention here ${i}` } : { type, text: `note ${i}` } });
    for (let i = 0; i < 50; i++) await t.append(name, body(-i - 1)); // warm-up
    return { t, name, body, lat: [], ms: 0, n: 0 };
  };
  const plain = await lane(`bench-w7-plain-${tag(rep)}`, 0, "pi.note");
  const bots = await lane(`bench-w7-bots-${tag(rep)}`, K.W7_BOTS, "chat");
  // Short alternating rounds, so drift on a shared machine lands on both lanes alike.
  const rounds = 10;
  const perRound = Math.ceil(K.W7_APPENDS / rounds);
  for (let r = 0; r < rounds; r++) {
    for (const l of r % 2 === 0 ? [plain, bots] : [bots, plain]) {
      const t0 = now();
      await pool(perRound, K.W7_WRITERS, async () => { l.lat.push(await l.t.append(l.name, l.body(l.n++))); });
      l.ms += now() - t0;
    }
  }
  const lane$ = (l) => ({ rate: l.n / (l.ms / 1000), p50: percentile(l.lat, 50), p99: percentile(l.lat, 99) });
  return { plain: lane$(plain), bots: lane$(bots) };
}

async function healthCeiling(t) {
  const lat = [];
  for (let i = 0; i < 50; i++) await (await fetch(`${t.url}/health`, { headers: t.h() })).arrayBuffer();
  const t0 = now();
  await pool(K.CEIL_HEALTH_REQUESTS, K.CEIL_HEALTH_CONCURRENCY, async () => {
    const a = now();
    const r = await fetch(`${t.url}/health`, { headers: t.h() });
    await r.arrayBuffer();
    lat.push(now() - a);
  });
  return { rate: K.CEIL_HEALTH_REQUESTS / ((now() - t0) / 1000), p50: percentile(lat, 50) };
}

/** Best effort (needs `ss`): the user worker's own workerd socket, bypassing wrangler's proxy worker. */
async function directPort(worker) {
  try {
    const { execSync } = await import("node:child_process");
    const pids = new Set(treeCpu(worker.pid).pids.filter((p) => p.endsWith(":workerd")).map((p) => p.split(":")[0]));
    const out = execSync("ss -ltnp", { encoding: "utf8", timeout: 5000 });
    for (const m of out.matchAll(/127\.0\.0\.1:(\d+)\s.*?"workerd",pid=(\d+)/g)) {
      if (!pids.has(m[2]) || Number(m[1]) === worker.port) continue;
      try {
        const r = await fetch(`http://127.0.0.1:${m[1]}/health`, { signal: AbortSignal.timeout(2000) });
        if ((await r.text()).includes("threadbox")) return Number(m[1]);
      } catch {}
    }
  } catch {}
  return null;
}

/**
 * The ceiling worker (bench/ceiling-worker.ts) on one runtime: `serve` (plain workerd, as
 * `npm run serve` runs) or `dev` (wrangler dev). Every figure is what the bare platform does with
 * no threadbox code: no auth, no stream logic, one table per actor.
 */
async function insertCeiling(runtime) {
  const configPath = join(HERE, "wrangler.ceiling.toml");
  const w = runtime === "serve" ? await startBenchServe({ configPath }) : await startBenchWorker({ configPath });
  try {
    pinServer(w.pid);
    if (pinning.applied) pinning[runtime === "serve" ? "affinityCeilingServe" : "affinityCeiling"] = affinityOf(w.pid);
    const call = async (n, ids, actor = "bench") => {
      const a = now();
      const r = await fetch(`${w.url}/insert?n=${n}&ids=${ids ? 1 : 0}&actor=${encodeURIComponent(actor)}`);
      if (!r.ok) throw new Error(`ceiling insert -> ${r.status} ${await r.text()}`);
      await r.json();
      return now() - a;
    };
    const measure = async (ids) => {
      await call(1000, ids); // warm-up
      let base = Infinity, best = Infinity;
      for (let i = 0; i < K.CEIL_REPS; i++) base = Math.min(base, await call(0, ids));
      for (let i = 0; i < K.CEIL_REPS; i++) best = Math.min(best, await call(K.CEIL_ROWS, ids));
      return K.CEIL_ROWS / (Math.max(1, best - base) / 1000);
    };
    // Same HTTP path as threadbox (client -> worker -> DO, commit per request), no stream logic:
    // the platform's ceiling for workloads 1 and 2 on this machine.
    const perRequest = async (rowsPer, requests, conc) => {
      const t0 = now();
      await pool(requests, conc, async () => { await call(rowsPer, false); });
      return (rowsPer * requests) / ((now() - t0) / 1000);
    };
    // Workload 5's shape on bare actors: each new actor creates its one table and takes a first
    // row (32 at once, as #5 creates threads), then every actor takes W5_ENTRIES rows in order.
    const manyActors = async (rep) => {
      const names = Array.from({ length: K.W5_THREADS }, (_, i) => `many-${rep}-${i}`);
      const tc = now();
      await pool(K.W5_THREADS, 32, async (i) => { await call(1, false, names[i]); });
      const create = K.W5_THREADS / ((now() - tc) / 1000);
      const t0 = now();
      await pool(K.W5_THREADS, K.W5_CONCURRENCY, async (i) => {
        for (let j = 0; j < K.W5_ENTRIES; j++) await call(1, true, names[i]);
      });
      return { create, rows: (K.W5_THREADS * K.W5_ENTRIES) / ((now() - t0) / 1000) };
    };
    // Workload 3's shapes on a bare actor: W3_READERS hibernatable sockets (`ws`) or parked long-polls
    // (`long-poll`), one committed row + one answer to each every W3_INTERVAL_MS; latency from before
    // the POST to each receipt.
    const delivery = async (rep, mode) => {
      const actor = `${mode}-${rep}`;
      const samples = [];
      const sockets = [];
      const ac = new AbortController();
      const polls = [];
      // A long-poll reader: re-parks after every answer, as #3's readers do.
      const poll = async () => {
        let after = 1;
        while (!ac.signal.aborted) {
          try {
            const { response, text } = await fetchUntil(ac.signal, `${w.url}/poll?actor=${actor}&after=${after}`);
            samples.push(now() - Number(text));
            after = Number(response.headers.get("next-offset"));
          } catch {
            return;
          }
        }
      };
      // Something to start after (seq 1), so every reader parks.
      await (await fetch(`${w.url}/broadcast?actor=${actor}`, { method: "POST", body: String(now()) })).arrayBuffer();
      for (let r = 0; r < K.W3_READERS && mode === "long-poll"; r++) polls.push(poll());
      for (let r = 0; r < K.W3_READERS && mode === "ws"; r++) {
        const ws = new WebSocket(`${w.url.replace(/^http/, "ws")}/ws?actor=${actor}`);
        await new Promise((resolve, reject) => {
          ws.addEventListener("open", resolve, { once: true });
          ws.addEventListener("error", () => reject(new Error("ceiling websocket failed")), { once: true });
        });
        ws.addEventListener("message", (ev) => samples.push(now() - Number(ev.data)));
        sockets.push(ws);
      }
      await sleep(1000);
      await paced(async (stamp) => { await (await fetch(`${w.url}/broadcast?actor=${actor}`, { method: "POST", body: stamp })).arrayBuffer(); });
      for (let i = 0; i < 100 && samples.length < K.W3_READERS * K.W3_MESSAGES; i++) await sleep(50);
      for (const ws of sockets) ws.close();
      ac.abort();
      await Promise.all(polls);
      return { p50: percentile(samples, 50), p99: percentile(samples, 99) };
    };
    const out = { plain: [], withIds: [], single: [], batched: [], create: [], spread: [], wsP50: [], wsP99: [], lpP50: [], lpP99: [] };
    for (let rep = 0; rep < K.REPEATS; rep++) {
      log(`ceiling (${runtime}): raw DO SQLite inserts [${rep + 1}/${K.REPEATS}]`);
      out.single.push(await perRequest(1, K.W1_APPENDS, K.W1_WRITERS));
      out.batched.push(await perRequest(K.W2_BATCH, K.W2_BATCHES, K.W2_WRITERS));
      out.plain.push(await measure(false));
      out.withIds.push(await measure(true));
      const many = await manyActors(rep);
      out.create.push(many.create);
      out.spread.push(many.rows);
      const ws = await delivery(rep, "ws");
      out.wsP50.push(ws.p50);
      out.wsP99.push(ws.p99);
      const lp = await delivery(rep, "long-poll");
      out.lpP50.push(lp.p50);
      out.lpP99.push(lp.p99);
    }
    return out;
  } finally {
    await w.stop();
  }
}

// ---------- main ----------
/** Server order for a repeat: as listed on even repeats, reversed on odd ones. */
const orderFor = (rep, list) => (rep % 2 === 0 ? list : [...list].reverse());

async function main() {
  log(`cpus=${cpus().length} knobs=${JSON.stringify(K)}`);
  const results = { startedAt: new Date().toISOString(), cpus: cpus().length, node: process.version, knobs: K, repeats: K.REPEATS, raw: {}, rows };

  log(`starting threadbox (wrangler dev${K.SERVE ? " and npm run serve" : ""}) and the reference server (${[...refStores].join(" and ")} store)`);
  const vars = { LONG_POLL_TIMEOUT_MS: String(K.LONG_POLL_TIMEOUT_MS) };
  const [worker, ref, refMem, served] = await Promise.all([
    startBenchWorker({ vars }),
    refStores.has("file") ? startRefServer({ longPollTimeoutMs: K.LONG_POLL_TIMEOUT_MS, store: "file" }) : null,
    refStores.has("memory") ? startRefServer({ longPollTimeoutMs: K.LONG_POLL_TIMEOUT_MS, store: "memory" }) : null,
    K.SERVE ? startBenchServe({ vars }) : null,
  ]);
  const stopAll = async () => { await Promise.allSettled([worker.stop(), ref?.stop(), refMem?.stop(), served?.stop()]); };
  process.on("SIGINT", () => { stopAll().finally(() => process.exit(130)); });
  try {
    // Client on one core, every server process on another (the same one for all of them).
    const serverPids = { serve: served?.pid, threadbox: worker.pid, reference: ref?.pid, referenceMemory: refMem?.pid };
    // The pids, e.g. for `perf record -g -p <pid>` (bench/README.md, CPU profile of the append path).
    log(`server pids: ${Object.entries(serverPids).filter(([, pid]) => pid).map(([k, pid]) =>
      `${k} ${pid}${k === "threadbox" ? " (wrangler; its workerd: " + treeCpu(pid).pids.filter((p) => p.endsWith(":workerd")).map((p) => p.split(":")[0]).join(", ") + ")" : k === "serve" ? " (workerd)" : " (node)"}`).join(", ")}`);
    pinning = planPinning(Boolean(K.PIN));
    if (pinning.applied) {
      try {
        for (const pid of Object.values(serverPids)) if (pid) pinServer(pid);
        pinPid(process.pid, pinning.clientCpu);
      } catch (err) {
        log(`pinning failed, running unpinned: ${err.message}`);
        const all = pinning.cpus.join(",");
        for (const pid of Object.values(serverPids)) if (pid) try { pinTree(pid, all); } catch {}
        try { pinPid(process.pid, all); } catch {}
        pinning = { applied: false, reason: `taskset failed: ${err.message}`, cpus: pinning.cpus };
      }
    }
    const affinities = () => ({
      client: affinityOf(process.pid, { tree: false }),
      ...Object.fromEntries(Object.entries(serverPids).filter(([, pid]) => pid).map(([k, pid]) => [k, affinityOf(pid)])),
    });
    pinning.affinityAtStart = affinities();
    results.pinning = pinning;
    log(pinning.applied
      ? `pinned: client on CPU ${pinning.clientCpu}, servers on CPU ${pinning.serverCpu}: ${JSON.stringify(pinning.affinityAtStart)}`
      : `not pinned: ${pinning.reason}`);

    const tb = new Target({ label: "threadbox", url: worker.url, token: await worker.mintHouseToken(), threads: true });
    const rf = ref ? new Target({ label: "reference", url: ref.url, token: "unused", threads: false }) : null;
    const rm = refMem ? new Target({ label: "reference (memory)", url: refMem.url, token: "unused", threads: false }) : null;
    const sv = served ? new Target({ label: "serve", url: served.url, token: await served.mintHouseToken(), threads: true }) : null;
    // Whose memory #5 reads (the process tree of each server).
    for (const [t, pid] of [[sv, served?.pid], [tb, worker.pid], [rf, ref?.pid], [rm, refMem?.pid]]) if (t) t.pid = pid;
    // Every server, in table order; `t` is what the workload function gets.
    const servers = [
      sv && { key: "serve", label: "threadbox (npm run serve)", t: sv },
      { key: "threadbox", label: "threadbox (wrangler dev)", t: tb },
      rf && { key: "reference", label: "reference (file store)", t: rf },
      rm && { key: "referenceMemory", label: "reference (memory store)", t: rm },
    ].filter(Boolean);
    const threadboxes = servers.filter((s) => s.t.hasThreads);
    results.order = { even: servers.map((s) => s.key), odd: orderFor(1, servers).map((s) => s.key) };
    /**
     * Runs `fn(t, rep)` K.REPEATS times on every server of `list`, the order alternating between
     * repeats. Stores and returns { [key]: [run1, run2, ...] }.
     */
    const repeated = async (key, fn, list = servers) => {
      const out = Object.fromEntries(list.map((s) => [s.key, []]));
      for (let rep = 0; rep < K.REPEATS; rep++) {
        for (const s of orderFor(rep, list)) {
          log(`${key} [${rep + 1}/${K.REPEATS}]: ${s.label}`);
          out[s.key].push(await fn(s.t, rep));
        }
      }
      results.raw[key] = out;
      return out;
    };

    if (only.has("ceil")) {
      const h = await repeated("ceilHealth", healthCeiling, threadboxes);
      const p50s = threadboxes.map((s) => `${fmt(median(h[s.key].map((x) => x.p50)))} ms ${s.key === "serve" ? "serve" : "dev"}`);
      row("C1", "ceiling: no-op route GET /health (16 conc.)", "req/s", "req/s", null, each(h, (x) => x.rate), `p50 ${p50s.join(", ")}`);
      const dp = await directPort(worker);
      if (dp) {
        const direct = new Target({ label: "direct", url: `http://127.0.0.1:${dp}`, token: tb.token, threads: true });
        const d = await repeated("ceilHealthDirect", healthCeiling, [{ key: "threadbox", label: "wrangler dev, user workerd socket", t: direct }]);
        row("C1b", "ceiling: GET /health, bypassing wrangler proxy", "req/s", "req/s", null, each(d, (x) => x.rate),
          `p50 ${fmt(median(d.threadbox.map((x) => x.p50)))} ms; user workerd socket`);
      }
      log("ceiling: raw DO SQLite inserts (bench/ceiling-worker.ts)");
      // Each runtime's own ceiling, in its own column: serve's bounds serve's figures.
      const c = { threadbox: await insertCeiling("dev") };
      if (K.SERVE) c.serve = await insertCeiling("serve");
      results.raw.ceilInsert = c;
      const fig = (f) => Object.fromEntries(Object.entries(c).map(([k, v]) => [k, v[f]]));
      row("C2", "ceiling: raw DO SQLite insert, one actor", "rows/s", "rows/s", null, fig("plain"), "entry_id null (plain stream)");
      row("C3", "ceiling: raw DO SQLite insert + entry_id", "rows/s", "rows/s", null, fig("withIds"), "unique entry_id (thread)");
      row("C4", `ceiling: 1 row/request via HTTP, ${K.W1_WRITERS} conc.`, "rows/s", "rows/s", null, fig("single"), "no-auth DO insert route; bound for #1");
      row("C5", `ceiling: ${K.W2_BATCH} rows/request via HTTP, ${K.W2_WRITERS} conc.`, "rows/s", "rows/s", null, fig("batched"), "no-auth DO insert route; bound for #2");
      row("C6", `ceiling: create ${K.W5_THREADS} actors (1 table + 1 row each, 32 conc.)`, "per s", "per s", null, fig("create"),
        "bound for #5's thread creation: a new thread's actor creates 5 tables and registers with its house");
      row("C7", `ceiling: ${K.W5_THREADS} actors x ${K.W5_ENTRIES} rows, 1 row/request (${K.W5_CONCURRENCY} conc.)`, "rows/s", "rows/s", null, fig("spread"),
        "bound for #5's appends: no auth, no stream logic");
      row("C8", `ceiling: ${K.W3_READERS} WebSocket subscribers of a bare actor`, "p50", "ms", null, fig("wsP50"),
        `one row + one send each, every ${K.W3_INTERVAL_MS} ms; bound for #3's WebSocket delivery`);
      row("C8", `ceiling: ${K.W3_READERS} WebSocket subscribers of a bare actor`, "p99", "ms", null, fig("wsP99"));
      row("C9", `ceiling: ${K.W3_READERS} long-poll readers of a bare actor`, "p50", "ms", null, fig("lpP50"),
        "parked fetches woken by the same POST; bound for #3's long-poll rows");
      row("C9", `ceiling: ${K.W3_READERS} long-poll readers of a bare actor`, "p99", "ms", null, fig("lpP99"));
    }
    /** "serve 67% of C4, dev 25% of C4": each threadbox runtime's median against its own runtime's ceiling, when the ceilings ran. */
    const ofCeiling = (r, value, ceilKey, ceilName) => ["serve", "threadbox"]
      .filter((k) => r[k] && results.raw.ceilInsert?.[k])
      .map((k) => `${short(k)} ${((median(r[k].map(value)) / median(results.raw.ceilInsert[k][ceilKey])) * 100).toFixed(0)}% of ${ceilName}`)
      .join(", ");
    if (only.has("1")) {
      const r = await repeated("w1", w1);
      const label = `single appends, ${K.W1_WRITERS} writers`;
      row("1", label, "entries/s", "entries/s", "higher", each(r, (x) => x.rate), ofCeiling(r, (x) => x.rate, "single", "C4"));
      row("1", label, "append p50", "ms", "lower", each(r, (x) => x.p50));
      row("1", label, "append p99", "ms", "lower", each(r, (x) => x.p99));
    }
    if (only.has("2")) {
      const r = await repeated("w2", w2);
      // Goal: at least 50 % of the in-actor insert ceiling (C2) measured on the same runtime.
      row("2", `batched appends (${K.W2_BATCH}/POST, ${K.W2_WRITERS} writers)`, "entries/s", "entries/s", "higher", each(r, (x) => x.rate),
        [ofCeiling(r, (x) => x.rate, "plain", "C2"), ofCeiling(r, (x) => x.rate, "batched", "C5")].filter(Boolean).join("; "));
    }
    if (only.has("3")) {
      /** "recv 1999/2000 serve, ..." summed over the repeats. */
      const recv = (r) => Object.entries(r).map(([k, runs]) =>
        `${sum(runs.map((x) => x.received))}/${sum(runs.map((x) => x.expected))} ${short(k)}`).join(", ");
      for (const mode of ["long-poll", "sse"]) {
        const r = await repeated(`w3-${mode}`, (t, rep) => w3(t, mode, rep));
        row("3", `delivery, ${K.W3_READERS} ${mode} readers`, "p50", "ms", "lower", each(r, (x) => x.p50), `recv ${recv(r)}`);
        row("3", `delivery, ${K.W3_READERS} ${mode} readers`, "p99", "ms", "lower", each(r, (x) => x.p99));
      }
      const ws = await repeated("w3-ws", (t, rep) => w3(t, "ws", rep), threadboxes);
      row("3", `delivery, ${K.W3_READERS} WebSocket subscribers`, "p50", "ms", "lower", each(ws, (x) => x.p50), `recv ${recv(ws)}; ref has no WS`);
      row("3", `delivery, ${K.W3_READERS} WebSocket subscribers`, "p99", "ms", "lower", each(ws, (x) => x.p99));
    }
    if (only.has("4")) {
      const r = await repeated("w4", w4);
      const pages = Object.entries(r).map(([k, runs]) => `${runs[0].pages} ${short(k)}`).join(", ");
      row("4", `catch-up read of ${K.W4_ENTRIES} entries`, "entries/s", "entries/s", "higher", each(r, (x) => x.rate), `pages ${pages}`);
      row("4", `catch-up read of ${K.W4_ENTRIES} entries`, "MB/s", "MB/s", "higher", each(r, (x) => x.mbps));
      row("4", `fill (batches of ${K.W4_FILL_BATCH})`, "entries/s", "entries/s", "higher", each(r, (x) => x.fillRate), "setup, informational");
    }
    let w5names = [];
    if (only.has("5")) {
      const r = await repeated("w5", w5);
      w5names = r.threadbox.map((x) => x.names);
      for (const runs of Object.values(r)) for (const x of runs) delete x.names;
      const lost = Object.entries(r).filter(([k]) => k.startsWith("reference")).map(([k, runs]) => [short(k), sum(runs.map((x) => x.recreated))]).filter(([, n]) => n > 0)
        .map(([k, n]) => `; ${k} lost ${n} appends (404) over ${K.REPEATS} runs`).join("");
      row("5", `${K.W5_THREADS} threads x ${K.W5_ENTRIES} entries (${K.W5_CONCURRENCY} conc.)`, "entries/s", "entries/s", "higher", each(r, (x) => x.rate),
        [`ref: plain streams${lost}`, ofCeiling(r, (x) => x.rate, "spread", "C7")].filter(Boolean).join("; "));
      row("5", `${K.W5_THREADS} threads x ${K.W5_ENTRIES} entries`, "append p99", "ms", "lower", each(r, (x) => x.p99));
      row("5", `create ${K.W5_THREADS} threads/streams`, "per s", "per s", "higher", each(r, (x) => x.createRate),
        ["setup, informational", ofCeiling(r, (x) => x.createRate, "create", "C6")].filter(Boolean).join("; "));
      row("5", `server memory per thread/stream, after the appends`, "KiB", "KiB", null, each(r, (x) => x.kibPerThread), "RSS growth of the server's process tree / threads; informational");
      row("5", `same, after ${K.W5_IDLE_MS / 1000} s idle`, "KiB", "KiB", null, each(r, (x) => x.kibPerThreadIdle),
        "threadbox only; RSS never shrinks: the allocator keeps freed pages and reuses them, so later repeats grow less (min)");
      row("5", `server's open files, after the appends`, "files", "files", null, each(r, (x) => x.openFiles), "threadbox: ~3 per live actor (SQLite db, WAL, shm)");
      row("5", `same, after ${K.W5_IDLE_MS / 1000} s idle`, "files", "files", null, each(r, (x) => x.openFilesIdle), "threadbox only: idle actors evicted, their databases closed");
    }
    if (only.has("6")) {
      log(`w6: ${K.W6_THREADS} running threads heartbeating every ${K.W6_INTERVAL_MS} ms for ${K.W6_DURATION_MS} ms`);
      const r = await repeated("w6", (t, rep) => w6(t, worker.pid, w5names[rep] ?? [], rep), [{ key: "threadbox", label: "threadbox (wrangler dev)", t: tb }]);
      const h = r.threadbox;
      row("6", `heartbeats: ${h[0].threads} threads / ${K.W6_INTERVAL_MS / 1000}s`, "workerd CPU", "% of 1 core", "lower", { threadbox: h.map((x) => x.workerdCpuPct) },
        `idle ${median(h.map((x) => x.idleWorkerdCpuPct)).toFixed(1)}%; tree ${median(h.map((x) => x.treeCpuPct)).toFixed(1)}%; ${median(h.map((x) => x.rate)).toFixed(0)} hb/s`);
      row("6", "heartbeats", "hb p99", "ms", "lower", { threadbox: h.map((x) => x.p99) }, `failed ${sum(h.map((x) => x.failed))}`);
      const grown = h.map((x) => x.grown);
      row("6", "heartbeats: log growth", "threads grown", "threads", "lower", { threadbox: grown }, Math.max(...grown) === 0 ? "OK: zero growth" : "FAIL: logs grew");
    }
    if (only.has("7")) {
      log(`w7: chat appends with ${K.W7_BOTS} bots, none triggered, vs plain appends`);
      const r = await repeated("w7", w7, [
        served && { key: "serve", label: "npm run serve", t: served },
        { key: "threadbox", label: "wrangler dev", t: worker },
      ].filter(Boolean));
      // The comparison is within one runtime: chat with bots against plain appends without.
      const dev = r.threadbox, srv = r.serve ?? null;
      const p = srv ?? dev;
      const label = `chat appends, ${K.W7_BOTS} bots none triggered (${K.W7_WRITERS} writers)`;
      const note = `reference column: plain appends (pi.*) in a house without bots on the ${srv ? "serve" : "wrangler dev"} runtime; goal ratio <= 1.10`;
      const devNote = (f) => (srv ? `wrangler dev plain ${fmt(median(dev.map((x) => f(x.plain))))}` : "");
      const figs = (f) => ({ threadbox: dev.map((x) => f(x.bots)), serve: srv?.map((x) => f(x.bots)), reference: p.map((x) => f(x.plain)) });
      row("7", label, "append p50", "ms", "lower", figs((x) => x.p50), note, 1.1);
      row("7", label, "append p99", "ms", "lower", figs((x) => x.p99), devNote((x) => x.p99), 1.1);
      row("7", label, "entries/s", "entries/s", "higher", figs((x) => x.rate), devNote((x) => x.rate), 1 / 1.1);
    }
    pinning.affinityAtEnd = affinities();
  } finally {
    await stopAll();
  }

  results.finishedAt = new Date().toISOString();
  mkdirSync(dirname(K.OUT), { recursive: true });
  writeFileSync(K.OUT, JSON.stringify(results, null, 2));
  const primary = served ? "serve" : "wrangler dev";
  console.log(table(rows));
  console.log([
    "",
    `results: ${K.OUT}`,
    "notes:",
    `- each figure is the median of ${K.REPEATS} run${K.REPEATS === 1 ? "" : "s"} per server${K.REPEATS > 1 ? ", (min–max) over the runs" : ""}; ratio = ${primary} median / ${refStores.has("file") ? "reference (file store) median" : "reference (memory) median (the file store did not run)"}; goal: >= 1.0 throughput, <= 1.0 latency`,
    `- pinning: ${pinNote()}`,
    "- durability: threadbox does one synchronous fsync per commit (SQLite in the Durable Object; stream appends that reach",
    "  one actor together share a commit, and none is answered before its commit); the reference file store",
    "  (column reference) appends to a segment file and awaits an asynchronous fdatasync that concurrent writers to the same stream",
    "  share; reference (memory) does not persist at all, an upper bound for the reference without durability",
    `- server order alternates between repeats: ${heads(results.order.even)} on odd repeats, ${heads(results.order.odd)} on even ones`,
  ].join("\n"));
}

function pinNote() {
  if (!pinning.applied) return `not applied (${pinning.reason}); client and servers share CPUs ${pinning.cpus?.join(",") ?? "?"}`;
  const s = String(pinning.serverCpu), c = String(pinning.clientCpu);
  const ok = (a) => a && Object.entries(a).every(([k, lists]) => lists.length === 1 && lists[0] === (k === "client" ? c : s));
  const servers = [K.SERVE ? "serve's workerd" : null, "wrangler dev with its workerd processes",
    refStores.size === 2 ? "both reference servers" : "the reference server", only.has("ceil") ? "the ceiling worker" : null].filter(Boolean);
  const ceilOk = [pinning.affinityCeiling, pinning.affinityCeilingServe].every((a) => !a || ok({ ceiling: a }));
  return `applied with taskset: client (the bench process) on CPU ${c}; every server process (${servers.join(", ")}) on CPU ${s}` +
    (ok(pinning.affinityAtStart) && (!pinning.affinityAtEnd || ok(pinning.affinityAtEnd)) && ceilOk ? "" : `; CHECK: some thread ran elsewhere, see pinning in ${K.OUT}`);
}

const heads = (keys) => keys.map((k) => COLUMNS.find((c) => c.key === k)?.head ?? k).join(", ");

function fmt(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "-";
  if (Math.abs(v) >= 1000) return Math.round(v).toLocaleString("en-US");
  if (Math.abs(v) >= 100) return v.toFixed(0);
  if (Math.abs(v) >= 10) return v.toFixed(1);
  return v.toFixed(2);
}

/** `median (min–max)`, or just the median when the runs agree or there was one. */
function fmtStat(st) {
  if (!st) return "-";
  const [m, lo, hi] = [fmt(st.median), fmt(st.min), fmt(st.max)];
  return lo === hi ? m : `${m} (${lo}–${hi})`;
}

/**
 * ratio = the primary threadbox median / the reference median: `npm run serve`'s runtime when it
 * ran (what a self-hosted threadbox is), else wrangler dev. wrangler dev stays a column without goals.
 */
function table(rs) {
  const withServe = rs.some((r) => r.serve !== null);
  const cols = COLUMNS.filter((c) => c.key !== "serve" || withServe);
  const head = ["#", "workload", "metric", ...cols.map((c) => c.head), "ratio", "goal", "note"];
  const numeric = new Set(Array.from({ length: cols.length + 1 }, (_, i) => 3 + i));
  const body = rs.map((r) => {
    const primary = withServe ? r.serve : r.threadbox;
    // Against the file-store reference; the memory store only when the file store did not run.
    const base = r.reference ?? (refStores.has("file") ? null : r.referenceMemory);
    const ratio = primary !== null && primary !== undefined && base ? primary / base : null;
    let goal = "";
    const limit = r.goalRatio ?? 1;
    if (ratio !== null && r.better) goal = (r.better === "higher" ? ratio >= limit : ratio <= limit) ? "ok" : "SHORT";
    return [r.id, r.workload, `${r.metric}${r.unit && r.unit !== r.metric ? ` (${r.unit})` : ""}`,
      ...cols.map((c) => fmtStat(r.stats[c.key])),
      ratio === null ? "-" : ratio.toFixed(2), goal, r.note];
  });
  const w = head.map((h, i) => Math.max(h.length, ...body.map((b) => String(b[i]).length)));
  const line = (cells) => cells.map((c, i) => (numeric.has(i) ? String(c).padStart(w[i]) : String(c).padEnd(w[i]))).join("  ").trimEnd();
  return [line(head), w.map((n) => "-".repeat(n)).join("  "), ...body.map(line)].join("\n");
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
