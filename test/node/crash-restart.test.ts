// "Nothing lost" from a user's side when the server dies: `npm run serve` (plain workerd, state in
// SQLite files) is killed with SIGKILL at awkward moments and started again on the same state,
// with the local sandbox host, real pi in boxes and scripted model servers around it.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSandboxHost } from "../../sandbox-host/server.mjs";
import { findMarkedPids } from "../../sandbox-host/proc.mjs";
import { freePort, nodePath } from "../../scripts/lib/wrangler-dev.mjs";
import { freshTree } from "../support/fresh-tree";
import { startModelServer, type ModelServer } from "../support/model-server";
import { jsonApi } from "../support/json-api";
import { botsAndBoxesEnvironment } from "../support/bots-and-boxes-env";

const ADMIN = "crash-admin-secret-4f1c9e";
const TOKEN_SECRET = "crash-token-secret-0123456789abcdef";
const SANDBOX_KEY = "crash-sandbox-key";
const BOT_KEY = "sk-crash-bot";
const PI_KEY = "sk-crash-pi";

type Entry = { id: string; offset: string; authorId?: string; payload: { type: string; [k: string]: any } };
type Served = Awaited<ReturnType<typeof serve>>;

let tree: ReturnType<typeof freshTree>;
let host: Awaited<ReturnType<typeof startSandboxHost>>;
let botModel: ModelServer;
let piModel: ModelServer;
let server: Served | undefined;
let port: number;
let env: Record<string, string>;
let token = "";
let envId = "";
const dirs: string[] = [];

const url = () => `http://127.0.0.1:${port}`;
const api = jsonApi(() => ({ url: url(), token }));

function tempDir(prefix: string) {
  const d = mkdtempSync(join(tmpdir(), prefix));
  dirs.push(d);
  return d;
}

async function serve(args: string[] = []) {
  const child = spawn(process.execPath, [join(tree.dir, "scripts", "serve.mjs"), ...args], {
    cwd: tree.dir, detached: true, env: { ...process.env, PATH: nodePath(), NO_COLOR: "1", ...env },
  });
  let output = "";
  child.stdout!.on("data", (d) => { output += d; });
  child.stderr!.on("data", (d) => { output += d; });
  const exited = new Promise<number | string>((resolve) => child.on("exit", (code, signal) => resolve(code ?? signal ?? -1)));
  await new Promise<void>((resolve, reject) => {
    const timer = setInterval(() => {
      if (output.includes("threadbox is serving")) { clearInterval(timer); resolve(); }
    }, 50);
    exited.then((code) => { clearInterval(timer); reject(new Error(`npm run serve exited (${code}):\n${output}`)); });
  });
  return {
    child, exited, output: () => output,
    /** The whole process group at once, as a crash or a power cut would. */
    async crash() { process.kill(-child.pid!, "SIGKILL"); await exited; },
  };
}

/** kill -9 the server and start it again on the same state. */
async function crashAndRestart() {
  await server!.crash();
  server = await serve(["--no-build"]);
}

async function waitFor<T>(what: string, fn: () => Promise<T | null | undefined | false>, timeoutMs = 45_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function entries(threadId: string): Promise<Entry[]> {
  return (await api(`/api/threads/${threadId}/entries?offset=-1&limit=10000`)).body.entries;
}

/** Boxes made for runs (a shared box of an environment stays by design). */
const runBoxes = () => [...host.boxes.values()].filter((b) => (b as unknown as { spec: { labels?: Record<string, string> } }).spec.labels?.["threadbox.ephemeral"] === "true");

/** What the runners of a box logged (each run's runner.log), as one text. */
function runnerLogs(home: string): string {
  const runs = join(home, ".threadbox", "runs");
  return (existsSync(runs) ? readdirSync(runs) : []).map((r) => { try { return readFileSync(join(runs, r, "runner.log"), "utf8"); } catch { return ""; } }).join("");
}

const chatsBy = (es: Entry[], author: string) => es.filter((e) => e.payload.type === "chat" && e.authorId === author);

beforeAll(async () => {
  tree = freshTree();
  host = await startSandboxHost({ port: 0, apiKey: SANDBOX_KEY, root: tempDir("threadbox-crash-boxes-") });
  botModel = await startModelServer([]);
  piModel = await startModelServer([]);
  port = await freePort();
  const varsFile = join(tempDir("threadbox-crash-vars-"), "serve.vars");
  writeFileSync(varsFile, [
    `THREADBOX_ADMIN_SECRET=${ADMIN}`,
    `THREADBOX_TOKEN_SECRET=${TOKEN_SECRET}`,
    `DAYTONA_API_URL=${host.apiUrl}`,
    `DAYTONA_API_KEY=${SANDBOX_KEY}`,
    "DAYTONA_TARGET=local",
    `THREADBOX_STREAM_URL=http://127.0.0.1:${port}/api/stream`,
    "ORPHAN_SILENCE_MS=15000",
    "PROBE_INTERVAL_MS=2000",
    "PROBE_CONFIRM_MS=500",
    "DISPATCH_TURN_LEASE_MS=2000",
    "RUNNER_DRAIN_MS=5000",
    "STOP_GRACE_MS=3000",
  ].join("\n"));
  env = { PORT: String(port), THREADBOX_STATE_DIR: tempDir("threadbox-crash-state-"), THREADBOX_VARS_FILE: varsFile };
  server = await serve();
  const r = await fetch(`${url()}/api/admin/tokens`, {
    method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
    body: JSON.stringify({ houseId: "house-crash", subject: "owner-crash", role: "owner" }),
  });
  token = ((await r.json()) as { token: string }).token;
  const made = await api("/api/environments", {
    method: "POST",
    json: botsAndBoxesEnvironment({ name: "crash", botBaseUrl: botModel.baseUrl, piBaseUrl: piModel.baseUrl, botKey: BOT_KEY, piKey: PI_KEY }),
  });
  expect(made.status).toBe(201);
  envId = made.body.id;
}, 240_000);

afterAll(async () => {
  if (server) { try { process.kill(-server.child.pid!, "SIGKILL"); } catch { /* gone */ } }
  await botModel?.close();
  await piModel?.close();
  await host?.close();
  tree?.remove();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe("kill -9 of npm run serve", () => {
  it("while a bot turn waits on its model: after the restart the turn answers exactly once", async () => {
    const bot = (await api("/api/agents", { method: "POST", json: { model: "bots/bot-model", name: "Steady", handle: "steady", environmentId: envId, tools: [] } })).body;
    const t = (await api("/api/threads", { method: "POST", json: {} })).body;
    botModel.push({ hang: true }, { text: "Survived the crash." });
    const before = botModel.requests.length;
    await api(`/api/threads/${t.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: "@steady are you there?" } } });
    await waitFor("the model call in flight", async () => botModel.requests.length > before);
    await crashAndRestart();
    await waitFor("the resumed reply", async () => chatsBy(await entries(t.id), bot.id).length >= 1);
    await waitFor("the reply's own decisions", async () => {
      const ds = (await api(`/api/threads/${t.id}/dispatch`)).body.decisions as { triggerEntryId: string }[];
      return ds.some((d) => d.triggerEntryId.startsWith("reply:"));
    });
    await new Promise((r) => setTimeout(r, 3000)); // a second, wrong turn would have answered by now
    const final = await entries(t.id);
    expect(chatsBy(final, bot.id).map((e) => e.payload.text)).toEqual(["Survived the crash."]);
    expect(final.filter((e) => e.payload.type === "signal.dispatch.error")).toHaveLength(0);
    expect(botModel.requests.length - before).toBe(2);
    await api(`/api/agents/${bot.id}`, { method: "DELETE" });
  }, 90_000);

  it("while a bot turn's model fails after the restart: the turn fails visibly once, nothing stays thinking", async () => {
    const bot = (await api("/api/agents", { method: "POST", json: { model: "bots/bot-model", name: "Frail", handle: "frail", environmentId: envId, tools: [] } })).body;
    const t = (await api("/api/threads", { method: "POST", json: {} })).body;
    botModel.push({ hang: true }, { error: 400, message: "bad request from the model" });
    const before = botModel.requests.length;
    await api(`/api/threads/${t.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: "@frail are you there?" } } });
    await waitFor("the model call in flight", async () => botModel.requests.length > before);
    await crashAndRestart();
    const errors = await waitFor("the turn's failure", async () => {
      const es = (await entries(t.id)).filter((e) => e.payload.type === "signal.dispatch.error");
      return es.length ? es : null;
    });
    await new Promise((r) => setTimeout(r, 4000));
    const final = await entries(t.id);
    expect(final.filter((e) => e.payload.type === "signal.dispatch.error")).toHaveLength(1);
    expect(JSON.stringify(errors[0].payload)).toContain("bad request from the model");
    expect(chatsBy(final, bot.id)).toEqual([]);
    expect(botModel.requests.length - before).toBe(2);
    await api(`/api/agents/${bot.id}`, { method: "DELETE" });
  }, 90_000);


  it("while a bot's run_command runs: after the restart each call has one result and the turn answers once", async () => {
    const shared = await api("/api/environments", { method: "POST", json: {
      name: "crash-bot-shared", sharedBox: true, provider: "daytona", secrets: { BOT_KEY },
      piModels: { providers: { bots: { baseUrl: botModel.baseUrl, api: "openai-completions", apiKey: "$BOT_KEY", models: [{ id: "bot-model" }] } } },
    } });
    expect(shared.status, JSON.stringify(shared.body)).toBe(201);
    const bot = (await api("/api/agents", { method: "POST", json: { model: "bots/bot-model", name: "Runner", handle: "runner", environmentId: shared.body.id, tools: ["run_command"] } })).body;
    const t = (await api("/api/threads", { method: "POST", json: { environmentId: shared.body.id } })).body;
    botModel.push(
      { toolCalls: [{ id: "rc1", name: "run_command", arguments: { command: "echo begun; sleep 6; echo ended" } }] },
      { text: "The command was cut off by a restart." },
    );
    await api(`/api/threads/${t.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: "@runner run it" } } });
    await waitFor("the command's output", async () => (await entries(t.id)).some((e) => e.payload.type === "signal.exec.output"), 60_000);
    await crashAndRestart();
    await waitFor("the reply", async () => chatsBy(await entries(t.id), bot.id).length >= 1);
    await new Promise((r) => setTimeout(r, 3000));
    const es = await entries(t.id);
    expect(chatsBy(es, bot.id).map((e) => e.payload.text)).toEqual(["The command was cut off by a restart."]);
    const results = es.filter((e) => e.payload.type === "pi.tool_result");
    expect(results.map((e) => e.payload.toolCallId)).toEqual(["rc1"]);
    expect(results[0].payload).toMatchObject({ isError: true, output: expect.stringContaining("interrupted by a restart") });
    await api(`/api/agents/${bot.id}`, { method: "DELETE" });
  }, 120_000);

  /** A child of a new parent delegated `task`; resolves once the delegate call answered. */
  async function delegate(task: string) {
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const d = await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task } });
    expect(d.status).toBe(202);
    return { parentId: parent.id as string, childId: d.body.childThreadId as string };
  }

  async function settled(id: string, timeoutMs = 60_000) {
    return waitFor(`thread ${id} to settle`, async () => {
      const t = (await api(`/api/threads/${id}`)).body;
      return t.status === "completed" || t.status === "failed" ? t : null;
    }, timeoutMs);
  }

  /** The parent hears of its child's end exactly once, and no box of the house is left on the host. */
  async function noLeak(parentId: string) {
    await waitFor("the parent's child_finished", async () => (await entries(parentId)).some((e) => e.payload.type === "signal.thread.child_finished"));
    await waitFor("no box left on the sandbox host", async () => runBoxes().length === 0, 30_000)
      .catch(() => { throw new Error(`boxes left on the host: ${JSON.stringify(runBoxes().map((b) => [b.id, b.state]))}`); });
    await new Promise((r) => setTimeout(r, 1000));
    expect((await entries(parentId)).filter((e) => e.payload.type === "signal.thread.child_finished")).toHaveLength(1);
    // The house's list says what the thread says.
    const listed = (await api(`/api/threads?parent=${parentId}`)).body.threads as { id: string; status: string; reason?: string | null }[];
    for (const c of listed) {
      const row = (await api(`/api/threads/${c.id}`)).body;
      expect([c.status, c.reason ?? null]).toEqual([row.status, row.reason ?? null]);
    }
  }

  for (const delayMs of [0, 400, 1200]) {
    it(`${delayMs} ms into launching a delegated run: it settles, the parent hears once, no box is left`, async () => {
      piModel.push(
        { toolCalls: [{ name: "bash", arguments: { command: "printf hi > hello.txt" } }] },
        { text: "Wrote hello.txt." },
      );
      const before = piModel.requests.length;
      const { parentId, childId } = await delegate("write hello.txt containing hi");
      await new Promise((r) => setTimeout(r, delayMs));
      await crashAndRestart();
      const t = await settled(childId);
      expect(t.status === "completed" || (t.status === "failed" && t.reason), JSON.stringify(t)).toBeTruthy();
      await noLeak(parentId);
      // One runner, one pi: a launch retried after the restart must not start a second one.
      const es = await entries(childId);
      const count = (type: string) => es.filter((e) => e.payload.type === type).length;
      if (t.status === "completed") expect([count("signal.run.launched"), count("pi.tool_call"), count("pi.tool_result")]).toEqual([1, 1, 1]);
      expect(piModel.requests.length - before).toBeLessThanOrEqual(2);
    }, 120_000);
  }

  it("while pi waits on its model in a box: the run completes after the restart and its box goes", async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => { release = r; });
    const before = piModel.requests.length;
    piModel.push(
      { toolCalls: [{ name: "bash", arguments: { command: "printf hi > hello.txt" } }], until: held },
      { text: "Wrote hello.txt." },
    );
    const { parentId, childId } = await delegate("write hello.txt containing hi");
    await waitFor("pi's model call", async () => piModel.requests.length > before, 60_000);
    await crashAndRestart();
    release();
    const t = await settled(childId);
    expect(t.status).toBe("completed");
    const es = await entries(childId);
    expect(es.filter((e) => e.payload.type === "pi.tool_result")).toHaveLength(1);
    await noLeak(parentId);
  }, 120_000);

  it("while the server is down pi finishes: after the restart the run completes, once, and its box goes", async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => { release = r; });
    const before = piModel.requests.length;
    piModel.push(
      { toolCalls: [{ name: "bash", arguments: { command: "printf hi > hello.txt" } }], until: held },
      { text: "Wrote hello.txt while nobody listened." },
    );
    const { parentId, childId } = await delegate("write hello.txt containing hi");
    await waitFor("pi's model call", async () => piModel.requests.length > before, 60_000);
    const boxId = (await api(`/api/threads/${childId}`)).body.boxId as string;
    const home = host.boxes.get((await api(`/api/sandboxes/${boxId}`)).body.providerRef)!.home;
    await server!.crash();
    release();
    await waitFor("pi's last model call", async () => piModel.requests.length >= before + 2, 30_000);
    // pi ends its turn with nobody to tell: its last entries wait in the box.
    await waitFor("pi to settle", async () => runnerLogs(home).includes("pi has settled with nothing waiting"), 30_000);
    server = await serve(["--no-build"]);
    const t = await settled(childId);
    expect([t.status, t.detail]).toEqual(["completed", expect.anything()]);
    const es = await entries(childId);
    expect(es.filter((e) => e.payload.type === "pi.tool_result")).toHaveLength(1);
    expect(es.filter((e) => e.payload.type === "pi.assistant" && /nobody listened/.test(JSON.stringify(e.payload)))).toHaveLength(1);
    await noLeak(parentId);
  }, 120_000);

  /**
   * `threadbox delegate --watch --json` on a new parent, pi held on its model; the server is killed
   * and stays down `downMs` while pi goes on (its entries wait in the box), then comes back.
   */
  async function watchedThroughOutage(downMs: number) {
    let release!: () => void;
    const held = new Promise<void>((r) => { release = r; });
    const before = piModel.requests.length;
    piModel.push(
      { toolCalls: [{ name: "bash", arguments: { command: "printf hi > hello.txt" } }], until: held },
      { toolCalls: [{ name: "bash", arguments: { command: "cat hello.txt" } }] },
      { text: "Wrote hello.txt while the server was away." },
    );
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const cli = spawn(process.execPath, [join(tree.dir, "cli", "threadbox.mjs"), "--json", "delegate", parent.id, "write hello.txt containing hi", "--watch"], {
      env: { ...process.env, THREADBOX_URL: url(), THREADBOX_TOKEN: token, THREADBOX_CONFIG: join(tempDir("threadbox-crash-cli-"), "config.json") },
    });
    let out = "";
    let err = "";
    cli.stdout.on("data", (d) => { out += d; });
    cli.stderr.on("data", (d) => { err += d; });
    const exited = new Promise<number | null>((r) => cli.on("close", r));
    try {
      await waitFor("pi's model call", async () => piModel.requests.length > before, 60_000);
      await server!.crash();
      release(); // pi goes on while the server is down: the mirror keeps its entries until it is back
      await new Promise((r) => setTimeout(r, downMs));
      server = await serve(["--no-build"]);
      const code = await Promise.race([exited, new Promise<string>((r) => setTimeout(() => r("still running"), 90_000))]);
      const lines = out.split("\n").filter(Boolean).map((l) => JSON.parse(l));
      const childId = lines[0].childThreadId as string;
      return { code, err, printed: lines.slice(1).map((e) => e.id as string), childId, parentId: parent.id as string };
    } finally {
      cli.kill("SIGKILL");
    }
  }

  it("with threadbox delegate --watch following, the server down for 8 s while pi works: it exits 0 once the run completes, every entry printed once, in order", async () => {
    const { code, err, printed, childId, parentId } = await watchedThroughOutage(8_000);
    const es = await entries(childId);
    expect({ code, err }).toEqual({ code: 0, err: "" });
    expect(printed).toEqual(es.map((e) => e.id));
    // What pi did while the server was away reached the thread, in the order pi did it.
    const steps = es.filter((e) => e.payload.type === "pi.tool_call" || e.payload.type === "pi.tool_result")
      .map((e) => `${e.payload.type === "pi.tool_call" ? "call" : "result"} ${e.payload.type === "pi.tool_call" ? e.payload.args?.command : e.payload.name ?? ""}`);
    expect(steps).toEqual(["call printf hi > hello.txt", "result bash", "call cat hello.txt", "result bash"]);
    const last = es.filter((e) => e.payload.type.startsWith("pi.")).at(-1)!;
    expect([last.payload.type, JSON.stringify(last.payload).includes("while the server was away")]).toEqual(["pi.assistant", true]);
    expect((await api(`/api/threads/${childId}`)).body.status).toBe("completed");
    await noLeak(parentId);
  }, 180_000);

  it("the server down for 22 s, past ORPHAN_SILENCE_MS (15 s here) and the late-alarm margin (5 s), while pi works: the run is not called dead at the restart; it completes, and delegate --watch exits 0", async () => {
    const { code, err, printed, childId, parentId } = await watchedThroughOutage(22_000);
    const es = await entries(childId);
    const row = (await api(`/api/threads/${childId}`)).body;
    expect({ code, err, status: row.status, reason: row.reason }).toEqual({ code: 0, err: "", status: "completed", reason: "completed" });
    expect(printed).toEqual(es.map((e) => e.id));
    expect(es.filter((e) => e.payload.type === "pi.tool_result")).toHaveLength(2);
    await noLeak(parentId);
  }, 180_000);

  it("right after a run completed: its box still goes after the restart", async () => {
    piModel.push({ text: "Nothing to do." });
    const { parentId, childId } = await delegate("say hi");
    await waitFor("the run to complete", async () => (await api(`/api/threads/${childId}`)).body.status === "completed", 60_000);
    await crashAndRestart();
    await noLeak(parentId);
  }, 120_000);

  it("right after a stop of a running run: its processes still end after the restart", async () => {
    const before = piModel.requests.length;
    piModel.push({ toolCalls: [{ name: "bash", arguments: { command: "sleep 120" } }] }); // stopped before it asks again: no step of its is left for the next test
    const { childId } = await delegate("sleep");
    await waitFor("pi's command running", async () => piModel.requests.length > before + 0 && (await entries(childId)).some((e) => e.payload.type === "pi.tool_call"), 60_000);
    const box = (await api(`/api/threads/${childId}`)).body.boxId as string;
    const ref = (await api(`/api/sandboxes/${box}`)).body.providerRef as string;
    const marker = host.boxes.get(ref)!.marker;
    expect(findMarkedPids(marker).length).toBeGreaterThan(0);
    expect((await api(`/api/threads/${childId}/stop`, { method: "POST" })).status).toBeLessThan(300);
    await crashAndRestart();
    const t = (await api(`/api/threads/${childId}`)).body;
    expect([t.status, t.reason]).toEqual(["failed", "stopped"]);
    await waitFor("the run's processes to end", async () => findMarkedPids(marker).length === 0, 30_000)
      .catch(() => { throw new Error(`still running: ${findMarkedPids(marker).join(" ")}`); });
    await api(`/api/sandboxes/${box}`, { method: "DELETE" });
  }, 120_000);

  it("during delegations with Idempotency-Keys: retrying each after the restart makes one child, one run and no leaked box per key", async () => {
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const keys = Array.from({ length: 8 }, (_, i) => `crash-delegate-${Date.now()}-${i}`);
    for (let i = 0; i < keys.length; i++) piModel.push({ text: "Done." });
    const send = (key: string) => fetch(`${url()}/api/threads/${parent.id}/delegate`, {
      method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json", "idempotency-key": key },
      body: JSON.stringify({ task: "say done" }),
    }).then(async (r) => ({ status: r.status, body: await r.json().catch(() => null) as any })).catch(() => ({ status: 0, body: null }));
    const first = keys.map((k, i) => new Promise((r) => setTimeout(r, i * 40)).then(() => send(k)));
    await new Promise((r) => setTimeout(r, 150));
    await crashAndRestart();
    const before = await Promise.all(first);
    expect(before.some((r) => r.status !== 202)).toBe(true); // the crash cut some off
    const after = await Promise.all(keys.map(send));
    expect(after.map((r) => r.status).every((s) => s === 200 || s === 202), JSON.stringify(after)).toBe(true);
    for (const [i, r] of before.entries()) if (r.status === 202) expect(after[i].body.childThreadId).toBe(r.body.childThreadId);
    const children = (await api(`/api/threads?parent=${parent.id}&limit=100`)).body.threads as { id: string }[];
    expect(children.map((c) => c.id).sort()).toEqual(after.map((r) => r.body.childThreadId).sort());
    for (const c of children) await settled(c.id);
    await waitFor("a child_finished per child", async () => (await entries(parent.id)).filter((e) => e.payload.type === "signal.thread.child_finished").length >= keys.length);
    await waitFor("no box left on the sandbox host", async () => runBoxes().length === 0, 30_000);
    await new Promise((r) => setTimeout(r, 1000));
    expect((await entries(parent.id)).filter((e) => e.payload.type === "signal.thread.child_finished")).toHaveLength(keys.length);
  }, 120_000);

  it("during concurrent idempotent appends: retrying every request after the restart leaves each entry exactly once", async () => {
    const t = (await api("/api/threads", { method: "POST", json: {} })).body;
    const ids = Array.from({ length: 300 }, (_, i) => `m${i}`);
    const post = (id: string) => fetch(`${url()}/api/threads/${t.id}/entries`, {
      method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ id, payload: { type: "chat", text: `text ${id}` } }),
    }).then((r) => r.status).catch(() => 0);
    const inflight = ids.map((id, i) => new Promise((r) => setTimeout(r, i * 3)).then(() => post(id)));
    await new Promise((r) => setTimeout(r, 300));
    await crashAndRestart();
    const first = await Promise.all(inflight);
    expect(first.some((s) => s !== 201)).toBe(true); // the crash cut some off
    const retried = await Promise.all(ids.map(post));
    expect(retried.every((s) => s === 201)).toBe(true);
    const es = await entries(t.id);
    expect(es.map((e) => e.id).sort()).toEqual([...ids].sort());
    expect(es.every((e) => e.payload.text === `text ${e.id}`)).toBe(true);
  }, 90_000);

  it.each(["a plain stream", "a thread's stream"])("during appends with Producer headers to %s: a producer retrying from its last acknowledged seq leaves no gap and no duplicate", async (kind) => {
    const thread = kind === "a thread's stream";
    let path = `/api/stream/crash-producer-${Date.now()}`;
    if (thread) path = `/api/stream/thread-${(await api("/api/threads", { method: "POST", json: {} })).body.id}`;
    else expect((await fetch(`${url()}${path}`, { method: "PUT", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" } })).status).toBe(201);
    const producers = ["p0", "p1", "p2", "p3"];
    const N = 60;
    const acked = new Map(producers.map((p) => [p, -1]));
    const send = (p: string, seq: number) => fetch(`${url()}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json", "producer-id": p, "producer-epoch": "0", "producer-seq": String(seq) },
      body: JSON.stringify(thread ? [{ payload: { type: "chat", text: JSON.stringify({ p, seq }) } }] : { p, seq }),
    }).then((r) => r.status).catch(() => 0);
    let crashed = false;
    const loop = async (p: string) => {
      for (let seq = acked.get(p)! + 1; seq < N; seq++) {
        for (;;) {
          const s = await send(p, seq);
          if (s === 200 || s === 204) { acked.set(p, seq); break; }
          if (s !== 0 && s !== 503) throw new Error(`${p} seq ${seq}: ${s}`);
          await new Promise((r) => setTimeout(r, 200)); // server down: retry the same seq
        }
        if (!crashed && p === "p0" && seq === 15) { crashed = true; void crashAndRestart(); }
      }
    };
    await Promise.all(producers.map(loop));
    const read = (await (await fetch(`${url()}${path}?offset=-1`, { headers: { authorization: `Bearer ${token}` } })).json()) as any[];
    const body = (thread ? read.map((e) => JSON.parse(e.payload.text)) : read) as { p: string; seq: number }[];
    for (const p of producers) {
      expect(body.filter((m) => m.p === p).map((m) => m.seq)).toEqual(Array.from({ length: N }, (_, i) => i));
    }
  }, 90_000);

  it("with a WebSocket subscriber: reconnecting from its last offset gets every entry exactly once", async () => {
    const t = (await api("/api/threads", { method: "POST", json: {} })).body;
    const seen: Entry[] = [];
    const open = (offset: string) => new Promise<WebSocket>((resolve, reject) => {
      const ws = new WebSocket(`ws://127.0.0.1:${port}/api/threads/${t.id}/subscribe?offset=${offset}`, ["threadbox", `bearer.${token}`]);
      ws.addEventListener("message", (m) => { const e = JSON.parse(String(m.data)); if (e.offset) seen.push(e); });
      ws.addEventListener("open", () => resolve(ws));
      ws.addEventListener("error", () => reject(new Error("the subscribe socket failed")));
    });
    const closed = (ws: WebSocket) => new Promise<void>((r) => { if (ws.readyState === WebSocket.CLOSED) r(); else ws.addEventListener("close", () => r()); });
    let ws = await open("-1");
    const post = (i: number) => api(`/api/threads/${t.id}/entries`, { method: "POST", json: { id: `w${i}`, payload: { type: "chat", text: `w${i}` } } });
    for (let i = 0; i < 20; i++) await post(i);
    await waitFor("the first 20 entries", async () => seen.length >= 20);
    const gone = closed(ws);
    await crashAndRestart();
    await gone;
    for (let i = 20; i < 30; i++) await post(i);
    ws = await open(seen.at(-1)!.offset);
    for (let i = 30; i < 40; i++) await post(i);
    await waitFor("all 40 entries", async () => seen.length >= 40);
    await new Promise((r) => setTimeout(r, 500));
    ws.close();
    expect(seen.map((e) => e.id)).toEqual(Array.from({ length: 40 }, (_, i) => `w${i}`));
  }, 90_000);

  it("with threadbox tail following: it reconnects after the restart and prints every entry exactly once", async () => {
    const t = (await api("/api/threads", { method: "POST", json: {} })).body;
    const tail = spawn(process.execPath, [join(tree.dir, "cli", "threadbox.mjs"), "--json", "tail", t.id], {
      env: { ...process.env, THREADBOX_URL: url(), THREADBOX_TOKEN: token, THREADBOX_CONFIG: join(tempDir("threadbox-crash-cli-"), "config.json") },
    });
    let out = "";
    tail.stdout.on("data", (d) => { out += d; });
    const printed = () => out.split("\n").filter(Boolean).map((l) => JSON.parse(l).id as string);
    try {
      const post = (i: number) => api(`/api/threads/${t.id}/entries`, { method: "POST", json: { id: `c${i}`, payload: { type: "chat", text: `c${i}` } } });
      for (let i = 0; i < 10; i++) await post(i);
      await waitFor("tail printing the first 10", async () => printed().length >= 10);
      await crashAndRestart();
      for (let i = 10; i < 20; i++) await post(i);
      await waitFor("tail printing all 20", async () => printed().length >= 20, 40_000);
      await new Promise((r) => setTimeout(r, 500));
      expect(printed()).toEqual(Array.from({ length: 20 }, (_, i) => `c${i}`));
    } finally {
      tail.kill("SIGKILL");
    }
  }, 90_000);
});

describe("kill -9 of the npm run serve process alone", () => {
  it("leaves its workerd serving; a second npm run serve on that state refuses to start and names the pid to stop", async () => {
    const t = (await api("/api/threads", { method: "POST", json: {} })).body;
    const workerdPid = Number(/plain workerd \(pid (\d+)/.exec(server!.output())![1]);
    process.kill(server!.child.pid!, "SIGKILL");
    await server!.exited;
    // It serves on: the process was not what was killed.
    expect((await api(`/api/threads/${t.id}`)).status).toBe(200);
    const other = await freePort();
    const second = spawn(process.execPath, [join(tree.dir, "scripts", "serve.mjs"), "--no-build"], {
      cwd: tree.dir, detached: true, env: { ...process.env, PATH: nodePath(), NO_COLOR: "1", ...env, PORT: String(other) },
    });
    let out = "";
    second.stdout.on("data", (d) => { out += d; });
    second.stderr.on("data", (d) => { out += d; });
    const code = await new Promise((r) => {
      const timer = setTimeout(() => { out += "[still running after 30 s: killed]"; process.kill(-second.pid!, "SIGKILL"); }, 30_000);
      second.on("exit", (c, sig) => { clearTimeout(timer); r(c ?? sig); });
    });
    try { process.kill(workerdPid, 0); } catch { throw new Error(`the first workerd is gone: ${out}`); }
    expect([code, out]).toEqual([1, `npm run serve: the state directory ${env.THREADBOX_STATE_DIR} is in use by workerd (pid ${workerdPid}): another npm run serve, or one left serving when its npm run serve was killed alone; stop it (kill ${workerdPid}) first, or set THREADBOX_STATE_DIR to another directory\n`]);
    // Once it is stopped, the state serves again, nothing lost.
    process.kill(workerdPid, "SIGKILL");
    await waitFor("the orphaned workerd to go", async () => { try { process.kill(workerdPid, 0); return false; } catch { return true; } }, 10_000);
    server = await serve(["--no-build"]);
    expect((await api(`/api/threads/${t.id}`)).body.id).toBe(t.id);
  }, 90_000);
});

describe("a restart of the local sandbox host", () => {
  async function restartHost() {
    const { port: hostPort, root } = host;
    await host.close();
    host = await startSandboxHost({ port: hostPort, apiKey: SANDBOX_KEY, root });
  }

  it("under a running delegated run: the run fails as orphaned with a reason, the parent hears once, no box is left", async () => {
    const before = piModel.requests.length;
    piModel.push({ hang: true });
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const childId = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "wait" } })).body.childThreadId as string;
    await waitFor("pi's model call", async () => piModel.requests.length > before, 60_000);
    await restartHost();
    const t = await waitFor("the run to settle", async () => {
      const r = (await api(`/api/threads/${childId}`)).body;
      return r.status === "failed" || r.status === "completed" ? r : null;
    }, 60_000);
    expect([t.status, t.reason]).toEqual(["failed", "pi_session_orphaned"]);
    expect(t.detail).toBeTruthy();
    await waitFor("the parent's child_finished", async () => (await entries(parent.id)).some((e) => e.payload.type === "signal.thread.child_finished"));
    await new Promise((r) => setTimeout(r, 1000));
    expect((await entries(parent.id)).filter((e) => e.payload.type === "signal.thread.child_finished")).toHaveLength(1);
    expect(runBoxes()).toEqual([]);
  }, 120_000);

  it("under a shared-box exec: the command fails visibly, and the next exec gets a working box", async () => {
    const shared = await api("/api/environments", { method: "POST", json: { name: "crash-shared", sharedBox: true, provider: "daytona" } });
    expect(shared.status).toBe(201);
    const warm = await api(`/api/environments/${shared.body.id}/exec`, { method: "POST", json: { command: "echo warm" } });
    expect([warm.status, warm.body.output]).toEqual([200, "warm\n"]);
    const t = (await api("/api/threads", { method: "POST", json: {} })).body;
    const running = api(`/api/environments/${shared.body.id}/exec`, { method: "POST", json: { command: "echo started; sleep 30; echo finished", threadId: t.id, timeoutSec: 60 } });
    await waitFor("the command's first output", async () => (await entries(t.id)).some((e) => e.payload.type === "signal.exec.output"));
    const restartedAt = Date.now();
    await restartHost();
    const cut = await running;
    // The command dies with its box: its caller hears so at once, not when the command would have ended.
    expect(Date.now() - restartedAt).toBeLessThan(10_000);
    expect(cut.status, JSON.stringify(cut.body)).not.toBe(200);
    expect(cut.body.error?.message).toBeTruthy();
    expect((await entries(t.id)).map((e) => e.payload.text)).toEqual(["started\n"]);
    const again = await waitFor("a working shared box", async () => {
      const r = await api(`/api/environments/${shared.body.id}/exec`, { method: "POST", json: { command: "echo again" } });
      return r.status === 200 ? r : null;
    }, 60_000);
    expect(again.body.output).toBe("again\n");
    expect(host.boxes.has((await api(`/api/sandboxes/${again.body.boxId}`)).body.providerRef)).toBe(true);
    await api(`/api/sandboxes/${again.body.boxId}`, { method: "DELETE" });
  }, 120_000);
});
