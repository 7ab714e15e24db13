// `npm run serve`: the deploy bundle on plain workerd, started as a user starts it, from a fresh
// clone. State lives in SQLite files on local disk: it survives a crash of the process, and an
// alarm set before the crash fires after the restart.
import { execFileSync, spawn } from "node:child_process";
import { createServer as createHttpServer, get } from "node:http";
import { connect, createServer, type AddressInfo } from "node:net";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { freshTree } from "../support/fresh-tree";
import { freePort, nodePath } from "../../scripts/lib/wrangler-dev.mjs";

const ADMIN = "serve-admin-secret-4f1c9e";
const TOKEN_SECRET = "serve-token-secret-0123456789abcdef";
const trees: { remove(): void }[] = [];
const dirs: string[] = [];
/** Every `npm run serve` started: a failed assertion before a test stops its own must not leave it running. */
const started: { pid?: number }[] = [];
afterAll(() => {
  for (const child of started) {
    try { process.kill(-child.pid!, "SIGKILL"); } catch { /* already gone */ }
  }
  for (const t of trees) t.remove();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function tempDir(prefix: string) {
  const d = mkdtempSync(join(tmpdir(), prefix));
  dirs.push(d);
  return d;
}

/** `npm run serve` in `cwd`; resolves once it says it is serving. */
async function serve(cwd: string, env: Record<string, string>, args: string[] = []) {
  const child = spawn(process.execPath, [join(cwd, "scripts", "serve.mjs"), ...args], {
    cwd, detached: true, env: { ...process.env, PATH: nodePath(), NO_COLOR: "1", ...env },
  });
  started.push(child);
  let output = "";
  child.stdout!.on("data", (d) => { output += d; });
  child.stderr!.on("data", (d) => { output += d; });
  const exited = new Promise<number | string>((resolve) => child.on("exit", (code, signal) => resolve(code ?? signal ?? -1)));
  const ready = new Promise<void>((resolve, reject) => {
    const timer = setInterval(() => {
      if (output.includes("threadbox is serving")) { clearInterval(timer); resolve(); }
    }, 100);
    exited.then((code) => { clearInterval(timer); reject(new Error(`npm run serve exited (${code}):\n${output}`)); });
  });
  await ready;
  const workerdPid = Number(/plain workerd \(pid (\d+)/.exec(output)![1]);
  return {
    child, exited, workerdPid, output: () => output,
    /** The whole process group at once, as a crash or a power cut would. */
    crash() { process.kill(-child.pid!, "SIGKILL"); return exited; },
  };
}

function alive(pid: number) {
  try { process.kill(pid, 0); return true; } catch { return false; }
}

function client(url: string) {
  let token = "";
  const call = async (path: string, init: { method?: string; json?: unknown; headers?: Record<string, string>; body?: string } = {}) => {
    const headers: Record<string, string> = { authorization: `Bearer ${token}`, ...init.headers };
    let body = init.body;
    if (init.json !== undefined) { headers["content-type"] = "application/json"; body = JSON.stringify(init.json); }
    const r = await fetch(`${url}${path}`, { method: init.method ?? "GET", headers, body });
    const text = await r.text();
    let parsed: any = text;
    try { parsed = JSON.parse(text); } catch { /* not JSON */ }
    return { status: r.status, body: parsed, text, headers: r.headers };
  };
  return {
    call,
    token: () => token,
    async login() {
      const r = await fetch(`${url}/api/admin/tokens`, {
        method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
        body: JSON.stringify({ houseId: "house-serve", subject: "owner-serve", role: "owner" }),
      });
      expect(r.status).toBe(201);
      token = ((await r.json()) as { token: string }).token;
    },
  };
}

describe("npm run serve", () => {
  it("keeps threads, entries and plain streams across a crash, and fires an alarm after the restart", async () => {
    const tree = freshTree();
    trees.push(tree);
    const stateDir = tempDir("threadbox-serve-state-");
    const varsFile = join(tempDir("threadbox-serve-vars-"), "serve.vars");
    // A sandbox provider on this machine's loopback, as a local sandbox host would be: it only
    // records that the worker reached it.
    const reached: string[] = [];
    const provider = createHttpServer((req, res) => { reached.push(`${req.method} ${req.url}`); res.writeHead(503).end(); });
    await new Promise<void>((r) => provider.listen(0, "127.0.0.1", r));
    const providerPort = (provider.address() as AddressInfo).port;
    writeFileSync(varsFile, [
      `THREADBOX_ADMIN_SECRET=${ADMIN}`,
      `THREADBOX_TOKEN_SECRET="${TOKEN_SECRET}"`,
      "ORPHAN_SILENCE_MS=4000",
      "PROBE_INTERVAL_MS=60000",
      `DAYTONA_API_URL=http://127.0.0.1:${providerPort}/api`,
      "DAYTONA_API_KEY=loopback-key",
    ].join("\n"));
    const port = await freePort();
    const env = { PORT: String(port), THREADBOX_STATE_DIR: stateDir, THREADBOX_VARS_FILE: varsFile };

    const first = await serve(tree.dir, env);
    expect(first.output()).toMatch(/bundle [\d.]+ KiB/);
    // The token-minting commands it prints run as printed, in a shell that has no THREADBOX_ADMIN_SECRET yet.
    expect(first.output()).toContain(`THREADBOX_ADMIN_SECRET from ${varsFile}`);
    const printed = /Mint a house token[^\n]*\n((?: {2}.*\n)+)/.exec(first.output())![1]!;
    const { THREADBOX_ADMIN_SECRET: _unset, ...shellEnv } = process.env;
    const minted = JSON.parse(execFileSync("bash", ["-c", printed], { cwd: tempDir("threadbox-serve-shell-"), env: shellEnv, encoding: "utf8" }));
    expect([minted.error, minted.houseId, minted.role, typeof minted.token]).toEqual([undefined, "my-house", "owner", "string"]);
    expect(first.output()).toContain(`open http://127.0.0.1:${port}/#token=<token>`);
    const api = client(`http://127.0.0.1:${port}`);
    await api.login();

    // Secrets reach workerd through its environment, never the config file on disk.
    const config = readFileSync(join(tree.dir, ".serve", "build", "workerd.capnp"), "utf8");
    expect(config).toContain("enableSql = true");
    expect(config).not.toContain(ADMIN);
    expect(config).not.toContain(TOKEN_SECRET);

    const thread = (await api.call("/api/threads", { method: "POST", json: { title: "kept" } })).body;
    const one = await api.call(`/api/threads/${thread.id}/entries`, { method: "POST", json: { id: "e1", payload: { type: "chat", text: "one" } } });
    expect(one.status).toBe(201);
    const batch = Array.from({ length: 50 }, (_, i) => ({ id: `b${i}`, payload: { type: "chat", text: `batch ${i}` } }));
    expect((await api.call(`/api/threads/${thread.id}/entries`, { method: "POST", json: batch })).status).toBe(201);
    const before = (await api.call(`/api/threads/${thread.id}/entries?offset=-1`)).body;
    expect(before.entries).toHaveLength(51);

    // Behind a TLS reverse proxy: its X-Forwarded-Proto makes the created stream's URL https.
    const created = await api.call("/api/stream/notes", { method: "PUT", headers: { "content-type": "application/json", "x-forwarded-proto": "https" } });
    expect(created.status).toBe(201);
    expect(created.headers.get("location")).toBe(`https://127.0.0.1:${port}/api/stream/notes`);
    expect((await api.call("/api/stream/notes", { method: "POST", json: [{ n: 1 }, { n: 2 }] })).status).toBe(204);

    // Appends that arrive together share a commit; a client stalled mid-body must not hold the
    // others, and its own append lands once the rest of its body comes.
    expect((await api.call("/api/stream/uploads", { method: "PUT", headers: { "content-type": "application/json" } })).status).toBe(201);
    const stalled = rawPost(port, "/api/stream/uploads", api.token(), JSON.stringify({ n: "stalled" }));
    await stalled.sentHalf;
    const beside = await Promise.all(["a", "b", "c"].map((n) => api.call("/api/stream/uploads", { method: "POST", json: { n } })));
    expect(beside.map((r) => r.status)).toEqual([204, 204, 204]);
    stalled.finish();
    expect(await stalled.status).toBe(204);
    const uploads = (await api.call("/api/stream/uploads?offset=-1")).body as { n: string }[];
    expect(uploads.map((u) => u.n).sort()).toEqual(["a", "b", "c", "stalled"]);
    expect(uploads.at(-1)).toEqual({ n: "stalled" });

    // A running thread whose run goes silent: the orphan alarm is due ORPHAN_SILENCE_MS later.
    const run = (await api.call("/api/threads", { method: "POST", json: { title: "silent run" } })).body;
    await api.call(`/api/threads/${run.id}/entries`, { method: "POST", json: { payload: { type: "signal.thread.status_changed", status: "running" } } });
    expect((await api.call(`/api/threads/${run.id}`)).body.status).toBe("running");
    const crashedAt = Date.now();
    await first.crash();
    await waitFor(async () => !alive(first.workerdPid), 10_000);

    const second = await serve(tree.dir, env, ["--no-build"]);
    try {
      await api.login();
      const after = (await api.call(`/api/threads/${thread.id}/entries?offset=-1`)).body;
      expect(after.entries).toEqual(before.entries);
      expect((await api.call(`/api/threads/${thread.id}`)).body.title).toBe("kept");
      const listed = (await api.call("/api/threads?limit=10")).body.threads.map((t: { id: string }) => t.id);
      expect(listed).toEqual(expect.arrayContaining([thread.id, run.id]));
      const notes = await api.call("/api/stream/notes?offset=-1");
      expect(notes.body).toEqual([{ n: 1 }, { n: 2 }]);
      // An idempotent retry after the restart is still recognised.
      const retry = (await api.call(`/api/threads/${thread.id}/entries`, { method: "POST", json: { id: "e1", payload: { type: "chat", text: "one" } } })).body;
      expect(retry.entries[0].duplicate).toBe(true);

      // The alarm set before the crash fires in the new process, without any request to that thread.
      const orphaned = await waitFor(async () => {
        const es = (await api.call(`/api/threads/${run.id}/entries?offset=-1`)).body.entries as { ts: number; payload: { status?: string } }[];
        return es.find((e) => e.payload.status === "pi_session_orphaned");
      });
      expect(orphaned.ts).toBeGreaterThan(crashedAt);
      const row = (await api.call(`/api/threads/${run.id}`)).body;
      expect([row.status, row.reason]).toEqual(["failed", "pi_session_orphaned"]);

      // Production knows no in-memory test provider.
      const env1 = await api.call("/api/environments", { method: "POST", json: { name: "x", provider: "test" } });
      expect(env1.status).toBe(400);
      expect(env1.body.error.code).toBe("validation_failed");
      const box = await api.call("/api/sandboxes", { method: "POST", json: { provider: "test" } });
      expect(box.status).toBe(400);
      expect(box.body.error.code).toBe("validation_failed");

      // The worker reaches a provider on loopback (workerd alone would allow public addresses only).
      const made = await api.call("/api/sandboxes", { method: "POST", json: {} });
      expect(made.status).toBe(502); // the stand-in answers 503 to everything
      expect(reached.length).toBeGreaterThan(0);
      expect(readFileSync(join(tree.dir, ".serve", "build", "workerd.capnp"), "utf8")).toContain('allow = ["public", "private", "local"]');
    } finally {
      provider.close();
      process.kill(-second.child.pid!, "SIGTERM");
      expect(await second.exited).toBe(0);
      await waitFor(async () => !alive(second.workerdPid), 10_000); // stopped with it, not left behind
    }
  }, 240_000);

  it("serves the [assets] directory of wrangler.toml next to the API", async () => {
    const tree = freshTree();
    trees.push(tree);
    const site = join(tree.dir, "site-dist");
    mkdirSync(join(site, "assets"), { recursive: true });
    writeFileSync(join(site, "index.html"), "<!doctype html><title>threadbox ui</title>");
    writeFileSync(join(site, "assets", "app.js"), "console.log('ui')");
    // This test brings its own [assets] (in place of the project's, if it has one by now).
    const toml = readFileSync(join(tree.dir, "wrangler.toml"), "utf8").replace(/^\[assets\]\n(?:(?!\[)[^\n]*\n?)*/m, "");
    writeFileSync(join(tree.dir, "wrangler.toml"), `${toml}\n[assets]\ndirectory = "./site-dist"\nnot_found_handling = "single-page-application"\n`);
    const varsFile = join(tempDir("threadbox-serve-vars-"), "serve.vars");
    writeFileSync(varsFile, `THREADBOX_ADMIN_SECRET=${ADMIN}\nTHREADBOX_TOKEN_SECRET=${TOKEN_SECRET}\n`);
    const port = await freePort();
    const server = await serve(tree.dir, { PORT: String(port), THREADBOX_STATE_DIR: tempDir("threadbox-serve-state-"), THREADBOX_VARS_FILE: varsFile });
    const url = `http://127.0.0.1:${port}`;
    try {
      const index = await fetch(`${url}/`);
      expect(index.status).toBe(200);
      expect(index.headers.get("content-type")).toContain("text/html");
      expect(await index.text()).toContain("threadbox ui");
      const js = await fetch(`${url}/assets/app.js`);
      expect(js.headers.get("content-type")).toContain("javascript");
      expect(await js.text()).toBe("console.log('ui')");
      // A page load of an app route gets the app; the API still answers API calls.
      const route = await navigate(`${url}/threads/th_1`);
      expect(route.status).toBe(200);
      expect(route.body).toContain("threadbox ui");
      const health = await fetch(`${url}/health`);
      expect(await health.json()).toEqual({ ok: true, service: "threadbox" });
      const unauthorized = await fetch(`${url}/api/threads`);
      expect(unauthorized.status).toBe(401);
      expect(((await unauthorized.json()) as { error: { code: string } }).error.code).toBe("unauthorized");
      const missing = await fetch(`${url}/nope.js`);
      expect(missing.status).toBe(404);
      await missing.body?.cancel();
    } finally {
      process.kill(-server.child.pid!, "SIGTERM");
      await server.exited;
    }
  }, 240_000);

  it("refuses to start on a busy port, and without a usable token secret, before building anything", async () => {
    const tree = freshTree();
    trees.push(tree);
    const varsFile = join(tempDir("threadbox-serve-vars-"), "serve.vars");
    const start = async (port: number, file = varsFile) => {
      const child = spawn(process.execPath, [join(tree.dir, "scripts", "serve.mjs")], {
        cwd: tree.dir, env: { ...process.env, PATH: nodePath(), PORT: String(port), THREADBOX_VARS_FILE: file },
      });
      let out = "";
      child.stdout.on("data", (d) => { out += d; });
      child.stderr.on("data", (d) => { out += d; });
      const code = await new Promise((r) => child.on("exit", r));
      return { code, out };
    };

    // A vars file that cannot be created (its directory is missing) or read (a directory): one line
    // naming the setting, no stack trace.
    for (const file of [join(tempDir("threadbox-serve-vars-"), "missing-dir", "serve.vars"), tempDir("threadbox-serve-vars-")]) {
      const bad = await start(await freePort(), file);
      expect(bad.code).toBe(1);
      expect(bad.out).toContain(`the vars file ${file} (`);
      expect(bad.out).toContain("THREADBOX_VARS_FILE must name a file");
      expect(bad.out).not.toMatch(/\n\s+at |node:fs/);
    }

    writeFileSync(varsFile, `THREADBOX_ADMIN_SECRET=${ADMIN}\nTHREADBOX_TOKEN_SECRET=short\n`);
    const weak = await start(await freePort());
    expect(weak.code).toBe(1);
    expect(weak.out).toContain("THREADBOX_TOKEN_SECRET");
    writeFileSync(varsFile, `THREADBOX_ADMIN_SECRET=admin\nTHREADBOX_TOKEN_SECRET=${TOKEN_SECRET}\n`);
    const weakAdmin = await start(await freePort());
    expect(weakAdmin.code).toBe(1);
    expect(weakAdmin.out).toContain("THREADBOX_ADMIN_SECRET");

    writeFileSync(varsFile, `THREADBOX_ADMIN_SECRET=${ADMIN}\nTHREADBOX_TOKEN_SECRET=${TOKEN_SECRET}\n`);
    const busy = createServer();
    await new Promise<void>((r) => busy.listen(0, "127.0.0.1", () => r()));
    const port = (busy.address() as { port: number }).port;
    try {
      const taken = await start(port);
      expect(taken.code).toBe(1);
      expect(taken.out).toContain(`port ${port} (threadbox) is already in use`);
      expect(taken.out).toMatch(/PORT=\d+ npm run serve/);
      expect(taken.out).not.toMatch(/EADDRINUSE|\n\s+at /);
    } finally {
      busy.close();
    }
    expect(existsSync(join(tree.dir, ".serve", "build"))).toBe(false);
  }, 60_000);

  it("a state directory that cannot be made (/proc/nope, under a file) stops it at once with one line, before building", async () => {
    const tree = freshTree();
    trees.push(tree);
    const varsFile = join(tempDir("threadbox-serve-vars-"), "serve.vars");
    writeFileSync(varsFile, `THREADBOX_ADMIN_SECRET=${ADMIN}\nTHREADBOX_TOKEN_SECRET=${TOKEN_SECRET}\n`);
    const aFile = join(tempDir("threadbox-serve-state-"), "a-file");
    writeFileSync(aFile, "");
    for (const [stateDir, code] of [["/proc/nope", "ENOENT"], [join(aFile, "state"), "ENOTDIR"]]) {
      const r = await exitOf(tree.dir, { PORT: String(await freePort()), THREADBOX_STATE_DIR: stateDir, THREADBOX_VARS_FILE: varsFile }, 20_000);
      expect({ stateDir, ...r }).toEqual({
        stateDir, code: 1,
        out: `npm run serve: cannot create the state directory ${stateDir} (${code}): THREADBOX_STATE_DIR must name a directory that exists or can be created; unset, it is .serve/state\n`,
      });
    }
    expect(existsSync(join(tree.dir, ".serve", "build"))).toBe(false);
  }, 60_000);

  it("warns when git would commit its secrets or its state: a vars file or state directory named inside the clone and not ignored", async () => {
    const tree = freshTree();
    trees.push(tree);
    execFileSync("git", ["init", "-q"], { cwd: tree.dir });
    // an unknown THREADBOX_OUTBOUND stops it right after both are in place, before the build
    const stop = { PORT: String(await freePort()), THREADBOX_OUTBOUND: "bogus" };
    const named = await exitOf(tree.dir, { ...stop, THREADBOX_VARS_FILE: "prod.vars", THREADBOX_STATE_DIR: "prod-state" }, 20_000);
    expect(named.out).toContain(`created ${join(tree.dir, "prod.vars")}`);
    expect(named.out).toContain(`warning: git does not ignore the vars file ${join(tree.dir, "prod.vars")}, which holds the secrets`);
    expect(named.out).toContain(`warning: git does not ignore the state directory ${join(tree.dir, "prod-state")}`);
    // the defaults are in .gitignore; a file outside the clone is no business of git's
    const outside = join(tempDir("threadbox-serve-vars-"), "serve.vars");
    const cases: Record<string, string>[] = [{}, { THREADBOX_VARS_FILE: outside, THREADBOX_STATE_DIR: tempDir("threadbox-serve-state-") }];
    for (const env of cases) {
      const quiet = await exitOf(tree.dir, { ...stop, ...env }, 20_000);
      expect(quiet.out).toContain("THREADBOX_OUTBOUND: unknown bogus");
      expect(quiet.out).not.toContain("warning: git");
    }
    expect(readFileSync(join(tree.dir, ".serve.vars"), "utf8")).not.toContain("(kept out of git)");
  }, 60_000);

  it("creates its vars file with the stream URL of the port it serves on and the sandbox host's port", async () => {
    const tree = freshTree();
    trees.push(tree);
    const varsFile = join(tempDir("threadbox-serve-vars-"), "serve.vars");
    const [port, sandboxPort] = [await freePort(), await freePort()];
    // A state directory that cannot be made stops it right after the vars file is written.
    const r = await exitOf(tree.dir, { PORT: String(port), SANDBOX_HOST_PORT: String(sandboxPort), HOST: "0.0.0.0", THREADBOX_STATE_DIR: "/proc/nope", THREADBOX_VARS_FILE: varsFile }, 20_000);
    expect(r.out).toContain(`created ${varsFile}`);
    const vars = readFileSync(varsFile, "utf8");
    expect(vars).toMatch(new RegExp(`^THREADBOX_STREAM_URL=http://127\\.0\\.0\\.1:${port}/api/stream$`, "m"));
    expect(vars).toMatch(new RegExp(`^DAYTONA_API_URL=http://127\\.0\\.0\\.1:${sandboxPort}/api$`, "m"));
    expect(vars).not.toMatch(/:8787|:3986/);
  }, 60_000);
});

/** `npm run serve` expected to stop by itself: its exit code and all it printed. */
async function exitOf(cwd: string, env: Record<string, string>, timeoutMs: number): Promise<{ code: number | string; out: string }> {
  const child = spawn(process.execPath, [join(cwd, "scripts", "serve.mjs")], { cwd, detached: true, env: { ...process.env, PATH: nodePath(), NO_COLOR: "1", ...env } });
  started.push(child);
  let out = "";
  child.stdout!.on("data", (d) => { out += d; });
  child.stderr!.on("data", (d) => { out += d; });
  const timer = setTimeout(() => { out += "[still running after the timeout: killed]"; process.kill(-child.pid!, "SIGKILL"); }, timeoutMs);
  const code = await new Promise<number | string>((resolve) => child.on("exit", (c, signal) => resolve(c ?? signal ?? -1)));
  clearTimeout(timer);
  return { code, out };
}

/** A browser page load (fetch() may not set Sec-Fetch-Mode itself). */
function navigate(url: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    get(url, { headers: { "sec-fetch-mode": "navigate", accept: "text/html" } }, (res) => {
      let body = "";
      res.on("data", (d) => { body += d; });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    }).on("error", reject);
  });
}

/** A POST whose body stops halfway until `finish()`: a slow or stalled uploader. */
function rawPost(port: number, path: string, token: string, body: string) {
  const socket = connect(port, "127.0.0.1");
  const half = Math.floor(body.length / 2);
  const sentHalf = new Promise<void>((resolve, reject) => {
    socket.once("error", reject);
    socket.once("connect", () => {
      socket.write(`POST ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${token}\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body.slice(0, half)}`, () => resolve());
    });
  });
  let answer = "";
  socket.on("data", (d) => { answer += d; });
  const status = new Promise<number>((resolve, reject) => {
    socket.once("close", () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0)));
    socket.once("error", reject);
  });
  return { sentHalf, status, finish: () => socket.write(body.slice(half)) };
}

async function waitFor<T>(probe: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > deadline) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, 200));
  }
}
