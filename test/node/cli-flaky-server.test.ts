// The CLI's follow against a stand-in server that misbehaves on cue: no worker needed, so the
// exact moment of a failure can be chosen (the server going away just as a run ends, another
// server's page answering the WebSocket upgrade).
import { afterEach, describe, expect, it } from "vitest";
import { spawn } from "node:child_process";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
// @ts-expect-error ws ships without type declarations (and @types/ws is not installed)
import { WebSocketServer } from "ws";
import { ROOT } from "../../scripts/lib/wrangler-dev.mjs";
// @ts-expect-error plain JS module without declarations
import { subscribe } from "../../cli/lib/subscribe.mjs";
import { tempDirs } from "../support/temp-dirs";

const tempDir = tempDirs();
const CLI = join(ROOT, "cli", "threadbox.mjs");
const servers: Server[] = [];

afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

async function listen(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ server: Server; url: string }> {
  const server = createServer(handler);
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

/**
 * Runs the CLI to its end (killed after `timeoutMs`: code "still running"). `input` is its stdin
 * (none by default); `env` adds to its environment; `until` sends it a SIGINT once stdout holds that text;
 * `onStderr` is told all of stderr so far, as it grows.
 */
function runCli(args: string[], url: string, timeoutMs = 20_000, opts: { input?: string; env?: Record<string, string>; until?: string; onStderr?: (stderr: string) => void } = {}): Promise<{ code: number | null | string; stdout: string; stderr: string }> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("THREADBOX_")));
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ...base, NO_COLOR: "1", XDG_CONFIG_HOME: tempDir("tb-cfg-"), THREADBOX_URL: url, THREADBOX_TOKEN: "a.b.c", ...opts.env },
    stdio: [opts.input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
  });
  if (opts.input !== undefined) child.stdin!.end(opts.input);
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (d) => {
    stdout += d;
    if (opts.until !== undefined && stdout.includes(opts.until)) child.kill("SIGINT");
  });
  child.stderr!.on("data", (d) => {
    stderr += d;
    opts.onStderr?.(stderr);
  });
  return new Promise((resolve) => {
    const timer = setTimeout(() => { child.kill("SIGKILL"); resolve({ code: "still running", stdout, stderr }); }, timeoutMs);
    child.on("close", (code) => { clearTimeout(timer); resolve({ code, stdout, stderr }); });
  });
}

describe("tail --until-done against a server that goes away as the run ends", () => {
  it("asks again how the run ended, instead of exiting 2 with the proxy's 502", async () => {
    const threadId = "th_flaky";
    let status = "running";
    let refusals = 0;
    const { server, url } = await listen((req, res) => {
      if (req.url === `/api/threads/${threadId}`) {
        // The run's end reached the socket; the next reads of the row meet a proxy whose server is restarting.
        if (status === "completed" && refusals < 2) {
          refusals++;
          res.writeHead(502, { "content-type": "text/html" }).end("<html><body><h1>502 Bad Gateway</h1></body></html>");
          return;
        }
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id: threadId, status, runId: "run_1", reason: null }));
        return;
      }
      res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ error: { code: "not_found", message: "no such route" } }));
    });
    const wss = new WebSocketServer({ server, handleProtocols: () => "threadbox" });
    wss.on("connection", (ws: { send(data: string): void }) => {
      ws.send(JSON.stringify({ offset: "0000000000000001_0000000000000000", id: "e1", ts: 1, payload: { type: "chat", text: "working" } }));
      status = "completed";
      ws.send(JSON.stringify({ offset: "0000000000000002_0000000000000000", id: "e2", ts: 2, payload: { type: "signal.thread.status_changed", status: "completed", runId: "run_1" } }));
    });
    const r = await runCli(["tail", threadId, "--until-done", "--json"], url);
    wss.close();
    expect({ code: r.code, ids: r.stdout.trim().split("\n").map((l) => JSON.parse(l).id), stderr: r.stderr }).toEqual({ code: 0, ids: ["e1", "e2"], stderr: "" });
    expect(refusals).toBe(2);
  });
});

describe("a WebSocket upgrade answered by another server's page", () => {
  it("is not_threadbox naming the status and content type, not the page's HTML as the message", async () => {
    const { url } = await listen((_req, res) => {
      res.writeHead(404, { "content-type": "text/html" }).end("<!doctype html><html><body><h1>Not Found</h1><p>nginx</p></body></html>");
    });
    const sub = subscribe({ url, token: "a.b.c" }, "th_x", { offset: "-1", onEntry: () => {} });
    const err = await sub.done.then(() => null, (e: any) => e);
    expect({ code: err?.code, message: err?.message }).toEqual({
      code: "not_threadbox",
      message: `${url} is not a threadbox API (the WebSocket upgrade was answered 404 text/html): check the URL`,
    });
  });
});

describe("a WebSocket upgrade answered 502 by a proxy while the server restarts", () => {
  it("is retried with backoff, saying so, and the entries come once it is back", async () => {
    let refusals = 0;
    const { server, url } = await listen((_req, res) => res.writeHead(404).end());
    // Before the WebSocket server sees it: the first two upgrades meet the proxy's error page.
    server.prependListener("upgrade", (_req: IncomingMessage, socket: import("node:net").Socket) => {
      if (refusals >= 2) return;
      refusals++;
      socket.end("HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/html\r\ncontent-length: 13\r\nconnection: close\r\n\r\n<h1>502</h1>\n");
    });
    const wss = new WebSocketServer({ noServer: true, handleProtocols: () => "threadbox" });
    server.on("upgrade", (req: IncomingMessage, socket: import("node:net").Socket, head: Buffer) => {
      if (socket.destroyed || socket.writableEnded) return;
      wss.handleUpgrade(req, socket, head, (ws: { send(data: string): void }) => ws.send(JSON.stringify({ offset: "0000000000000001_0000000000000000", id: "e1", ts: 1, payload: { type: "chat", text: "back" } })));
    });
    const delays: number[] = [];
    const seen: string[] = [];
    const sub = subscribe({ url, token: "a.b.c" }, "th_x", { offset: "-1", onEntry: (e: any) => { seen.push(e.id); }, onReconnecting: (ms: number) => delays.push(ms) });
    for (let i = 0; i < 100 && seen.length === 0; i++) await new Promise((r) => setTimeout(r, 50));
    sub.close();
    await sub.done;
    wss.close();
    expect({ seen, refusals, delays }).toEqual({ seen: ["e1"], refusals: 2, delays: [250, 500] });
  });
});

describe("new, post and resume while the server cannot be reached yet (a restart)", () => {
  it("each asks again until the server is back, then prints its answer; new and resume under the key they first sent", async () => {
    const cases = [
      { args: ["new", "t"], path: "/api/threads", status: 201, answer: { id: "th_new", status: "idle" }, out: "th_new\n", keyed: true },
      { args: ["post", "th_x", "hi", "--id", "e_1"], path: "/api/threads/th_x/entries", status: 201, answer: { entries: [{ id: "e_1", offset: "0000000000000001_0000000000000000", duplicate: false }], nextOffset: "0000000000000001_0000000000000000" }, out: "posted e_1 at offset 0000000000000001_0000000000000000\n", keyed: false },
      { args: ["resume", "th_x", "again"], path: "/api/threads/th_x/resume", status: 202, answer: { threadId: "th_x", runId: "run_2", status: "running" }, out: "th_x running (run run_2)\n", keyed: true },
    ];
    for (const c of cases) {
      // A port nothing listens on yet: the server comes up on it a moment after the command starts.
      const probe = createServer();
      await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
      const port = (probe.address() as AddressInfo).port;
      await new Promise((r) => probe.close(r));
      const asked: { method?: string; url?: string; key: string | null; body: string }[] = [];
      // The server comes up once the command has been refused and said it asks again.
      let refused!: () => void;
      const wasRefused = new Promise<void>((r) => { refused = r; });
      const running = runCli(c.args, `http://127.0.0.1:${port}`, 20_000, { onStderr: (err) => { if (/ECONNREFUSED: (asking|sending) again/.test(err)) refused(); } });
      await wasRefused;
      const server = createServer(async (req, res) => {
        let body = "";
        for await (const chunk of req) body += chunk;
        asked.push({ method: req.method, url: req.url, key: (req.headers["idempotency-key"] as string | undefined) ?? null, body });
        res.writeHead(c.status, { "content-type": "application/json" }).end(JSON.stringify(c.answer));
      });
      servers.push(server);
      await new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
      const r = await running;
      expect({ args: c.args, code: r.code, stdout: r.stdout, asked: asked.map((a) => `${a.method} ${a.url}`) })
        .toEqual({ args: c.args, code: 0, stdout: c.out, asked: [`POST ${c.path}`] });
      expect(asked[0]!.key === null).toBe(!c.keyed);
      if (c.args[0] === "post") expect(JSON.parse(asked[0]!.body).id).toBe("e_1");
      expect(r.stderr).toMatch(/cannot reach http:\/\/127\.0\.0\.1:\d+: ECONNREFUSED: (asking|sending) again in \d+ ms/);
    }
  });
});

describe("resume --watch while the server restarts", () => {
  it("asks again for where the log ends, for the resume (under one Idempotency-Key) and for the thread row, then follows the run to its end", async () => {
    const threadId = "th_watch";
    const html502 = (res: ServerResponse) => res.writeHead(502, { "content-type": "text/html" }).end("<h1>502 Bad Gateway</h1>");
    let status = "failed";
    const seen = { entries: 0, resume: 0, row: 0 };
    const keys: (string | null)[] = [];
    const { server, url } = await listen(async (req, res) => {
      for await (const _ of req) { /* the body */ }
      if (req.url === `/api/threads/${threadId}/entries?offset=now&limit=1`) {
        if (seen.entries++ === 0) return html502(res);
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ entries: [], nextOffset: "0000000000000004_0000000000000000", upToDate: true }));
        return;
      }
      if (req.method === "POST" && req.url === `/api/threads/${threadId}/resume`) {
        keys.push((req.headers["idempotency-key"] as string | undefined) ?? null);
        status = "running";
        // The run starts; its answer is lost.
        if (seen.resume++ === 0) return void req.socket.destroy();
        res.writeHead(202, { "content-type": "application/json" }).end(JSON.stringify({ threadId, runId: "run_2", status: "running" }));
        return;
      }
      if (req.url === `/api/threads/${threadId}`) {
        if (seen.row++ === 0) return html502(res);
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id: threadId, status, runId: "run_2", reason: null }));
        return;
      }
      res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ error: { code: "not_found", message: "no such route" } }));
    });
    const wss = new WebSocketServer({ server, handleProtocols: () => "threadbox" });
    wss.on("connection", (ws: { send(data: string): void }) => {
      ws.send(JSON.stringify({ offset: "0000000000000005_0000000000000000", id: "claim:run_2", ts: 5, payload: { type: "signal.thread.status_changed", status: "running", runId: "run_2" } }));
      status = "completed";
      ws.send(JSON.stringify({ offset: "0000000000000006_0000000000000000", id: "done", ts: 6, payload: { type: "signal.thread.status_changed", status: "completed", runId: "run_2" } }));
    });
    const r = await runCli(["resume", threadId, "again", "--watch", "--json"], url);
    wss.close();
    expect({ code: r.code, ids: r.stdout.split("\n").filter(Boolean).map((l) => JSON.parse(l).id), stderr: r.stderr, seen, sameKey: keys.length === 2 && keys[0] !== null && keys[0] === keys[1] })
      .toEqual({ code: 0, ids: ["claim:run_2", "done"], stderr: "", seen: { entries: 2, resume: 2, row: 3 }, sameKey: true });
  });
});

/** stdout's lines, each parsed as JSON where it is JSON: a failure shows what was printed instead. */
const lines = (out: string) => out.split("\n").filter(Boolean).map((l) => { try { return JSON.parse(l); } catch { return l; } });

describe("a plain tail started while the server restarts", () => {
  it("asks again for the thread row (saying so, but not with --json) and then follows the thread", async () => {
    const threadId = "th_plain";
    let refusals = 0;
    const { server, url } = await listen((req, res) => {
      if (req.url === `/api/threads/${threadId}`) {
        // A proxy in front answers for the server while it restarts.
        if (refusals++ % 2 === 0) return void res.writeHead(502, { "content-type": "text/html" }).end("<h1>502 Bad Gateway</h1>");
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id: threadId, status: "idle", runId: null, reason: null }));
        return;
      }
      res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ error: { code: "not_found", message: "no such route" } }));
    });
    const wss = new WebSocketServer({ server, handleProtocols: () => "threadbox" });
    wss.on("connection", (ws: { send(data: string): void }) => {
      ws.send(JSON.stringify({ offset: "0000000000000001_0000000000000000", id: "e1", ts: 1, payload: { type: "chat", text: "still here" } }));
    });
    const json = await runCli(["tail", threadId, "--json"], url, 20_000, { until: "\n" });
    const human = await runCli(["tail", threadId], url, 20_000, { until: "still here" });
    wss.close();
    expect({ code: json.code, ids: lines(json.stdout).map((l) => l.id), stderr: json.stderr })
      .toEqual({ code: 0, ids: ["e1"], stderr: "" });
    expect({ code: human.code, stdout: human.stdout }).toEqual({ code: 0, stdout: expect.stringContaining("still here") });
    expect(human.stderr).toMatch(/Bad Gateway from http:\/\/127\.0\.0\.1:\d+ \(GET \/api\/threads\/th_plain answered 502 text\/html, not the API's JSON error\): asking again in 250 ms/);
    expect(refusals).toBe(4);
  });
});

describe("chat whose DM thread's answer is lost (a restart just then)", () => {
  it("asks again under the same Idempotency-Key: one thread, and the conversation goes on", async () => {
    const me = "cli-user";
    const token = `a.${Buffer.from(JSON.stringify({ sub: me })).toString("base64url")}.c`;
    const creates: { key: string | null; body: any }[] = [];
    const log: object[] = [];
    const sockets = new Set<{ send(data: string): void }>();
    const append = (entry: object) => {
      log.push(entry);
      for (const ws of sockets) ws.send(JSON.stringify(entry));
    };
    const offset = (n: number) => `${String(n).padStart(16, "0")}_0000000000000000`;
    const { server, url } = await listen(async (req, res) => {
      let body = "";
      for await (const chunk of req) body += chunk;
      const json = (status: number, answer: unknown) => res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(answer));
      if (req.method === "GET" && req.url === "/api/agents") return json(200, { agents: [{ id: "ag_1", handle: "demo", name: "Demo", model: "m", environmentId: "env_1" }] });
      if (req.method === "POST" && req.url === "/api/threads") {
        creates.push({ key: (req.headers["idempotency-key"] as string | undefined) ?? null, body: JSON.parse(body) });
        // The thread is made; its answer never arrives.
        if (creates.length === 1) return void req.socket.destroy();
        return json(200, { id: "th_dm", status: "idle", parent: { kind: "agent", id: "ag_1" } });
      }
      if (req.method === "POST" && req.url === "/api/threads/th_dm/entries") {
        const envelope = JSON.parse(body);
        const posted = { offset: offset(log.length + 1), id: envelope.id, ts: 1, authorId: me, payload: envelope.payload };
        append(posted);
        json(201, { entries: [{ id: posted.id, offset: posted.offset, duplicate: false }], nextOffset: posted.offset });
        append({ offset: offset(log.length + 1), id: "answer", ts: 2, authorId: "ag_1", payload: { type: "chat", text: "hello back", triggerEntryId: envelope.id } });
        return;
      }
      json(404, { error: { code: "not_found", message: "no such route" } });
    });
    const wss = new WebSocketServer({ server, handleProtocols: () => "threadbox" });
    wss.on("connection", (ws: { send(data: string): void; on(event: string, fn: () => void): void }) => {
      for (const entry of log) ws.send(JSON.stringify(entry));
      sockets.add(ws);
      ws.on("close", () => sockets.delete(ws));
    });
    const r = await runCli(["chat", "@demo", "--json"], url, 20_000, { input: "hi\n", env: { THREADBOX_TOKEN: token } });
    wss.close();
    expect({ code: r.code, stderr: r.stderr, lines: lines(r.stdout) }).toEqual({
      code: 0, stderr: "",
      lines: [{ threadId: "th_dm", bot: { id: "ag_1", handle: "demo" } }, expect.objectContaining({ id: "answer", payload: expect.objectContaining({ text: "hello back" }) })],
    });
    expect({ creates: creates.length, sameKey: creates.length === 2 && creates[0]!.key !== null && creates[0]!.key === creates[1]!.key, body: creates.at(-1)?.body })
      .toEqual({ creates: 2, sameKey: true, body: { title: "chat with @demo", parent: { kind: "agent", id: "ag_1" }, environmentId: "env_1" } });
  });
});

describe("a request that gets no answer within THREADBOX_TIMEOUT (a server stalled while it restarts)", () => {
  it("is asked again when it is safe to repeat: a GET, a POST under its Idempotency-Key, a post under its entry id", async () => {
    const seen: { method?: string; url?: string; key: string | null; body: string }[] = [];
    const count = (method: string, url: string) => seen.filter((s) => s.method === method && s.url === url).length;
    const { url } = await listen(async (req, res) => {
      let body = "";
      for await (const chunk of req) body += chunk;
      seen.push({ method: req.method, url: req.url, key: (req.headers["idempotency-key"] as string | undefined) ?? null, body });
      const json = (status: number, answer: unknown) => res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(answer));
      // Each request's first try is taken and never answered.
      if (count(req.method!, req.url!) === 1) return;
      if (req.url === "/api/environments") return json(200, { environments: [{ id: "env_1", name: "demo" }] });
      if (req.url === "/api/threads") return json(200, { id: "th_new", status: "idle" });
      if (req.url === "/api/threads/th_x/entries") return json(201, { entries: [{ id: "e_1", offset: "0000000000000001_0000000000000000", duplicate: true }], nextOffset: "0000000000000001_0000000000000000" });
      json(404, { error: { code: "not_found", message: "no such route" } });
    });
    const env = { THREADBOX_TIMEOUT: "1" };
    const made = await runCli(["new", "t", "--env", "demo"], url, 30_000, { env });
    const posted = await runCli(["post", "th_x", "hi", "--id", "e_1", "--json"], url, 30_000, { env });
    const threads = seen.filter((s) => s.url === "/api/threads");
    const posts = seen.filter((s) => s.url === "/api/threads/th_x/entries");
    expect({
      made: [made.code, made.stdout], posted: [posted.code, (() => { try { return JSON.parse(posted.stdout).entries[0].id; } catch { return posted.stdout; } })(), posted.stderr],
      environments: count("GET", "/api/environments") >= 2, threads: threads.length >= 2, oneKey: threads.length > 0 && threads[0]!.key !== null && threads.every((t) => t.key === threads[0]!.key),
      posts: posts.length >= 2, oneId: posts.every((p) => JSON.parse(p.body).id === "e_1"),
    }).toEqual({ made: [0, "th_new\n"], posted: [0, "e_1", ""], environments: true, threads: true, oneKey: true, posts: true, oneId: true });
    expect(made.stderr).toMatch(/no answer from http:\/\/127\.0\.0\.1:\d+ within 1 s \(POST \/api\/threads\).*: asking again in \d+ ms \(same Idempotency-Key: one thread at most\)/);
  });

  it("is not asked again when sending it again could do it twice (a stop)", async () => {
    let stops = 0;
    const { url } = await listen((req) => { if (req.url === "/api/threads/th_x/stop") stops++; });
    const r = await runCli(["stop", "th_x"], url, 30_000, { env: { THREADBOX_TIMEOUT: "1" } });
    expect({ code: r.code, stops, stderr: r.stderr })
      .toEqual({ code: 2, stops: 1, stderr: expect.stringMatching(/^error timeout: no answer from http:\/\/127\.0\.0\.1:\d+ within 1 s \(POST \/api\/threads\/th_x\/stop\)/) });
  });
});

/** A port nothing listens on yet: a server can come up on it later. */
async function freshPort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
  const port = (probe.address() as AddressInfo).port;
  await new Promise((r) => probe.close(r));
  return port;
}

/** A stand-in threadbox answering GETs by path (query left out), saying 404 as the API does to anything else; `asked` records each request. */
function answering(routes: Record<string, unknown>, asked: string[], first?: (res: ServerResponse) => boolean) {
  return async (req: IncomingMessage, res: ServerResponse) => {
    for await (const _ of req) { /* the body */ }
    asked.push(`${req.method} ${req.url}`);
    if (first?.(res)) return;
    const answer = req.method === "GET" ? routes[req.url!.replace(/\?.*$/, "")] : undefined;
    if (answer === undefined) return void res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ error: { code: "not_found", message: "no such route" } }));
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(answer));
  };
}

describe("commands that only read, started while the server is away (a deploy's restart)", () => {
  const preview = { url: "https://preview.example/p", port: 3000, boxId: "box_1", expiresAt: "2030-01-01T00:00:00.000Z" };
  const routes = {
    "/api/threads": { threads: [{ id: "th_1", status: "idle", title: "first" }] },
    "/api/threads/th_x": { id: "th_x", status: "running", boxId: "box_1" },
    "/api/threads/th_x/artifacts": { artifacts: [] },
    "/api/sandboxes": { sandboxes: [{ id: "box_1", state: "live", threads: ["th_1"] }] },
    "/api/sandboxes/box_1/ports/3000/preview": preview,
    "/api/environments": { environments: [{ id: "env_1", name: "demo" }] },
    "/api/agents": { agents: [{ id: "ag_1", handle: "demo", name: "Demo", model: "m/x" }] },
  };
  // Every command of cli/commands/ that sends only GETs; `url` stands for the server's URL.
  const cases: { args: string[]; out: string | RegExp; json: (doc: any) => unknown; expected: unknown }[] = [
    { args: ["threads"], out: "th_1  idle  first\n", json: (d) => d.threads.map((t: any) => t.id), expected: ["th_1"] },
    { args: ["sandboxes"], out: "box_1  live  kept  threads: th_1\n", json: (d) => d.sandboxes.map((b: any) => b.id), expected: ["box_1"] },
    { args: ["envs"], out: "env_1  demo  pi  no shared box\n", json: (d) => d.environments.map((e: any) => e.id), expected: ["env_1"] },
    { args: ["agents"], out: "@demo  Demo  model m/x  mention  tools: all  ag_1\n", json: (d) => d.agents.map((a: any) => a.handle), expected: ["demo"] },
    { args: ["artifacts", "th_x"], out: "no artifacts on this thread\n", json: (d) => d.artifacts, expected: [] },
    { args: ["preview", "th_x", "3000"], out: "https://preview.example/p\n", json: (d) => d.url, expected: preview.url },
    { args: ["login", "url"], out: /^logged in to http:\/\/127\.0\.0\.1:\d+ \(saved in .+\)\n$/, json: (d) => d.subject, expected: null },
  ];
  const withUrl = (args: string[], url: string) => args.map((a) => (a === "url" ? url : a));

  it("each asks again, saying so on stderr, and prints its answer once the server is back (exit 0)", async () => {
    const runs = await Promise.all(cases.map(async (c) => {
      const port = await freshPort();
      const url = `http://127.0.0.1:${port}`;
      let refused!: () => void;
      const wasRefused = new Promise<void>((r) => { refused = r; });
      const running = runCli(withUrl(c.args, url), url, 30_000, { onStderr: (err) => { if (/ECONNREFUSED: asking again in \d+ ms/.test(err)) refused(); } });
      // The server comes up only once the command has been refused and said it asks again.
      await Promise.race([wasRefused, running]);
      const asked: string[] = [];
      const server = createServer(answering(routes, asked));
      servers.push(server);
      await new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
      return { url, asked, r: await running };
    }));
    runs.forEach(({ url, asked, r }, i) => {
      const c = cases[i]!;
      expect({ args: c.args, code: r.code, stdout: r.stdout, get: asked.every((a) => a.startsWith("GET ")) })
        .toEqual({ args: c.args, code: 0, stdout: typeof c.out === "string" ? c.out : expect.stringMatching(c.out), get: true });
      expect(r.stderr, c.args.join(" ")).toContain(`cannot reach ${url}: ECONNREFUSED: asking again in 250 ms\n`);
    });
  }, 60_000);

  it("with --json each asks again past a proxy's 502 with stderr left empty, and prints its JSON answer", async () => {
    const runs = await Promise.all(cases.map(async (c) => {
      const asked: string[] = [];
      let refusals = 0;
      const { url } = await listen(answering(routes, asked, (res) => {
        if (refusals++ > 0) return false;
        res.writeHead(502, { "content-type": "text/html" }).end("<h1>502 Bad Gateway</h1>");
        return true;
      }));
      return { asked, r: await runCli([...withUrl(c.args, url), "--json"], url, 30_000) };
    }));
    runs.forEach(({ asked, r }, i) => {
      const c = cases[i]!;
      let answer: unknown = r.stdout;
      try { answer = c.json(JSON.parse(r.stdout)); } catch { /* shown as printed */ }
      expect({ args: c.args, code: r.code, answer, stderr: r.stderr, first: asked[0] === asked[1] })
        .toEqual({ args: c.args, code: 0, answer: c.expected, stderr: "", first: true });
    });
  }, 60_000);

  it("with THREADBOX_RETRY=0 each fails at once: exit 2, the server unreachable", async () => {
    const runs = await Promise.all(cases.map(async (c) => {
      const url = `http://127.0.0.1:${await freshPort()}`;
      return { url, r: await runCli(withUrl(c.args, url), url, 30_000, { env: { THREADBOX_RETRY: "0" } }) };
    }));
    runs.forEach(({ url, r }, i) => {
      expect({ args: cases[i]!.args, code: r.code, stdout: r.stdout, stderr: r.stderr })
        .toEqual({ args: cases[i]!.args, code: 2, stdout: "", stderr: `error unreachable: cannot reach ${url}: ECONNREFUSED\n` });
    });
  }, 60_000);
});

describe("writes that could take effect twice, answered by a proxy's 502 (the server may have done them)", () => {
  it("are sent once and fail with exit 2: stop, interrupt, env add, agent add", async () => {
    const cases = [
      { args: ["stop", "th_x"], sent: "POST /api/threads/th_x/stop" },
      { args: ["interrupt", "th_x"], sent: "POST /api/threads/th_x/interrupt" },
      { args: ["env", "add", "demo"], sent: "POST /api/environments" },
      { args: ["agent", "add", "demo", "--model", "m/x"], sent: "POST /api/agents" },
    ];
    const runs = await Promise.all(cases.map(async (c) => {
      const asked: string[] = [];
      const { url } = await listen(answering({}, asked, (res) => {
        res.writeHead(502, { "content-type": "text/html" }).end("<h1>502 Bad Gateway</h1>");
        return true;
      }));
      return { url, asked, r: await runCli(c.args, url, 30_000) };
    }));
    runs.forEach(({ url, asked, r }, i) => {
      const c = cases[i]!;
      expect({ args: c.args, code: r.code, asked, stderr: r.stderr })
        .toEqual({ args: c.args, code: 2, asked: [c.sent], stderr: `error http_502: Bad Gateway from ${url} (${c.sent} answered 502 text/html, not the API's JSON error)\n` });
    });
  });
});
