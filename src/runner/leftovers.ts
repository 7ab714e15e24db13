/**
 * What a run's harness leaves running. The harness runs in its own process group, but a tool's
 * command need not stay in it: pi's bash tool starts each command in a session of its own, and a
 * `cmd &` there outlives the command, and pi too, once pi is gone (killed, crashed) or has ended.
 * So the runner names the harness with a mark in its environment, which every process it starts
 * inherits, and finds them by it (the local sandbox host finds a box's processes the same way).
 */
import { readFileSync } from "node:fs";
import { pidsWithEnv } from "../domain/proc-env.mjs";

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
  return pidsWithEnv(HARNESS_MARK_ENV, (value) => value === mark);
}

/** The process group `pid` is in (undefined when it is gone, or without procfs). */
function groupOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    // pid (comm) state ppid pgrp …: the command name may hold spaces and parentheses.
    const pgrp = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[2]);
    return Number.isInteger(pgrp) ? pgrp : undefined;
  } catch {
    return undefined;
  }
}

/**
 * SIGKILLs the harnesses' groups and every process with the mark, again while new ones turn up (a
 * loop that forks as it is killed); returns how many were found. `groups`: those of the run's
 * harnesses in the order they started, the last one's harness just exited. An earlier one's
 * harness exited before, perhaps long ago: once its group emptied, the id was free to be taken
 * again (by another run's harness, or a command of one in a session of its own, on a shared box),
 * so it is signalled only while a process in it carries the mark.
 */
export function killLeftovers(mark: string, groups: number[]): number {
  const marked = markedPids(mark);
  const ours = new Set(marked.map(groupOf));
  const last = groups.at(-1);
  for (const pid of groups.slice(0, -1)) if (pid !== last && ours.has(pid)) signalGroup(pid, "SIGKILL");
  signalGroup(last, "SIGKILL");
  const found = new Set<number>();
  for (let round = 0; round < 5; round++) {
    const pids = round === 0 ? marked : markedPids(mark);
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
