/**
 * What a run's harness leaves running. The harness runs in its own process group, but a tool's
 * command need not stay in it: pi's bash tool starts each command in a session of its own, and a
 * `cmd &` there outlives the command, and pi too, once pi is gone (killed, crashed) or has ended.
 * So the runner names the harness with a mark in its environment, which every process it starts
 * inherits, and finds them by it (the local sandbox host finds a box's processes the same way).
 */
import { readdirSync, readFileSync } from "node:fs";

/** The environment variable that carries a run's mark into the harness and all it starts. */
export const HARNESS_MARK_ENV = "THREADBOX_HARNESS_MARK";

/** Sends `signal` to the process group `pid` leads; false when there is none left. */
export function signalGroup(pid: number | undefined, signal: NodeJS.Signals): boolean {
  if (!pid) return false;
  try {
    process.kill(-pid, signal);
    return true;
  } catch {
    return false;
  }
}

/** The pids whose environment carries `${HARNESS_MARK_ENV}=mark` (none without procfs). */
export function markedPids(mark: string): number[] {
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return [];
  }
  const wanted = `${HARNESS_MARK_ENV}=${mark}`;
  const out: number[] = [];
  for (const e of entries) {
    if (!/^\d+$/.test(e) || Number(e) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${e}/environ`, "latin1").split("\0").includes(wanted)) out.push(Number(e));
    } catch {
      // exited meanwhile, or another user's
    }
  }
  return out;
}

/**
 * SIGKILLs the harness's groups and every process with the mark, again while new ones turn up (a
 * loop that forks as it is killed); returns how many were found.
 */
export function killLeftovers(mark: string, groups: number[]): number {
  for (const pid of groups) signalGroup(pid, "SIGKILL");
  const found = new Set<number>();
  for (let round = 0; round < 5; round++) {
    const pids = markedPids(mark);
    if (pids.length === 0) break;
    for (const pid of pids) {
      found.add(pid);
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone already
      }
    }
  }
  return found.size;
}
