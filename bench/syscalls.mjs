#!/usr/bin/env node
// What one operation costs the server in durable-storage system calls and CPU, threadbox (on
// `npm run serve`'s runtime) beside the reference server's file store, in one run: fsync-family
// calls and files opened per operation (counted by strace on the server's process tree), and the
// server's CPU time per operation (from /proc). Unlike the throughput of `npm run bench`, these
// counts do not depend on how busy the machine is, so they explain a bench row's ceiling.
//
//   npm run bench:syscalls                 # 200 operations of each kind
//   npm run bench:syscalls -- --count=500
//
// Needs Linux; without strace only the CPU column is printed.
import { spawn, spawnSync } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { Target } from "./lib/client.mjs";
import { startBenchServe } from "./lib/worker.mjs";
import { startRefServer } from "./lib/ref-server.mjs";
import { pool, sleep } from "./lib/stats.mjs";

const flags = Object.fromEntries(process.argv.slice(2).filter((a) => a.startsWith("--")).map((a) => {
  const [k, ...v] = a.slice(2).split("=");
  return [k, v.length ? v.join("=") : "true"];
}));
const count = Number(flags.count ?? 200);
if (!Number.isInteger(count) || count < 1) {
  console.error("--count must be a positive integer");
  process.exit(2);
}
const hasStrace = spawnSync("strace", ["-V"]).status === 0;
const TICKS_PER_S = 100; // USER_HZ: /proc/<pid>/stat counts CPU time in these on Linux.

/** Every process in the tree under `pid` (workerd's and Node's threads are counted with their process). */
function tree(pid) {
  const children = new Map();
  for (const p of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    try {
      const ppid = readFileSync(`/proc/${p}/stat`, "utf8").split(") ")[1].split(" ")[1];
      children.set(ppid, [...(children.get(ppid) ?? []), p]);
    } catch {}
  }
  const out = [String(pid)];
  for (let i = 0; i < out.length; i++) out.push(...(children.get(out[i]) ?? []));
  return out;
}

/** User + system CPU seconds of the process tree so far. */
function cpuSeconds(pid) {
  let ticks = 0;
  for (const p of tree(pid)) {
    try {
      const f = readFileSync(`/proc/${p}/stat`, "utf8").split(") ")[1].split(" ");
      ticks += Number(f[11]) + Number(f[12]); // utime, stime (fields 14 and 15)
    } catch {}
  }
  return ticks / TICKS_PER_S;
}

/** Runs `fn` while strace counts the tree's fsync-family calls and opened files. */
async function measure(pid, fn) {
  let trace = null;
  let output = "";
  if (hasStrace) {
    const args = ["-f", "-c", "-e", "trace=fsync,fdatasync,sync_file_range,openat"];
    for (const p of tree(pid)) args.push("-p", p);
    trace = spawn("strace", args, { stdio: ["ignore", "ignore", "pipe"] });
    trace.stderr.on("data", (d) => (output += d));
    await sleep(500);
  }
  const cpu0 = cpuSeconds(pid);
  await fn();
  await sleep(300); // a commit answered before its fsync returned still counts
  const cpu = cpuSeconds(pid) - cpu0;
  if (!trace) return { fsyncs: null, opens: null, cpu };
  trace.kill("SIGINT");
  await new Promise((r) => trace.on("exit", r));
  const calls = (name) => {
    const line = output.split("\n").find((l) => l.trim().endsWith(` ${name}`));
    return line ? Number(line.trim().split(/\s+/)[3]) : 0;
  };
  return { fsyncs: calls("fsync") + calls("fdatasync") + calls("sync_file_range"), opens: calls("openat"), cpu };
}

const body = (i) => JSON.stringify({ payload: { type: "chat", text: `entry ${i} ${"x".repeat(40)}` } });

async function measureServer(label, target, pid) {
  for (let i = 0; i < 20; i++) await target.createThread(`warm-${i}`); // first-use costs out of the way
  const names = [];
  const rows = [];
  let lost = 0;
  // As in `npm run bench`: the reference's file store answers 404 now and then on a stream it just
  // created (so its streams are created one at a time, and such appends are counted, not fatal).
  const append = (name, text) => target.append(name, text).catch((err) => {
    if (target.hasThreads || !/-> 404/.test(err.message)) throw err;
    lost++;
  });
  rows.push(["create a thread", await measure(pid, () => pool(count, target.hasThreads ? 32 : 1, async (i) => { names[i] = await target.createThread(i); }))]);
  await sleep(1000);
  rows.push(["first append to each new thread (64 at once)", await measure(pid, () => pool(count, 64, async (i) => { await append(names[i], body(i)); }))]);
  rows.push(["append to one thread (1 writer)", await measure(pid, async () => { for (let i = 0; i < count; i++) await append(names[0], body(i)); })]);
  console.error(`${label}: measured`);
  return { rows, lost };
}

const serve = await startBenchServe();
const ref = await startRefServer({ longPollTimeoutMs: 1000, store: "file" }).catch(async (err) => {
  await serve.stop();
  throw err;
});
try {
  const serveTarget = new Target({ label: "serve", url: serve.url, token: await serve.mintHouseToken(), threads: true });
  const refTarget = new Target({ label: "reference", url: ref.url, threads: false });
  const ours = await measureServer("serve", serveTarget, serve.pid);
  const theirs = await measureServer("reference", refTarget, ref.pid);
  const per = (n) => (n === null ? "-" : (n / count).toFixed(2));
  const ms = (s) => ((s * 1000) / count).toFixed(3);
  console.log(`\n${count} operations of each kind; per operation. Threads are created 32 at once on threadbox, one at a time on the reference (as in npm run bench). Threadbox: a thread is a Durable Object with its own SQLite database; reference: a thread is a plain stream in its file store.`);
  console.log(`${"operation".padEnd(46)} ${"serve fsyncs".padStart(12)} ${"opens".padStart(6)} ${"CPU ms".padStart(8)}   ${"ref fsyncs".padStart(10)} ${"opens".padStart(6)} ${"CPU ms".padStart(8)}`);
  ours.rows.forEach(([name, a], i) => {
    const b = theirs.rows[i][1];
    console.log(`${name.padEnd(46)} ${per(a.fsyncs).padStart(12)} ${per(a.opens).padStart(6)} ${ms(a.cpu).padStart(8)}   ${per(b.fsyncs).padStart(10)} ${per(b.opens).padStart(6)} ${ms(b.cpu).padStart(8)}`);
  });
  if (theirs.lost > 0) console.log(`The reference answered 404 to ${theirs.lost} of its ${2 * count} appends (a stream it had just created): those cost it less than a real append.`);
  if (!hasStrace) console.log("(strace not found: fsyncs and opens not counted)");
  console.log("CPU ms: the server's process tree, user + system, at /proc's 10 ms resolution (use --count >= 200).");
} finally {
  await serve.stop();
  await ref.stop();
}
