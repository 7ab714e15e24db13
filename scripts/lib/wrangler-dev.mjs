// Starts the worker under `wrangler dev` (local workerd) for scripts, Node tests and benchmarks.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

/**
 * Wrangler settings for a machine without internet: no metrics, and no fetch of the `Request.cf`
 * object from workers.cloudflare.com (offline it only prints a warning and uses a placeholder).
 */
export const OFFLINE_WRANGLER_ENV = { WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false" };

/** A house API token from a running worker, through its admin route. */
export async function mintHouseToken(url, adminSecret, houseId, subject, role) {
  const r = await fetch(`${url}/api/admin/tokens`, {
    method: "POST",
    headers: { authorization: `Bearer ${adminSecret}`, "content-type": "application/json" },
    body: JSON.stringify({ houseId, subject, role }),
  });
  if (r.status !== 201) throw new Error(`mint failed: ${r.status} ${await r.text()}`);
  return (await r.json()).token;
}

/** Children must find Node 22 first on PATH, as they do under `npm run`. */
export function nodePath() {
  return `${dirname(process.execPath)}:${join(ROOT, "node_modules", ".bin")}:${process.env.PATH ?? ""}`;
}

/**
 * wrangler dev traces every request locally by default (its local explorer and observability),
 * which costs more CPU than the worker itself. Off unless the caller's environment turns them on
 * (`X_LOCAL_EXPLORER=true npm run dev`); spread before process.env so that choice wins.
 */
export function localTracingEnv() {
  return { X_LOCAL_OBSERVABILITY: "false", X_LOCAL_EXPLORER: "false" };
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

export async function waitForHttp(url, timeoutMs = 60_000, isReady = (r) => r.ok) {
  const deadline = Date.now() + timeoutMs;
  let lastErr;
  while (Date.now() < deadline) {
    try {
      const r = await fetch(url);
      if (isReady(r)) return;
    } catch (err) {
      lastErr = err;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out waiting for ${url}: ${lastErr?.message ?? "not ready"}`);
}

/**
 * @param {{ port?: number, vars?: Record<string,string>, persistTo?: string, quiet?: boolean, logLevel?: string,
 *           configPath?: string, readyPath?: string, cwd?: string }} opts
 */
export async function startWorker(opts = {}) {
  // A port found free can be taken by another process (a parallel test's wrangler) before
  // wrangler binds it: try again with fresh ports instead of failing the run.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startWorkerOnce(opts);
    } catch (err) {
      if (attempt >= 3 || !/Address already in use/i.test(String(err?.message))) throw err;
      await new Promise((r) => setTimeout(r, 200 * attempt));
    }
  }
}

/**
 * The --persist-to dirs this module made (one per start; megabytes after a test file, far more after a bench).
 * Such a dir goes when its worker stops, unless stop({ keepState: true }) keeps it for a restart on
 * it; the restarted worker removes it then. A dir the caller made is the caller's to remove.
 */
const ownStateDirs = new Set();

async function startWorkerOnce(opts) {
  const port = opts.port ?? (await freePort());
  const inspectorPort = await freePort();
  const vars = {
    THREADBOX_ADMIN_SECRET: "test-admin-secret",
    THREADBOX_TOKEN_SECRET: "test-token-secret-0123456789abcdef",
    ...opts.vars,
  };
  const persistTo = opts.persistTo ?? mkdtempSync(join(tmpdir(), "threadbox-wrangler-"));
  if (!opts.persistTo) ownStateDirs.add(persistTo);
  const removeState = () => {
    if (!ownStateDirs.delete(persistTo)) return;
    rmSync(persistTo, { recursive: true, force: true, maxRetries: 3 });
  };
  const args = [
    "dev", "--ip", "127.0.0.1", "--port", String(port), "--inspector-port", String(inspectorPort),
    "--persist-to", persistTo, "--show-interactive-dev-session=false", "--log-level", opts.logLevel ?? "warn",
  ];
  if (opts.configPath) args.push("--config", opts.configPath);
  for (const [k, v] of Object.entries(vars)) args.push("--var", `${k}:${v}`);
  const cwd = opts.cwd ?? ROOT;
  const child = spawn(process.execPath, [join(cwd, "node_modules", "wrangler", "bin", "wrangler.js"), ...args], {
    cwd,
    env: { ...localTracingEnv(), ...process.env, ...OFFLINE_WRANGLER_ENV, PATH: nodePath(), CI: "true", NO_COLOR: "1" },
    stdio: ["ignore", opts.quiet === false ? "inherit" : "pipe", opts.quiet === false ? "inherit" : "pipe"],
    detached: true,
  });
  let output = "";
  // Keep only the tail: a long benchmark must not hold every log line in memory.
  child.stdout?.on("data", (d) => { output = (output + d).slice(-20_000); });
  child.stderr?.on("data", (d) => { output = (output + d).slice(-20_000); });
  const url = `http://127.0.0.1:${port}`;
  const exited = new Promise((resolve) => child.on("exit", resolve));
  try {
    await Promise.race([
      waitForHttp(`${url}${opts.readyPath ?? "/health"}`, 120_000),
      exited.then((code) => { throw new Error(`wrangler dev exited early (${code}):\n${output}`); }),
    ]);
  } catch (err) {
    try { process.kill(-child.pid, "SIGKILL"); } catch {}
    await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
    // Only a dir made for this start: one kept for a restart must outlive a retry.
    if (!opts.persistTo) removeState();
    throw err;
  }
  return {
    url,
    port,
    /** The wrangler process group: benchmarks read CPU of the workerd tree below it. */
    pid: child.pid,
    vars,
    persistTo,
    output: () => output,
    mintHouseToken: (houseId = "house-test", subject = "user-test", role = "owner") =>
      mintHouseToken(url, vars.THREADBOX_ADMIN_SECRET, houseId, subject, role),
    /** keepState: leave a dir of this module's own in place, for a restart on it (`persistTo`). */
    async stop({ keepState = false } = {}) {
      if (child.exitCode === null) {
        try { process.kill(-child.pid, "SIGTERM"); } catch {}
        await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
        try { process.kill(-child.pid, "SIGKILL"); } catch {}
      }
      if (!keepState) removeState();
    },
  };
}
