// Process helpers shared by boxes and sessions.
import fs from "node:fs";
import path from "node:path";
import { pidsWithEnv } from "../src/domain/proc-env.mjs";

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
  return scanMarkers((value) => value === marker);
}

/** The processes of box `boxId` started by any host (a killed host's left behind, say). */
export function findPidsOfBox(boxId) {
  return scanMarkers((value) => value.endsWith(`/${boxId}`));
}

function scanMarkers(matches) {
  // no procfs (macOS): none, and only process-group kill applies
  return pidsWithEnv(BOX_MARKER_VAR, matches);
}


/** The host's PATH, which finds the tools the host itself runs in a box (its shell, `unshare`). */
export const HOST_PATH = process.env.PATH ?? "/usr/local/bin:/usr/bin:/bin";
const hostBinaries = new Map();

/**
 * `name`'s absolute path on the host. A box's own PATH (an environment may set it) decides what
 * its commands find, as on a Daytona box whose shell is started by absolute path; it must not
 * decide whether the host can start that shell at all.
 */
export function hostBinary(name) {
  let found = hostBinaries.get(name);
  if (found === undefined) {
    found = name;
    for (const dir of HOST_PATH.split(path.delimiter)) {
      const candidate = path.join(dir || ".", name);
      try {
        fs.accessSync(candidate, fs.constants.X_OK);
        if (fs.statSync(candidate).isFile()) {
          found = candidate;
          break;
        }
      } catch {}
    }
    hostBinaries.set(name, found);
  }
  return found;
}
