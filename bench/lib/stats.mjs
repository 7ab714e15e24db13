import { readdirSync, readFileSync } from "node:fs";

export const now = () => performance.timeOrigin + performance.now();
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function percentile(values, p) {
  if (values.length === 0) return NaN;
  const s = Float64Array.from(values).sort();
  const i = Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1));
  return s[i];
}

/** Runs `fn(i)` for i in [0, count) with at most `concurrency` in flight. */
export async function pool(count, concurrency, fn) {
  let next = 0;
  const workers = Array.from({ length: Math.min(concurrency, count) }, async () => {
    for (;;) {
      const i = next++;
      if (i >= count) return;
      await fn(i);
    }
  });
  await Promise.all(workers);
}

/** A JSON object of about `bytes` bytes. */
export function paddedJson(fields, bytes = 100) {
  const base = JSON.stringify({ ...fields, pad: "" });
  return JSON.stringify({ ...fields, pad: "x".repeat(Math.max(0, bytes - base.length)) });
}

const CLK_TCK = 100;

function procStat(pid) {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, "utf8");
    const close = s.lastIndexOf(")");
    const comm = s.slice(s.indexOf("(") + 1, close);
    const f = s.slice(close + 2).split(" ");
    // fields after comm: [0]=state [1]=ppid ... [11]=utime [12]=stime
    return { pid, comm, ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]) };
  } catch {
    return null;
  }
}

/** CPU ticks of a process and all its descendants, split by command name. */
export function treeCpu(rootPid) {
  const all = [];
  for (const d of readdirSync("/proc")) if (/^\d+$/.test(d)) { const st = procStat(d); if (st) all.push(st); }
  const children = new Map();
  for (const p of all) { if (!children.has(p.ppid)) children.set(p.ppid, []); children.get(p.ppid).push(p); }
  const root = all.find((p) => p.pid === String(rootPid));
  const out = { totalSec: 0, workerdSec: 0, pids: [] };
  const stack = root ? [root] : [];
  let guard = 0;
  while (stack.length && guard++ < 10_000) {
    const p = stack.pop();
    out.totalSec += p.ticks / CLK_TCK;
    if (p.comm.includes("workerd")) out.workerdSec += p.ticks / CLK_TCK;
    out.pids.push(`${p.pid}:${p.comm}`);
    for (const c of children.get(Number(p.pid)) ?? []) stack.push(c);
  }
  return out;
}

/**
 * One figure over repeated runs: { median, min, max, runs }. Non-finite runs (a run with no
 * samples) stay in `runs` but are left out of median/min/max; null when no run has a figure.
 */
export function summarize(values) {
  if (values === null || values === undefined) return null;
  const runs = (Array.isArray(values) ? values : [values]).map((v) => (typeof v === "number" ? v : NaN));
  const s = runs.filter(Number.isFinite).sort((a, b) => a - b);
  if (s.length === 0) return null;
  const mid = Math.floor(s.length / 2);
  const median = s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
  return { median, min: s[0], max: s[s.length - 1], runs: runs.map((v) => (Number.isFinite(v) ? v : null)) };
}

/** Open file descriptors of a process and all its descendants, from /proc/<pid>/fd. */
export function treeOpenFiles(rootPid) {
  let n = 0;
  for (const entry of treeCpu(rootPid).pids) {
    try {
      n += readdirSync(`/proc/${entry.split(":")[0]}/fd`).length;
    } catch {
      // exited meanwhile
    }
  }
  return n;
}

/** Resident memory (MiB) of a process and all its descendants, from /proc/<pid>/status VmRSS. */
export function treeRssMiB(rootPid) {
  let kib = 0;
  for (const entry of treeCpu(rootPid).pids) {
    try {
      const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${entry.split(":")[0]}/status`, "utf8"));
      if (m) kib += Number(m[1]);
    } catch {
      // exited meanwhile
    }
  }
  return kib / 1024;
}
