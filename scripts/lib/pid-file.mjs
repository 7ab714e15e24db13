// The pid files `npm run serve` (its workerd, in the state directory) and `npm run dev` (wrangler's
// process group, in .wrangler/) leave so that a next start can name a server still running.
import { readFileSync, rmSync } from "node:fs";

/** True while process `pid` exists (a negative `pid`: while process group `-pid` has a member). */
export function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err?.code === "EPERM";
  }
}

/** The integer a pid file holds, or null (no file, or not an integer). */
export function readPidFile(file) {
  let n;
  try {
    n = Number(readFileSync(file, "utf8").trim());
  } catch {
    return null;
  }
  return Number.isInteger(n) ? n : null;
}

/** Removes `file` if it still names `pid`: another server may have written it since. */
export function removePidFileOf(file, pid) {
  if (readPidFile(file) === pid) rmSync(file, { force: true });
}
