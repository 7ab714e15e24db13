// The real `threadbox` binary, spawned as a user runs it, against the worker under `wrangler dev`
// with the local sandbox host, the real pi in boxes, and the development demo model as pi's model.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFileSync, spawn } from "node:child_process";
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { delimiter, dirname, join } from "node:path";
import { startSandboxHost } from "../../sandbox-host/server.mjs";
import { ROOT, freePort, startWorker } from "../../scripts/lib/wrangler-dev.mjs";
import { startDemoModel } from "../../dev/demo-model/server.mjs";
import { DEMO_ENVIRONMENT_ID, seedDevHouse } from "../../scripts/lib/seed-dev.mjs";
import { startPausableProxy } from "../support/pausable-proxy";
import { createServer } from "node:http";
import { randomBytes } from "node:crypto";
import type { AddressInfo } from "node:net";
// @ts-expect-error plain JS module without declarations
import { subscribe } from "../../cli/lib/subscribe.mjs";
import { tempDirs } from "../support/temp-dirs";

const tempDir = tempDirs();

const CLI = join(ROOT, "cli", "threadbox.mjs");
const SANDBOX_KEY = "cli-sandbox-key";
let host: Awaited<ReturnType<typeof startSandboxHost>>;
let worker: Awaited<ReturnType<typeof startWorker>>;
let demo: Awaited<ReturnType<typeof startDemoModel>>;
let token: string;

type Result = { code: number | null; stdout: string; stderr: string };

/** Runs the CLI to its end. `env` replaces the login: no THREADBOX_* leaks in from the test's environment. */
function cli(args: string[], opts: { env?: Record<string, string>; input?: string; node?: string; config?: string; timeoutMs?: number } = {}): Promise<Result> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("THREADBOX_")));
  const child = spawn(opts.node ?? process.execPath, [CLI, ...args], {
    env: { ...base, NO_COLOR: "1", XDG_CONFIG_HOME: opts.config ?? tempDir("tb-cfg-"), ...opts.env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => (stdout += d));
  child.stderr.on("data", (d) => (stderr += d));
  child.stdin.end(opts.input ?? "");
  // A CLI that hangs is killed after timeoutMs: its result then says "still running" instead of an exit code.
  const timer = opts.timeoutMs ? setTimeout(() => { stderr += "\n[still running: killed]"; child.kill("SIGKILL"); }, opts.timeoutMs) : undefined;
  return new Promise((resolve) => child.on("close", (code) => { clearTimeout(timer); resolve({ code, stdout, stderr }); }));
}

const as = () => ({ THREADBOX_URL: worker.url, THREADBOX_TOKEN: token });

/** The CLI started and left running (signed in as the test house), to be watched and signalled. */
function started(args: string[]) {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("THREADBOX_")));
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ...base, NO_COLOR: "1", XDG_CONFIG_HOME: tempDir("tb-cfg-"), ...as() }, stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  child.stderr!.on("data", (d) => (err += d));
  const closed = new Promise<number | null>((resolve) => child.on("close", resolve));
  return { child, stderr: () => err, closed };
}
const ok = async (args: string[], opts: Parameters<typeof cli>[1] = {}) => {
  const r = await cli(args, { env: as(), ...opts });
  if (r.code !== 0) throw new Error(`threadbox ${args.join(" ")} exited ${r.code}:\n${r.stdout}\n${r.stderr}`);
  return r;
};
/** Appends entries to a thread as any writer of it may (free-form payloads). */
const appendEntries = async (threadId: string, payloads: unknown[]) => {
  const r = await fetch(`${worker.url}/api/threads/${threadId}/entries`, {
    method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify(payloads.map((payload) => ({ payload }))),
  });
  if (!r.ok) throw new Error(`append: ${r.status} ${await r.text()}`);
};
/** `started`, with its stdout collected; resolves once stdout holds `marker` (or the CLI exited). */
async function startedUntil(args: string[], marker: string) {
  const run = started(args);
  let out = "";
  run.child.stdout!.on("data", (d) => (out += d));
  let exited = false;
  void run.closed.then(() => (exited = true));
  for (let i = 0; i < 200 && !exited && !out.includes(marker); i++) await new Promise((r) => setTimeout(r, 50));
  return { ...run, stdout: () => out };
}
const api = async (path: string): Promise<any> => (await fetch(`${worker.url}${path}`, { headers: { authorization: `Bearer ${token}` } })).json();

beforeAll(async () => {
  host = await startSandboxHost({ port: 0, apiKey: SANDBOX_KEY });
  demo = await startDemoModel();
  const port = await freePort();
  worker = await startWorker({
    port,
    // boxes write to the worker itself over loopback, as under npm run dev
    vars: { DAYTONA_API_URL: host.apiUrl, DAYTONA_API_KEY: SANDBOX_KEY, DAYTONA_TARGET: "local", THREADBOX_STREAM_URL: `http://127.0.0.1:${port}/api/stream` },
  });
  token = await worker.mintHouseToken("house-cli", "cli-user", "owner");
  await seedDevHouse({ url: worker.url, token, demoModelBaseUrl: demo.baseUrl, vars: {}, statePath: join(tempDir("tb-seed-"), "seed.json") });
}, 180_000);

afterAll(async () => {
  await worker?.stop();
  await demo?.close();
  await host?.close();
});

describe("login", () => {
  it("takes the sign-in link npm run dev prints, keeps the token in a file only the user reads, and later commands use it", async () => {
    const config = tempDir("tb-login-");
    const r = await cli(["login", `${worker.url}/#token=${token}`], { config });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("as cli-user in house house-cli");
    const file = join(config, "threadbox", "config.json");
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(JSON.parse(readFileSync(file, "utf8"))).toEqual({ url: worker.url, token });
    const created = await cli(["new", "after login"], { config });
    expect(created.code).toBe(0);
    expect(created.stdout.trim()).toMatch(/^th_/);
    // logout forgets it, and a second logout says there was nothing to forget
    expect((await cli(["logout"], { config })).stdout.trim()).toBe(`removed ${file}`);
    expect((await cli(["logout"], { config })).stdout.trim()).toBe(`not logged in (nothing stored at ${file})`);
    expect(JSON.parse((await cli(["logout", "--json"], { config })).stdout)).toEqual({ removed: null });
  });

  it("refuses a bad token with the API's error code, exits non-zero and stores nothing", async () => {
    const config = tempDir("tb-login-");
    const r = await cli(["login", `${worker.url}/#token=not-a-token`], { config });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("error unauthorized:");
    expect(existsSync(join(config, "threadbox", "config.json"))).toBe(false);
  });

  it("a broken stored login stands in the way only of what needs it; problems with the config path are named in one line", async () => {
    const config = tempDir("tb-login-");
    const file = join(config, "threadbox", "config.json");
    mkdirSync(dirname(file));
    writeFileSync(file, "{bad");
    // THREADBOX_URL and THREADBOX_TOKEN say everything: the file is not read
    const listed = await cli(["threads", "--json"], { config, env: as() });
    expect([listed.code, listed.stderr]).toEqual([0, ""]);
    const needed = await cli(["threads"], { config });
    expect([needed.code, needed.stderr]).toEqual([2, `error bad_config: ${file} is not valid JSON: fix or delete it, then run \`threadbox login\`\n`]);
    // login is the fix it suggests, so login replaces it
    expect((await cli(["login", `${worker.url}/#token=${token}`], { config })).code).toBe(0);
    expect(JSON.parse(readFileSync(file, "utf8"))).toEqual({ url: worker.url, token });

    const aFile = join(config, "threadbox", "config.json"); // a file where the path wants a directory
    const under = join(aFile, "config.json");
    const unwritable = await cli(["login", `${worker.url}/#token=${token}`], { env: { THREADBOX_CONFIG: under } });
    expect([unwritable.code, unwritable.stderr]).toEqual([2, `error bad_config: cannot write ${under}: a part of its path is a file, not a directory\n`]);
    const dir = tempDir("tb-cfg-dir-");
    const asDir = await cli(["threads"], { env: { THREADBOX_CONFIG: dir } });
    expect([asDir.code, asDir.stderr]).toEqual([2, `error bad_config: cannot read ${dir}: it is a directory\n`]);
    const loginDir = await cli(["login", `${worker.url}/#token=${token}`], { env: { THREADBOX_CONFIG: dir } });
    expect([loginDir.code, loginDir.stderr]).toEqual([2, `error bad_config: cannot write ${dir}: it is a directory\n`]);
    const logoutDir = await cli(["logout"], { env: { THREADBOX_CONFIG: dir } });
    expect([logoutDir.code, logoutDir.stderr]).toEqual([2, `error bad_config: cannot remove ${dir}: it is a directory\n`]);
  });

  it("refuses a URL where something other than a threadbox API answers (the web UI's pages, a JSON server of another kind)", async () => {
    const config = tempDir("tb-login-");
    const page = `${worker.url}/threads/th_x`; // the web UI answers every such path 200 with its HTML
    const r = await cli(["login", `${page}#token=${token}`], { config });
    expect([r.code, r.stderr]).toEqual([2, `error not_threadbox: ${page} is not a threadbox API (GET /api/threads answered 200 text/html; charset=utf-8, not JSON): check the URL\n`]);
    expect(existsSync(join(config, "threadbox", "config.json"))).toBe(false);
    const other = createServer((_req, res) => { res.setHeader("content-type", "application/json"); res.end('{"ok":true}'); });
    await new Promise<void>((resolve) => other.listen(0, "127.0.0.1", resolve));
    const otherUrl = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
    try {
      const o = await cli(["login", `${otherUrl}/#token=${token}`], { config });
      expect([o.code, o.stderr]).toEqual([2, `error not_threadbox: ${otherUrl} is not a threadbox API (GET /api/threads answered JSON without an array threads): check the URL\n`]);
      expect(existsSync(join(config, "threadbox", "config.json"))).toBe(false);
      // Every command reading it: the same error, never a TypeError's stack or a "no threads" that is not true.
      const commands = [["threads"], ["agents"], ["sandboxes"], ["new", "x"], ["post", "th_x", "hi"], ["artifacts", "th_x"]];
      const results = await Promise.all(commands.map((args) => cli(args, { env: { THREADBOX_URL: otherUrl, THREADBOX_TOKEN: token } })));
      for (const [i, args] of commands.entries()) {
        const c = results[i];
        expect([c.code, c.stdout, c.stderr], args.join(" ")).toEqual([2, "", expect.stringMatching(/^error not_threadbox: .* answered JSON without .*: check the URL\n$/)]);
      }
    } finally {
      other.close();
    }
    // Another API that refuses (a model server's 404, as on the demo model's port), and a proxy's error page.
    const refusing = createServer((req, res) => {
      if (req.url?.startsWith("/proxy")) { res.writeHead(502, { "content-type": "text/html" }); res.end("<html><body><h1>502 Bad Gateway</h1></body></html>"); return; }
      res.writeHead(404, { "content-type": "application/json" });
      res.end('{"error":{"message":"no route GET /api/threads","type":"invalid_request_error"}}');
    });
    await new Promise<void>((resolve) => refusing.listen(0, "127.0.0.1", resolve));
    const refusingUrl = `http://127.0.0.1:${(refusing.address() as AddressInfo).port}`;
    try {
      const o = await cli(["login", `${refusingUrl}/#token=${token}`], { config });
      expect([o.code, o.stderr]).toEqual([2, `error not_threadbox: ${refusingUrl} is not a threadbox API (GET /api/threads answered 404 JSON without an error code): check the URL\n`]);
      expect(existsSync(join(config, "threadbox", "config.json"))).toBe(false);
      const proxied = await cli(["threads"], { env: { THREADBOX_URL: `${refusingUrl}/proxy`, THREADBOX_TOKEN: token, THREADBOX_RETRY: "0" } });
      expect([proxied.code, proxied.stderr]).toEqual([2, `error http_502: Bad Gateway from ${refusingUrl}/proxy (GET /api/threads answered 502 text/html, not the API's JSON error)\n`]);
    } finally {
      refusing.close();
    }
    // commands pointed there say the same instead of a stack trace or a silent retry loop
    const env = { THREADBOX_URL: page, THREADBOX_TOKEN: token };
    const listed = await cli(["threads"], { env });
    expect([listed.code, listed.stderr]).toEqual([2, expect.stringMatching(/^error not_threadbox: .* is not a threadbox API .*\n$/)]);
    const tail = await cli(["--json", "tail", "th_x"], { env, timeoutMs: 15_000 });
    expect([tail.code, JSON.parse(tail.stderr).error.code]).toEqual([2, "not_threadbox"]);
    // the WebSocket itself, asked there, gets the page instead of an upgrade: a final answer, not one to retry
    for (const offset of ["-1", "now"]) {
      const sub = subscribe({ url: page, token }, "th_x", { offset, onEntry: () => {} });
      const outcome = await Promise.race([sub.done.then(() => "done", (err: { code?: string }) => err.code), new Promise((r) => setTimeout(() => r("still retrying"), 10_000))]);
      sub.close();
      expect({ offset, outcome }).toEqual({ offset, outcome: "not_threadbox" });
    }
  });

  it("runs on the machine's own Node (20) as well, outside npm's PATH", async () => {
    const dirs = (process.env.PATH ?? "").split(delimiter).filter((d) => !d.includes("node_modules"));
    const systemNode = dirs.map((d) => join(d, "node")).find((p) => existsSync(p));
    expect(systemNode).toBeTruthy();
    const version = execFileSync(systemNode!, ["--version"], { encoding: "utf8" }).trim();
    const r = await cli(["threads", "--json"], { env: as(), node: systemNode });
    expect({ version, code: r.code, stderr: r.stderr }).toEqual({ version, code: 0, stderr: "" });
    expect(Array.isArray(JSON.parse(r.stdout).threads)).toBe(true);
  });
});

/** Python that runs argv on a pseudo-terminal, types `key` once `prompt` shows, and prints {code, output}. */
const ON_A_TERMINAL = `
import json, os, pty, select, sys, time
argv, prompt, key = json.loads(sys.argv[1]), sys.argv[2].encode(), sys.argv[3].encode().decode("unicode_escape").encode()
pid, fd = pty.fork()
if pid == 0:
    os.execv(argv[0], argv)
out = b""
def read(until, secs):
    global out
    end = time.time() + secs
    while time.time() < end and (until is None or until not in out):
        if select.select([fd], [], [], 0.1)[0]:
            try: out += os.read(fd, 4096)
            except OSError: return
read(prompt, 10)
os.write(fd, key)
code, end = None, time.time() + 10
while code is None and time.time() < end:
    read(None, 0.2)
    wpid, status = os.waitpid(pid, os.WNOHANG)
    if wpid: code = os.waitstatus_to_exitcode(status)
if code is None:
    os.kill(pid, 9); os.waitpid(pid, 0)
read(None, 0.2)
print(json.dumps({"code": code, "output": out.decode(errors="replace").replace("\\r", "")}))
`;
function atTerminal(args: string[], prompt: string, key: string, env: Record<string, string> = {}): { code: number | null; output: string } {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("THREADBOX_")));
  const out = execFileSync("python3", ["-c", ON_A_TERMINAL, JSON.stringify([process.execPath, CLI, ...args]), prompt, key], {
    encoding: "utf8", env: { ...base, NO_COLOR: "1", THREADBOX_CONFIG: join(tempDir("tb-cfg-"), "config.json"), ...env },
  });
  return JSON.parse(out);
}

describe("prompts that do not echo", () => {
  it("Ctrl-C at the login token prompt or env add's secret prompt exits 130 without a message; Ctrl-D is an empty answer", () => {
    const login = atTerminal(["login", "http://127.0.0.1:9"], "house token: ", "\\x03");
    expect(login).toEqual({ code: 130, output: expect.stringMatching(/house token: \S*\n$/) });
    const secret = atTerminal(["env", "add", "x", "--secret", "CLI_PROMPTED_KEY"], "CLI_PROMPTED_KEY: ", "\\x03");
    expect(secret.code).toBe(130);
    expect(secret.output).not.toMatch(/Warning|await|error/);
    const empty = atTerminal(["login", "http://127.0.0.1:9"], "house token: ", "\\x04");
    expect(empty.code).toBe(2);
    expect(empty.output).toContain("error usage: empty token");
  });
});

describe("threads, new, post", () => {
  it("new prints the id; post appends a chat entry idempotently; threads --tree nests children; --json is parseable", async () => {
    const parent = (await ok(["new", "cli parent", "--env", "demo"])).stdout.trim();
    const child = (await ok(["new", "cli child", "--parent", parent])).stdout.trim();
    expect((await api(`/api/threads/${child}`)).environmentId).toBe(DEMO_ENVIRONMENT_ID); // inherited, named by name

    const posted = await ok(["post", parent, "hello from the cli", "--id", "m-1"]);
    expect(posted.stdout).toMatch(/^posted m-1 at offset \S+\n$/);
    const again = await ok(["post", parent, "hello from the cli", "--id", "m-1", "--json"]);
    expect(JSON.parse(again.stdout).entries[0].duplicate).toBe(true);
    const viaStdin = await ok(["post", parent, "-"], { input: "two\nlines\n" });
    expect(viaStdin.code).toBe(0);
    const chats = (await api(`/api/threads/${parent}/entries?offset=-1`)).entries.filter((e: any) => e.payload.type === "chat");
    expect(chats.map((e: any) => [e.authorId, e.payload.text])).toEqual([["cli-user", "hello from the cli"], ["cli-user", "two\nlines"]]);

    const tree = (await ok(["threads", "--tree"])).stdout.split("\n");
    const at = tree.findIndex((l) => l.startsWith(`${parent}  idle  cli parent`));
    expect(at).toBeGreaterThanOrEqual(0);
    expect(tree[at + 1]).toBe(`└─ ${child}  idle  cli child`);

    const listed = JSON.parse((await ok(["threads", "--json"])).stdout);
    expect(listed.threads.find((t: any) => t.id === child)).toMatchObject({ title: "cli child", parent: { kind: "thread", id: parent } });
  });

  it("errors print the API's code and message and exit non-zero; with --json as a JSON error on stderr", async () => {
    const bad = await cli(["threads"], { env: { THREADBOX_URL: worker.url, THREADBOX_TOKEN: "forged" } });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/^error unauthorized: .+/);
    const missing = await cli(["post", "th_does_not_exist", "hi", "--json"], { env: as() });
    expect(missing.code).toBe(2);
    expect(JSON.parse(missing.stderr).error.code).toBe("not_found");
    const noEnv = await cli(["new", "x", "--env", "no-such-env"], { env: as() });
    expect([noEnv.code, noEnv.stderr.trim()]).toEqual([2, "error not_found: no environment with id or name no-such-env"]);
    const down = await cli(["threads"], { env: { THREADBOX_URL: "http://127.0.0.1:9", THREADBOX_TOKEN: token, THREADBOX_RETRY: "0" } });
    expect(down.code).toBe(2);
    expect(down.stderr).toContain("error unreachable: cannot reach http://127.0.0.1:9");
  });

  it("a server URL that is not an http(s) URL is a usage error naming where it came from, not a failure to reach it", async () => {
    const cases = [
      [["--url", "notaurl", "threads"], {}, "error usage: --url notaurl is not a valid server URL (like http://127.0.0.1:8787)\n"],
      [["--url", "localhost:8787", "threads"], {}, "error usage: --url localhost:8787 is not a valid server URL (like http://127.0.0.1:8787)\n"],
      [["threads"], { THREADBOX_URL: "ftp://x" }, "error usage: THREADBOX_URL ftp://x is not a valid server URL (like http://127.0.0.1:8787)\n"],
      // login's link is a server URL too: the same mistake, the same error
      [["login", "localhost:8787/#token=abc"], {}, "error usage: the link localhost:8787/#token=… is not a valid server URL or sign-in link (like http://127.0.0.1:8787/#token=…)\n"],
    ] as const;
    for (const [args, env, stderr] of cases) {
      const r = await cli([...args], { env: { THREADBOX_TOKEN: token, ...env } });
      expect({ args, code: r.code, stdout: r.stdout, stderr: r.stderr }).toEqual({ args, code: 2, stdout: "", stderr });
    }
    const json = await cli(["--url", "notaurl", "--json", "threads"], { env: { THREADBOX_TOKEN: token } });
    expect(JSON.parse(json.stderr).error.code).toBe("usage");
  });

  it("artifacts --run with a run the thread does not have says so; a thread's run without artifacts says that", async () => {
    const threadId = (await ok(["new", "no such run"])).stdout.trim();
    const r = await cli(["artifacts", threadId, "--run", "bogus"], { env: as() });
    expect([r.code, r.stdout, r.stderr]).toEqual([2, "", "error not_found: no run bogus on this thread\n"]);
    // The run's own token claims it, as a run's box does.
    const { mintRunToken } = await import("../../src/auth/tokens");
    const runToken = (await mintRunToken("test-token-secret-0123456789abcdef", "house-cli", threadId, "r7", "cli-user")).token;
    const claim = await fetch(`${worker.url}/api/threads/${threadId}/entries`, {
      method: "POST", headers: { authorization: `Bearer ${runToken}`, "content-type": "application/json" },
      body: JSON.stringify({ id: "claim:r7", payload: { type: "signal.thread.status_changed", status: "running", runId: "r7" } }),
    });
    expect(claim.ok).toBe(true);
    const none = await cli(["artifacts", threadId, "--run", "r7"], { env: as() });
    expect([none.code, none.stdout, none.stderr]).toEqual([0, "no artifacts from run r7\n", ""]);
  });
});

describe("a token the server no longer takes", () => {
  /** An owner token of the test house that expires `seconds` from now. */
  async function tokenFor(seconds: number) {
    const { SignJWT } = await import("jose");
    return new SignJWT({ kind: "house", house: "house-cli", role: "owner" }).setProtectedHeader({ alg: "HS256" })
      .setIssuer("threadbox").setSubject("cli-user").setIssuedAt().setExpirationTime(Math.floor(Date.now() / 1000) + seconds)
      .sign(new TextEncoder().encode("test-token-secret-0123456789abcdef"));
  }
  /** Resolves a second after `token` expired (its exp is in whole seconds), rather than a fixed while after it was used. */
  const pastExpiry = (token: string) => {
    const exp = (JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString()) as { exp: number }).exp;
    return new Promise((r) => setTimeout(r, Math.max(0, exp * 1000 + 1000 - Date.now())));
  };
  const fromEnv = "set THREADBOX_TOKEN to a fresh token (or unset it and run `threadbox login`)";

  it("an expired token says to sign in again, for a token from THREADBOX_TOKEN or from the stored login; --json keeps the code", async () => {
    const expired = await tokenFor(-10);
    const env = { THREADBOX_URL: worker.url, THREADBOX_TOKEN: expired };
    expect(await cli(["threads"], { env })).toEqual({ code: 2, stdout: "", stderr: `error unauthorized: token expired: sign in again: ${fromEnv}\n` });
    const json = await cli(["threads", "--json"], { env });
    expect([json.code, JSON.parse(json.stderr)]).toEqual([2, { error: { code: "unauthorized", message: `token expired: sign in again: ${fromEnv}` } }]);
    const config = tempDir("tb-login-");
    mkdirSync(join(config, "threadbox"));
    writeFileSync(join(config, "threadbox", "config.json"), JSON.stringify({ url: worker.url, token: expired }), { mode: 0o600 });
    const stored = await cli(["tail", "th_any"], { config });
    expect([stored.code, stored.stderr]).toEqual([2, "error unauthorized: token expired: sign in again: run `threadbox login` with a fresh sign-in link (under npm run dev: cat .wrangler/sign-in-link)\n"]);
  });

  it("tail whose token expires while it follows (the server closes with 4001) ends at once with that error, after what it was sent, without reconnecting", async () => {
    const threadId = (await ok(["new", "expiring"])).stdout.trim();
    await appendEntries(threadId, [{ type: "chat", text: "before" }]);
    const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("THREADBOX_")));
    const expiring = await tokenFor(4);
    const child = spawn(process.execPath, [CLI, "tail", threadId], {
      env: { ...base, NO_COLOR: "1", XDG_CONFIG_HOME: tempDir("tb-cfg-"), THREADBOX_URL: worker.url, THREADBOX_TOKEN: expiring },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    const closed = new Promise<number | null>((r) => child.on("close", r));
    for (let i = 0; i < 200 && !out.includes("before"); i++) await new Promise((r) => setTimeout(r, 50));
    await pastExpiry(expiring); // the socket is still open
    await appendEntries(threadId, [{ type: "chat", text: "after" }]); // the server closes instead of sending it
    // Said once the server's close frame is in, not when the server gets round to ending the TCP connection (10 s under wrangler dev).
    const code = await Promise.race([closed, new Promise<string>((r) => setTimeout(() => r("still running"), 4_000))]);
    if (code === "still running") child.kill("SIGKILL");
    expect({ code, out: out.trim().split("\n").map((l) => l.replace(/^\S+ /, "")), err }).toEqual({
      code: 2, out: ["cli-user: before"], err: `error unauthorized: token expired: sign in again: ${fromEnv}\n`,
    });
  }, 30_000);

  it("chat still reading its input ends as soon as the server closes its subscription for an expired token, not when the input ends", async (ctx) => {
    if ((await fetch(`${worker.url}/api/agents`, { headers: { authorization: `Bearer ${token}` } })).status === 404) ctx.skip(); // a server without bots
    const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("THREADBOX_")));
    const expiring = await tokenFor(5);
    const child = spawn(process.execPath, [CLI, "chat", "demo", "--json"], {
      env: { ...base, NO_COLOR: "1", XDG_CONFIG_HOME: tempDir("tb-cfg-"), THREADBOX_URL: worker.url, THREADBOX_TOKEN: expiring },
      stdio: ["pipe", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    const closed = new Promise<number | null>((r) => child.on("close", r));
    child.stdin.write("hello\n"); // and the input stays open, as at a terminal
    for (let i = 0; i < 200 && !out.includes("threadId"); i++) await new Promise((r) => setTimeout(r, 50));
    const threadId = JSON.parse(out.split("\n")[0]).threadId as string;
    await pastExpiry(expiring);
    await appendEntries(threadId, [{ type: "pi.custom", text: "the server closes the socket instead of sending this" }]);
    const code = await Promise.race([closed, new Promise<string>((r) => setTimeout(() => r("still running"), 4_000))]);
    if (code === "still running") child.kill("SIGKILL");
    expect({ code, err: err.trim() && JSON.parse(err.trim()) }).toEqual({
      code: 2, err: { error: { code: "unauthorized", message: `token expired: sign in again: ${fromEnv}` } },
    });
  }, 30_000);
});

describe("an empty thread id", () => {
  it("every command taking a thread id refuses an empty or blank one as a usage error before asking the server", async () => {
    const usage = "error usage: the thread id is empty (did the command that gave it fail?)\n";
    const commands = [["tail", ""], ["tail", " ", "--until-done"], ["post", "", "hi"], ["delegate", "", "task"], ["stop", ""], ["interrupt", "\t"],
      ["resume", "", "more"], ["artifacts", ""], ["new", "x", "--parent", ""], ["chat", "@demo", "--thread", " "]];
    // Independent processes: run side by side rather than one after another.
    const [preview, json, ...results] = await Promise.all([["preview", "", "3000"], ["post", "", "hi", "--json"], ...commands].map((args) => cli(args, { env: as() })));
    for (const [i, args] of commands.entries()) {
      const r = results[i];
      expect({ args, code: r.code, stdout: r.stdout, stderr: r.stderr }).toEqual({ args, code: 2, stdout: "", stderr: usage });
    }
    expect([preview.code, preview.stderr]).toEqual([2, "error usage: the box or thread id is empty (did the command that gave it fail?)\n"]);
    expect([json.code, JSON.parse(json.stderr)]).toEqual([2, { error: { code: "usage", message: "the thread id is empty (did the command that gave it fail?)" } }]);
  });

  it("an empty --env or --run (a $(…) that failed) is a usage error, not a thread without an environment or an empty list", async () => {
    const cases = [
      [["new", "x", "--env", ""], "environment"],
      [["delegate", "th_x", "task", "--env", " "], "environment"],
      [["agent", "add", "emptyenv", "--model", "demo/demo", "--env", ""], "environment"],
      [["artifacts", "th_x", "--run", ""], "--run id"],
    ] as const;
    const results = await Promise.all(cases.map(([args]) => cli([...args], { env: as() })));
    for (const [i, [args, what]] of cases.entries()) {
      const r = results[i];
      expect({ args, code: r.code, stdout: r.stdout, stderr: r.stderr }).toEqual({ args, code: 2, stdout: "", stderr: `error usage: the ${what} is empty (did the command that gave it fail?)\n` });
    }
  });

  it("post, delegate and resume refuse a blank text (an unset \"$VAR\", an empty pipe) instead of posting an empty chat or starting a run on nothing", async () => {
    const thread = (await ok(["new", "blank texts", "--env", "demo"])).stdout.trim();
    for (const [args, stdin, message] of [
      [["post", thread, ""], undefined, "the message is empty"],
      [["post", thread, "-"], "\n", "the message is empty (nothing on stdin)"],
      [["delegate", thread, " "], undefined, "the task is empty"],
      [["resume", thread, "\t"], undefined, "the message is empty"],
    ] as const) {
      const r = await cli([...args], { env: as(), input: stdin });
      expect({ args, code: r.code, stdout: r.stdout, stderr: r.stderr }).toEqual({ args, code: 2, stdout: "", stderr: `error usage: ${message}\n` });
    }
    expect((await api(`/api/threads/${thread}/entries?offset=-1`)).entries).toEqual([]);
    expect((await api(`/api/threads?parent=${thread}`)).threads).toEqual([]);
  });
});

describe("runs: delegate --watch and tail --until-done end when the run ends", () => {
  it("delegate --watch: the demo model drives real pi through a write tool call to completion; exit 0", async () => {
    const parent = (await ok(["new", "watch me", "--env", "demo"])).stdout.trim();
    const r = await cli(["delegate", parent, "write hello.txt containing hi", "--watch"], { env: as() });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("▶ write hello.txt (3 bytes)");
    expect(r.stdout).toContain("✓ write");
    expect(r.stdout).toMatch(/pi: Done\. write finished/);
    expect(r.stdout).toMatch(/● completed/);
    expect(r.stderr).toContain("run completed");
    const childId = /child thread (th_\S+),/.exec(r.stderr)![1];
    expect((await api(`/api/threads/${childId}`)).status).toBe("completed");

    // tail of a finished thread replays it and exits at once with the run's status
    const replay = await cli(["tail", childId, "--until-done", "--json"], { env: as() });
    expect(replay.code).toBe(0);
    const types = replay.stdout.trim().split("\n").map((l) => JSON.parse(l).payload.type);
    expect(types).toContain("pi.tool_call");
    expect(types.at(-1)).toBe("signal.thread.status_changed");
    // ... and so it does from an offset past the run's finished-signal, with nothing to replay
    const lastOffset = JSON.parse(replay.stdout.trim().split("\n").at(-1)!).offset;
    for (const from of ["now", lastOffset]) {
      const late = await cli(["tail", childId, "--until-done", "--from", from], { env: as(), timeoutMs: 15_000 });
      expect({ from, code: late.code, stderr: late.stderr }).toEqual({ from, code: 0, stderr: "run completed\n" });
    }

    // what the run wrote stays readable from the thread
    const art = await cli(["artifacts", childId, "--full"], { env: as() });
    expect(art.code).toBe(0);
    expect(art.stdout).toMatch(/added\s+hello\.txt/);
    expect(art.stdout).toContain("    | hi");
    const artJson = JSON.parse((await cli(["artifacts", childId, "--json"], { env: as() })).stdout);
    expect(artJson.artifacts[0].payload.files).toEqual([expect.objectContaining({ path: "hello.txt", content: "hi\n" })]);
  });

  it("tail --until-done exits non-zero when the run fails (a model error); resume --watch then follows the new run only", async () => {
    const parent = (await ok(["new", "fail me", "--env", "demo"])).stdout.trim();
    const childId = (await ok(["delegate", parent, "fail: on purpose"])).stdout.trim();
    expect(childId).toMatch(/^th_/);
    const r = await cli(["tail", childId, "--until-done"], { env: as() });
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("demo model failure: on purpose");
    expect(r.stderr).toMatch(/run failed: /);
    const late = await cli(["tail", childId, "--until-done", "--from", "now", "--json"], { env: as(), timeoutMs: 15_000 });
    expect([late.code, late.stdout, late.stderr]).toEqual([1, "", ""]);

    // resume --watch follows only the new run, to its own end
    const resumed = await cli(["resume", childId, "write again.txt containing more", "--watch"], { env: as() });
    expect(resumed.code).toBe(0);
    expect(resumed.stdout).toContain("▶ write again.txt (5 bytes)");
    expect(resumed.stdout).not.toContain("demo model failure"); // the earlier run is not replayed
    expect(resumed.stderr).toContain("run completed");

    // a tail from the start replays both runs, not stopping at the first run's end, and exits
    // with the last run's status
    const both = await cli(["tail", childId, "--until-done"], { env: as(), timeoutMs: 15_000 });
    expect(both.code).toBe(0);
    expect(both.stdout).toContain("demo model failure: on purpose");
    expect(both.stdout).toContain("▶ write again.txt (5 bytes)");
    expect(both.stdout.trim().split("\n").filter((l) => l.includes(" ● ")).at(-1)).toMatch(/● completed/);
    expect(both.stderr).toBe("run completed\n");
  });

  it("stop ends a running run; the tail watching it exits non-zero with reason stopped", async () => {
    const parent = (await ok(["new", "stop me", "--env", "demo"])).stdout.trim();
    const childId = (await ok(["delegate", parent, "run sleep 60"])).stdout.trim();
    const tail = cli(["tail", childId, "--until-done"], { env: as() });
    // stop once pi is really running the command
    for (let i = 0; ; i++) {
      const es = (await api(`/api/threads/${childId}/entries?offset=-1`)).entries;
      if (es.some((e: any) => e.payload.type === "pi.tool_call")) break;
      if (i > 300) throw new Error("pi never called the tool");
      await new Promise((r) => setTimeout(r, 200));
    }
    const stopped = await ok(["stop", childId, "--json"]);
    expect(JSON.parse(stopped.stdout)).toMatchObject({ id: childId, status: "failed", reason: "stopped" });
    const r = await tail;
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("▶ bash $ sleep 60");
    expect(r.stderr).toContain("run failed: stopped");
    const { boxId } = await api(`/api/threads/${childId}`);
    expect((await ok(["sandboxes"])).stdout).toMatch(new RegExp(`^${boxId}  \\w+  ephemeral`, "m"));
    const again = await cli(["stop", childId], { env: as() });
    expect([again.code, again.stderr]).toEqual([2, expect.stringMatching(/^error conflict: thread is failed, not running/)]);
  });
});

describe("tail --until-done on a thread that never ran", () => {
  it("says it is waiting for a run instead of hanging silently; Ctrl-C ends it as interrupted", async () => {
    const threadId = (await ok(["new", "never ran"])).stdout.trim();
    const { child, stderr, closed } = started(["tail", threadId, "--until-done"]);
    for (let i = 0; i < 100 && !stderr().includes("has not run yet"); i++) await new Promise((r) => setTimeout(r, 100));
    expect(stderr()).toContain(`thread ${threadId} has not run yet: waiting for a run to start and finish`);
    child.kill("SIGINT");
    expect(await closed).toBe(130);
  });

  it("a SIGTERM (a process manager, `timeout`) ends it too, as terminated (143), not killed by the signal", async () => {
    const threadId = (await ok(["new", "never ran either"])).stdout.trim();
    const { child, stderr, closed } = started(["tail", threadId, "--until-done"]);
    for (let i = 0; i < 100 && !stderr().includes("has not run yet"); i++) await new Promise((r) => setTimeout(r, 100));
    expect(stderr()).toContain("has not run yet");
    child.kill("SIGTERM");
    expect(await closed).toBe(143);
  });
});

describe("tail shows whatever a writer of the thread wrote", () => {
  it("free-form agent payloads (arguments null, a tool call that is null) print as lines and the tail goes on", async () => {
    const threadId = (await ok(["new", "free-form"])).stdout.trim();
    await appendEntries(threadId, [
      { type: "pi.tool_call", name: "bash", args: null },
      { type: "pi.assistant", toolCalls: [null] },
      { type: "chat", text: "still here" },
    ]);
    const { child, stdout, stderr, closed } = await startedUntil(["tail", threadId], "still here");
    child.kill("SIGINT");
    expect({ code: await closed, stderr: stderr() }).toEqual({ code: 0, stderr: "" });
    expect(stdout()).toMatch(/ ▶ bash\n.* ▶ tool\n.*: still here\n$/);
  });
});

describe("artifacts a run's box wrote", () => {
  it("an artifact.files entry without files is named and skipped, not a crash", async () => {
    const threadId = (await ok(["new", "odd artifacts"])).stdout.trim();
    // Only a run's own token writes its artifacts (as the launch mints it for the box).
    const { mintRunToken } = await import("../../src/auth/tokens");
    const runToken = (await mintRunToken("test-token-secret-0123456789abcdef", "house-cli", threadId, "r1", "cli-user")).token;
    const r0 = await fetch(`${worker.url}/api/threads/${threadId}/entries`, {
      method: "POST", headers: { authorization: `Bearer ${runToken}`, "content-type": "application/json" },
      body: JSON.stringify({ id: `${threadId}:artifacts:r1:files`, payload: { type: "artifact.files", runId: "r1" } }),
    });
    expect(r0.ok).toBe(true);
    const r = await cli(["artifacts", threadId], { env: as() });
    expect([r.code, r.stdout, r.stderr]).toEqual([0, "run r1: artifact.files entry without a file list, skipped\n", ""]);
  });

  it("a thread with more artifacts than a page: the full page names the command for the older ones, which lists them", async () => {
    const threadId = (await ok(["new", "many runs"])).stdout.trim();
    const { mintRunToken } = await import("../../src/auth/tokens");
    for (const runId of ["r1", "r2", "r3"]) {
      const runToken = (await mintRunToken("test-token-secret-0123456789abcdef", "house-cli", threadId, runId, "cli-user")).token;
      const w = await fetch(`${worker.url}/api/threads/${threadId}/entries`, {
        method: "POST", headers: { authorization: `Bearer ${runToken}`, "content-type": "application/json" },
        body: JSON.stringify({ id: `${threadId}:artifacts:${runId}:files`, payload: { type: "artifact.files", runId, files: [{ path: `${runId}.txt`, status: "added", size: 1 }] } }),
      });
      expect(w.ok).toBe(true);
    }
    const first = await cli(["artifacts", threadId, "--limit", "2"], { env: as() });
    expect([first.code, first.stdout.match(/^run \w+/gm)]).toEqual([0, ["run r3", "run r2"]]);
    const hint = /^older artifacts may follow: threadbox (artifacts .* --before (\S+))\n$/.exec(first.stderr);
    expect(hint, first.stderr).not.toBeNull();
    const next = await cli(hint![1].split(" "), { env: as() });
    expect([next.code, next.stdout.match(/^run \w+/gm), next.stderr]).toEqual([0, ["run r1"], ""]);
    // Past the oldest, it says so instead of "no artifacts on this thread".
    const past = (await cli(["artifacts", threadId, "--before", JSON.parse((await ok(["artifacts", threadId, "--json"])).stdout).artifacts.at(-1).offset], { env: as() }));
    expect([past.code, past.stdout.startsWith("no artifacts on this thread before offset "), past.stderr]).toEqual([0, true, ""]);
  });
});

describe("what the server sends cannot drive the terminal", () => {
  it("titles, chat text and error messages are printed with their escape sequences written out, not acted on", async () => {
    const threadId = (await ok(["new", "esc\u001b[31mRED\u001b]0;title\u0007"])).stdout.trim();
    await appendEntries(threadId, [{ type: "chat", text: "hello\u001b[2K\r\u001b[32mrun completed\u001b]0;pwned title\u0007" }, { type: "chat", text: "end" }]);
    const controls = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/; // NO_COLOR: not even our own colours
    const listed = await ok(["threads", "--limit", "5"]);
    expect(listed.stdout).not.toMatch(controls);
    expect(listed.stdout).toContain(`${threadId}  idle  esc\\x1b[31mRED\\x1b]0;title\\x07`);
    const { child, stdout, closed } = await startedUntil(["tail", threadId], ": end\n");
    child.kill("SIGINT");
    await closed;
    expect(stdout()).not.toMatch(controls);
    expect(stdout()).toContain(": hello\\x1b[2K\\r\\x1b[32mrun completed\\x1b]0;pwned title\\x07\n");
    const err = await cli(["new", "x", "--env", "\u001b]0;owned\u0007"], { env: as() });
    expect([err.code, err.stderr]).toEqual([2, "error not_found: no environment with id or name \\x1b]0;owned\\x07\n"]);
  });
});

describe("output into a pipe that closes early", () => {
  it("tail --json | head -1: ends quietly, no EPIPE stack trace", async () => {
    const threadId = (await ok(["new", "piped"])).stdout.trim();
    await fetch(`${worker.url}/api/threads/${threadId}/entries`, {
      method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify(Array.from({ length: 200 }, (_, i) => ({ payload: { type: "chat", text: `line ${i} ${"x".repeat(200)}` } }))),
    });
    const { child, stderr, closed } = started(["tail", threadId, "--json"]);
    await new Promise<void>((resolve) => child.stdout.once("data", () => resolve()));
    child.stdout.destroy(); // the reader (head) is gone
    const code = await Promise.race([closed, new Promise<string>((r) => setTimeout(() => r("still running"), 10_000))]);
    if (code === "still running") child.kill("SIGKILL");
    expect(code).toBe(0);
    expect(stderr()).not.toMatch(/EPIPE|at .*\.mjs/);
  });
});

describe("output that cannot be written", () => {
  it("tail --until-done | head -1 before the run ended: not a success (130, as for Ctrl-C); a plain tail's reader leaving still ends it with 0", async () => {
    const threadId = (await ok(["new", "cut short"])).stdout.trim(); // never ran: the wait goes on
    await appendEntries(threadId, [{ type: "chat", text: "first" }]);
    for (const [args, want] of [[["--until-done"], 130], [[], 0]] as const) {
      const { child, stderr, closed } = started(["tail", threadId, "--json", ...args]);
      await new Promise<void>((resolve) => child.stdout!.once("data", () => resolve()));
      child.stdout!.destroy(); // the reader (head) is gone
      await appendEntries(threadId, [{ type: "chat", text: "more" }]); // the next write finds the pipe closed
      const code = await Promise.race([closed, new Promise<string>((r) => setTimeout(() => r("still running"), 10_000))]);
      if (code === "still running") child.kill("SIGKILL");
      expect({ args, code, stderr: stderr() }).toEqual({ args, code: want, stderr: "" });
    }
  });

  it("a failed write to stdout (a full disk) is an error in one line, exit 2", async (ctx) => {
    if (!existsSync("/dev/full")) ctx.skip();
    const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("THREADBOX_")));
    const full = openSync("/dev/full", "w");
    const child = spawn(process.execPath, [CLI, "threads"], {
      env: { ...base, NO_COLOR: "1", XDG_CONFIG_HOME: tempDir("tb-cfg-"), ...as() }, stdio: ["ignore", full, "pipe"],
    });
    closeSync(full);
    let stderr = "";
    child.stderr!.on("data", (d) => (stderr += d));
    const code = await new Promise((resolve) => child.on("close", resolve));
    expect([code, stderr]).toEqual([2, "error output: cannot write to stdout: ENOSPC\n"]);
  });
});

/**
 * In front of the worker: the first POST to a path `route` matches reaches the worker, and its
 * answer is cut off (a restart, a dropped network); later ones pass. Records each one's Idempotency-Key.
 */
async function frontCuttingFirst(route: RegExp) {
  let cut = 0;
  const keys: (string | null)[] = [];
  const front = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const headers = Object.fromEntries(Object.entries(req.headers).filter(([k]) => !["host", "connection", "content-length"].includes(k))) as Record<string, string>;
    const r = await fetch(`${worker.url}${req.url}`, { method: req.method, headers, body: chunks.length ? Buffer.concat(chunks) : undefined });
    const body = Buffer.from(await r.arrayBuffer());
    if (req.method === "POST" && route.test(req.url ?? "")) {
      keys.push(req.headers["idempotency-key"] as string ?? null);
      if (cut++ === 0) {
        req.socket.destroy();
        return;
      }
    }
    res.writeHead(r.status, { "content-type": r.headers.get("content-type") ?? "application/json" }).end(body);
  });
  await new Promise<void>((r) => front.listen(0, "127.0.0.1", r));
  return {
    env: { THREADBOX_URL: `http://127.0.0.1:${(front.address() as AddressInfo).port}`, THREADBOX_TOKEN: token },
    keys,
    sameKey: () => keys.length === 2 && keys[0] !== null && keys[0] === keys[1],
    close: async () => {
      front.closeAllConnections();
      await new Promise((r) => front.close(r));
    },
  };
}

describe("delegate while the connection drops", () => {
  it("a delegate whose answer is lost is asked again under the same Idempotency-Key: one child, and its id is printed", async () => {
    const parent = (await ok(["new", "lost answer", "--env", "demo"])).stdout.trim();
    // The first delegate reaches the worker, and its answer is cut off (a restart, a dropped network).
    const front = await frontCuttingFirst(/\/delegate$/);
    try {
      const r = await cli(["delegate", parent, "write a.txt containing b"], { env: front.env, timeoutMs: 60_000 });
      const children = (await api(`/api/threads?parent=${parent}`)).threads.map((t: any) => t.id);
      expect({ code: r.code, stdout: r.stdout, children, sameKey: front.sameKey() })
        .toEqual({ code: 0, stdout: `${children[0]}\n`, children: [expect.stringMatching(/^th_/)], sameKey: true });
      expect(r.stderr).toMatch(/asking again in \d+ ms \(same Idempotency-Key: one child at most\)/);
    } finally {
      await front.close();
    }
  }, 90_000);
});

describe("new, post and resume while the connection drops", () => {
  it("a new whose answer is lost is asked again under the same Idempotency-Key: one thread, and its id is printed", async () => {
    const front = await frontCuttingFirst(/^\/api\/threads$/);
    const title = `lost new ${Date.now()}`;
    try {
      const r = await cli(["new", title, "--env", "demo"], { env: front.env, timeoutMs: 60_000 });
      const made = (await api("/api/threads?limit=1000")).threads.filter((t: any) => t.title === title).map((t: any) => t.id);
      expect({ code: r.code, stdout: r.stdout, made, sameKey: front.sameKey() })
        .toEqual({ code: 0, stdout: `${made[0]}\n`, made: [expect.stringMatching(/^th_/)], sameKey: true });
      expect(r.stderr).toMatch(/asking again in \d+ ms \(same Idempotency-Key: one thread at most\)/);
    } finally {
      await front.close();
    }
  }, 90_000);

  it("a post whose answer is lost is sent again under the same entry id: the thread holds it once, and it is not called already there", async () => {
    const thread = (await ok(["new", "lost post"])).stdout.trim();
    const front = await frontCuttingFirst(/\/entries$/);
    try {
      const r = await cli(["post", thread, "only once"], { env: front.env, timeoutMs: 60_000 });
      const chats = (await api(`/api/threads/${thread}/entries`)).entries.filter((e: any) => e.payload.type === "chat");
      expect({ code: r.code, stdout: r.stdout, chats: chats.map((e: any) => e.payload.text) })
        .toEqual({ code: 0, stdout: `posted ${chats[0]?.id} at offset ${chats[0]?.offset}\n`, chats: ["only once"] });
      expect(r.stderr).toMatch(/sending again in \d+ ms \(same entry id: posted once\)/);
    } finally {
      await front.close();
    }
  }, 90_000);

  it("a resume whose answer is lost is asked again under the same Idempotency-Key: one run, and it is printed", async () => {
    const parent = (await ok(["new", "lost resume", "--env", "demo"])).stdout.trim();
    const child = (await ok(["delegate", parent, "fail: first run"])).stdout.trim();
    expect((await cli(["tail", child, "--until-done"], { env: as(), timeoutMs: 60_000 })).code).toBe(1);
    const front = await frontCuttingFirst(/\/resume$/);
    try {
      const r = await cli(["resume", child, "fail: second run"], { env: front.env, timeoutMs: 60_000 });
      const claims = (await api(`/api/threads/${child}/entries`)).entries.filter((e: any) => e.id.startsWith("claim:")).map((e: any) => e.payload.runId);
      expect({ code: r.code, claims: claims.length, sameKey: front.sameKey() }).toEqual({ code: 0, claims: 2, sameKey: true });
      expect(r.stdout).toMatch(new RegExp(`^${child} (running|completed|failed) \\(run ${claims[1]}\\)\n$`));
      expect(r.stderr).toMatch(/asking again in \d+ ms \(same Idempotency-Key: one run at most\)/);
    } finally {
      await front.close();
    }
  }, 120_000);
});

describe("tail over a flaky connection", () => {
  /** `threadbox tail <new thread> --json ...args` through a proxy the test can cut; `post` writes a chat with that id. */
  async function tailThroughProxy(title: string, args: string[], before: string[] = []) {
    const proxy = await startPausableProxy(worker.port);
    const threadId = (await ok(["new", title])).stdout.trim();
    const post = (id: string) => fetch(`${worker.url}/api/threads/${threadId}/entries`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ id, payload: { type: "chat", text: id } }),
    });
    for (const id of before) await post(id);
    const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("THREADBOX_")));
    const child = spawn(process.execPath, [CLI, "tail", threadId, "--json", ...args], {
      env: { ...base, THREADBOX_URL: `http://127.0.0.1:${proxy.port}`, THREADBOX_TOKEN: token, XDG_CONFIG_HOME: tempDir("tb-cfg-") },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    const exited = new Promise((r) => child.on("close", r));
    const ids = () => out.split("\n").filter(Boolean).map((l) => JSON.parse(l).id as string);
    const end = async () => {
      child.kill("SIGINT");
      await exited;
      await proxy.close();
    };
    return { proxy, post, child, ids, end };
  }

  it("reconnects from the last offset after a drop: every entry once, in order", async () => {
    const { proxy, post, child, ids, end } = await tailThroughProxy("flaky", [], ["m1", "m2", "m3"]);
    const until = async (n: number) => {
      for (let i = 0; ids().length < n; i++) {
        if (i > 400) throw new Error(`tail saw only ${ids().join(",")}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    try {
      await until(3);
      proxy.pause(); // the socket drops; reconnects are refused while paused
      for (const id of ["m4", "m5"]) await post(id);
      await new Promise((r) => setTimeout(r, 300));
      expect(ids()).toEqual(["m1", "m2", "m3"]);
      proxy.resume();
      await until(5);
      await post("m6");
      await until(6);
      expect(ids()).toEqual(["m1", "m2", "m3", "m4", "m5", "m6"]);
    } finally {
      await end();
    }
    expect(child.exitCode).toBe(0); // Ctrl-C ends a plain tail cleanly
  });

  it("a drop in the middle of a long thread's catch-up resumes from the last entry printed: all 5000 once, in order", async () => {
    const proxy = await startPausableProxy(worker.port);
    const threadId = (await ok(["new", "long and flaky"])).stdout.trim();
    // 5 MB in all, of text that does not compress (the socket may deflate its messages): the proxy
    // cuts the tail's WebSocket once it has passed 1 MB, however fast the catch-up goes, and refuses
    // the reconnects until resumed.
    const cutOff = proxy.cutWebSocketAfter(1_000_000);
    for (let b = 0; b < 10; b++) {
      const r = await fetch(`${worker.url}/api/threads/${threadId}/entries`, {
        method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify(Array.from({ length: 500 }, (_, i) => ({ id: `l${b * 500 + i}`, payload: { type: "chat", text: `line ${b * 500 + i} ${randomBytes(500).toString("hex")}` } }))),
      });
      expect(r.status).toBe(201);
    }
    const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("THREADBOX_")));
    const child = spawn(process.execPath, [CLI, "tail", threadId, "--json"], {
      env: { ...base, THREADBOX_URL: `http://127.0.0.1:${proxy.port}`, THREADBOX_TOKEN: token, XDG_CONFIG_HOME: tempDir("tb-cfg-") },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    const exited = new Promise((r) => child.on("close", r));
    // Whole lines only: stdout may be read in the middle of one.
    const ids = () => out.slice(0, out.lastIndexOf("\n") + 1).split("\n").filter(Boolean).map((l) => JSON.parse(l).id as string);
    const until = async (n: number) => {
      for (let i = 0; ids().length < n; i++) {
        if (i > 1200) throw new Error(`tail saw only ${ids().length}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    try {
      // mid catch-up (a catch-up that fit in the budget would be all printed, with no cut)
      await Promise.race([cutOff, until(5000).then(() => { throw new Error("the whole catch-up passed before the cut"); })]);
      await appendEntries(threadId, [{ type: "chat", text: "during" }]);
      const cut = ids().length; // at most what the first MB held, however much of it the tail has printed yet
      proxy.resume();
      await until(5001);
      await new Promise((r) => setTimeout(r, 300));
      const seen = ids();
      expect({ cut: cut < 5000, n: seen.length, unique: new Set(seen).size, first5000: seen.slice(0, 5000).join() === Array.from({ length: 5000 }, (_, i) => `l${i}`).join(), err })
        .toEqual({ cut: true, n: 5001, unique: 5001, first5000: true, err: "" });
      expect(JSON.parse(out.trim().split("\n").at(-1)!).payload.text).toBe("during");
    } finally {
      child.kill("SIGINT");
      await exited;
      await proxy.close();
    }
  }, 90_000);

  it("a connection that goes silent without closing (a dropped network) is noticed by an unanswered ping and resumed from the last offset", async () => {
    const proxy = await startPausableProxy(worker.port);
    const threadId = (await ok(["new", "silent link"])).stdout.trim();
    const post = (id: string) => appendEntries(threadId, [{ type: "chat", text: id }]).then(() => id);
    const seen: string[] = [];
    // the ping interval of `tail`, shortened: by default a silent link is noticed within 30 s
    const sub = subscribe({ url: `http://127.0.0.1:${proxy.port}`, token }, threadId, { offset: "-1", pingEveryMs: 1_000, onEntry: (e: any) => { seen.push(e.payload.text); } });
    const until = async (n: number) => {
      for (let i = 0; seen.length < n && i < 200; i++) await new Promise((r) => setTimeout(r, 50));
    };
    try {
      await post("s1");
      await until(1);
      await new Promise((r) => setTimeout(r, 2_500));
      expect(proxy.upgrades).toBe(1); // pings answered: a quiet link that works is kept
      proxy.freeze();
      await post("s2");
      await until(2);
      expect(seen).toEqual(["s1", "s2"]);
    } finally {
      sub.close();
      await proxy.close();
    }
  });

  it("a reconnect whose handshake is never answered is given up and tried again", async () => {
    const proxy = await startPausableProxy(worker.port);
    const threadId = (await ok(["new", "silent handshake"])).stdout.trim();
    const seen: string[] = [];
    const sub = subscribe({ url: `http://127.0.0.1:${proxy.port}`, token }, threadId, { offset: "-1", pingEveryMs: 1_000, onEntry: (e: any) => { seen.push(e.payload.text); } });
    const until = async (n: number) => {
      for (let i = 0; seen.length < n && i < 200; i++) await new Promise((r) => setTimeout(r, 50));
    };
    try {
      await appendEntries(threadId, [{ type: "chat", text: "h1" }]);
      await until(1);
      proxy.freeze(true); // the network goes: the open link and the next connection hear nothing
      await appendEntries(threadId, [{ type: "chat", text: "h2" }]);
      await new Promise((r) => setTimeout(r, 2_500)); // the ping goes unanswered; a reconnect is under way
      proxy.thaw(); // the network is back, for connections made from now on
      await until(2);
      expect(seen).toEqual(["h1", "h2"]);
    } finally {
      sub.close();
      await proxy.close();
    }
  });

  it("--from now that has seen nothing yet still misses nothing written while it was cut off", async () => {
    const { proxy, post, ids, end } = await tailThroughProxy("quiet", ["--from", "now"], ["before"]);
    try {
      // Connected, nothing to show: the tail pins "now" to the thread's tail before it opens its
      // WebSocket. (A fixed wait for this lost to a slow CLI start: "now" was then after the posts.)
      for (let i = 0; proxy.upgrades < 1; i++) {
        if (i > 400) throw new Error("the tail never opened its WebSocket");
        await new Promise((r) => setTimeout(r, 50));
      }
      proxy.pause();
      for (const id of ["late1", "late2"]) await post(id);
      await new Promise((r) => setTimeout(r, 300));
      proxy.resume();
      for (let i = 0; ids().length < 2; i++) {
        if (i > 400) throw new Error(`tail saw only ${ids().join(",")}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      expect(ids()).toEqual(["late1", "late2"]);
    } finally {
      await end();
    }
  });
});

describe("chat with a bot", () => {
  it("chat <bot>: a DM thread in the bot's environment; the bot delegates, and chat exits once the child's result is back", async (ctx) => {
    if ((await fetch(`${worker.url}/api/agents`, { headers: { authorization: `Bearer ${token}` } })).status === 404) ctx.skip(); // a server without bots
    const r = await cli(["chat", "@demo", "--reply-timeout", "120"], { env: as(), input: "write hi.txt containing yo\n" });
    expect(r.code).toBe(0);
    const threadId = /thread (th_\S+) with @demo/.exec(r.stderr)![1];
    const thread = await api(`/api/threads/${threadId}`);
    expect([thread.parent.kind, thread.environmentId]).toEqual(["agent", DEMO_ENVIRONMENT_ID]);
    expect(r.stdout).toContain("▶ delegate_task");
    expect(r.stdout).toMatch(/● child th_\S+ completed/);
    expect(r.stdout).toMatch(/@demo: Done\. write finished:\n\s+Successfully wrote to hi\.txt/);
    const es = (await api(`/api/threads/${threadId}/entries?offset=-1`)).entries;
    const chats = es.filter((e: any) => e.payload.type === "chat");
    expect(chats[0]).toMatchObject({ authorId: "cli-user", payload: { text: "write hi.txt containing yo" } });
    expect(chats.at(-1).authorId).toBe(thread.parent.id); // the last word is the bot's report of the child
    expect(es.filter((e: any) => e.payload.type === "signal.thread.child_finished")).toHaveLength(1);
    // tail names the bot as chat does, in its DM thread and in the child it delegated (whose task it wrote)
    const childId = es.find((e: any) => e.payload.type === "signal.thread.child_finished").payload.childThreadId;
    const child = await cli(["tail", childId, "--until-done"], { env: as(), timeoutMs: 30_000 });
    expect(child.code).toBe(0);
    // the DM thread itself never runs: a plain tail, stopped once its log has been printed
    const dm = await cli(["tail", threadId], { env: as(), timeoutMs: 3_000 });
    for (const tailed of [child, dm]) {
      expect(tailed.stdout).toMatch(/^\d\d:\d\d:\d\d @demo: /m);
      expect(tailed.stdout).not.toContain(thread.parent.id);
    }
  });

  it("chat with several lines piped in prints the answer to each before it exits", async (ctx) => {
    if ((await fetch(`${worker.url}/api/agents`, { headers: { authorization: `Bearer ${token}` } })).status === 404) ctx.skip();
    const r = await cli(["chat", "@demo", "--reply-timeout", "120", "--json"], { env: as(), input: "hello there\nand hello again\n" });
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trim().split("\n").map((l) => JSON.parse(l));
    const threadId = lines[0].threadId as string;
    const mine = (await api(`/api/threads/${threadId}/entries?offset=-1`)).entries.filter((e: any) => e.payload.type === "chat" && e.authorId === "cli-user").map((e: any) => e.id);
    expect(mine).toHaveLength(2);
    const answers = lines.filter((e) => e.payload?.type === "chat" && e.authorId !== "cli-user").map((e) => e.payload.triggerEntryId);
    expect(answers.sort()).toEqual([...mine].sort());
  });

  it("agent add creates a bot on an environment named by name; agents lists it; a taken handle is the API's error", async (ctx) => {
    if ((await fetch(`${worker.url}/api/agents`, { headers: { authorization: `Bearer ${token}` } })).status === 404) ctx.skip();
    const r = await ok(["agent", "add", "@reviewer", "--model", "demo/demo", "--env", "demo", "--tools", "delegate_task", "--json"]);
    expect(JSON.parse(r.stdout)).toMatchObject({ handle: "reviewer", name: "reviewer", model: "demo/demo", environmentId: DEMO_ENVIRONMENT_ID, tools: ["delegate_task"] });
    expect((await ok(["agents"])).stdout).toMatch(/^@reviewer {2}reviewer {2}model demo\/demo/m);
    const again = await cli(["agent", "add", "reviewer", "--model", "demo/demo"], { env: as() });
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/^error \w+: /);
  });

  it("chat ends as soon as the bot's turn fails, with its reason, instead of waiting out the reply timeout", async (ctx) => {
    if ((await fetch(`${worker.url}/api/agents`, { headers: { authorization: `Bearer ${token}` } })).status === 404) ctx.skip();
    // No environment: the bot has no model to call, so its turn fails at once.
    const made = await fetch(`${worker.url}/api/agents`, {
      method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "Stranded", handle: "stranded", model: "openai/gpt-4.1-mini" }),
    });
    expect(made.status).toBe(201);
    const started = Date.now();
    const r = await cli(["chat", "@stranded", "--reply-timeout", "120"], { env: as(), input: "hello?\n" });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^error bot_failed: @stranded could not answer: .+ \(thread th_\S+\)$/m);
    expect(Date.now() - started).toBeLessThan(60_000); // far from the 120 s it would have waited
  });

  it("chat whose first message's turn fails and whose second is answered still exits with the failure", async (ctx) => {
    if ((await fetch(`${worker.url}/api/agents`, { headers: { authorization: `Bearer ${token}` } })).status === 404) ctx.skip();
    const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("THREADBOX_")));
    const child = spawn(process.execPath, [CLI, "chat", "@demo", "--reply-timeout", "120", "--json"], {
      env: { ...base, NO_COLOR: "1", XDG_CONFIG_HOME: tempDir("tb-cfg-"), ...as() }, stdio: ["pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const closed = new Promise<number | null>((resolve) => child.on("close", resolve));
    // the second message only once the first one's failure is on screen: its answer comes after it
    child.stdin.write("fail: the first message breaks\n");
    for (let i = 0; i < 600 && !stdout.includes('"signal.dispatch.error"'); i++) await new Promise((r) => setTimeout(r, 50));
    expect(stdout).toContain('"signal.dispatch.error"');
    child.stdin.end("hello again\n");
    const code = await closed;
    const answers = stdout.trim().split("\n").map((l) => JSON.parse(l)).filter((e) => e.payload?.type === "chat" && e.authorId !== "cli-user");
    expect(answers).toHaveLength(1); // the second message was answered
    expect(code).toBe(2);
    expect(JSON.parse(stderr.trim())).toEqual({ error: { code: "bot_failed", message: expect.stringMatching(/^@demo could not answer: .*demo model failure: the first message breaks.* \(thread th_\S+\)$/) } });
  });

  it("a message typed while the server is unreachable (a restart, a network drop) is sent once it is back, once, and answered", async (ctx) => {
    if ((await fetch(`${worker.url}/api/agents`, { headers: { authorization: `Bearer ${token}` } })).status === 404) ctx.skip();
    const proxy = await startPausableProxy(worker.port);
    const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("THREADBOX_")));
    const child = spawn(process.execPath, [CLI, "chat", "@demo", "--reply-timeout", "120", "--json"], {
      env: { ...base, NO_COLOR: "1", XDG_CONFIG_HOME: tempDir("tb-cfg-"), THREADBOX_URL: `http://127.0.0.1:${proxy.port}`, THREADBOX_TOKEN: token },
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const closed = new Promise<number | null>((resolve) => child.on("close", resolve));
    const answers = () => stdout.trim().split("\n").filter(Boolean).map((l) => JSON.parse(l)).filter((e) => e.payload?.type === "chat" && e.authorId !== "cli-user");
    try {
      child.stdin.write("hello there\n");
      for (let i = 0; i < 600 && answers().length < 1; i++) await new Promise((r) => setTimeout(r, 50));
      expect(answers()).toHaveLength(1);
      proxy.pause(); // connections are reset and refused: the socket drops, and the next post cannot get through
      child.stdin.end("and hello again\n");
      await new Promise((r) => setTimeout(r, 1_500));
      proxy.resume();
      const code = await Promise.race([closed, new Promise<string>((r) => setTimeout(() => r("still running"), 60_000))]);
      if (code === "still running") child.kill("SIGKILL");
      expect({ code, stderr }).toEqual({ code: 0, stderr: "" });
    } finally {
      await proxy.close();
    }
    const threadId = JSON.parse(stdout.split("\n")[0]).threadId as string;
    const mine = (await api(`/api/threads/${threadId}/entries?offset=-1`)).entries.filter((e: any) => e.payload.type === "chat" && e.authorId === "cli-user");
    expect(mine.map((e: any) => e.payload.text)).toEqual(["hello there", "and hello again"]);
    expect(answers().map((e) => e.payload.triggerEntryId).sort()).toEqual(mine.map((e: any) => e.id).sort());
  }, 120_000);

  it("Ctrl-C while chat waits (for the bot's answer, or for input) exits 130 as tail --until-done does, a SIGTERM 143, not killed by the signal", async (ctx) => {
    if ((await fetch(`${worker.url}/api/agents`, { headers: { authorization: `Bearer ${token}` } })).status === 404) ctx.skip();
    const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("THREADBOX_")));
    let dm = "";
    // a message in flight; then, in the same DM thread, nothing typed yet
    const cases = [
      [[], "run sleep 5\n", "run_command", "SIGINT", 130],
      [["--json", "--thread"], "", '"threadId"', "SIGINT", 130],
      [["--json", "--thread"], "", '"threadId"', "SIGTERM", 143],
    ] as const;
    for (const [args, input, marker, signal, exitCode] of cases) {
      const child = spawn(process.execPath, [CLI, "chat", "@demo", "--reply-timeout", "120", ...args, ...(dm ? [dm] : [])], {
        env: { ...base, NO_COLOR: "1", XDG_CONFIG_HOME: tempDir("tb-cfg-"), ...as() }, stdio: ["pipe", "pipe", "pipe"],
      });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (d) => (stdout += d));
      child.stderr.on("data", (d) => (stderr += d));
      const closed = new Promise<{ code: number | null; signal: string | null }>((resolve) => child.on("close", (code, signal) => resolve({ code, signal })));
      child.stdin.write(input); // stdin stays open: chat is still reading it
      for (let i = 0; i < 600 && !stdout.includes(marker); i++) await new Promise((r) => setTimeout(r, 50));
      expect(stdout).toContain(marker);
      child.kill(signal);
      expect(await closed).toEqual({ code: exitCode, signal: null });
      expect(stderr).not.toMatch(/error/);
      dm ||= /thread (th_\S+) with @demo/.exec(stderr)![1];
    }
  });

  it("chat with nothing piped in opens no thread and exits 2 saying so", async (ctx) => {
    if ((await fetch(`${worker.url}/api/agents`, { headers: { authorization: `Bearer ${token}` } })).status === 404) ctx.skip();
    const count = async () => (await api("/api/threads?limit=1000")).threads.length;
    const before = await count();
    for (const input of ["", "\n  \n"]) {
      const r = await cli(["chat", "@demo"], { env: as(), input });
      expect([r.code, r.stdout]).toEqual([2, ""]);
      expect(r.stderr).toContain("nothing to send: no message on stdin");
    }
    expect(await count()).toBe(before);
  });

  it("chat refuses a reply timeout that is not a positive number before opening a thread; --json makes usage errors JSON", async () => {
    const r = await cli(["chat", "@demo", "--reply-timeout", "abc"], { env: as(), input: "x\n" });
    expect(r.code).toBe(2);
    expect(r.stderr).toBe("error usage: --reply-timeout abc is not a number of seconds above 0\n");
    const j = await cli(["threads", "--status", "bogus", "--json"], { env: as() });
    expect(j.code).toBe(2);
    expect(JSON.parse(j.stderr.trim())).toEqual({ error: { code: "usage", message: expect.stringContaining("'bogus' is invalid") } });
  });

  it("agent add --tools \"\" makes a bot with no tools; chat --thread refuses a thread that is not a DM with that bot", async (ctx) => {
    if ((await fetch(`${worker.url}/api/agents`, { headers: { authorization: `Bearer ${token}` } })).status === 404) ctx.skip();
    const r = await ok(["agent", "add", "@toolless", "--model", "demo/demo", "--tools", "", "--json"]);
    expect(JSON.parse(r.stdout).tools).toEqual([]);
    expect((await ok(["agents"])).stdout).toMatch(/^@toolless .* tools: none/m);
    const plain = (await ok(["new", "plain"])).stdout.trim();
    const started = Date.now();
    const c = await cli(["chat", "@demo", "--thread", plain, "--reply-timeout", "60"], { env: as(), input: "hello\n" });
    expect(c.code).toBe(2);
    expect(c.stderr).toContain(`error usage: thread ${plain} is not a direct-message thread with @demo`);
    expect(Date.now() - started).toBeLessThan(30_000);
  });

  it("chat names a missing bot clearly", async (ctx) => {
    if ((await fetch(`${worker.url}/api/agents`, { headers: { authorization: `Bearer ${token}` } })).status === 404) ctx.skip();
    const r = await cli(["chat", "@nobody"], { env: as() });
    expect([r.code, r.stderr.trim()]).toEqual([2, "error not_found: no bot @nobody in this house (see `threadbox agents`)"]);
  });
});

describe("preview", () => {
  it("preview <box> <port> prints a URL that opens a server on the box; a thread without a box is a clear error", async () => {
    const post = async (path: string, body: unknown): Promise<any> => (await fetch(`${worker.url}${path}`, {
      method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: JSON.stringify(body),
    })).json();
    const e = await post("/api/environments", { name: "cli-preview", sharedBox: true });
    const port = await freePort(); // the OS picks it: a random one could be in use (20000-40000 overlaps the ephemeral ports)
    const ran = await post(`/api/environments/${e.id}/exec`, { command: `echo from-cli-preview > index.html; nohup python3 -m http.server ${port} --bind 127.0.0.1 >/dev/null 2>&1 & sleep 0.5` });
    const r = await ok(["preview", ran.boxId, String(port), "--expires", "120"]);
    // stdout is the URL alone, so `$(threadbox preview …)` composes; the note is on stderr
    const url = r.stdout.trim();
    expect(r.stdout).toMatch(/^\S+\n$/);
    expect(url).toMatch(new RegExp(`/proxy/${port}-[0-9a-f]{32}/$`));
    expect(r.stderr).toContain(`port ${port} of ${ran.boxId}, valid until `);
    let text = "";
    for (const t0 = Date.now(); !text.includes("from-cli-preview") && Date.now() - t0 < 15_000;) {
      text = await fetch(`${url}index.html`).then((x) => x.text()).catch(() => "");
      if (!text.includes("from-cli-preview")) await new Promise((res) => setTimeout(res, 100));
    }
    expect(text.trim()).toBe("from-cli-preview");

    const idle = (await ok(["new", "no box here"])).stdout.trim();
    const notRunning = await cli(["interrupt", idle], { env: as() });
    expect([notRunning.code, notRunning.stderr]).toEqual([2, expect.stringContaining("error conflict: thread is idle, not running")]);
    const noBox = await cli(["preview", idle, "3000"], { env: as() });
    expect([noBox.code, noBox.stderr]).toEqual([2, expect.stringContaining("has no box right now")]);
    // a port out of range is the CLI's own usage error; the server's check stays behind it
    const bad = await cli(["preview", ran.boxId, "0"], { env: as() });
    expect([bad.code, bad.stderr]).toEqual([2, "error usage: port 0 is not a whole number from 1 to 65535\n"]);
    const refused = await fetch(`${worker.url}/api/sandboxes/${ran.boxId}/ports/0/preview`, { headers: { authorization: `Bearer ${token}` } });
    expect([refused.status, ((await refused.json()) as { error: { code: string } }).error.code]).toEqual([400, "validation_failed"]);
  });
});

describe("house configuration", () => {
  it("env add reads a secret from the environment, never from argv; envs shows it by name only", async () => {
    const r = await ok(["env", "add", "cli-env", "--model", "local/m", "--base-url", "http://127.0.0.1:1/v1", "--secret", "CLI_TEST_KEY", "--var", "A=b", "--json"], {
      env: { ...as(), CLI_TEST_KEY: "sk-cli-secret-value" },
    });
    const e = JSON.parse(r.stdout);
    expect(e).toMatchObject({ name: "cli-env", secretNames: ["CLI_TEST_KEY"], env: { A: "b" }, model: "local/m" });
    expect(e.piModels.providers.local).toEqual({ baseUrl: "http://127.0.0.1:1/v1", api: "openai-completions", apiKey: "$CLI_TEST_KEY", models: [{ id: "m" }] });
    const listed = await ok(["envs"]);
    expect(listed.stdout).toMatch(/cli-env .*secrets: CLI_TEST_KEY/);
    expect(listed.stdout + r.stdout).not.toContain("sk-cli-secret-value");
    const missing = await cli(["env", "add", "x", "--secret", "CLI_UNSET_KEY"], { env: as() });
    expect([missing.code, missing.stderr]).toEqual([2, expect.stringContaining("error usage: secret CLI_UNSET_KEY: set it in the environment")]);
  });

  it("envs says whether each environment keeps a shared box, which run_command and preview_link need", async () => {
    await ok(["env", "add", "cli-no-box", "--id", "env_cli_no_box"]);
    await ok(["env", "add", "cli-box", "--id", "env_cli_box", "--shared-box"]);
    const lines = (await ok(["envs"])).stdout.split("\n");
    expect(lines.find((l) => l.startsWith("env_cli_no_box "))).toBe("env_cli_no_box  cli-no-box  pi  no shared box");
    expect(lines.find((l) => l.startsWith("env_cli_box "))).toBe("env_cli_box  cli-box  pi  shared box");
    const listed = JSON.parse((await ok(["envs", "--json"])).stdout).environments;
    expect(listed.filter((e: any) => e.id.startsWith("env_cli_")).map((e: any) => [e.id, e.sharedBox])).toEqual(expect.arrayContaining([["env_cli_no_box", false], ["env_cli_box", true]]));
  });

  it("the dev seed is idempotent: a second run adds no second demo environment", async () => {
    const statePath = join(tempDir("tb-seed-"), "seed.json");
    const seed = () => seedDevHouse({ url: worker.url, token, demoModelBaseUrl: demo.baseUrl, vars: {}, statePath });
    await seed();
    const second = await seed();
    expect(second.environments).toEqual(["demo"]);
    const envs = JSON.parse((await ok(["envs", "--json"])).stdout).environments;
    expect(envs.filter((e: any) => e.name === "demo").map((e: any) => e.id)).toEqual([DEMO_ENVIRONMENT_ID]);
    if (second.agentsSupported) {
      const agents = JSON.parse((await ok(["agents", "--json"])).stdout).agents;
      expect(agents.filter((a: any) => a.handle === "demo")).toHaveLength(1);
    }
  });
});
