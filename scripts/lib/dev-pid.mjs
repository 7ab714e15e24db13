// npm run dev notes the process group its wrangler dev runs in (led by scripts/lib/tether.mjs) in
// .wrangler/dev.pid, as npm run serve notes its workerd in the state directory: a wrangler dev of
// this checkout still serving .wrangler/state is named, rather than a bare "port in use" or a
// second wrangler dev on the same state.
import { readFileSync, readdirSync } from "node:fs";
import { alive, readPidFile } from "./pid-file.mjs";
import { spawnSync } from "node:child_process";
import { join } from "node:path";

export const DEV_PID_FILE = join(".wrangler", "dev.pid");

/** The commands of the processes in process group `pgid` (none when it is gone). */
function groupCommands(pgid) {
  if (!alive(-pgid)) return [];
  try {
    return readdirSync("/proc").filter((p) => /^\d+$/.test(p)).flatMap((p) => {
      try {
        // The command may hold ") ", so the fields after it are read from the last one.
        const stat = readFileSync(`/proc/${p}/stat`, "utf8");
        if (stat.slice(stat.lastIndexOf(") ") + 2).split(" ")[2] !== String(pgid)) return [];
        return [readFileSync(`/proc/${p}/cmdline`, "utf8").replace(/\0/g, " ")];
      } catch {
        return [];
      }
    });
  } catch {
    // No procfs (macOS).
    const out = spawnSync("ps", ["-A", "-o", "pgid=,command="], { encoding: "utf8" }).stdout ?? "";
    return out.split("\n").map((l) => /^\s*(\d+)\s+(.*)$/.exec(l)).filter((m) => m && m[1] === String(pgid)).map((m) => m[2]);
  }
}

/**
 * The process group of a wrangler dev (or its workerd) that an earlier npm run dev of the checkout
 * at `root` left running, or null. A group that is gone, or whose id now leads something else,
 * does not count.
 */
export function devGroupServing(root) {
  const pgid = readPidFile(join(root, DEV_PID_FILE));
  if (pgid === null || pgid <= 1) return null;
  return groupCommands(pgid).some((c) => /wrangler|workerd/.test(c)) ? pgid : null;
}

/**
 * Why npm run dev cannot start now (a wrangler dev of this checkout still runs), or null. A group
 * whose tether (its leader) still lives may be on its way out (its npm run dev just died, and the
 * tether is stopping it, which takes up to a few seconds after the port closes): it gets
 * `graceMs` to go before it counts. A group without its tether was left running, and counts at once.
 */
export async function devInUse(root, graceMs = 8000) {
  let pgid = devGroupServing(root);
  for (const t0 = Date.now(); pgid !== null && alive(pgid) && Date.now() - t0 < graceMs;) {
    await new Promise((r) => setTimeout(r, 200));
    pgid = devGroupServing(root);
  }
  return pgid === null ? null
    : `npm run dev: a wrangler dev of this checkout still serves .wrangler/state (process group ${pgid}): another npm run dev, or one left running when its npm run dev was killed; stop it (kill -- -${pgid}) first`;
}
