// npm run dev notes the process group its wrangler dev runs in (led by scripts/lib/tether.mjs) in
// .wrangler/dev.pid, as npm run serve notes its workerd in the state directory: a wrangler dev of
// this checkout still serving .wrangler/state is named, rather than a bare "port in use" or a
// second wrangler dev on the same state.
import { readFileSync, readdirSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { join } from "node:path";

export const DEV_PID_FILE = join(".wrangler", "dev.pid");

/** The commands of the processes in process group `pgid` (none when it is gone). */
function groupCommands(pgid) {
  try {
    process.kill(-pgid, 0);
  } catch (err) {
    if (err?.code !== "EPERM") return [];
  }
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
  let pgid;
  try {
    pgid = Number(readFileSync(join(root, DEV_PID_FILE), "utf8").trim());
  } catch {
    return null;
  }
  if (!Number.isInteger(pgid) || pgid <= 1) return null;
  return groupCommands(pgid).some((c) => /wrangler|workerd/.test(c)) ? pgid : null;
}

/** Why npm run dev cannot start now (a wrangler dev of this checkout still runs), or null. */
export function devInUse(root) {
  const pgid = devGroupServing(root);
  return pgid === null ? null
    : `npm run dev: a wrangler dev of this checkout still serves .wrangler/state (process group ${pgid}): another npm run dev, or one left running when its npm run dev was killed; stop it (kill -- -${pgid}) first`;
}
