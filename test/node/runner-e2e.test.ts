/**
 * End to end, box side: the real pi CLI with the mirror extension, run by the runner, against a
 * scripted OpenAI-compatible model and the reference Durable Streams server as the thread.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { startPausableProxy } from "../support/pausable-proxy";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { DurableStreamTestServer } from "@durable-streams/server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rebuildPiSession } from "../../src/sandbox/harness/pi-session";
import { readThread } from "../../src/runner/stream-writer";
import { startModelServer, type ModelServer, type ScriptStep } from "../support/model-server";
import { startSandboxHost } from "../../sandbox-host/server.mjs";
import { createDaytonaProvider } from "../../src/sandbox/daytona-provider";
import { runnerLaunch } from "../../src/sandbox/harness";
import { randomBytes } from "node:crypto";
import { entryInputSchema } from "../../src/entries/schema";
import { MAX_REASON_LENGTH } from "../../src/domain/statuses";

const ROOT = join(__dirname, "..", "..");
const RUNNER = join(ROOT, "dist/runner/runner.mjs");
const MIRROR = join(ROOT, "dist/runner/mirror.mjs");
const BIN = join(ROOT, "node_modules/.bin");

let streams: DurableStreamTestServer;
let streamBase: string; // http://127.0.0.1:port/v1/stream
let tmp: string;
let threadSeq = 0;

beforeAll(async () => {
  execFileSync(process.execPath, [join(ROOT, "scripts/build-runner.mjs")], { cwd: ROOT, stdio: "pipe" });
  streams = new DurableStreamTestServer({ port: 0, host: "127.0.0.1" });
  const url = await streams.start();
  streamBase = `${url}/v1/stream`;
  tmp = mkdtempSync(join(tmpdir(), "threadbox-runner-"));
});

afterAll(async () => {
  await streams?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

async function newThread(base = streamBase): Promise<string> {
  const id = `t${Date.now().toString(36)}${threadSeq++}`;
  const res = await fetch(`${streamBase}/thread-${id}`, { method: "PUT", headers: { "content-type": "application/json" } });
  expect(res.status).toBe(201);
  void base;
  return id;
}

async function post(threadId: string, entry: unknown) {
  const res = await fetch(`${streamBase}/thread-${threadId}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(entry),
  });
  expect(res.ok).toBe(true);
}

async function entriesOf(threadId: string) {
  const all = (await readThread(`${streamBase}/thread-${threadId}`, undefined)) as any[];
  // Artifacts (the run's files) have their own tests; these follow the run's own entries.
  return all.filter((e) => e.payload?.type !== "signal.heartbeat" && !String(e.payload?.type).startsWith("artifact."));
}

function agentDir(model: ModelServer): string {
  const dir = mkdtempSync(join(tmp, "agent-"));
  writeFileSync(
    join(dir, "models.json"),
    JSON.stringify({
      providers: {
        local: { baseUrl: model.baseUrl, api: "openai-completions", apiKey: "test-key", models: [{ id: "scripted-model" }] },
      },
    }),
  );
  writeFileSync(join(dir, "settings.json"), JSON.stringify({ retry: { enabled: false } }));
  return dir;
}

interface RunResult {
  code: number | null;
  stderr: string;
  cwd: string;
  agentDir: string;
}

function startRunner(opts: {
  threadId: string;
  model: ModelServer;
  prompt: string;
  streamUrl?: string;
  cwd?: string;
  agentDir?: string;
  session?: string;
  env?: Record<string, string>;
  /** runner options before the harness's own (`--bin`), and arguments after `--` for the harness */
  runnerArgs?: string[];
  harnessArgs?: string[];
}): { child: ChildProcess; done: Promise<RunResult> } {
  const cwd = opts.cwd ?? mkdtempSync(join(tmp, "work-"));
  const adir = opts.agentDir ?? agentDir(opts.model);
  const args = [RUNNER, "--harness", "pi", "--mirror", MIRROR, "--model", "local/scripted-model", "--prompt", opts.prompt];
  if (opts.session) args.push("--session", opts.session);
  args.push(...(opts.runnerArgs ?? []));
  if (opts.harnessArgs) args.push("--", ...opts.harnessArgs);
  const child = spawn(process.execPath, args, {
    cwd,
    stdio: ["ignore", "ignore", "pipe"],
    env: {
      ...process.env,
      PATH: `${BIN}:${dirname(process.execPath)}:${process.env.PATH}`,
      PI_CODING_AGENT_DIR: adir,
      PI_OFFLINE: "1",
      THREADBOX_THREAD_ID: opts.threadId,
      THREADBOX_STREAM_URL: opts.streamUrl ?? streamBase,
      THREADBOX_STREAM_TOKEN_FILE: tokenFile("test-token"),
      THREADBOX_RUN_ID: `run-${opts.threadId}-${Date.now().toString(36)}`,
      THREADBOX_HEARTBEAT_MS: "500",
      THREADBOX_FLUSH_TIMEOUT_MS: "20000",
      ...(opts.env ?? {}),
    },
  });
  let stderr = "";
  child.stderr!.on("data", (d) => (stderr += d));
  const done = new Promise<RunResult>((resolve) =>
    child.on("close", (code) => resolve({ code, stderr, cwd, agentDir: adir })),
  );
  return { child, done };
}

/** The stream token as the launch hands it over: a file the runner reads and removes. */
function tokenFile(token: string): string {
  const file = join(mkdtempSync(join(tmp, "token-")), "stream-token-x");
  writeFileSync(file, token, { mode: 0o600 });
  return file;
}

const types = (es: any[]) => es.map((e) => (e.payload.type === "signal.thread.status_changed" ? `status:${e.payload.status}` : e.payload.type));

function expectNoDuplicateIds(es: any[]) {
  const ids = es.map((e) => e.id).filter(Boolean);
  expect(new Set(ids).size).toBe(ids.length);
}

const toolThenAnswer = (file = "out.txt"): ScriptStep[] => [
  { toolCalls: [{ name: "bash", arguments: { command: `echo hello > ${file} && echo written` } }] },
  { text: "All done." },
];

describe("runner + mirror with the real pi", () => {
  let firstThread: string;
  let firstRun: RunResult;

  it("mirrors a tool call, its result and the final answer, then posts one completed", async () => {
    const model = await startModelServer(toolThenAnswer());
    try {
      firstThread = await newThread();
      await post(firstThread, { id: `${firstThread}:prompt`, payload: { type: "chat", text: "write the file" } });
      const { done } = startRunner({ threadId: firstThread, model, prompt: "write the file" });
      firstRun = await done;
      expect(firstRun.code, firstRun.stderr).toBe(0);
      const es = await entriesOf(firstThread);
      expect(types(es)).toEqual([
        "chat",
        "pi.user",
        "pi.assistant",
        "pi.tool_call",
        "pi.tool_result",
        "pi.assistant",
        "status:completed",
      ]);
      expectNoDuplicateIds(es);
      expect(es[2].payload.stopReason).toBe("toolUse");
      expect(es[3].payload).toMatchObject({ name: "bash", args: { command: "echo hello > out.txt && echo written" } });
      expect(es[4].payload).toMatchObject({ output: "written\n", isError: false });
      expect(es[5].payload).toMatchObject({ text: "All done.", stopReason: "stop", model: "scripted-model" });
      expect(es[6].id).toMatch(/:finished:run-/);
      expect(readFileSync(join(firstRun.cwd, "out.txt"), "utf8")).toBe("hello\n");
      // the reference server stores heartbeats (the worker only refreshes liveness with them)
      const raw = (await readThread(`${streamBase}/thread-${firstThread}`, undefined)) as any[];
      expect(raw.some((e) => e.payload?.type === "signal.heartbeat" && !e.id)).toBe(true);
    } finally {
      await model.close();
    }
  });

  it("a long bash call's output reaches the thread while it runs, secrets redacted; a quick one's only in its result", async () => {
    // The slow call prints two lines, then waits for the test to have seen live output before the
    // rest (a fixed pace lost to a slow poll: the call had ended by the time it looked).
    const slow = 'for i in 1 2; do echo "line$i key=$LIVE_SECRET"; sleep 0.7; done; while [ ! -f go ]; do sleep 0.05; done; for i in 3 4; do echo "line$i key=$LIVE_SECRET"; done';
    const model = await startModelServer([
      { toolCalls: [{ name: "bash", arguments: { command: "echo quick" } }] },
      { toolCalls: [{ name: "bash", arguments: { command: slow } }] },
      { text: "Done." },
    ]);
    const cwd = mkdtempSync(join(tmp, "work-"));
    try {
      const threadId = await newThread();
      const { done } = startRunner({ threadId, model, prompt: "count", cwd, env: { THREADBOX_SECRET_NAMES: "LIVE_SECRET", LIVE_SECRET: "s3cret-live-value" } });
      // Watched while the run goes: live lines land before the call's result does.
      let seenLive: string[] = [];
      let resultsWhenLive = -1;
      for (const t0 = Date.now(); resultsWhenLive < 0 && Date.now() - t0 < 60_000;) {
        const es = await entriesOf(threadId);
        seenLive = es.filter((e) => e.payload.type === "signal.exec.output").map((e) => e.payload.text);
        if (seenLive.length > 0) resultsWhenLive = es.filter((e) => e.payload.type === "pi.tool_result").length;
        if (es.some((e) => e.payload.type === "signal.thread.status_changed")) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      writeFileSync(join(cwd, "go"), "");
      expect(resultsWhenLive).toBe(1); // the quick call's result only: the slow one was still running
      const run = await done;
      expect(run.code, run.stderr).toBe(0);
      const es = await entriesOf(threadId);
      expectNoDuplicateIds(es);
      const calls = es.filter((e) => e.payload.type === "pi.tool_call");
      const live = es.filter((e) => e.payload.type === "signal.exec.output");
      // Only the slow call is followed, under its own call id; the quick one's output is in its result alone.
      expect(new Set(live.map((e) => e.payload.execId))).toEqual(new Set([calls[1].payload.toolCallId]));
      expect(live.map((e) => e.payload.text).join("")).toBe([1, 2, 3, 4].map((i) => `line${i} key=[redacted]\n`).join(""));
      expect(JSON.stringify(es)).not.toContain("s3cret-live-value");
      const slowResult = es.findIndex((e) => e.payload.type === "pi.tool_result" && e.payload.toolCallId === calls[1].payload.toolCallId);
      expect(es.findIndex((e) => e.payload.type === "signal.exec.output")).toBeLessThan(slowResult);
    } finally {
      writeFileSync(join(cwd, "go"), "");
      await model.close();
    }
  });

  it("resume: a session rebuilt from the thread loads in pi and the model sees the first turn", async () => {
    expect(firstThread).toBeTruthy();
    const model = await startModelServer([{ text: "Second answer." }]);
    try {
      // the control plane: claim the new run, post the follow-up prompt, rebuild the session
      await post(firstThread, { payload: { type: "signal.thread.status_changed", status: "running" } });
      await post(firstThread, { payload: { type: "chat", text: "now say more" } });
      const before = await entriesOf(firstThread);
      const freshCwd = mkdtempSync(join(tmp, "fresh-box-"));
      const rebuilt = rebuildPiSession(before, { cwd: freshCwd, model: { provider: "local", modelId: "scripted-model" } });
      expect(rebuilt.pendingPrompt).toBe("now say more");
      expect(rebuilt.messageCount).toBe(4); // user, assistant(tool call), tool result, assistant
      const sessionFile = join(freshCwd, "rebuilt.jsonl");
      writeFileSync(sessionFile, rebuilt.jsonl);

      const { done } = startRunner({
        threadId: firstThread,
        model,
        prompt: rebuilt.pendingPrompt!,
        cwd: freshCwd,
        session: sessionFile,
        env: { THREADBOX_MIRROR_NEXT_INDEX: String(rebuilt.messageCount) },
      });
      const run = await done;
      expect(run.code, run.stderr).toBe(0);

      expect(model.requests).toHaveLength(1);
      const msgs = model.requests[0].messages;
      const flat = JSON.stringify(msgs);
      expect(flat).toContain("write the file");
      expect(flat).toContain("echo hello > out.txt");
      expect(flat).toContain("written\\n");
      expect(flat).toContain("All done.");
      const roles = msgs.map((m: any) => m.role);
      expect(roles).toEqual(["system", "user", "assistant", "tool", "assistant", "user"]);
      expect(msgs[msgs.length - 1].content).toEqual(expect.arrayContaining([expect.objectContaining({ text: "now say more" })]));

      const after = await entriesOf(firstThread);
      const added = after.slice(before.length);
      expect(types(added)).toEqual(["pi.user", "pi.assistant", "status:completed"]);
      expect(added[1].payload.text).toBe("Second answer.");
      expectNoDuplicateIds(after);
      // the resumed run's ids are keyed by the rebuilt session and continue its index
      expect(added[0].id).toBe(`${firstThread}:m:${rebuilt.sessionId}:${rebuilt.messageCount}`);
    } finally {
      await model.close();
    }
  });

  it("resume on the same box with another model: pi continues its own session file and asks the new model", async () => {
    const model = await startModelServer([{ text: "First answer." }, { text: "Second answer." }]);
    try {
      const threadId = await newThread();
      const adir = agentDir(model);
      const models = JSON.parse(readFileSync(join(adir, "models.json"), "utf8"));
      models.providers.local.models.push({ id: "other-model" });
      writeFileSync(join(adir, "models.json"), JSON.stringify(models));
      const cwd = mkdtempSync(join(tmp, "work-"));
      const first = await startRunner({ threadId, model, prompt: "remember PLUM", cwd, agentDir: adir }).done;
      expect(first.code, first.stderr).toBe(0);
      const sessionsDir = join(adir, "sessions");
      const files = readdirSync(sessionsDir, { recursive: true }).map(String).filter((f) => f.endsWith(".jsonl"));
      expect(files).toHaveLength(1);
      const second = await startRunner({ threadId, model, prompt: "which word?", cwd, agentDir: adir, session: join(sessionsDir, files[0]), runnerArgs: ["--model", "local/other-model"] }).done;
      expect(second.code, second.stderr).toBe(0);
      expect(model.requests.map((r: any) => r.body.model)).toEqual(["scripted-model", "other-model"]);
      expect(JSON.stringify(model.requests[1].messages)).toContain("remember PLUM");
      const es = await entriesOf(threadId);
      expect(es.filter((e) => e.payload.type === "pi.assistant").map((e) => [e.payload.text, e.payload.model])).toEqual([["First answer.", "scripted-model"], ["Second answer.", "other-model"]]);
      expectNoDuplicateIds(es);
    } finally {
      await model.close();
    }
  });

  it("model error: the mirror posts pi_failed and the runner does not post a second one", async () => {
    const model = await startModelServer([{ error: 500, message: "upstream exploded" }]);
    try {
      const threadId = await newThread();
      const { done } = startRunner({ threadId, model, prompt: "do it" });
      const run = await done;
      const es = await entriesOf(threadId);
      expect(types(es)).toEqual(["pi.user", "pi.assistant", "status:pi_failed"]);
      expect(es[1].payload.stopReason).toBe("error");
      expect(es[2].payload.reason).toBe("the model API answered HTTP 500: upstream exploded"); // not the provider's JSON body
      expect(run.stderr).toContain("already on the thread");
      expect(run.stderr).toContain("[threadbox runner]");
    } finally {
      await model.close();
    }
  });

  it("a model error body pi-ai cut through a secret: what is left of it before pi-ai's cut marker is redacted, in the entry and the reason", async () => {
    const key = "sk-gateway-key-0123456789abcdef";
    // pi-ai keeps the first 4000 characters of the error body ({"message":"… is its first 12): the key begins 12 before the cut.
    const model = await startModelServer([{ error: 500, message: `${"y".repeat(4000 - 12 - 12)}${key} was refused ${"z".repeat(100)}` }]);
    try {
      const threadId = await newThread();
      await startRunner({ threadId, model, prompt: "do it", env: { GATEWAY_KEY: key, THREADBOX_SECRET_NAMES: "GATEWAY_KEY" } }).done;
      const es = await entriesOf(threadId);
      expect(types(es)).toEqual(["pi.user", "pi.assistant", "status:pi_failed"]);
      expect(es[1].payload.errorMessage).toMatch(/y\[redacted\]\.\.\. \[truncated \d+ chars\]$/);
      expect(es[2].payload.reason).toMatch(/y\[redacted\]\.\.\. \[truncated \d+ chars\]/);
      expect(JSON.stringify(es)).not.toContain(key.slice(0, 12));
    } finally {
      await model.close();
    }
  });

  it("a model error longer than a reason may be: the mirror redacts it before it cuts it to the bound", async () => {
    const key = "sk-gateway-key-0123456789abcdef";
    // An error event mid-stream: pi-ai passes its message on whole. The reason keeps 9,999
    // characters: the key begins 8 before that.
    const message = `${"y".repeat(9_999 - 8)}${key} was refused ${"z".repeat(100)}`;
    const model = await startModelServer([{ raw: `data: ${JSON.stringify({ error: { message } })}\n\n`, contentType: "text/event-stream" }]);
    try {
      const threadId = await newThread();
      await startRunner({ threadId, model, prompt: "do it", env: { GATEWAY_KEY: key, THREADBOX_SECRET_NAMES: "GATEWAY_KEY" } }).done;
      const es = await entriesOf(threadId);
      const finished = es.filter((e) => e.payload.type === "signal.thread.status_changed");
      expect(finished.map((e) => e.payload.status)).toEqual(["pi_failed"]);
      // The cut goes through the mark the key left.
      expect(String(finished[0].payload.reason)).toMatch(/^y{9991}\[redacte…$/);
      expect(JSON.stringify(es)).not.toContain(key.slice(0, 4));
    } finally {
      await model.close();
    }
  });

  it("pi without an API key: the run fails with pi's own message on the thread, not a bare exit code", async () => {
    const model = await startModelServer([]);
    try {
      const adir = mkdtempSync(join(tmp, "agent-"));
      writeFileSync(join(adir, "models.json"), JSON.stringify({
        providers: { local: { baseUrl: model.baseUrl, api: "openai-completions", models: [{ id: "scripted-model" }] } },
      }));
      writeFileSync(join(adir, "settings.json"), JSON.stringify({ retry: { enabled: false } }));
      const threadId = await newThread();
      const run = await startRunner({ threadId, model, prompt: "do it", agentDir: adir }).done;
      expect(run.code).toBe(1);
      const es = await entriesOf(threadId);
      const finished = es.filter((e) => e.payload.type === "signal.thread.status_changed");
      expect(finished).toHaveLength(1);
      expect(finished[0].payload.status).toBe("pi_failed");
      expect(finished[0].payload.reason).toBe("harness exited with code 1: No API key found for local.");
      expect(finished[0].payload.runId).toMatch(/^run-/);
      const stderr = es.find((e) => e.payload.type === "signal.run.stderr");
      expect(stderr?.payload.text).toContain("No API key found for local.");
      expect(stderr?.payload.truncated).toBe(false);
      expect(model.requests).toHaveLength(0);
    } finally {
      await model.close();
    }
  });

  it("a model URL nobody answers: the failure names the URL", async () => {
    const model = await startModelServer([]);
    const url = model.baseUrl;
    await model.close(); // nothing listens there any more
    const threadId = await newThread();
    const run = await startRunner({ threadId, model: { ...model, baseUrl: url } as ModelServer, prompt: "do it" }).done;
    expect(run.code).not.toBeNull();
    const es = await entriesOf(threadId);
    const finished = es.filter((e) => e.payload.type === "signal.thread.status_changed");
    expect(finished).toHaveLength(1);
    expect(finished[0].payload.status).toBe("pi_failed");
    expect(finished[0].payload.reason).toContain(`at ${url}`);
    expect(finished[0].payload.reason).toContain("local/scripted-model");
  });

  it("pi killed with SIGKILL: the runner posts pi_failed", async () => {
    const model = await startModelServer([{ hang: true }]);
    try {
      const threadId = await newThread();
      const { child, done } = startRunner({ threadId, model, prompt: "take forever" });
      // Killed once its prompt is on the thread: pi posts it about when it asks the model, and a
      // post still in flight when pi dies is lost with it.
      const posted = async () => (await entriesOf(threadId)).some((e) => e.payload.type === "pi.user");
      const t0 = Date.now();
      while ((model.requests.length === 0 || !(await posted())) && Date.now() - t0 < 20_000) await new Promise((r) => setTimeout(r, 50));
      expect(model.requests.length).toBe(1);
      const pids = execFileSync("ps", ["-o", "pid=", "--ppid", String(child.pid)], { encoding: "utf8" })
        .split("\n")
        .map((s) => Number(s.trim()))
        .filter(Boolean);
      expect(pids.length).toBeGreaterThan(0);
      for (const pid of pids) process.kill(pid, "SIGKILL");
      const run = await done;
      expect(run.code).toBe(137);
      const es = await entriesOf(threadId);
      expect(types(es)).toEqual(["pi.user", "status:pi_failed"]);
      expect(es[1].payload.reason).toContain("SIGKILL");
    } finally {
      await model.close();
    }
  });

  it("an external SIGTERM to the runner stops pi cleanly and posts stopped", async () => {
    const model = await startModelServer([{ hang: true }]);
    try {
      const threadId = await newThread();
      const { child, done } = startRunner({ threadId, model, prompt: "wait" });
      const t0 = Date.now();
      while (model.requests.length === 0 && Date.now() - t0 < 20_000) await new Promise((r) => setTimeout(r, 50));
      child.kill("SIGTERM");
      const run = await done;
      expect(run.code).toBe(143);
      const es = await entriesOf(threadId);
      expect(types(es)).toEqual(["pi.user", "status:stopped"]);
      expect(run.stderr).toContain("harness exited: code=143");
    } finally {
      await model.close();
    }
  });

  it("a tool call that writes megabytes: its entries land cut to a size the thread takes, say so, and the run completes", async () => {
    const content = `${"0123456789abcdef".repeat(64)}\n`.repeat(2048); // 2 MiB + 2 KiB
    const model = await startModelServer([
      { toolCalls: [{ name: "write", arguments: { path: "big.txt", content } }] },
      { text: "Wrote it." },
    ]);
    try {
      const threadId = await newThread();
      const { done } = startRunner({ threadId, model, prompt: "write a big file" });
      const run = await done;
      expect(run.code).toBe(0);
      expect(readFileSync(join(run.cwd, "big.txt"), "utf8")).toBe(content);
      const es = await entriesOf(threadId);
      expect(types(es)).toEqual(["pi.user", "pi.assistant", "pi.tool_call", "pi.tool_result", "pi.assistant", "status:completed"]);
      // The worker refuses a body over 1 MiB: an entry that large would never reach the thread.
      for (const e of es) expect(Buffer.byteLength(JSON.stringify(e))).toBeLessThan(1024 * 1024);
      const call = es.find((e) => e.payload.type === "pi.tool_call")!;
      expect(call.payload.truncated).toBe(true);
      expect(call.payload.args.path).toBe("big.txt");
      expect(call.payload.args.content.startsWith("0123456789abcdef")).toBe(true);
      expect(call.payload.args.content).toMatch(/cut by threadbox: \d+ of 2099200 characters\]$/);
      expect(es[1].payload.truncated).toBe(true);
    } finally {
      await model.close();
    }
  });

  it("pi frozen mid-run: the heartbeat stops with it, so the thread's silence alarm can settle the run", async () => {
    const model = await startModelServer([{ hang: true }]);
    const heartbeats = async (id: string) =>
      ((await readThread(`${streamBase}/thread-${id}`, undefined)) as any[]).filter((e) => e.payload?.type === "signal.heartbeat").length;
    let pids: number[] = [];
    try {
      const threadId = await newThread();
      const { child, done } = startRunner({ threadId, model, prompt: "think" });
      const t0 = Date.now();
      while (model.requests.length === 0 && Date.now() - t0 < 20_000) await new Promise((r) => setTimeout(r, 50));
      expect(model.requests.length).toBe(1);
      pids = execFileSync("ps", ["-o", "pid=", "--ppid", String(child.pid)], { encoding: "utf8" })
        .split("\n").map((s) => Number(s.trim())).filter(Boolean);
      expect(pids.length).toBeGreaterThan(0);
      // A pi whose event loop no longer runs (here: stopped) does no work and posts nothing.
      for (const pid of pids) process.kill(pid, "SIGSTOP");
      await new Promise((r) => setTimeout(r, 1_000));
      const before = await heartbeats(threadId);
      await new Promise((r) => setTimeout(r, 2_500)); // 5 beats at THREADBOX_HEARTBEAT_MS=500
      expect(await heartbeats(threadId)).toBe(before);
      for (const pid of pids) process.kill(pid, "SIGCONT");
      pids = [];
      child.kill("SIGTERM");
      await done;
    } finally {
      for (const pid of pids) try { process.kill(pid, "SIGCONT"); } catch { /* gone */ }
      await model.close();
    }
  });

  it("the runaway guard ends a hung pi: SIGTERM, then pi_failed", async () => {
    const model = await startModelServer([{ hang: true }]);
    try {
      const threadId = await newThread();
      const { done } = startRunner({ threadId, model, prompt: "hang", env: { THREADBOX_RUNAWAY_MS: "1500", THREADBOX_KILL_GRACE_MS: "3000" } });
      const run = await done;
      const es = await entriesOf(threadId);
      expect(types(es)).toEqual(["pi.user", "status:pi_failed"]);
      expect(es[1].payload.reason).toContain("runaway");
      expect(run.code).toBe(143);
    } finally {
      await model.close();
    }
  });

  /** Live processes whose command line has `marker` (zombies, already dead, excluded). */
  const processesWith = (marker: string) => readdirSync("/proc").filter((d) => /^\d+$/.test(d)).filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(marker) && !/^\S+ \S+ Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8").replace(/\(.*\)/, "x"));
    } catch {
      return false;
    }
  });
  /** A bash tool call that leaves a process running after the call (pi starts each command in its own session). */
  const leaveBehind = (marker: string): ScriptStep => ({ toolCalls: [{ name: "bash", arguments: { command: `nohup sleep ${marker} >/dev/null 2>&1 & echo started` } }] });

  it("a process a tool left running does not outlive the run: gone once the run completes, is stopped, or pi is killed", async () => {
    for (const ending of ["completes", "stopped", "pi killed"] as const) {
      const marker = `1000.${process.pid}${Date.now() % 100000}`;
      // The run's last answer waits until the test has seen the process: a run that completed
      // (and killed it) before the first look would leave nothing to see.
      let seen!: () => void;
      const until = new Promise<void>((r) => { seen = r; });
      const model = await startModelServer([leaveBehind(marker), ending === "completes" ? { text: "Left it running.", until } : { hang: true }]);
      try {
        const threadId = await newThread();
        const { child, done } = startRunner({ threadId, model, prompt: "start something in the background" });
        const t0 = Date.now();
        while ((model.requests.length < 2 || processesWith(marker).length === 0) && Date.now() - t0 < 30_000) await new Promise((r) => setTimeout(r, 50));
        expect(processesWith(marker)).toHaveLength(1);
        seen();
        if (ending === "pi killed") {
          const pids = execFileSync("ps", ["-o", "pid=", "--ppid", String(child.pid)], { encoding: "utf8" }).split("\n").map((x) => Number(x.trim())).filter(Boolean);
          for (const pid of pids) process.kill(pid, "SIGKILL");
        }
        if (ending === "stopped") child.kill("SIGTERM");
        const run = await done;
        expect(run.code).toBe({ completes: 0, stopped: 143, "pi killed": 137 }[ending]);
        expect([ending, processesWith(marker)]).toEqual([ending, []]);
        expect(run.stderr).toContain("process(es) pi left running");
      } finally {
        for (const pid of processesWith(marker)) try { process.kill(Number(pid), "SIGKILL"); } catch { /* gone */ }
        await model.close();
      }
    }
  }, 180_000);

  it("a pi that never gets as far as its mirror is stopped after THREADBOX_START_TIMEOUT_MS, not beaten for until the runaway guard", async () => {
    const model = await startModelServer([{ text: "never asked" }]);
    // A harness that hangs before writing anything, as pi stuck before its extensions load.
    const bin = join(mkdtempSync(join(tmp, "stuck-pi-")), "pi");
    writeFileSync(bin, "#!/bin/sh\nexec sleep 600\n", { mode: 0o755 });
    try {
      const threadId = await newThread();
      const t0 = Date.now();
      const { child, done } = startRunner({ threadId, model, prompt: "hello", runnerArgs: ["--bin", bin], env: { THREADBOX_START_TIMEOUT_MS: "1500" } });
      const run = await Promise.race([done, new Promise<null>((r) => setTimeout(() => r(null), 20_000))]);
      if (!run) {
        // The runner stops the stuck harness with it (SIGTERM is a stop).
        child.kill("SIGTERM");
        await done;
      }
      expect(run, "the runner was still running 20 s after a 1.5 s start timeout").not.toBeNull();
      expect(Date.now() - t0).toBeGreaterThan(1_400);
      expect(run!.code).toBe(143);
      const es = await entriesOf(threadId);
      expect(types(es)).toEqual(["status:pi_failed"]);
      expect(es[0].payload.reason).toContain("the harness did not start: no output within 1500 ms (THREADBOX_START_TIMEOUT_MS)");
      expect(model.requests).toHaveLength(0);
    } finally {
      await model.close();
    }
  });

  it("pi that finished its work but hangs on the way out is terminated after a grace period; the run still completes", async () => {
    const model = await startModelServer([{ text: "Finished." }]);
    try {
      const threadId = await newThread();
      const adir = agentDir(model);
      mkdirSync(join(adir, "extensions"), { recursive: true });
      // An extension stuck in its shutdown: pi never exits on its own once its input closes, and
      // (its event loop blocked) does not even take SIGTERM.
      writeFileSync(join(adir, "extensions", "stuck.ts"), `export default function (pi) { pi.on("session_shutdown", () => { const end = Date.now() + 60_000; while (Date.now() < end); }); }\n`);
      const { done } = startRunner({ threadId, model, prompt: "say done", agentDir: adir, env: { THREADBOX_FLUSH_TIMEOUT_MS: "1000", THREADBOX_KILL_GRACE_MS: "2000" } });
      const run = await done;
      expect(run.stderr).toContain("closing its input");
      expect(run.stderr).toMatch(/pi did not exit \d+ ms after its input closed; terminating it/);
      expect(run.code, run.stderr).toBe(0);
      const es = await entriesOf(threadId);
      expect(types(es)).toEqual(["pi.user", "pi.assistant", "status:completed"]);
    } finally {
      await model.close();
    }
  });

  it("the stream unreachable mid-run: every entry still lands once, in order", async () => {
    const proxy = await startPausableProxy(new URL(streamBase).port);
    const model = await startModelServer([
      { toolCalls: [{ name: "bash", arguments: { command: "echo one > a.txt && echo ok" } }], delayMs: 200 },
      { toolCalls: [{ name: "bash", arguments: { command: "echo two > b.txt && echo ok" } }], delayMs: 200 },
      { text: "Both written.", delayMs: 200 },
    ]);
    try {
      const threadId = await newThread();
      const { done } = startRunner({
        threadId,
        model,
        prompt: "write two files",
        streamUrl: `http://127.0.0.1:${proxy.port}/v1/stream`,
      });
      // cut the stream off as soon as pi asks the model, keep it off while pi works
      const t0 = Date.now();
      while (model.requests.length === 0 && Date.now() - t0 < 20_000) await new Promise((r) => setTimeout(r, 20));
      proxy.pause();
      while (model.requests.length < 3 && Date.now() - t0 < 20_000) await new Promise((r) => setTimeout(r, 20));
      await new Promise((r) => setTimeout(r, 1500));
      const refusedWhilePaused = proxy.refused;
      proxy.resume();
      const run = await done;
      expect(run.code, run.stderr).toBe(0);
      expect(refusedWhilePaused).toBeGreaterThan(0);
      const es = await entriesOf(threadId);
      expect(types(es)).toEqual([
        "pi.user",
        "pi.assistant",
        "pi.tool_call",
        "pi.tool_result",
        "pi.assistant",
        "pi.tool_call",
        "pi.tool_result",
        "pi.assistant",
        "status:completed",
      ]);
      expectNoDuplicateIds(es);
      expect(es[7].payload.text).toBe("Both written.");
    } finally {
      await model.close();
      await proxy.close();
    }
  });
});

describe("messages that reach pi as it settles, starts or is interrupted (real pi)", () => {
  /** Runs pi once with a first answer, posts `text` when `when` says so, and returns what became of it. */
  async function lateMessage(opts: { runnerArgs?: string[]; harnessArgs?: string[] }) {
    const model = await startModelServer([{ text: "First answer." }, { text: "Took the late message." }]);
    const threadId = await newThread();
    const runId = `r-late-${threadId}`;
    await post(threadId, { id: `prompt:${runId}`, payload: { type: "chat", text: "answer", dispatch: false } });
    const { child, done } = startRunner({ threadId, model, prompt: "answer", env: { THREADBOX_RUN_ID: runId }, ...opts });
    try {
      for (let i = 0; i < 400; i++) {
        if ((await entriesOf(threadId)).some((e) => e.payload.type === "pi.assistant" && e.payload.text === "First answer.")) break;
        await new Promise((r) => setTimeout(r, 25));
      }
      await post(threadId, { id: "c-late", payload: { type: "chat", text: "ALSO: say you took this" } });
      const ended = await Promise.race([done, new Promise<null>((r) => setTimeout(() => r(null), 30_000))]);
      const es = await entriesOf(threadId);
      return { ended, es, requests: model.requests };
    } finally {
      child.kill("SIGKILL");
      await model.close();
    }
  }

  function expectTaken(r: Awaited<ReturnType<typeof lateMessage>>) {
    expect(r.ended, `the run did not end within 30 s: ${types(r.es).join(" ")}`).not.toBeNull();
    expect(r.ended!.code, r.ended!.stderr).toBe(0);
    // The model got the message in a turn of its own, and the run ended after that turn.
    expect(r.requests).toHaveLength(2);
    expect(JSON.stringify(r.requests[1].messages)).toContain("ALSO: say you took this");
    expect(r.es.filter((e) => e.payload.type === "signal.run.message_delivered").map((e) => e.payload.entryId)).toEqual(["c-late"]);
    expect(r.es.filter((e) => e.payload.type === "pi.assistant").at(-1)!.payload.text).toBe("Took the late message.");
    expect(r.es.filter((e) => e.payload.type === "signal.thread.status_changed").map((e) => e.payload.status)).toEqual(["completed"]);
  }

  it("while pi is settling (its extensions still at agent_settled): pi takes it as a new turn, not a steer it never reads", async () => {
    const ext = join(mkdtempSync(join(tmp, "ext-")), "slow-settle.mjs");
    writeFileSync(ext, `export default function (pi) { pi.on("agent_settled", () => new Promise((r) => setTimeout(r, 2500))); }\n`);
    expectTaken(await lateMessage({ harnessArgs: ["--extension", ext] }));
  }, 60_000);

  it("after pi settled, before the runner read that it had (a loaded box): the run does not stay open for ever", async () => {
    // The real pi, its output reaching the runner 1.5 s late.
    const bin = join(mkdtempSync(join(tmp, "slow-out-")), "pi");
    writeFileSync(bin, `#!${process.execPath}
const { spawn } = require("node:child_process");
const pi = spawn(${JSON.stringify(join(BIN, "pi"))}, process.argv.slice(2), { stdio: ["inherit", "pipe", "inherit"] });
pi.stdout.on("data", (d) => setTimeout(() => process.stdout.write(d), 1500));
pi.on("exit", (code) => setTimeout(() => process.exit(code ?? 1), 1600));
`, { mode: 0o755 });
    expectTaken(await lateMessage({ runnerArgs: ["--bin", bin] }));
  }, 60_000);

  /** A run whose thread already has a message (id `messageId`) for it when it starts. */
  async function earlyMessageRun(tag: string, messageId: string) {
    const model = await startModelServer([{ text: "Did both." }]);
    const threadId = await newThread();
    const runId = `r-${tag}-${threadId}`;
    await post(threadId, { id: `prompt:${runId}`, payload: { type: "chat", text: "TASK: one", dispatch: false } });
    await post(threadId, { id: messageId, payload: { type: "chat", text: "EARLY: and two" } });
    const { child, done } = startRunner({ threadId, model, prompt: "TASK: one", env: { THREADBOX_RUN_ID: runId } });
    try {
      const ended = await Promise.race([done, new Promise<null>((r) => setTimeout(() => r(null), 30_000))]);
      const es = await entriesOf(threadId);
      expect(ended, `the run did not end within 30 s: ${types(es).join(" ")}`).not.toBeNull();
      expect(ended!.code, ended!.stderr).toBe(0);
      const marks = es.filter((e) => e.payload.type === "signal.run.message_delivered");
      return { es, marks, stderr: ended!.stderr, requests: model.requests };
    } finally {
      child.kill("SIGKILL");
      await model.close();
    }
  }

  it("a message already on the thread when the run starts steers the task's turn; neither is lost", async () => {
    const { es, marks, requests } = await earlyMessageRun("early", "early");
    expect(marks.map((e) => e.payload.entryId)).toEqual(["early"]);
    const sent = JSON.stringify(requests.map((r) => r.messages));
    expect(sent).toContain("TASK: one");
    expect(sent).toContain("EARLY: and two");
    expect(es.filter((e) => e.payload.type === "signal.thread.status_changed").map((e) => e.payload.status)).toEqual(["completed"]);
  }, 60_000);

  it("a message whose id is as long as an entry id may be is marked delivered (the mark's id stays within the limit)", async () => {
    const longId = `m-${"x".repeat(198)}`;
    const { marks, stderr } = await earlyMessageRun("longid", longId);
    expect(stderr).not.toMatch(/rejected with 400/);
    expect(marks.map((e) => e.payload.entryId)).toEqual([longId]);
    // The thread's own rule for what a box may post: an id over the limit is refused with its whole batch.
    const accepted = entryInputSchema.safeParse({ id: marks[0].id, ts: marks[0].ts, authorId: marks[0].authorId, payload: marks[0].payload });
    expect(accepted.success, JSON.stringify(accepted.error?.issues)).toBe(true);
  }, 60_000);

  it("interrupted during a tool call and left without a message: stopped after THREADBOX_IDLE_AFTER_INTERRUPT_MS, not a failed model call", async () => {
    // An odd length, so that its process is this test's alone.
    const model = await startModelServer([{ toolCalls: [{ name: "bash", arguments: { command: "sleep 45.321" } }] }]);
    const threadId = await newThread();
    const runId = `r-idle-${threadId}`;
    await post(threadId, { id: `prompt:${runId}`, payload: { type: "chat", text: "sleep", dispatch: false } });
    const { child, done } = startRunner({ threadId, model, prompt: "sleep", env: { THREADBOX_RUN_ID: runId, THREADBOX_IDLE_AFTER_INTERRUPT_MS: "1500" } });
    try {
      // The call is mirrored before pi runs it: an interrupt in between aborts the call before its
      // command starts ('Operation aborted'), so this waits for the command's process.
      const sleeping = () => readdirSync("/proc").some((pid) => {
        try { return readFileSync(`/proc/${pid}/cmdline`, "utf8") === "sleep\u000045.321\u0000"; } catch { return false; }
      });
      for (const t0 = Date.now(); !sleeping() && Date.now() - t0 < 30_000;) await new Promise((r) => setTimeout(r, 25));
      await post(threadId, { id: "i-tool", payload: { type: "signal.run.interrupt", runId } });
      const ended = await Promise.race([done, new Promise<null>((r) => setTimeout(() => r(null), 30_000))]);
      const es = await entriesOf(threadId);
      expect(ended, `the run did not end within 30 s: ${types(es).join(" ")}`).not.toBeNull();
      expect(es.find((e) => e.payload.type === "pi.tool_result")?.payload.output).toBe("Command aborted");
      expect(es.filter((e) => e.payload.type === "signal.thread.status_changed").map((e) => [e.payload.status, e.payload.reason]))
        .toEqual([["stopped", "no message within 1500 ms of the interrupt (THREADBOX_IDLE_AFTER_INTERRUPT_MS)"]]);
    } finally {
      child.kill("SIGKILL");
      await model.close();
    }
  }, 60_000);

  it("a message posted after the run was stopped, before its runner got SIGTERM, is not handed to pi nor marked delivered", async () => {
    const model = await startModelServer([{ hang: true }, { text: "Took it." }]);
    const threadId = await newThread();
    const runId = `r-stopped-${threadId}`;
    await post(threadId, { id: `prompt:${runId}`, payload: { type: "chat", text: "think", dispatch: false } });
    const { child, done } = startRunner({ threadId, model, prompt: "think", env: { THREADBOX_RUN_ID: runId } });
    try {
      for (let i = 0; i < 400 && model.requests.length === 0; i++) await new Promise((r) => setTimeout(r, 25));
      expect(model.requests).toHaveLength(1);
      // What POST /api/threads/:id/stop writes; the box's SIGTERM follows from the thread's alarm.
      await post(threadId, { id: `stop:${runId}`, authorId: "threadbox", payload: { type: "signal.thread.status_changed", status: "stopped", reason: "stopped by alice", runId } });
      await post(threadId, { id: "after-stop", payload: { type: "chat", text: "LATE: the run is over" } });
      // A steer pi accepts is marked at once; give the watch time to read the message.
      await new Promise((r) => setTimeout(r, 2_500));
      const es = await entriesOf(threadId);
      expect(es.filter((e) => e.payload.type === "signal.run.message_delivered").map((e) => e.payload.entryId)).toEqual([]);
      child.kill("SIGTERM");
      const ended = await Promise.race([done, new Promise<null>((r) => setTimeout(() => r(null), 30_000))]);
      expect(ended, "the runner did not exit within 30 s of SIGTERM").not.toBeNull();
      expect(JSON.stringify(model.requests.map((r) => r.messages))).not.toContain("LATE: the run is over");
      expect((await entriesOf(threadId)).filter((e) => e.payload.type === "signal.run.message_delivered")).toEqual([]);
    } finally {
      child.kill("SIGKILL");
      await model.close();
    }
  }, 60_000);

  it("two messages at once to an interrupted pi: the first is its next prompt, the second steers that turn; both reach the model", async () => {
    const model = await startModelServer([{ hang: true }, { text: "Did both." }]);
    const threadId = await newThread();
    const runId = `r-two-${threadId}`;
    await post(threadId, { id: `prompt:${runId}`, payload: { type: "chat", text: "think", dispatch: false } });
    const { child, done } = startRunner({ threadId, model, prompt: "think", env: { THREADBOX_RUN_ID: runId } });
    try {
      for (let i = 0; i < 400 && model.requests.length === 0; i++) await new Promise((r) => setTimeout(r, 25));
      await post(threadId, { id: "i1", payload: { type: "signal.run.interrupt", runId } });
      for (let i = 0; i < 400; i++) {
        if ((await entriesOf(threadId)).some((e) => e.payload.type === "pi.assistant" && e.payload.stopReason === "aborted")) break;
        await new Promise((r) => setTimeout(r, 25));
      }
      await post(threadId, [
        { id: "m1", payload: { type: "chat", text: "FIRST: do this" } },
        { id: "m2", payload: { type: "chat", text: "SECOND: and this" } },
      ]);
      const ended = await Promise.race([done, new Promise<null>((r) => setTimeout(() => r(null), 30_000))]);
      const es = await entriesOf(threadId);
      expect(ended, `the run did not end within 30 s: ${types(es).join(" ")}`).not.toBeNull();
      expect(ended!.code, ended!.stderr).toBe(0);
      expect(es.filter((e) => e.payload.type === "signal.run.message_delivered").map((e) => e.payload.entryId).sort()).toEqual(["m1", "m2"]);
      const sent = JSON.stringify(model.requests.slice(1).map((r) => r.messages));
      expect(sent).toContain("FIRST: do this");
      expect(sent).toContain("SECOND: and this");
      expect(es.filter((e) => e.payload.type === "signal.thread.status_changed").map((e) => e.payload.status)).toEqual(["completed"]);
    } finally {
      child.kill("SIGKILL");
      await model.close();
    }
  }, 60_000);
});

describe("the thread unreachable when the run ends", () => {
  it("for longer than a short flush window: the final answer and the finished-signal still land, once", async () => {
    const proxy = await startPausableProxy(new URL(streamBase).port);
    const model = await startModelServer([
      { toolCalls: [{ name: "bash", arguments: { command: "echo ok" } }] },
      { text: "The final answer.", delayMs: 500 },
    ]);
    try {
      const threadId = await newThread();
      // The default flush window, as a box gets it.
      const { done } = startRunner({ threadId, model, prompt: "say ok", streamUrl: `http://127.0.0.1:${proxy.port}/v1/stream`, env: { THREADBOX_FLUSH_TIMEOUT_MS: "" } });
      const t0 = Date.now();
      while (model.requests.length < 2 && Date.now() - t0 < 30_000) await new Promise((r) => setTimeout(r, 20));
      // The worker goes away while pi writes its last answer, and stays away past 15 s.
      proxy.pause();
      await new Promise((r) => setTimeout(r, 20_000));
      proxy.resume();
      const run = await done;
      expect(run.code, run.stderr).toBe(0);
      const es = await entriesOf(threadId);
      expect(types(es).slice(-2)).toEqual(["pi.assistant", "status:completed"]);
      expect(es.at(-2).payload.text).toBe("The final answer.");
      expectNoDuplicateIds(es);
    } finally {
      await model.close();
      await proxy.close();
    }
  }, 90_000);
});

describe("runner with harnesses that do not mirror themselves (recorded output)", () => {
  function fakeHarness(fixture: string, exitCode: number, before = ""): string {
    const file = join(mkdtempSync(join(tmp, "bin-")), "fake-harness");
    writeFileSync(file, `#!/bin/sh\n${before}cat '${fixture.startsWith("/") ? fixture : join(ROOT, "test/fixtures", fixture)}'\nexit ${exitCode}\n`, { mode: 0o755 });
    return file;
  }
  /** The runner started on `bin` for `threadId`, as a launch starts it: `closed` is its exit code, `stderr()` what it wrote so far. */
  function startRunner(threadId: string, bin: string, o: { harness?: string; runId?: string; token?: string; env?: Record<string, string> } = {}) {
    const child = spawn(process.execPath, [RUNNER, "--harness", o.harness ?? "codex", "--bin", bin, "--prompt", "task"], {
      cwd: tmp,
      stdio: ["ignore", "ignore", "pipe"],
      env: {
        ...process.env,
        THREADBOX_THREAD_ID: threadId,
        THREADBOX_STREAM_URL: streamBase,
        THREADBOX_STREAM_TOKEN_FILE: tokenFile(o.token ?? "test-token"),
        THREADBOX_RUN_ID: o.runId ?? "r1",
        ...o.env,
      },
    });
    let stderr = "";
    child.stderr!.on("data", (d) => (stderr += d));
    return { closed: new Promise<number | null>((r) => child.on("close", r)), stderr: () => stderr };
  }
  async function runWith(harness: string, fixture: string, exitCode: number, before = "") {
    const threadId = await newThread();
    const run = startRunner(threadId, fakeHarness(fixture, exitCode, before), { harness });
    const code = await run.closed;
    return { threadId, code, stderr: run.stderr(), es: await entriesOf(threadId) };
  }

  it("a failed harness's stderr tail goes on the thread: bounded, secrets redacted, no stream token to leak", async () => {
    const threadId = await newThread();
    const bin = join(mkdtempSync(join(tmp, "bin-")), "noisy-harness");
    // Writes 10 KiB of noise, then the secrets it was given, then its last words; exits 3.
    writeFileSync(bin, `#!/bin/sh\nhead -c 10240 /dev/zero | tr '\\0' x >&2\necho >&2\necho "token=$THREADBOX_STREAM_TOKEN file=$(cat "$THREADBOX_STREAM_TOKEN_FILE" 2>/dev/null) key=$MODEL_KEY named=$PLAIN_NAMED_SECRET short=$SHORT" >&2\necho "fatal: cannot reach the model" >&2\nexit 3\n`, { mode: 0o755 });
    const code = await startRunner(threadId, bin, {
      runId: "r-stderr",
      token: "stream-token-value-123",
      env: { MODEL_KEY: "sk-model-key-456", PLAIN_NAMED_SECRET: "hunter2-but-longer", THREADBOX_SECRET_NAMES: "PLAIN_NAMED_SECRET", SHORT: "abc" },
    }).closed;
    expect(code).toBe(3);
    const es = await entriesOf(threadId);
    const tail = es.find((e) => e.payload.type === "signal.run.stderr")!;
    expect(tail.id).toBe(`${threadId}:stderr:r-stderr`);
    expect(tail.payload.runId).toBe("r-stderr");
    expect(tail.payload.truncated).toBe(true);
    expect(Buffer.byteLength(tail.payload.text)).toBeLessThanOrEqual(4096);
    // The stream token never reaches a harness that does not mirror itself: not in its environment, not as a file.
    expect(tail.payload.text).toContain("token= file= key=[redacted] named=[redacted] short=abc");
    for (const secret of ["stream-token-value-123", "sk-model-key-456", "hunter2-but-longer"]) expect(JSON.stringify(es)).not.toContain(secret);
    const finished = es.filter((e) => e.payload.type === "signal.thread.status_changed");
    expect(finished.map((e) => [e.payload.status, e.payload.reason])).toEqual([["pi_failed", "harness exited with code 3: fatal: cannot reach the model"]]);
  });

  it("a secret the stderr tail's window cuts through: what is left of it at the tail's start is redacted too", async () => {
    const threadId = await newThread();
    const secret = "hunter2-but-much-longer-secret";
    const bin = join(mkdtempSync(join(tmp, "bin-")), "cut-secret-harness");
    // The secret, then exactly enough bytes that the 4096-byte tail begins 12 characters before its end.
    writeFileSync(bin, `#!/bin/sh\nprintf 'key=%s' "$PLAIN_NAMED_SECRET" >&2\nhead -c 4074 /dev/zero | tr '\\0' x >&2\necho >&2\necho "fatal: x" >&2\nexit 3\n`, { mode: 0o755 });
    expect(await startRunner(threadId, bin, { runId: "r-stderr-cut", env: { PLAIN_NAMED_SECRET: secret, THREADBOX_SECRET_NAMES: "PLAIN_NAMED_SECRET" } }).closed).toBe(3);
    const tail = (await entriesOf(threadId)).find((e) => e.payload.type === "signal.run.stderr")!;
    expect(tail.payload.truncated).toBe(true);
    expect(tail.payload.text).not.toContain(secret.slice(-12));
    expect(tail.payload.text).toMatch(/^\[redacted\]x+\nfatal: x\n$/);
  });

  it("a failure reason already near the length limit stays within it once the stderr line is added", async () => {
    const threadId = await newThread();
    const dir = mkdtempSync(join(tmp, "bin-"));
    // The harness's own failure message, as long as a reason may be, quoting a subprocess's exit.
    const message = `${"y".repeat(MAX_REASON_LENGTH - 40)} the sub-agent exited with code 1`;
    writeFileSync(join(dir, "out.jsonl"), `${JSON.stringify({ type: "turn.failed", error: { message } })}\n`);
    const bin = join(dir, "long-reason-harness");
    writeFileSync(bin, `#!/bin/sh\ncat '${join(dir, "out.jsonl")}'\necho "fatal: the sub-agent failed" >&2\nexit 1\n`, { mode: 0o755 });
    expect(await startRunner(threadId, bin, { runId: "r-long" }).closed).toBe(1);
    const finished = (await entriesOf(threadId)).filter((e) => e.payload.type === "signal.thread.status_changed");
    expect(finished.map((e) => e.payload.status)).toEqual(["pi_failed"]);
    const reason: string = finished[0].payload.reason;
    // The worker refuses a longer reason, which would leave the run to the silence alarm.
    expect(reason.length).toBeLessThanOrEqual(MAX_REASON_LENGTH);
    expect(entryInputSchema.safeParse({ payload: finished[0].payload }).success).toBe(true);
    expect(reason.startsWith(message.slice(0, 100))).toBe(true);
  });

  it("claude-code cannot take a message mid-run: it is queued and starts a resumed turn of the same session after this one", async () => {
    const threadId = await newThread();
    const runId = "r-queue";
    await post(threadId, { id: `prompt:${runId}`, payload: { type: "chat", text: "task", dispatch: false } });
    const dir = mkdtempSync(join(tmp, "bin-"));
    const calls = join(dir, "calls.jsonl");
    const go = join(dir, "go");
    const bin = join(dir, "fake-claude");
    // Records its arguments; the first turn waits until the test has posted its message.
    writeFileSync(bin, `#!/bin/sh
node -e 'require("fs").appendFileSync(process.argv[1], JSON.stringify(process.argv.slice(2)) + "\\n")' '${calls}' "$@"
if [ ! -f '${go}' ]; then touch '${go}.started'; while [ ! -f '${go}' ]; do sleep 0.05; done; fi
cat '${join(ROOT, "test/fixtures/claude-code-stream-json-success.jsonl")}'
`, { mode: 0o755 });
    const { closed, stderr } = startRunner(threadId, bin, { harness: "claude-code", runId });
    while (!existsSync(`${go}.started`)) await new Promise((r) => setTimeout(r, 20));
    await post(threadId, { id: "c-late", payload: { type: "chat", text: "please also add a test" } });
    // The first turn ends only once the runner has queued the message.
    for (let i = 0; i < 200 && !stderr().includes("message c-late queued"); i++) await new Promise((r) => setTimeout(r, 50));
    expect(stderr()).toContain("message c-late queued");
    writeFileSync(go, "");
    expect(await closed).toBe(0);
    const argvs = readFileSync(calls, "utf8").trim().split("\n").map((l) => JSON.parse(l) as string[]);
    expect(argvs).toHaveLength(2);
    expect(argvs[0]).not.toContain("--resume");
    expect(argvs[1].slice(argvs[1].indexOf("--resume"), argvs[1].indexOf("--resume") + 2)).toEqual(["--resume", "3f1c2a4e-8b7d-4c2e-9a51-0d6e2b9f7c11"]);
    expect(argvs[1].at(-1)).toBe("please also add a test");
    const es = await entriesOf(threadId);
    const marks = es.filter((e) => e.payload.type === "signal.run.message_delivered");
    expect(marks.map((e) => [e.payload.entryId, e.payload.mode])).toEqual([["c-late", "queued"]]);
    expect(es.filter((e) => e.payload.type === "signal.thread.status_changed").map((e) => e.payload.status)).toEqual(["completed"]);
  });

  it("codex: the runner parses --json output, posts the entries with ids, then completed", async () => {
    const { threadId, code, es } = await runWith("codex", "codex-exec-json-success.jsonl", 0);
    expect(code).toBe(0);
    expect(types(es)).toEqual([
      "pi.tool_call", "pi.tool_result", "pi.assistant", "pi.tool_call", "pi.tool_result",
      "pi.tool_call", "pi.tool_result", "pi.assistant", "status:completed",
    ]);
    expect(es[0].id).toBe(`${threadId}:h:r1:0`);
    expect(es[8].id).toBe(`${threadId}:finished:r1`);
    expectNoDuplicateIds(es);
  });

  it("output whose multi-byte characters fall across the pipe's reads reaches the thread intact", async () => {
    const text = "price: 5€, or 4£";
    const dir = mkdtempSync(join(tmp, "fixture-"));
    const all = Buffer.from([
      { type: "thread.started", thread_id: "t-utf8" },
      { type: "turn.started" },
      { type: "item.completed", item: { id: "item_0", type: "agent_message", text } },
      { type: "turn.completed", usage: { input_tokens: 1, cached_input_tokens: 0, output_tokens: 1 } },
    ].map((r) => JSON.stringify(r)).join("\n") + "\n");
    // The harness writes its output in two parts, the first ending inside the 3 bytes of "€".
    const cut = all.indexOf(Buffer.from("€")) + 1;
    writeFileSync(join(dir, "head"), all.subarray(0, cut));
    writeFileSync(join(dir, "tail"), all.subarray(cut));
    const { code, es } = await runWith("codex", join(dir, "tail"), 0, `cat '${join(dir, "head")}'; sleep 0.5\n`);
    expect(code).toBe(0);
    expect(es.find((e) => e.payload.type === "pi.assistant")!.payload.text).toBe(text);
    expect(types(es).at(-1)).toBe("status:completed");
  });

  it("a harness that exits leaving a process behind that holds its output still ends the run", async () => {
    const marker = `sleep 60.${Date.now() % 100000}`;
    try {
      // The background sleep inherits the harness's stdout and outlives it by far.
      const { code, es, stderr } = await runWith("codex", "codex-exec-json-success.jsonl", 0, `${marker} &\n`);
      expect(stderr).toContain("its output is still held open; going on without it");
      expect(code).toBe(0);
      expect(types(es).at(-1)).toBe("status:completed");
    } finally {
      spawnSync("pkill", ["-f", marker]);
    }
  });

  it("a harness's error that quotes a secret: the finished-signal's reason has it redacted, like the entries", async () => {
    const threadId = await newThread();
    const bin = join(mkdtempSync(join(tmp, "bin-")), "fake-claude");
    // An API error that echoes the key (one of the environment's secrets) it was sent, as some gateways' errors do.
    writeFileSync(bin, `#!/bin/sh\nnode -e '
const text = "API Error: 401 invalid x-api-key " + process.env.MODEL_KEY;
console.log(JSON.stringify({ type: "assistant", message: { role: "assistant", stop_reason: "stop_sequence", content: [{ type: "text", text }] } }));
console.log(JSON.stringify({ type: "result", subtype: "success", is_error: true, result: text }));'\n`, { mode: 0o755 });
    expect(await startRunner(threadId, bin, { harness: "claude-code", runId: "r-secret", env: { MODEL_KEY: "sk-model-key-789", THREADBOX_SECRET_NAMES: "MODEL_KEY" } }).closed).toBe(0);
    const es = await entriesOf(threadId);
    expect(types(es)).toEqual(["pi.assistant", "pi.error", "status:pi_failed"]);
    expect(es[1].payload.message).toContain("invalid x-api-key [redacted]");
    expect(es[2].payload.reason).toContain("invalid x-api-key [redacted]");
    expect(JSON.stringify(es)).not.toContain("sk-model-key-789");
  });

  it("a harness's long error whose secret the reason's length limit cuts through: no piece of it is in the reason", async () => {
    const threadId = await newThread();
    const key = "sk-model-key-0123456789abcdef";
    const bin = join(mkdtempSync(join(tmp, "bin-")), "fake-claude-long");
    // "claude-code success: API Error: 401 " is 36 characters: the key begins 12 before the reason's cut at MAX_REASON_LENGTH - 1.
    writeFileSync(bin, `#!/bin/sh\nnode -e '
const text = "API Error: 401 " + "y".repeat(${MAX_REASON_LENGTH - 1 - 12 - 36}) + process.env.MODEL_KEY + " was refused";
console.log(JSON.stringify({ type: "assistant", message: { role: "assistant", stop_reason: "stop_sequence", content: [{ type: "text", text }] } }));
console.log(JSON.stringify({ type: "result", subtype: "success", is_error: true, result: text }));'\n`, { mode: 0o755 });
    expect(await startRunner(threadId, bin, { harness: "claude-code", runId: "r-secret-cut", env: { MODEL_KEY: key, THREADBOX_SECRET_NAMES: "MODEL_KEY" } }).closed).toBe(0);
    const es = await entriesOf(threadId);
    expect(types(es)).toEqual(["pi.assistant", "pi.error", "status:pi_failed"]);
    expect(es[2].payload.reason.length).toBeLessThanOrEqual(MAX_REASON_LENGTH);
    expect(es[2].payload.reason).toMatch(/^claude-code success: API Error: 401 y+\[redacted\]/);
    expect(JSON.stringify(es)).not.toContain(key.slice(0, 12));
  });

  it("claude-code: an error result -> pi_failed", async () => {
    const { code, es } = await runWith("claude-code", "claude-code-stream-json-max-turns.jsonl", 0);
    expect(code).toBe(0);
    expect(types(es)).toEqual(["pi.tool_call", "pi.tool_result", "pi.error", "status:pi_failed"]);
    expect(es[3].payload.reason).toContain("error_max_turns");
  });
});

void existsSync;
void mkdirSync;

describe("the stream token in a box, the runner started the way a launch starts it", () => {
  // What a command of the model can read: every process's exec-time environment and command line
  // (the runner, pi, its shell and whatever else runs; same user, so all readable), and the box's
  // files (home, tmp and the host's records of it). The pattern is written so the scan never
  // matches its own command line, nor the session file that records the call.
  const SCAN = [
    `for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do { tr '\\0' '\\n' < "$f"; } 2>/dev/null | grep -aoE 'leak-canar[y]-[0-9a-f]+' | sed "s|^|$f ($(cat "\${f%/*}/comm" 2>/dev/null)): |"; done`,
    `grep -raoE 'leak-canar[y]-[0-9a-f]+' "$HOME/.." 2>/dev/null | head -20`,
    `echo "scanned $(ls -d /proc/[0-9]* | wc -l) processes"`,
  ].join("; ");

  it("no command the model runs finds the token, and the run still posts everything", async () => {
    const host = await startSandboxHost({ port: 0, apiKey: "k" });
    const provider = createDaytonaProvider({ apiUrl: host.apiUrl, apiKey: "k", target: "local" });
    const token = `eyJhbGciOiJub25lIn0.leak-canary-${randomBytes(12).toString("hex")}.sig`;
    // An environment variable the box's commands are meant to see: the scan must find it.
    const control = `leak-canary-c0c0${randomBytes(8).toString("hex")}`;
    const model = await startModelServer([{ toolCalls: [{ name: "bash", arguments: { command: SCAN } }] }, { text: "Scanned." }]);
    try {
      const threadId = await newThread();
      const runId = `run-${threadId}`;
      const box = await provider.create({ labels: { house: "h-token", thread: threadId }, ephemeral: true });
      const home = await provider.homeDir(box.ref);
      const plan = runnerLaunch({
        harness: "pi", threadId, streamUrl: streamBase, streamToken: token, runId, prompt: "scan the box", model: "local/scripted-model", cwd: "work",
        env: { PATH: `${BIN}:${dirname(process.execPath)}:${process.env.PATH}`, PI_CODING_AGENT_DIR: `${home}/.threadbox/pi-agent`, PI_OFFLINE: "1", THREADBOX_HEARTBEAT_MS: "500", SCAN_CONTROL: control },
      });
      // As src/threads/launch.ts does it: directories, uploads, then the runner in its own session.
      await provider.exec(box.ref, `mkdir -p work .threadbox/runs/${runId} && chmod 700 .threadbox/runs/${runId}`, { cwd: home });
      await provider.upload(box.ref, [
        ...plan.uploads.map((u) => ({ path: u.path, content: u.source ? readFileSync(join(ROOT, u.source), "utf8") : u.content! })),
        { path: ".threadbox/pi-agent/models.json", content: readFileSync(join(agentDir(model), "models.json"), "utf8") },
        { path: ".threadbox/pi-agent/settings.json", content: JSON.stringify({ retry: { enabled: false } }) },
      ]);
      const handle = await provider.startDetached(box.ref, plan.command, { env: plan.env, cwd: home, sessionId: `tb-run-${runId}` });
      let status = await provider.detachedStatus(handle);
      for (const t0 = Date.now(); status.running && Date.now() - t0 < 90_000; status = await provider.detachedStatus(handle)) await new Promise((r) => setTimeout(r, 200));
      const runnerLog = () => { try { return readFileSync(join(home, plan.logPath), "utf8"); } catch { return "(no runner log)"; } };
      expect(status, runnerLog()).toEqual({ running: false, exitCode: 0 });

      const es = await entriesOf(threadId);
      // (a scan that runs past 1 s also streams its output live: signal.exec.output)
      expect(types(es).filter((t) => t !== "signal.exec.output"), runnerLog()).toEqual(["pi.user", "pi.assistant", "pi.tool_call", "pi.tool_result", "pi.assistant", "status:completed"]);
      const output = es.find((e) => e.payload.type === "pi.tool_result")!.payload.output as string;
      expect(output).toMatch(/scanned \d+ processes/); // the scan ran to its end
      expect(output).toContain(`/environ (bash): ${control}`); // and reads what it is after
      expect(output).not.toContain(token.split(".")[1]);
      expect(JSON.stringify(es)).not.toContain(token.split(".")[1]);
      expect(es.at(-2).payload.text).toBe("Scanned.");
      // Nothing left behind in the box either, once the run is over.
      expect(spawnSync("grep", ["-rlF", token, join(home, "..")], { encoding: "utf8" }).stdout.trim()).toBe("");
    } finally {
      await model.close();
      await host.close();
    }
  }, 120_000);
});
