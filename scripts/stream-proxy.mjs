#!/usr/bin/env node
// Runs the stream-proxy edge function (supabase/functions/stream-proxy/index.ts) locally in Deno.
//   npm run stream-proxy            # STREAM_PROXY_PORT (default 54321), THREADBOX_WORKER_URL upstream
// Also exports startStreamProxy() for tests. Deno runs offline: the function has no remote imports,
// DENO_NO_UPDATE_CHECK=1, and DENO_DIR defaults to a temp dir, removed when the proxy exits.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { busyPortsMessage, envPort } from "./lib/ports.mjs";
import { stopWhenNpmRunEnds } from "./lib/npm-run-watch.mjs";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
export const ENTRY = join(ROOT, "supabase", "functions", "stream-proxy", "index.ts");
export const DEFAULT_PORT = 54321;

/** The `deno` npm package puts the native binary next to its package.json (bin.cjs only wraps it). */
export function denoBinary() {
  const candidates = [join(ROOT, "node_modules", "deno", "deno"), join(ROOT, "node_modules", ".bin", "deno")];
  for (const c of candidates) if (existsSync(c)) return c;
  throw new Error("deno binary not found under node_modules/deno (is the `deno` devDependency installed?)");
}

export function denoArgs(entry = ENTRY) {
  // --no-config/--no-lock: do not pick up the repo's package.json or write a lockfile.
  return ["run", "--no-config", "--no-lock", "--no-prompt", "--allow-net", "--allow-env", entry];
}

/**
 * Spawns the proxy and resolves once it listens.
 * @param {{ port?: number, workerUrl?: string | null, env?: Record<string, string | undefined>, quiet?: boolean, startTimeoutMs?: number }} opts
 *   workerUrl: null -> THREADBOX_WORKER_URL removed from the child's environment.
 * @returns {Promise<{ url: string, port: number, output: () => string, stop: () => Promise<void> }>}
 */
export async function startStreamProxy(opts = {}) {
  const deno = denoBinary();
  const env = { ...process.env, DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" };
  // Our own DENO_DIR is scratch space for this one run; a caller's DENO_DIR is theirs to keep.
  const ownDenoDir = process.env.DENO_DIR ? null : mkdtempSync(join(tmpdir(), "threadbox-deno-"));
  if (ownDenoDir) env.DENO_DIR = ownDenoDir;
  const removeDenoDir = () => {
    if (ownDenoDir) rmSync(ownDenoDir, { recursive: true, force: true });
  };
  if (opts.port !== undefined) env.STREAM_PROXY_PORT = String(opts.port);
  if (opts.workerUrl === null) delete env.THREADBOX_WORKER_URL;
  else if (opts.workerUrl !== undefined) env.THREADBOX_WORKER_URL = opts.workerUrl;
  for (const [k, v] of Object.entries(opts.env ?? {})) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  const child = spawn(deno, denoArgs(), {
    cwd: ROOT,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  const exited = new Promise((resolve) => {
    child.on("exit", (code, signal) => {
      removeDenoDir();
      resolve(code ?? signal);
    });
    child.on("error", (err) => {
      removeDenoDir();
      resolve(err.message);
    });
  });
  const listening = new Promise((resolve, reject) => {
    const onData = (d) => {
      output += d;
      if (!opts.quiet) process.stderr.write(d);
      const m = /stream-proxy listening on (http:\/\/\S+?:(\d+))/.exec(output);
      if (m) resolve({ url: m[1], port: Number(m[2]) });
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    exited.then((code) => reject(new Error(`stream-proxy exited early (${code}):\n${output}`)));
    setTimeout(() => reject(new Error(`stream-proxy did not start within ${opts.startTimeoutMs ?? 30_000} ms:\n${output}`)), opts.startTimeoutMs ?? 30_000).unref();
  });
  let where;
  try {
    where = await listening;
  } catch (err) {
    child.kill("SIGKILL");
    await exited;
    throw err;
  }
  return {
    ...where,
    output: () => output,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM");
      let grace;
      await Promise.race([exited, new Promise((r) => (grace = setTimeout(r, 3000)))]);
      clearTimeout(grace); // else it holds a caller that is done for 3 s
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGKILL");
        await exited;
      }
    },
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const command = "npm run stream-proxy";
  const port = envPort("STREAM_PROXY_PORT", DEFAULT_PORT, command);
  const host = process.env.STREAM_PROXY_HOSTNAME || "127.0.0.1"; // as index.ts reads it
  const unusable = await busyPortsMessage([{ port, envVar: "STREAM_PROXY_PORT", what: "the stream-proxy" }], command, host, "STREAM_PROXY_HOSTNAME");
  if (unusable) {
    console.error(unusable);
    process.exit(1);
  }
  if (!process.env.THREADBOX_WORKER_URL) {
    console.error("stream-proxy: THREADBOX_WORKER_URL is not set (e.g. http://127.0.0.1:8787/api/stream); every request will answer 500");
  }
  const starting = startStreamProxy({ port, quiet: false, startTimeoutMs: 60_000 });
  // Handled from the start, so that a Ctrl-C while Deno starts also stops it and removes its DENO_DIR.
  const shutdown = async () => {
    await starting.then((proxy) => proxy.stop(), () => {});
    process.exit(0);
  };
  process.on("SIGINT", shutdown);
  process.on("SIGTERM", shutdown);
  stopWhenNpmRunEnds("stream-proxy");
  await starting.catch(() => {
    // Deno's own output, already shown above, says why.
    console.error(`${command}: the proxy did not start`);
    process.exit(1);
  });
}
