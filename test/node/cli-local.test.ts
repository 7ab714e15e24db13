// The real `threadbox` binary against servers on loopback that are not a working threadbox: one
// that takes the connection and never answers, one that counts what reaches it. No worker needed.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawn } from "node:child_process";
import { createServer as createHttpServer, type Server as HttpServer } from "node:http";
import { createServer, type Server, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "../../scripts/lib/wrangler-dev.mjs";
import { tempDirs } from "../support/temp-dirs";

const tempDir = tempDirs();
const CLI = join(ROOT, "cli", "threadbox.mjs");

type Result = { code: number | null; stdout: string; stderr: string; ms: number };

/** Runs the CLI to its end (killed after `killAfterMs`, its stderr then says so). */
function cli(args: string[], env: Record<string, string>, killAfterMs = 20_000): Promise<Result> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("THREADBOX_")));
  const started = Date.now();
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ...base, NO_COLOR: "1", XDG_CONFIG_HOME: tempDir("tb-cfg-"), THREADBOX_TOKEN: "a.b.c", ...env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => (stdout += d));
  child.stderr.on("data", (d) => (stderr += d));
  child.stdin.end("hi\n");
  const timer = setTimeout(() => { stderr += "[still running: killed]"; child.kill("SIGKILL"); }, killAfterMs);
  return new Promise((resolve) => child.on("close", (code) => { clearTimeout(timer); resolve({ code, stdout, stderr, ms: Date.now() - started }); }));
}

const listen = async <S extends Server | HttpServer>(server: S): Promise<string> => {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
};

describe("a server that never answers", () => {
  let silent: Server;
  let silentUrl: string;
  let stalling: HttpServer;
  let stallingUrl: string;
  const sockets = new Set<Socket>();
  beforeAll(async () => {
    // Takes every connection and reads the request, but never writes a byte back.
    silent = createServer((s) => { sockets.add(s); s.resume(); });
    silentUrl = await listen(silent);
    // Sends the status line and headers, then never the body.
    stalling = createHttpServer((_req, res) => { res.writeHead(200, { "content-type": "application/json" }); res.write("{"); });
    stalling.on("connection", (s) => sockets.add(s));
    stallingUrl = await listen(stalling);
  });
  afterAll(() => {
    for (const s of sockets) s.destroy();
    silent?.close();
    stalling?.close();
  });

  it("every request gives up after THREADBOX_TIMEOUT seconds: error timeout, exit 2, not a hang", async () => {
    const cases = [
      [["threads"], "GET /api/threads"],
      [["stop", "th_x"], "POST /api/threads/th_x/stop"],
      [["login", silentUrl], "GET /api/threads"],
    ] as const;
    // THREADBOX_RETRY=0: a GET is otherwise asked again after its timeout (the next case).
    const runs = await Promise.all(cases.map(([args]) => cli([...args], { THREADBOX_URL: silentUrl, THREADBOX_TIMEOUT: "1", THREADBOX_RETRY: "0" })));
    runs.forEach((r, i) => {
      const [args, asked] = cases[i];
      expect({ args, code: r.code, stdout: r.stdout, stderr: r.stderr }).toEqual({
        args, code: 2, stdout: "",
        stderr: `error timeout: no answer from ${silentUrl} within 1 s (${asked}): the server took the connection but did not reply; THREADBOX_TIMEOUT=SECONDS waits longer\n`,
      });
      expect(r.ms).toBeLessThan(10_000);
    });
  });

  it("a request a command asks again while the server is away, and safe to repeat, is asked again after each timeout until THREADBOX_RETRY is over, then it gives up the same way", async () => {
    const cases = [
      [["new", "x"], "POST /api/threads", "asking again in \\d+ ms \\(same Idempotency-Key: one thread at most\\)"],
      [["post", "th_x", "hi"], "POST /api/threads/th_x/entries", "sending again in \\d+ ms \\(same entry id: posted once\\)"],
      [["tail", "th_x", "--until-done"], "GET /api/threads/th_x", "asking again in \\d+ ms"],
      [["chat", "@demo"], "GET /api/agents", "asking again in \\d+ ms"],
      [["threads"], "GET /api/threads", "asking again in \\d+ ms"],
      [["login", silentUrl], "GET /api/threads", "asking again in \\d+ ms"],
    ] as const;
    const runs = await Promise.all(cases.map(([args]) => cli([...args], { THREADBOX_URL: silentUrl, THREADBOX_TIMEOUT: "1", THREADBOX_RETRY: "4" }, 100_000)));
    runs.forEach((r, i) => {
      const [args, asked, again] = cases[i];
      const error = `error timeout: no answer from ${silentUrl} within 1 s (${asked}): the server took the connection but did not reply; THREADBOX_TIMEOUT=SECONDS waits longer`;
      const lines = r.stderr.trimEnd().split("\n");
      expect({ args, code: r.code, stdout: r.stdout, last: lines.at(-1), askedAgain: lines.length > 2 && lines.slice(0, -1).every((l) => l.startsWith(error.slice("error timeout: ".length)) && new RegExp(`: ${again}$`).test(l)) })
        .toEqual({ args, code: 2, stdout: "", last: error, askedAgain: true });
    });
  }, 120_000);

  it("an answer whose body never comes times out too; with --json the error is JSON", async () => {
    const r = await cli(["threads", "--json"], { THREADBOX_URL: stallingUrl, THREADBOX_TIMEOUT: "0.5", THREADBOX_RETRY: "0" });
    expect([r.code, r.stdout]).toEqual([2, ""]);
    expect(JSON.parse(r.stderr)).toEqual({ error: { code: "timeout", message: expect.stringContaining(`no answer from ${stallingUrl} within 0.5 s (GET /api/threads)`) } });
  });

  it("THREADBOX_RETRY=0 asks nothing again: the first timeout is the error", async () => {
    const r = await cli(["new", "x"], { THREADBOX_URL: silentUrl, THREADBOX_TIMEOUT: "1", THREADBOX_RETRY: "0" });
    expect({ code: r.code, stderr: r.stderr }).toEqual({
      code: 2,
      stderr: `error timeout: no answer from ${silentUrl} within 1 s (POST /api/threads): the server took the connection but did not reply; THREADBOX_TIMEOUT=SECONDS waits longer\n`,
    });
  });

  it("a THREADBOX_RETRY that is not a number of seconds is a usage error before anything is sent", async () => {
    for (const bad of ["abc", "-1", "1s"]) {
      const r = await cli(["threads"], { THREADBOX_URL: silentUrl, THREADBOX_RETRY: bad });
      expect({ bad, code: r.code, stderr: r.stderr }).toEqual({ bad, code: 2, stderr: `error usage: THREADBOX_RETRY ${bad} is not a number of seconds (0 or more)\n` });
    }
  });

  it("a THREADBOX_TIMEOUT that is not a number of seconds is a usage error", async () => {
    for (const bad of ["abc", "0", "-1", "1s"]) {
      const r = await cli(["threads"], { THREADBOX_URL: silentUrl, THREADBOX_TIMEOUT: bad });
      expect({ bad, code: r.code, stderr: r.stderr }).toEqual({ bad, code: 2, stderr: `error usage: THREADBOX_TIMEOUT ${bad} is not a number of seconds above 0\n` });
    }
  });
});

describe("numeric options", () => {
  let server: HttpServer;
  let url: string;
  const asked: string[] = [];
  beforeAll(async () => {
    server = createHttpServer((req, res) => {
      asked.push(`${req.method} ${req.url}`);
      res.writeHead(400, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { code: "validation_failed", message: "from the server" } }));
    });
    url = await listen(server);
  });
  afterAll(() => { server?.close(); });

  it("a bad number is the CLI's usage error, before anything is sent", async () => {
    const cases = [
      [["threads", "--limit", "abc"], "--limit abc is not a whole number from 1 to 1000"],
      [["threads", "--limit", "-3"], "--limit -3 is not a whole number from 1 to 1000"],
      [["threads", "--limit", "0"], "--limit 0 is not a whole number from 1 to 1000"],
      [["threads", "--limit", "1.5"], "--limit 1.5 is not a whole number from 1 to 1000"],
      [["threads", "--limit", "1001"], "--limit 1001 is not a whole number from 1 to 1000"],
      [["threads", "--limit="], '--limit "" is not a whole number from 1 to 1000'],
      [["artifacts", "th_x", "--limit", "x"], "--limit x is not a whole number from 1 to 200"],
      [["preview", "box_x", "http"], "port http is not a whole number from 1 to 65535"],
      [["preview", "box_x", "3000", "--expires", "1h"], "--expires 1h is not a whole number from 1 to 86400"],
      [["chat", "@demo", "--reply-timeout", "abc"], "--reply-timeout abc is not a number of seconds above 0"],
      [["chat", "@demo", "--reply-timeout", "-5"], "--reply-timeout -5 is not a number of seconds above 0"],
    ] as const;
    for (const [args, message] of cases) {
      const r = await cli([...args], { THREADBOX_URL: url });
      expect({ args, code: r.code, stdout: r.stdout, stderr: r.stderr }).toEqual({ args, code: 2, stdout: "", stderr: `error usage: ${message}\n` });
    }
    // A file option that cannot be read as JSON is a usage error too, said on one line.
    const notJson = join(tempDir("threadbox-cli-file-"), "models.json");
    writeFileSync(notJson, "vm\n");
    const files = [
      [["env", "add", "e2", "--pi-models", notJson], `--pi-models ${notJson}: Unexpected token 'v', "vm " is not valid JSON`],
      [["env", "add", "e2", "--pi-models", `${notJson}.missing`], `--pi-models ${notJson}.missing: no such file`],
    ] as const;
    for (const [args, message] of files) {
      const r = await cli([...args], { THREADBOX_URL: url, THREADBOX_TOKEN: "t" });
      expect({ args, code: r.code, stderr: r.stderr }).toEqual({ args, code: 2, stderr: `error usage: ${message}\n` });
    }
    // Other mistakes on the command line are the CLI's usage error too, not an API code such as
    // bad_request, which would read as the server's refusal (README: "a usage mistake is code usage").
    const mistakes = [
      [["env", "add", "e3", "--var", "novalue"], { THREADBOX_TOKEN: "t" }, "--var novalue: use KEY=VALUE"],
      [["env", "add", "e3", "--base-url", "http://127.0.0.1:1/v1", "--secret", "TB_CLI_UNSET_KEY"], { THREADBOX_TOKEN: "t" }, "--base-url needs --model provider/model-id"],
      [["env", "add", "e3", "--secret", "TB_CLI_UNSET_KEY"], { THREADBOX_TOKEN: "t" }, "secret TB_CLI_UNSET_KEY: set it in the environment (TB_CLI_UNSET_KEY=… threadbox env add …) or run in a terminal to be asked"],
      [["login", url], { THREADBOX_TOKEN: "" }, "no token: pass a sign-in link (URL#token=…), --token-stdin, or THREADBOX_TOKEN"],
    ] as const;
    for (const [args, env, message] of mistakes) {
      const r = await cli([...args], { THREADBOX_URL: url, ...env });
      expect({ args, code: r.code, stderr: r.stderr }).toEqual({ args, code: 2, stderr: `error usage: ${message}\n` });
      const j = await cli([...args, "--json"], { THREADBOX_URL: url, ...env });
      expect({ args, code: j.code, stderr: j.stderr }).toEqual({ args, code: 2, stderr: JSON.stringify({ error: { code: "usage", message } }) + "\n" });
    }
    const json = await cli(["threads", "--limit", "abc", "--json"], { THREADBOX_URL: url });
    expect([json.code, JSON.parse(json.stderr)]).toEqual([2, { error: { code: "usage", message: "--limit abc is not a whole number from 1 to 1000" } }]);
    expect(asked).toEqual([]);
  });

  it("good numbers reach the server as given", async () => {
    asked.length = 0;
    await cli(["threads", "--limit", "7"], { THREADBOX_URL: url });
    await cli(["threads"], { THREADBOX_URL: url });
    await cli(["artifacts", "th_x", "--limit", "200"], { THREADBOX_URL: url });
    await cli(["preview", "box_x", "3000", "--expires", "60"], { THREADBOX_URL: url });
    expect(asked).toEqual([
      "GET /api/threads?limit=7",
      "GET /api/threads?limit=100",
      "GET /api/threads/th_x/artifacts?limit=200",
      "GET /api/sandboxes/box_x/ports/3000/preview?expiresInSeconds=60",
    ]);
  });
});
