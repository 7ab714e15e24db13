// Processes found by a variable in their environment, which everything a process starts inherits:
// how the local host finds a box's processes and the runner what a run's harness left running,
// where a process group misses what started a session of its own.
import { readdirSync, readFileSync } from "node:fs";

/**
 * The pids (this process left out) whose environment sets `name` to a value `matches` accepts;
 * none without procfs (macOS).
 */
export function pidsWithEnv(name, matches) {
  let entries;
  try {
    entries = readdirSync("/proc");
  } catch {
    return [];
  }
  const prefix = `${name}=`;
  const out = [];
  for (const e of entries) {
    if (!/^\d+$/.test(e)) continue;
    const pid = Number(e);
    if (pid === process.pid) continue;
    try {
      const set = readFileSync(`/proc/${pid}/environ`, "latin1").split("\0").find((v) => v.startsWith(prefix));
      if (set !== undefined && matches(set.slice(prefix.length))) out.push(pid);
    } catch {
      // exited meanwhile, or another user's
    }
  }
  return out;
}
