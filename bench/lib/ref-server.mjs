import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { ROOT, freePort } from "./worker.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));

/** Starts @durable-streams/server in a child Node process. store: "file" (fsynced, like SQLite) or "memory". */
export async function startRefServer({ longPollTimeoutMs, store = "file" }) {
  const port = await freePort();
  const dataDir = store === "file" ? mkdtempSync(join(tmpdir(), "threadbox-bench-ref-")) : "";
  const child = spawn(process.execPath, [join(HERE, "ref-server-child.mjs")], {
    cwd: ROOT,
    env: { ...process.env, REF_PORT: String(port), REF_LONG_POLL_TIMEOUT_MS: String(longPollTimeoutMs), REF_DATA_DIR: dataDir },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`reference server did not start:\n${output}`)), 30_000);
    child.stdout.on("data", (d) => {
      output += d;
      const m = /READY (\S+)/.exec(output);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    child.stderr.on("data", (d) => { output = (output + d).slice(-20000); });
    child.on("exit", (code) => { clearTimeout(timer); reject(new Error(`reference server exited (${code}):\n${output}`)); });
  });
  const exited = new Promise((r) => child.on("exit", r));
  return {
    url: url.replace(/\/$/, ""),
    pid: child.pid,
    dataDir,
    async stop() {
      if (child.exitCode === null) {
        try { child.kill("SIGTERM"); } catch {}
        await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
        try { child.kill("SIGKILL"); } catch {}
      }
      if (dataDir) rmSync(dataDir, { recursive: true, force: true, maxRetries: 3 });
    },
  };
}
