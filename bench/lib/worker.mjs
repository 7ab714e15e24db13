// Bench copy of scripts/lib/wrangler-dev.mjs: adds `configPath` and exposes the process-group pid
// (so the bench can read /proc/<pid>/stat of the workerd process tree).
import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT, freePort, nodePath, waitForHttp } from "../../scripts/lib/wrangler-dev.mjs";

export { ROOT, freePort, nodePath };

/**
 * @param {{ vars?: Record<string,string>, persistTo?: string, logLevel?: string, configPath?: string,
 *           readyPath?: string }} opts
 */
export async function startBenchWorker(opts = {}) {
  const port = await freePort();
  const inspectorPort = await freePort();
  const vars = {
    THREADBOX_ADMIN_SECRET: "bench-admin-secret",
    THREADBOX_TOKEN_SECRET: "bench-token-secret-0123456789abcdef",
    ...opts.vars,
  };
  const persistTo = opts.persistTo ?? mkdtempSync(join(tmpdir(), "threadbox-bench-"));
  const args = [
    "dev", "--ip", "127.0.0.1", "--port", String(port), "--inspector-port", String(inspectorPort),
    "--persist-to", persistTo, "--show-interactive-dev-session=false", "--log-level", opts.logLevel ?? "warn",
  ];
  if (opts.configPath) args.push("--config", opts.configPath);
  for (const [k, v] of Object.entries(vars)) args.push("--var", `${k}:${v}`);
  const child = spawn(process.execPath, [join(ROOT, "node_modules", "wrangler", "bin", "wrangler.js"), ...args], {
    cwd: ROOT,
    env: { ...process.env, PATH: nodePath(), WRANGLER_SEND_METRICS: "false", CI: "true", NO_COLOR: "1" },
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  let output = "";
  child.stdout.on("data", (d) => { output = (output + d).slice(-20000); });
  child.stderr.on("data", (d) => { output = (output + d).slice(-20000); });
  const url = `http://127.0.0.1:${port}`;
  const exited = new Promise((resolve) => child.on("exit", resolve));
  try {
    await Promise.race([
      waitForHttp(`${url}${opts.readyPath ?? "/health"}`, 120_000),
      exited.then((code) => { throw new Error(`wrangler dev exited early (${code}):\n${output}`); }),
    ]);
  } catch (err) {
    try { process.kill(-child.pid, "SIGKILL"); } catch {}
    throw err;
  }
  return {
    url,
    port,
    pid: child.pid,
    vars,
    persistTo,
    output: () => output,
    async mintHouseToken(houseId = "house-bench", subject = "user-bench", role = "owner") {
      const r = await fetch(`${url}/api/admin/tokens`, {
        method: "POST",
        headers: { authorization: `Bearer ${vars.THREADBOX_ADMIN_SECRET}`, "content-type": "application/json" },
        body: JSON.stringify({ houseId, subject, role }),
      });
      if (r.status !== 201) throw new Error(`mint failed: ${r.status} ${await r.text()}`);
      return (await r.json()).token;
    },
    async stop() {
      if (child.exitCode !== null) return;
      try { process.kill(-child.pid, "SIGTERM"); } catch {}
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
      try { process.kill(-child.pid, "SIGKILL"); } catch {}
    },
  };
}
