// A server script started by `npm run <event>` runs under `npm -> sh -c -> node`. npm passes a
// SIGTERM it gets (a test's or a supervisor's child.kill()) to that shell only, and the shell dies
// without passing it on; npm killed with SIGKILL leaves the shell waiting. Either way the script
// served on, orphaned, holding its ports (and the pipes of whoever started npm). This watches the
// two processes above it and stops the script as a SIGTERM would, once either is gone.
import { execFileSync } from "node:child_process";

const alive = (pid) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === "EPERM";
  }
};

/** The parent of `pid` (1 once it was orphaned), or null when it cannot be read. */
function parentOf(pid) {
  try {
    const out = execFileSync("ps", ["-o", "ppid=", "-p", String(pid)], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
    const ppid = Number(out);
    return Number.isSafeInteger(ppid) && ppid >= 1 ? ppid : null;
  } catch {
    return null;
  }
}

// Read as the script starts, while npm surely still runs: read once npm is gone, the shell's
// parent would be init, and npm's pid lost.
const shell = process.ppid;
const npm = process.env.npm_lifecycle_event && shell > 1 ? parentOf(shell) : null;

/**
 * When this process was started by `npm run <event>` (not by another script that npm started,
 * nor directly), sends it SIGTERM, so its own handler stops it, once npm or npm's shell is gone.
 */
export function stopWhenNpmRunEnds(event, intervalMs = 1000) {
  if (process.env.npm_lifecycle_event !== event || shell <= 1) return;
  const timer = setInterval(() => {
    if (alive(shell) && npm !== 1 && (npm === null || alive(npm))) return;
    clearInterval(timer);
    process.kill(process.pid, "SIGTERM");
  }, intervalMs);
  timer.unref();
}
