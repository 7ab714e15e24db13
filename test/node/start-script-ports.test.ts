/**
 * What `npm run serve`, `npm run dev` and `npm run stream-proxy` say about a port or host variable
 * that cannot work: one line naming the variable and what it takes, exit code 1, no Node stack
 * trace, and never "already in use" for a port that is not. Real script subprocesses; each one
 * stops at the check, before it builds or starts anything.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const { freePort } = (await import("../../scripts/lib/wrangler-dev.mjs" as string)) as { freePort(): Promise<number> };

const ROOT = join(__dirname, "..", "..");
const scratch = mkdtempSync(join(tmpdir(), "threadbox-start-ports-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const VARS = ["PORT", "HOST", "SANDBOX_HOST_PORT", "DEMO_MODEL_PORT", "STREAM_PROXY_PORT", "STREAM_PROXY_HOSTNAME"];

async function run(script: string, env: Record<string, string>, args: string[] = []): Promise<{ code: number | string; out: string }> {
  const childEnv: NodeJS.ProcessEnv = {
    ...process.env,
    NO_COLOR: "1",
    // where serve would put its vars file if it got that far
    THREADBOX_VARS_FILE: join(scratch, "serve.vars"),
    THREADBOX_WORKER_URL: "http://127.0.0.1:9/api/stream",
  };
  for (const k of VARS) delete childEnv[k];
  Object.assign(childEnv, env);
  const child = spawn(process.execPath, [join(ROOT, "scripts", script), ...args], { cwd: ROOT, env: childEnv, detached: true });
  let out = "";
  child.stdout!.on("data", (d) => (out += d));
  child.stderr!.on("data", (d) => (out += d));
  // A script that got past its checks would start servers: end its whole group.
  const guard = setTimeout(() => {
    try {
      process.kill(-child.pid!, "SIGKILL");
    } catch { /* gone */ }
  }, 20_000);
  const code = await new Promise<number | string>((r) => child.on("exit", (c, s) => r(c ?? s ?? -1)));
  clearTimeout(guard);
  return { code, out };
}

function expectOneLine(out: string) {
  expect(out).not.toMatch(/\n\s+at |ERR_SOCKET_BAD_PORT|RangeError|NaN/);
  expect(out.trim().split("\n")).toHaveLength(1);
}

describe("an argument npm run serve does not take", () => {
  it("npm run serve -- --nobuild is refused, not dropped (which would build after all)", async () => {
    const r = await run("serve.mjs", { PORT: String(await freePort()), HOST: "127.0.0.1" }, ["--nobuild"]);
    expect(r.code).toBe(1);
    expect(r.out.trim()).toBe("npm run serve: unknown argument --nobuild (it takes --no-build)");
    expectOneLine(r.out);
  });
});

describe("a port variable that is not a port", () => {
  for (const bad of ["abc", "99999", "-1", "80.5"]) {
    it(`PORT=${bad} npm run serve`, async () => {
      const r = await run("serve.mjs", { PORT: bad, HOST: "127.0.0.1" });
      expect(r.code).toBe(1);
      expect(r.out.trim()).toBe(`npm run serve: PORT must be a port number from 1 to 65535, got "${bad}"`);
      expectOneLine(r.out);
    });
  }

  for (const name of ["PORT", "SANDBOX_HOST_PORT", "DEMO_MODEL_PORT"]) {
    for (const bad of ["abc", "99999"]) {
      it(`${name}=${bad} npm run dev`, async () => {
        const ports = { PORT: String(await freePort()), SANDBOX_HOST_PORT: String(await freePort()), DEMO_MODEL_PORT: String(await freePort()) };
        const r = await run("dev.mjs", { ...ports, [name]: bad });
        expect(r.code).toBe(1);
        expect(r.out.trim()).toBe(`npm run dev: ${name} must be a port number from 1 to 65535, got "${bad}"`);
        expectOneLine(r.out);
      }, 30_000);
    }
  }

  it("SANDBOX_HOST_PORT=abc npm run sandbox-host", async () => {
    const r = await run("../sandbox-host/main.mjs", { SANDBOX_HOST_PORT: "abc" });
    expect(r.code).toBe(1);
    expect(r.out.trim()).toBe(`npm run sandbox-host: SANDBOX_HOST_PORT must be a port number from 1 to 65535, got "abc"`);
    expectOneLine(r.out);
  });

  for (const bad of ["abc", "-1", "65536"]) {
    it(`STREAM_PROXY_PORT=${bad} npm run stream-proxy`, async () => {
      const r = await run("stream-proxy.mjs", { STREAM_PROXY_PORT: bad });
      expect(r.code).toBe(1);
      expect(r.out.trim()).toBe(`npm run stream-proxy: STREAM_PROXY_PORT must be a port number from 1 to 65535, got "${bad}"`);
      expectOneLine(r.out);
    }, 30_000);
  }
});

describe("a host that is not this machine's is named as such, not as a busy port", () => {
  it("HOST=999.1.1.1 npm run serve", async () => {
    const port = await freePort();
    const r = await run("serve.mjs", { PORT: String(port), HOST: "999.1.1.1" });
    expect(r.code).toBe(1);
    expect(r.out).not.toContain("already in use");
    expect(r.out).toMatch(/^npm run serve: cannot listen on 999\.1\.1\.1 port \d+ \(threadbox\): (ENOTFOUND|EAI_AGAIN|EAI_FAIL): HOST=999\.1\.1\.1 cannot be resolved; set HOST to an address of this machine/);
    expectOneLine(r.out);
  });

  it("STREAM_PROXY_HOSTNAME=999.1.1.1 npm run stream-proxy", async () => {
    const r = await run("stream-proxy.mjs", { STREAM_PROXY_PORT: String(await freePort()), STREAM_PROXY_HOSTNAME: "999.1.1.1" });
    expect(r.code).toBe(1);
    expect(r.out).toContain("STREAM_PROXY_HOSTNAME=999.1.1.1 cannot be resolved");
    expectOneLine(r.out.replace(/^stream-proxy: THREADBOX_WORKER_URL.*\n/m, ""));
  }, 30_000);

  it("the line to copy for a taken port keeps the other ports and the host the user set", async () => {
    const busy = createServer();
    await new Promise<void>((r) => busy.listen(0, "127.0.0.1", () => r()));
    const taken = (busy.address() as { port: number }).port;
    try {
      const [worker, model] = [await freePort(), await freePort()];
      const dev = await run("dev.mjs", { PORT: String(worker), SANDBOX_HOST_PORT: String(taken), DEMO_MODEL_PORT: String(model) });
      expect(dev.code).toBe(1);
      expect(dev.out).toMatch(new RegExp(`\\n  PORT=${worker} DEMO_MODEL_PORT=${model} SANDBOX_HOST_PORT=\\d+ npm run dev\\n`));
      const serve = await run("serve.mjs", { PORT: String(taken), HOST: "127.0.0.1" });
      expect(serve.code).toBe(1);
      expect(serve.out).toMatch(/\n  HOST=127\.0\.0\.1 PORT=\d+ npm run serve\n/);
    } finally {
      busy.close();
    }
  }, 30_000);

  it("a taken SANDBOX_HOST_PORT is named with a free one to use, not a Node stack", async () => {
    const busy = createServer();
    await new Promise<void>((r) => busy.listen(0, "127.0.0.1", () => r()));
    const port = (busy.address() as { port: number }).port;
    try {
      const r = await run("../sandbox-host/main.mjs", { SANDBOX_HOST_PORT: String(port) });
      expect(r.code).toBe(1);
      expect(r.out).toContain(`port ${port} (the local sandbox host) is already in use on 127.0.0.1`);
      expect(r.out).toMatch(/SANDBOX_HOST_PORT=\d+ npm run sandbox-host/);
      expect(r.out).not.toMatch(/\n\s+at |EADDRINUSE/);
    } finally {
      busy.close();
    }
  }, 30_000);

  it("a taken STREAM_PROXY_PORT is named with a free one to use, not a Deno and Node stack", async () => {
    const busy = createServer();
    await new Promise<void>((r) => busy.listen(0, "127.0.0.1", () => r()));
    const port = (busy.address() as { port: number }).port;
    try {
      const r = await run("stream-proxy.mjs", { STREAM_PROXY_PORT: String(port) });
      expect(r.code).toBe(1);
      expect(r.out).toContain(`port ${port} (the stream-proxy) is already in use on 127.0.0.1`);
      expect(r.out).toMatch(/STREAM_PROXY_PORT=\d+ npm run stream-proxy/);
      expect(r.out).not.toMatch(/\n\s+at |AddrInUse/);
    } finally {
      busy.close();
    }
  }, 30_000);
});
