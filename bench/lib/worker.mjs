// The bench starts workers with the shared helper, under bench-only secrets.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT, freePort, mintHouseToken, nodePath, startWorker } from "../../scripts/lib/wrangler-dev.mjs";

export { ROOT, freePort, nodePath };

/** @param {{ vars?: Record<string,string>, persistTo?: string, logLevel?: string, configPath?: string, readyPath?: string }} opts */
export async function startBenchWorker(opts = {}) {
  // Without persistTo, startWorker makes the state dir and its stop() removes it.
  const worker = await startWorker({
    ...opts,
    vars: { THREADBOX_ADMIN_SECRET: "bench-admin-secret", THREADBOX_TOKEN_SECRET: "bench-token-secret-0123456789abcdef", ...opts.vars },
  });
  const mint = worker.mintHouseToken;
  worker.mintHouseToken = (houseId = "house-bench", subject = "user-bench", role = "owner") => mint(houseId, subject, role);
  return worker;
}

/**
 * threadbox on `npm run serve`'s runtime (the deploy bundle on plain workerd), built into and
 * persisted in temp dirs, with the same bench secrets and vars. Same interface as startBenchWorker;
 * `pid` is workerd's own.
 * @param {{ vars?: Record<string,string>, workerdArgs?: string[], configPath?: string }} opts
 */
export async function startBenchServe(opts = {}) {
  const { startServe } = await import("../../scripts/lib/serve.mjs");
  const vars = { THREADBOX_ADMIN_SECRET: "bench-admin-secret", THREADBOX_TOKEN_SECRET: "bench-token-secret-0123456789abcdef", ...opts.vars };
  const port = await freePort();
  const stateDir = mkdtempSync(join(tmpdir(), "threadbox-bench-serve-state-"));
  const buildDir = mkdtempSync(join(tmpdir(), "threadbox-bench-serve-build-"));
  const removeDirs = () => { for (const d of [stateDir, buildDir]) rmSync(d, { recursive: true, force: true, maxRetries: 3 }); };
  let server;
  try {
    server = await startServe({
      port,
      stateDir,
      buildDir,
      varsFileText: Object.entries(vars).map(([k, v]) => `${k}=${v}`).join("\n"),
      workerdArgs: opts.workerdArgs,
      configPath: opts.configPath,
    });
  } catch (err) {
    removeDirs();
    throw err;
  }
  return {
    url: server.url,
    port,
    pid: server.pid,
    mintHouseToken: (houseId = "house-bench", subject = "user-bench", role = "owner") =>
      mintHouseToken(server.url, vars.THREADBOX_ADMIN_SECRET, houseId, subject, role),
    async stop() {
      await server.stop();
      removeDirs();
    },
    /** For an exit handler, where nothing can be awaited: kills workerd and removes the dirs. */
    kill() {
      try { process.kill(server.pid, "SIGKILL"); } catch {}
      removeDirs();
    },
  };
}
