// CPU pinning for the bench: the client (the bench process) on one core, every server process on
// another, with `taskset` (util-linux). Children and threads inherit a process's affinity, so
// pinning a server's process tree once after it starts covers what it spawns later.
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { treeCpu } from "./stats.mjs";

/** "0-2,5" -> [0, 1, 2, 5] */
function parseCpuList(s) {
  const out = [];
  for (const part of String(s).trim().split(",").filter(Boolean)) {
    const [a, b] = part.split("-").map(Number);
    for (let c = a; c <= (b ?? a); c++) out.push(c);
  }
  return out;
}

/** The CPUs a task may run on (`/proc/<pid>[/task/<tid>]/status`), as its list string; null if gone. */
function cpusAllowed(path) {
  try {
    return /^Cpus_allowed_list:\s*(\S+)/m.exec(readFileSync(`${path}/status`, "utf8"))?.[1] ?? null;
  } catch {
    return null;
  }
}

function hasTaskset() {
  try {
    execFileSync("taskset", ["--version"], { stdio: "pipe" });
    return true;
  } catch {
    return false;
  }
}

/**
 * Whether to pin, and where: the first two CPUs this process may use (0 and 1 on a plain 2-core
 * machine), client on the first, servers on the second.
 * @returns {{ applied: boolean, reason?: string, clientCpu?: number, serverCpu?: number, cpus: number[] }}
 */
export function planPinning(enabled) {
  const cpus = parseCpuList(cpusAllowed("/proc/self") ?? "0");
  if (!enabled) return { applied: false, reason: "disabled with PIN=0", cpus };
  if (!hasTaskset()) return { applied: false, reason: "taskset not found", cpus };
  if (cpus.length < 2) return { applied: false, reason: `only ${cpus.length} core available`, cpus };
  return { applied: true, clientCpu: cpus[0], serverCpu: cpus[1], cpus };
}

/** Pins every thread of `pid` to `cpus` (a taskset list, e.g. "1" or "0-1"). False if the process is gone. */
export function pinPid(pid, cpus) {
  try {
    execFileSync("taskset", ["-a", "-p", "-c", String(cpus), String(pid)], { stdio: "pipe" });
    return true;
  } catch (err) {
    if (cpusAllowed(`/proc/${pid}`) === null) return false; // exited meanwhile
    throw new Error(`taskset -a -p -c ${cpus} ${pid}: ${err.stderr?.toString().trim() || err.message}`);
  }
}

/** Pins a process and all its descendants (every thread) to `cpus`. Returns the pids pinned. */
export function pinTree(rootPid, cpus) {
  const pids = treeCpu(rootPid).pids.map((p) => Number(p.split(":")[0]));
  return pids.filter((pid) => pinPid(pid, cpus));
}

/**
 * The distinct CPU lists of every thread of a process tree (or of one process with `tree: false`):
 * ["1"] when the whole tree is pinned to CPU 1.
 */
export function affinityOf(rootPid, { tree = true } = {}) {
  const pids = tree ? treeCpu(rootPid).pids.map((p) => p.split(":")[0]) : [String(rootPid)];
  const lists = new Set();
  for (const pid of pids) {
    let tids = [];
    try { tids = readdirSync(`/proc/${pid}/task`); } catch {}
    for (const tid of tids) { const l = cpusAllowed(`/proc/${pid}/task/${tid}`); if (l) lists.add(l); }
  }
  return [...lists].sort();
}
