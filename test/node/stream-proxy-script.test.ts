/**
 * `npm run stream-proxy` (scripts/stream-proxy.mjs) as a process: what it leaves behind when it
 * stops, and what it says about a bad STREAM_PROXY_PORT. Real Node running the script, real Deno.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const { freePort } = (await import("../../scripts/lib/wrangler-dev.mjs" as string)) as { freePort(): Promise<number> };

const ROOT = join(__dirname, "..", "..");
const SCRIPT = join(ROOT, "scripts", "stream-proxy.mjs");
const temps: string[] = [];
afterAll(() => {
  for (const d of temps) rmSync(d, { recursive: true, force: true });
});

/** A fresh TMPDIR, so that what the script leaves in it is all there is to see. */
function freshTmp(): string {
  const d = mkdtempSync(join(tmpdir(), "threadbox-proxy-script-"));
  temps.push(d);
  return d;
}

/** Runs `node <args>` in its own process group with the given env; collects its output. */
function run(args: string[], env: Record<string, string | undefined>) {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: "1", ...env };
  delete childEnv.DENO_DIR;
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete childEnv[k];
  const child = spawn(process.execPath, args, { cwd: ROOT, env: childEnv, detached: true });
  let output = "";
  child.stdout!.on("data", (d) => (output += d));
  child.stderr!.on("data", (d) => (output += d));
  const exited = new Promise<number | string>((resolve) => child.on("exit", (code, signal) => resolve(code ?? signal ?? -1)));
  return { child, exited, output: () => output };
}

async function waitFor(what: string, check: () => boolean, exited: Promise<unknown>, output: () => string) {
  let gone = false;
  void exited.then(() => (gone = true));
  const deadline = Date.now() + 30_000;
  while (!check()) {
    if (gone || Date.now() > deadline) throw new Error(`${what} never happened:\n${output()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const denoDirs = (dir: string) => readdirSync(dir).filter((n) => n.startsWith("threadbox-deno-"));

describe("npm run stream-proxy: its temporary DENO_DIR", () => {
  for (const [how, signal, toGroup] of [
    ["Ctrl-C (SIGINT to the process group)", "SIGINT", true],
    ["SIGTERM to the script", "SIGTERM", false],
  ] as const) {
    it(`is removed when the proxy is stopped with ${how}`, async () => {
      const tmp = freshTmp();
      const port = await freePort();
      const p = run([SCRIPT], { TMPDIR: tmp, STREAM_PROXY_PORT: String(port), THREADBOX_WORKER_URL: "http://127.0.0.1:9/api/stream" });
      await waitFor("listening", () => p.output().includes("stream-proxy listening on"), p.exited, p.output);
      expect(denoDirs(tmp)).toHaveLength(1); // it does use one while it runs
      process.kill(toGroup ? -p.child.pid! : p.child.pid!, signal);
      expect(await p.exited).toBe(0);
      expect(denoDirs(tmp)).toEqual([]);
    }, 60_000);
  }

  it("is removed when startStreamProxy()'s stop() ends the proxy", async () => {
    const tmp = freshTmp();
    const code = `
      const { startStreamProxy } = await import(${JSON.stringify(SCRIPT)});
      const p = await startStreamProxy({ port: ${await freePort()}, workerUrl: "http://127.0.0.1:9/api/stream", quiet: true });
      await p.stop();
      console.log("stopped");`;
    const p = run(["--input-type=module", "-e", code], { TMPDIR: tmp });
    expect(await p.exited, p.output()).toBe(0);
    expect(p.output()).toContain("stopped");
    expect(denoDirs(tmp)).toEqual([]);
  }, 60_000);
});

describe("npm run stream-proxy: a THREADBOX_WORKER_URL set but not an http(s) URL, or a STREAM_PROXY_UPSTREAM_TIMEOUT_MS not a whole number", () => {
  const good = "http://127.0.0.1:8787/api/stream";
  for (const [env, why] of [
    [{ THREADBOX_WORKER_URL: "localhost:8787/api/stream" }, "THREADBOX_WORKER_URL must be an http(s) URL"], // parses, as scheme localhost:
    [{ THREADBOX_WORKER_URL: "127.0.0.1:8787/api/stream" }, "THREADBOX_WORKER_URL is not a valid URL"],
    [{ THREADBOX_WORKER_URL: "http://127.0.0.1:8787/api/stream?x=1" }, "THREADBOX_WORKER_URL must not carry a query or fragment"],
    [{ THREADBOX_WORKER_URL: good, STREAM_PROXY_UPSTREAM_TIMEOUT_MS: "30s" }, `STREAM_PROXY_UPSTREAM_TIMEOUT_MS must be a whole number of milliseconds (0 turns the timeout off), got "30s"`],
    [{ THREADBOX_WORKER_URL: good, STREAM_PROXY_UPSTREAM_TIMEOUT_MS: "-1" }, "STREAM_PROXY_UPSTREAM_TIMEOUT_MS must be a whole number"],
  ] as const) {
    it(`refuses to start, naming it, as a bad port does (${JSON.stringify(env)})`, async () => {
      const tmp = freshTmp();
      const p = run([SCRIPT], { TMPDIR: tmp, STREAM_PROXY_PORT: String(await freePort()), ...env });
      // It used to listen and answer every request 500: stop it then, and fail on what it said.
      const listening = new Promise<"listening">((resolve) => {
        const poll = setInterval(() => p.output().includes("stream-proxy listening on") && (clearInterval(poll), resolve("listening")), 50);
        void p.exited.then(() => clearInterval(poll));
      });
      const outcome = await Promise.race([p.exited, listening]);
      if (outcome === "listening") {
        process.kill(p.child.pid!, "SIGTERM");
        await p.exited;
      }
      expect([outcome, p.output()]).toEqual([1, expect.stringContaining(`stream-proxy: ${why}`)]);
      expect(p.output()).toContain("npm run stream-proxy: the proxy did not start");
      expect(denoDirs(tmp)).toEqual([]);
    }, 60_000);
  }
});
