/**
 * A server started with `npm run <script>` stops when npm is stopped: by the SIGTERM a test or a
 * supervisor sends with child.kill() (npm passes it to its `sh -c` only, which died without passing
 * it on), or by SIGKILL. Before, the script served on, orphaned, holding its port (and the pipes of
 * whoever started npm), so the next start found the port taken. Real `npm run` subprocesses.
 * (`npm run dev` and `npm run serve` use the same watch; they are too heavy to start here.)
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const { freePort } = (await import("../../scripts/lib/wrangler-dev.mjs" as string)) as { freePort(): Promise<number> };

const ROOT = join(__dirname, "..", "..");
const scratch = mkdtempSync(join(tmpdir(), "threadbox-npm-run-stop-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const listening = (port: number) => new Promise<boolean>((resolve) => {
  const s = connect(port, "127.0.0.1");
  s.once("connect", () => { s.destroy(); resolve(true); });
  s.once("error", () => resolve(false));
});

/** Whether the port is free again within `ms`. */
async function freed(port: number, ms: number): Promise<boolean> {
  for (const t0 = Date.now(); Date.now() - t0 < ms;) {
    if (!(await listening(port))) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return !(await listening(port));
}

async function startThenKill(script: string, env: Record<string, string>, ready: string, signal: NodeJS.Signals, port: number) {
  // Its own group, so that whatever is left is ended after the check.
  const child = spawn("npm", ["run", script], { cwd: ROOT, env: { ...process.env, NO_COLOR: "1", TMPDIR: scratch, ...env }, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  const started = new Promise<void>((resolve, reject) => {
    const look = (d: Buffer) => { out += d; if (out.includes(ready)) resolve(); };
    child.stdout!.on("data", look);
    child.stderr!.on("data", look);
    child.once("exit", (code) => reject(new Error(`npm run ${script} exited (${code}) before it was ready:\n${out}`)));
  });
  const exited = new Promise((r) => child.once("exit", r));
  try {
    await started;
    expect(await listening(port)).toBe(true);
    child.kill(signal);
    await exited;
    return await freed(port, 15_000);
  } finally {
    try { process.kill(-child.pid!, "SIGKILL"); } catch { /* all gone */ }
  }
}

describe("a server started with npm run stops with npm", () => {
  it("npm run sandbox-host, npm stopped with SIGTERM (child.kill()): the host stops and its port is free", async () => {
    const port = await freePort();
    expect(await startThenKill("sandbox-host", { SANDBOX_HOST_PORT: String(port), SANDBOX_HOST_API_KEY: "k", SANDBOX_HOST_ROOT: "" }, "boxes under", "SIGTERM", port)).toBe(true);
  });

  it("npm run sandbox-host, npm killed with SIGKILL: the host stops too", async () => {
    const port = await freePort();
    expect(await startThenKill("sandbox-host", { SANDBOX_HOST_PORT: String(port), SANDBOX_HOST_API_KEY: "k", SANDBOX_HOST_ROOT: "" }, "boxes under", "SIGKILL", port)).toBe(true);
  });

  it("npm run stream-proxy, npm stopped with SIGTERM: the proxy (and its Deno) stops and its port is free", async () => {
    const port = await freePort();
    const env = { STREAM_PROXY_PORT: String(port), THREADBOX_WORKER_URL: "http://127.0.0.1:9/api/stream" };
    expect(await startThenKill("stream-proxy", env, "stream-proxy listening", "SIGTERM", port)).toBe(true);
  });
});
