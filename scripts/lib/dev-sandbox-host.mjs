// npm run dev notes the local sandbox host it started (its URL and key, and the pid of the npm run
// dev that holds it) in .wrangler/dev-sandbox-host.json, so that `npm run smoke` and `snapshot` check
// the host that dev's worker uses: that one is on SANDBOX_HOST_PORT, whatever .dev.vars says.
import { readFileSync, rmSync, writeFileSync, chmodSync } from "node:fs";
import { join } from "node:path";
import { alive } from "./pid-file.mjs";

export const DEV_SANDBOX_HOST_FILE = join(".wrangler", "dev-sandbox-host.json");

/** Written by npm run dev once its host listens; owner-only, as it holds the host's key. */
export function recordDevSandboxHost(root, host) {
  const file = join(root, DEV_SANDBOX_HOST_FILE);
  writeFileSync(file, `${JSON.stringify({ pid: process.pid, apiUrl: host.apiUrl, apiKey: host.apiKey })}\n`, { mode: 0o600 });
  chmodSync(file, 0o600); // writeFileSync's mode applies only to a file it creates
}

/** Removed by the npm run dev that wrote it (another may have written it since). */
export function forgetDevSandboxHost(root) {
  const file = join(root, DEV_SANDBOX_HOST_FILE);
  if (readRecord(file)?.pid === process.pid) rmSync(file, { force: true });
}

function readRecord(file) {
  try {
    const r = JSON.parse(readFileSync(file, "utf8"));
    return Number.isInteger(r?.pid) && typeof r.apiUrl === "string" && typeof r.apiKey === "string" ? r : null;
  } catch {
    return null;
  }
}

/** Whether `pid` is still an npm run dev: a record left by a killed one may name a pid reused since. */
function isDevProcess(pid) {
  if (!alive(pid)) return false;
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("dev.mjs");
  } catch {
    return true; // no procfs (macOS): alive is what can be known
  }
}

/** The sandbox host of the npm run dev running in the checkout at `root`, or null. */
export function runningDevSandboxHost(root) {
  const r = readRecord(join(root, DEV_SANDBOX_HOST_FILE));
  return r && isDevProcess(r.pid) ? { pid: r.pid, apiUrl: r.apiUrl, apiKey: r.apiKey } : null;
}
