// Process helpers shared by boxes and sessions.
import fs from "node:fs";

/** Env var stamped on every box process so delete can find escaped ones via /proc. */
export const BOX_MARKER_VAR = "SANDBOX_HOST_BOX";

export function exitCodeOf(code, signal) {
  if (typeof code === "number") return code;
  const signals = { SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGTERM: 15 };
  return 128 + (signals[signal] ?? 0);
}

export function killGroup(pid, signal) {
  if (!pid) return;
  try {
    process.kill(-pid, signal);
  } catch {
    try {
      process.kill(pid, signal);
    } catch {
      /* already gone */
    }
  }
}

/** Scans /proc/<pid>/environ for the box marker; catches processes that left the group (setsid, nohup). */
export function findMarkedPids(marker) {
  let entries;
  try {
    entries = fs.readdirSync("/proc");
  } catch {
    return []; // no procfs (macOS): only process-group kill applies
  }
  const needle = Buffer.from(`${BOX_MARKER_VAR}=${marker}\0`);
  const out = [];
  for (const e of entries) {
    if (!/^\d+$/.test(e)) continue;
    const pid = Number(e);
    if (pid === process.pid) continue;
    try {
      const env = fs.readFileSync(`/proc/${pid}/environ`);
      const idx = env.indexOf(needle);
      if (idx === 0 || (idx > 0 && env[idx - 1] === 0)) out.push(pid);
    } catch {
      /* exited or not ours */
    }
  }
  return out;
}

