#!/usr/bin/env node
// A JavaScript CPU profile of threadbox on `npm run serve`'s runtime under one bench-shaped load:
// starts the deploy bundle on plain workerd with its inspector, drives the load, records the
// isolate's V8 profile over the DevTools protocol and prints where the time went (self time by
// function, then by source file). See bench/README.md, "CPU profile of the append path".
//
//   npm run bench:profile -- --load=single --count=5000
//   npm run bench:profile -- --load=threads --count=300 --entries=20
//   npm run bench:profile -- --load=stream-appends --count=300 --entries=20   (the same on plain streams)
//   npm run bench:profile -- --load=batched --count=300
//   npm run bench:profile -- --load=batched --entries=1000 --count=200   (#4's fill: 1,000 per POST)
//   npm run bench:profile -- --load=longpoll --count=200
//   npm run bench:profile -- --load=ws --count=200
//   npm run bench:profile -- --load=catchup --count=10 --entries=100000
//
// --out=<file.cpuprofile> keeps the raw profile (open it in Chrome DevTools' Performance panel).
import { setMaxListeners } from "node:events";
import { writeFileSync } from "node:fs";
import { Target } from "./lib/client.mjs";
import { freePort, startBenchServe } from "./lib/worker.mjs";
import { paddedJson, percentile, pool, sleep } from "./lib/stats.mjs";
import { pinPid, pinTree, planPinning } from "./lib/pin.mjs";

const flags = Object.fromEntries(process.argv.slice(2).filter((a) => a.startsWith("--")).map((a) => {
  const [k, ...v] = a.slice(2).split("=");
  return [k, v.length ? v.join("=") : "true"];
}));
const LOADS = ["single", "batched", "threads", "thread-appends", "stream-appends", "longpoll", "ws", "catchup"];
const load = flags.load ?? "single";
if (!LOADS.includes(load)) {
  console.error(`--load must be one of ${LOADS.join(", ")}`);
  process.exit(2);
}
const count = Number(flags.count ?? { single: 5000, batched: 300, threads: 300, "thread-appends": 300, "stream-appends": 300, longpoll: 200, ws: 200, catchup: 10 }[load]);
const entries = Number(flags.entries ?? 20);
const top = Number(flags.top ?? 25);

/** A minimal DevTools-protocol session over the inspector's WebSocket. */
async function inspect(port) {
  let targets = [];
  for (let i = 0; i < 50 && targets.length === 0; i++) {
    try {
      targets = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
    } catch {
      await sleep(100);
    }
  }
  const target = targets.find((t) => t.webSocketDebuggerUrl);
  if (!target) throw new Error(`no inspector target on port ${port}: ${JSON.stringify(targets)}`);
  const ws = new WebSocket(target.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    ws.addEventListener("open", resolve, { once: true });
    ws.addEventListener("error", () => reject(new Error("inspector websocket failed")), { once: true });
  });
  let nextId = 1;
  const pending = new Map();
  ws.addEventListener("message", (ev) => {
    const msg = JSON.parse(String(ev.data));
    const p = msg.id !== undefined && pending.get(msg.id);
    if (!p) return;
    pending.delete(msg.id);
    if (msg.error) p.reject(new Error(`${msg.error.message}`));
    else p.resolve(msg.result);
  });
  return {
    title: target.title ?? target.id,
    send(method, params = {}) {
      const id = nextId++;
      ws.send(JSON.stringify({ id, method, params }));
      return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
    },
    close: () => ws.close(),
  };
}

/** Self time per function and per file, in ms, from a V8 CPU profile. */
function summarize(profile) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const selfMs = new Map();
  const deltas = profile.timeDeltas ?? [];
  profile.samples.forEach((id, i) => selfMs.set(id, (selfMs.get(id) ?? 0) + (deltas[i + 1] ?? deltas[i] ?? 0) / 1000));
  const parentOf = new Map();
  for (const n of profile.nodes) for (const c of n.children ?? []) parentOf.set(c, n.id);
  const fns = new Map();
  const files = new Map();
  const nativeCallers = new Map();
  let total = 0;
  for (const [id, ms] of selfMs) {
    const f = byId.get(id).callFrame;
    const file = f.url ? f.url.replace(/^.*\//, "") : "";
    const fn = `${f.functionName || "(anonymous)"}${file ? ` ${file}:${f.lineNumber + 1}` : ""}`;
    fns.set(fn, (fns.get(fn) ?? 0) + ms);
    if (!f.url && !f.functionName.startsWith("(")) {
      // A native call (SQL exec, Headers, ...): which of our functions made it.
      const p = byId.get(parentOf.get(id))?.callFrame;
      const caller = p ? `${p.functionName || "(anonymous)"}${p.url ? ` ${p.url.replace(/^.*\//, "")}:${p.lineNumber + 1}` : ""}` : "?";
      const key = `${f.functionName || "(anonymous native)"} <- ${caller}`;
      nativeCallers.set(key, (nativeCallers.get(key) ?? 0) + ms);
    }
    const fileKey = file || f.functionName || "(native)";
    files.set(fileKey, (files.get(fileKey) ?? 0) + ms);
    total += ms;
  }
  const idle = fns.get("(idle)") ?? 0;
  return { total, busy: total - idle, fns, files, nativeCallers };
}

function printTable(title, map, busy, n) {
  console.log(`\n${title}`);
  for (const [k, ms] of [...map].filter(([k]) => k !== "(idle)").sort((a, b) => b[1] - a[1]).slice(0, n)) {
    console.log(`  ${ms.toFixed(1).padStart(9)} ms  ${((100 * ms) / busy).toFixed(1).padStart(5)} %  ${k}`);
  }
}

const body = () => JSON.stringify(JSON.parse(paddedJson({ t: Date.now() }, 100)));

/** What a load needs in place before the profile starts (catchup: a stream of `--entries` entries, default 100000). */
async function prepare(target) {
  if (load === "thread-appends" || load === "stream-appends") {
    // Created before the profile starts: the profile shows the appends alone. stream-appends is
    // the same load on plain streams: beside thread-appends it tells what the thread path costs.
    const names = [];
    const stamp = Date.now();
    await pool(count, 32, async (i) => { names[i] = load === "thread-appends" ? await target.createThread(i) : await target.createStream(`profile-many-${stamp}-${i}`); });
    return names;
  }
  if (load !== "catchup") return null;
  const name = `profile-catchup-${Date.now()}`;
  await target.createStream(name);
  const total = Number(flags.entries ?? 100_000);
  for (let at = 0; at < total; at += 1000) {
    await target.append(name, JSON.stringify(Array.from({ length: Math.min(1000, total - at) }, () => JSON.parse(body()))));
  }
  return name;
}

async function drive(target, token, prepared) {
  const lat = [];
  if (load === "single" || load === "batched") {
    const name = `profile-${Date.now()}`;
    await target.createStream(name);
    // --entries sizes a batch (100 by default, #2's shape; 1000 is #4's fill).
    const size = flags.entries ? entries : 100;
    const batch = load === "batched" ? JSON.stringify(Array.from({ length: size }, () => JSON.parse(body()))) : null;
    await pool(count, load === "batched" ? 4 : 16, async () => lat.push(await target.append(name, batch ?? body())));
    return { unit: load === "batched" ? `POSTs of ${size}` : "appends", done: count, lat };
  }
  if (load === "threads" || load === "thread-appends" || load === "stream-appends") {
    // Shaped like bench #5: threads created 32 at a time, then each thread's appends in order, 64 threads at once.
    const names = prepared ?? [];
    if (!prepared) await pool(count, 32, async (i) => { names[i] = await target.createThread(i); });
    const createdAt = performance.now();
    await pool(count, 64, async (i) => {
      for (let j = 0; j < entries; j++) {
        lat.push(await target.append(names[i], JSON.stringify({ payload: { type: "chat", text: `thread ${i} entry ${j} ${"x".repeat(40)}` } })));
      }
    });
    if (prepared) return { unit: `${load === "stream-appends" ? "plain streams" : "threads"} (created before the profile) x ${entries} appends each`, done: count, lat };
    return { unit: `threads created, then ${entries} appends each (appends alone: ${((performance.now() - createdAt) / 1000).toFixed(2)} s)`, done: count, lat };
  }
  if (load === "catchup") {
    // Like bench #4: the whole stream read from the start, page by page, `count` times over.
    let pages = 0;
    for (let i = 0; i < count; i++) {
      const t = performance.now();
      pages += (await target.catchUp(prepared)).pages;
      lat.push(performance.now() - t);
    }
    return { unit: `catch-up reads of the whole stream (${pages} pages)`, done: count, lat };
  }
  if (load === "ws") {
    // 50 WebSocket subscribers on one thread, `count` appends 20 ms apart.
    const name = await target.createThread(0);
    const sockets = [];
    for (let i = 0; i < 50; i++) sockets.push(await target.subscribe(name, () => {}));
    await sleep(300);
    for (let i = 0; i < count; i++) {
      lat.push(await target.append(name, JSON.stringify({ payload: { type: "chat", text: String(i) } })));
      await sleep(20);
    }
    for (const ws of sockets) ws.close();
    return { unit: "appends to 50 WebSocket subscribers", done: count, lat };
  }
  // longpoll: 50 readers parked on one thread, `count` appends 20 ms apart.
  const name = await target.createThread(0);
  const ctl = new AbortController();
  setMaxListeners(0, ctl.signal); // every long-poll request listens on it
  const offset = await target.tail(name);
  const readers = Array.from({ length: 50 }, () => target.longPoll(name, offset, () => {}, ctl.signal).catch(() => {}));
  await sleep(300);
  for (let i = 0; i < count; i++) {
    lat.push(await target.append(name, JSON.stringify({ payload: { type: "chat", text: String(i) } })));
    await sleep(20);
  }
  ctl.abort();
  await Promise.all(readers);
  return { unit: "appends to 50 long-poll readers", done: count, lat };
}

const inspectorPort = await freePort();
const server = await startBenchServe({ workerdArgs: [`--inspector-addr=127.0.0.1:${inspectorPort}`] });
// However this process ends (a closed pipe, Ctrl-C), the server goes with it.
process.on("exit", () => server.kill());
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(sig, () => process.exit(130));
process.stdout.on("error", () => process.exit(0));
// As in the bench: the client on one core, the server on another (PIN=0 or --pin=0: don't).
const pinning = planPinning((flags.pin ?? process.env.BENCH_PIN ?? "1") !== "0");
if (pinning.applied) {
  pinPid(process.pid, pinning.clientCpu);
  pinTree(server.pid, pinning.serverCpu);
}
let session;
try {
  const token = await server.mintHouseToken();
  const target = new Target({ label: "serve", url: server.url, token, threads: true });
  session = await inspect(inspectorPort);
  // Warm up (JIT, first actor) so the profile shows the steady state.
  const warm = `warm-${Date.now()}`;
  await target.createStream(warm);
  for (let i = 0; i < 200; i++) await target.append(warm, JSON.stringify({ w: i }));
  const prepared = await prepare(target);
  await session.send("Profiler.enable");
  await session.send("Profiler.setSamplingInterval", { interval: 100 });
  await session.send("Profiler.start");
  const t0 = performance.now();
  const result = await drive(target, token, prepared);
  const wallMs = performance.now() - t0;
  const { profile } = await session.send("Profiler.stop");
  if (flags.out) writeFileSync(flags.out, JSON.stringify(profile));
  const s = summarize(profile);
  console.log(`load: ${load}, ${result.done} ${result.unit} in ${(wallMs / 1000).toFixed(2)} s` +
    ` (${result.lat.length} requests timed: p50 ${percentile(result.lat, 50).toFixed(2)} ms, p99 ${percentile(result.lat, 99).toFixed(2)} ms)`);
  console.log(pinning.applied ? `pinned: client on CPU ${pinning.clientCpu}, workerd on CPU ${pinning.serverCpu}` : `not pinned: ${pinning.reason}`);
  console.log(`isolate "${session.title}": busy ${s.busy.toFixed(0)} ms of ${s.total.toFixed(0)} ms profiled` +
    ` (${(s.busy / result.lat.length).toFixed(3)} ms of JavaScript-thread time per request; the rest idle)`);
  printTable("self time by function", s.fns, s.busy, top);
  printTable("native calls by caller", s.nativeCallers, s.busy, top);
  printTable("self time by file", s.files, s.busy, 15);
} finally {
  session?.close();
  await server.stop();
}
