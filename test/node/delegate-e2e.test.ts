// The whole system on loopback: worker under wrangler dev, the local Daytona-compatible sandbox
// host (real @daytonaio/sdk client in the worker), the real pi CLI in a box, and a scripted
// OpenAI-compatible model server standing in for the LLM provider.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFile, execFileSync, execSync } from "node:child_process";
import { promisify } from "node:util";
import { existsSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { startSandboxHost } from "../../sandbox-host/server.mjs";
import { ROOT, freePort, startWorker } from "../../scripts/lib/wrangler-dev.mjs";
import { startModelServer, type ModelServer } from "../support/model-server";
import { startPausableProxy } from "../support/pausable-proxy";
import { createDaytonaProvider } from "../../src/sandbox/daytona-provider";
import { run } from "../../src/sandbox/run";
import { mintRunToken } from "../../src/auth/tokens";
import { tarArchive } from "../support/tar";
import { startGitHttpServer } from "../support/git-http-server";
import { jsonApi } from "../support/json-api";
import { tempDirs } from "../support/temp-dirs";

const tempDir = tempDirs();

const SANDBOX_KEY = "e2e-sandbox-key";
const execFileAsync = promisify(execFile);
let host: Awaited<ReturnType<typeof startSandboxHost>>;
let worker: Awaited<ReturnType<typeof startWorker>>;
let token: string;
let model: ModelServer;
let streamPath: Awaited<ReturnType<typeof startPausableProxy>>;

type Entry = { id: string; offset: string; authorId?: string; payload: { type: string; [k: string]: any } };

const api = jsonApi(() => ({ url: worker.url, token }));

async function entries(threadId: string): Promise<Entry[]> {
  return (await api(`/api/threads/${threadId}/entries?offset=-1&limit=10000`)).body.entries;
}

async function waitFor<T>(what: string, fn: () => Promise<T | null | undefined | false>, timeoutMs = 90_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 300));
  }
}

/** What a stuck run looked like: the thread, its last entries, the model's record and the runner's logs. */
async function diagnose(id: string): Promise<string> {
  const t = (await api(`/api/threads/${id}`)).body;
  const es = await entries(id).catch(() => []);
  const tail = es.slice(-25).map((e) => `${e.payload.type}${e.payload.status ? `(${e.payload.status})` : ""}`);
  // Boxes are deleted once their run settles: the ones still there belong to stuck runs.
  const logs: string[] = [];
  const boxesDir = join(host.root, "boxes");
  for (const box of existsSync(boxesDir) ? readdirSync(boxesDir) : []) {
    const runs = join(boxesDir, box, "home", ".threadbox", "runs");
    for (const run of existsSync(runs) ? readdirSync(runs) : []) {
      const log = join(runs, run, "runner.log");
      if (existsSync(log)) logs.push(`--- box ${box} run ${run} runner.log\n${readFileSync(log, "utf8").slice(-4000)}`);
    }
  }
  // The run's processes (runner, harness, tools) and what each is blocked on.
  const procs: string[] = [];
  const read = (pid: string, f: string) => { try { return readFileSync(`/proc/${pid}/${f}`, "utf8"); } catch { return ""; } };
  for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    if (!read(pid, "environ").includes(`THREADBOX_THREAD_ID=${id}\0`)) continue;
    const stat = read(pid, "stat").split(") ")[1]?.split(" ") ?? [];
    procs.push(`pid ${pid} ppid ${stat[1]} state ${stat[0]} wchan ${read(pid, "wchan")} ${read(pid, "cmdline").split("\0").join(" ").slice(0, 160)}`);
  }
  // Who else holds the runner's pipes (a harness's stdout stays open while any holder lives).
  const runnerPids = procs.filter((l) => l.includes("runner.mjs")).map((l) => l.split(" ")[1]);
  const fdsOf = (pid: string) => { try { return readdirSync(`/proc/${pid}/fd`).map((fd) => { try { return readlinkSync(`/proc/${pid}/fd/${fd}`); } catch { return ""; } }); } catch { return []; } };
  for (const rp of runnerPids) {
    const pipes = fdsOf(rp).filter((l) => l.startsWith("pipe:"));
    procs.push(`runner ${rp} pipes: ${pipes.join(" ")}`);
    for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d) && d !== rp)) {
      const shared = fdsOf(pid).filter((l) => pipes.includes(l));
      const stat = read(pid, "stat");
      if (shared.length || stat.split(") ")[1]?.split(" ")[1] === rp) {
        procs.push(`  pid ${pid} ${stat.slice(0, 60)} shares ${shared.join(" ")} ${read(pid, "cmdline").split("\0").join(" ").slice(0, 120)}`);
      }
    }
  }
  return [`thread: ${JSON.stringify({ status: t.status, detail: t.detail, reason: t.reason, boxId: t.boxId })}`,
    `processes of the thread:\n${procs.join("\n") || "(none)"}`,
    `entries (${es.length}, last 25): ${tail.join(" ")}`,
    `model requests so far: ${model.requests.length}`, ...logs].join("\n");
}

const settled = async (id: string) => {
  try {
    return await waitFor(`thread ${id} to settle`, async () => {
      const t = (await api(`/api/threads/${id}`)).body;
      return t.status === "completed" || t.status === "failed" ? t : null;
    });
  } catch (err) {
    throw new Error(`${(err as Error).message}\n${await diagnose(id)}`);
  }
};

/** A child thread of a new parent in a fresh e2e environment, running `task`. */
async function delegateChild(task: string): Promise<string> {
  const envId = await environment();
  const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
  return (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task } })).body.childThreadId as string;
}

async function environment(extraEnv: Record<string, string> = {}) {
  const r = await api("/api/environments", {
    method: "POST",
    json: {
      name: "e2e",
      env: { PI_OFFLINE: "1", THREADBOX_HEARTBEAT_MS: "500", ...extraEnv },
      secrets: { SCRIPTED_MODEL_KEY: "sk-e2e-secret-value" },
      piModels: { providers: { local: { baseUrl: model.baseUrl, api: "openai-completions", apiKey: "$SCRIPTED_MODEL_KEY", models: [{ id: "scripted-model" }] } } },
      piSettings: { retry: { enabled: false } },
      model: "local/scripted-model",
      provider: "daytona",
    },
  });
  expect(r.status).toBe(201);
  expect(JSON.stringify(r.body)).not.toContain("sk-e2e-secret-value");
  return r.body.id as string;
}

/** SIGKILLs every process whose environment names this thread (the runner, pi, its tools). */
function killProcessesOfThread(threadId: string, onlyCmdline?: RegExp): number {
  let n = 0;
  for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    try {
      const environ = readFileSync(`/proc/${pid}/environ`, "utf8");
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
      if (onlyCmdline && !onlyCmdline.test(cmdline)) continue;
      if (environ.includes(`THREADBOX_THREAD_ID=${threadId}\0`)) {
        process.kill(Number(pid), "SIGKILL");
        n++;
      }
    } catch {
      // gone already, or not ours
    }
  }
  return n;
}

/** SIGKILLs the harness only: the direct children of this thread's runner (pi gets no THREADBOX_* env). */
function killChildrenOfRunner(threadId: string): number {
  const pids = readdirSync("/proc").filter((d) => /^\d+$/.test(d));
  const read = (pid: string, f: string) => { try { return readFileSync(`/proc/${pid}/${f}`, "utf8"); } catch { return ""; } };
  const isRunner = (p: string) => {
    const argv = read(p, "cmdline").split("\0");
    return /node$/.test(argv[0]) && argv.some((a) => a.endsWith("runner.mjs")); // not the shell that started it
  };
  const runners = pids.filter((p) => isRunner(p) && read(p, "environ").includes(`THREADBOX_THREAD_ID=${threadId}\0`));
  let n = 0;
  for (const pid of pids) {
    const ppid = read(pid, "stat").split(") ")[1]?.split(" ")[1];
    if (ppid && runners.includes(ppid)) {
      try { process.kill(Number(pid), "SIGKILL"); n++; } catch { /* gone */ }
    }
  }
  return n;
}

/** How many processes still carry this run's id in their environment. */
function processesOfRun(runId: string): number {
  let n = 0;
  for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    try {
      if (readFileSync(`/proc/${pid}/environ`, "utf8").includes(`THREADBOX_RUN_ID=${runId}\0`)) n++;
    } catch {
      // gone
    }
  }
  return n;
}

const statuses = (es: Entry[]) => es.filter((e) => e.payload.type === "signal.thread.status_changed").map((e) => e.payload.status);

beforeAll(async () => {
  host = await startSandboxHost({ port: 0, apiKey: SANDBOX_KEY });
  model = await startModelServer([]);
  const port = await freePort();
  // Boxes reach the worker through a TCP hop a test can cut, like a flaky edge proxy.
  streamPath = await startPausableProxy(port);
  worker = await startWorker({
    port,
    vars: {
      DAYTONA_API_URL: host.apiUrl,
      DAYTONA_API_KEY: SANDBOX_KEY,
      DAYTONA_TARGET: "local",
      THREADBOX_STREAM_URL: `http://127.0.0.1:${streamPath.port}/api/stream`,
      ORPHAN_SILENCE_MS: "6000",
      PROBE_INTERVAL_MS: "1500",
      PROBE_CONFIRM_MS: "500",
      STOP_GRACE_MS: "3000",
      // Short-lived stream tokens: every run here outlives its first token and must renew it.
      STREAM_TOKEN_TTL_SECONDS: "8",
    },
  });
  token = await worker.mintHouseToken("house-e2e", "brain-bot", "owner");
}, 120_000);

afterAll(async () => {
  await worker?.stop();
  await model?.close();
  await streamPath?.close();
  await host?.close();
});

describe("delegate a task to pi in a box", () => {
  it("runs the real pi: tool call, tool result, answer, one completed signal, child_finished on the parent, box reaped", async () => {
    model.push(
      // What the model could find of the stream token: a variable of its own, the file the mirror
      // was handed, a JWT in the environment of any process of this run (runner, pi, its shell).
      { toolCalls: [{ name: "bash", arguments: { command: String.raw`echo hello-from-box > proof.txt && cat proof.txt && echo "token=[$THREADBOX_STREAM_TOKEN] file=[$(cat "$THREADBOX_STREAM_TOKEN_FILE" 2>/dev/null)]" && ` +
        String.raw`p=0; j=0; for f in /proc/[0-9]*/environ; do e=$({ tr '\0' '\n' < "$f"; } 2>/dev/null); case "$e" in *"THREADBOX_THREAD_ID=$THREADBOX_THREAD_ID"*) p=$((p+1)); echo "$e" | grep -q '=eyJ' && j=$((j+1));; esac; done; echo "procs=$p jwts=[$j]"` } }] },
      { text: "I wrote proof.txt." },
    );
    const envId = await environment();
    const parent = (await api("/api/threads", { method: "POST", json: { title: "parent", environmentId: envId } })).body;
    const started = Date.now();
    const d = await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "write proof.txt" } });
    expect(d.status).toBe(202);
    const childId = d.body.childThreadId as string;
    expect(d.body.status).toBe("running"); // claimed before the response, so bootstrap death is covered
    const child = await settled(childId);
    expect(child.status).toBe("completed");

    const es = await entries(childId);
    const kinds = es.map((e) => e.payload.type);
    expect(kinds[0]).toBe("chat");
    expect(es[0].payload.text).toBe("write proof.txt");
    const call = es.find((e) => e.payload.type === "pi.tool_call")!;
    expect(JSON.stringify(call.payload)).toContain("proof.txt");
    const result = es.find((e) => e.payload.type === "pi.tool_result")!;
    expect(JSON.stringify(result.payload)).toContain("hello-from-box");
    expect(JSON.stringify(result.payload)).toContain("token=[] file=[]"); // the stream token never reaches a tool
    expect(result.payload.output).toMatch(/procs=([3-9]|\d\d+) jwts=\[0\]/); // nor the environment of the run's processes
    const answers = es.filter((e) => e.payload.type === "pi.assistant" && e.payload.stopReason === "stop");
    expect(answers.at(-1)!.payload.text).toContain("I wrote proof.txt.");
    expect(kinds.indexOf("pi.tool_call")).toBeLessThan(kinds.indexOf("pi.tool_result"));
    expect(statuses(es).filter((s) => s !== "running")).toEqual(["completed"]);
    expect(new Set(es.map((e) => e.id)).size).toBe(es.length);
    // The box writes as the run's author (the delegating brain); only the control plane is threadbox.
    const written = es.filter((e) => e.payload.type.startsWith("pi."));
    expect(written.length).toBeGreaterThan(0);
    expect(new Set(written.map((e) => e.authorId))).toEqual(new Set(["brain-bot"]));
    const finishedSignal = es.find((e) => e.payload.type === "signal.thread.status_changed" && e.payload.status === "completed")!;
    expect(finishedSignal.authorId).toBe("brain-bot");
    // The model key reached the model as a bearer token, never the thread.
    expect(JSON.stringify(es)).not.toContain("sk-e2e-secret-value");
    expect(model.requests.at(-1)!.headers.authorization).toBe("Bearer sk-e2e-secret-value");

    const parentEntries = await entries(parent.id);
    const finished = parentEntries.filter((e) => e.payload.type === "signal.thread.child_finished");
    expect(finished).toHaveLength(1);
    const brainChat = parentEntries.filter((e) => e.payload.type === "chat");
    expect(brainChat).toHaveLength(1);
    expect(brainChat[0].authorId).toBe("brain-bot");
    expect(brainChat[0].payload.text).toContain("I wrote proof.txt.");

    const box = await waitFor("box to be reaped", async () => {
      const list = (await api("/api/sandboxes?state=deleted")).body.sandboxes as { id: string; labels: Record<string, string> }[];
      return list.find((b) => b.labels["threadbox.thread"] === childId);
    }, 30_000);
    expect(box).toBeTruthy();
    expect(readdirSync(host.root).filter((d) => existsSync(join(host.root, d, "proof.txt")))).toEqual([]);

    // The box is gone; what the run wrote is still on the thread, posted before its finished-signal.
    const listed = await api(`/api/threads/${childId}/artifacts`);
    expect(listed.status).toBe(200);
    const files = listed.body.artifacts.find((a: any) => a.payload.type === "artifact.files");
    expect(files.payload.files).toEqual([{ path: "proof.txt", status: "added", size: 15, binary: false, content: "hello-from-box\n" }]);
    const all = await entries(childId);
    const at = (pred: (e: any) => boolean) => all.findIndex(pred);
    expect(at((e) => e.payload.type === "artifact.files")).toBeLessThan(at((e) => e.payload.type === "signal.thread.status_changed" && e.payload.status === "completed"));
    expect(files.authorId).toBe("brain-bot");
    console.log(`delegate e2e: ${Date.now() - started} ms from delegate to settled`);
  });

  it("a model error ends the run as pi_failed, posted once", async () => {
    model.push({ error: 400, message: "the model refuses" });
    const envId = await environment();
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const childId = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "fail please" } })).body.childThreadId;
    const child = await settled(childId);
    expect([child.status, child.reason]).toEqual(["failed", "pi_failed"]);
    expect(statuses(await entries(childId)).filter((s) => s !== "running")).toEqual(["pi_failed"]);
  });

  it("after a model error the run's artifacts still follow the failure, and only then is the box released", async () => {
    model.push(
      { toolCalls: [{ name: "bash", arguments: { command: "echo half-done > partial.txt" } }] },
      { error: 400, message: "the model gives up" },
    );
    const childId = await delegateChild("start, then fail");
    const child = await settled(childId);
    expect([child.status, child.reason]).toEqual(["failed", "pi_failed"]);
    // The mirror posted the failure at once; the runner, still in the box, posts what the run left.
    const files = await waitFor("the run's files", async () =>
      (await api(`/api/threads/${childId}/artifacts`)).body.artifacts.find((a: any) => a.payload.type === "artifact.files"), 30_000);
    expect(JSON.stringify(files.payload.files)).toContain("partial.txt");
    const box = await waitFor("the box to be released", async () => {
      const b = (await api(`/api/sandboxes/${child.boxId}`)).body;
      return b.state === "deleted" ? b : undefined;
    }, 30_000);
    expect(box.state).toBe("deleted");
    expect(statuses(await entries(childId)).filter((s) => s !== "running")).toEqual(["pi_failed"]);
  });

  it("a box whose processes all die mid-run is orphaned by the alarms", async () => {
    model.push({ hang: true });
    const envId = await environment();
    const requestsBefore = model.requests.length;
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const childId = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "hang" } })).body.childThreadId;
    const running = await waitFor("the box to be assigned", async () => {
      const t = (await api(`/api/threads/${childId}`)).body;
      const es = await entries(childId);
      return t.boxId && es.some((e) => e.payload.type === "pi.user" || e.payload.type === "pi.assistant" || e.payload.type === "chat") && model.requests.length > requestsBefore ? t : null;
    });
    const boxes = (await api("/api/sandboxes")).body.sandboxes as { id: string; providerRef: string }[];
    const ref = boxes.find((b) => b.id === running.boxId)!.providerRef;
    // The box dies abruptly, as a destroyed VM does: runner and pi get no chance to post.
    const killed = killProcessesOfThread(childId);
    expect(killed).toBeGreaterThanOrEqual(2); // at least the runner and pi
    const del = await fetch(`${host.apiUrl}/sandbox/${ref}`, { method: "DELETE", headers: { authorization: `Bearer ${SANDBOX_KEY}` } });
    expect(del.ok).toBe(true);
    const child = await settled(childId);
    expect([child.status, child.reason]).toEqual(["failed", "pi_session_orphaned"]);
    // The probes found the box gone (well before the silence threshold could have ended the run).
    expect(child.detail).toMatch(new RegExp(`^box ${running.boxId} (confirmed dead by two probes|is dead: )`));
    expect(child.detail).not.toMatch(/no heartbeat/);
    expect(statuses(await entries(childId)).filter((s) => s !== "running")).toEqual(["pi_session_orphaned"]);
  });

  it("pi frozen mid-run on a live box: it falls silent, and the silence alarm ends the run as orphaned", async () => {
    model.push({ hang: true });
    const requestsBefore = model.requests.length;
    const childId = await delegateChild("hang");
    await waitFor("pi to be at work", async () => (await entries(childId)).some((e) => e.payload.type === "pi.user") && model.requests.length > requestsBefore);
    // pi is the runner's child.
    const runnerPid = readdirSync("/proc").filter((d) => /^\d+$/.test(d)).find((pid) => {
      try {
        return readFileSync(`/proc/${pid}/environ`, "utf8").includes(`THREADBOX_THREAD_ID=${childId}\0`) && readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")[1]?.endsWith("runner.mjs");
      } catch {
        return false;
      }
    });
    expect(runnerPid).toBeTruthy();
    const piPids = execFileSync("ps", ["-o", "pid=", "--ppid", runnerPid!], { encoding: "utf8" }).split("\n").map((l) => Number(l.trim())).filter(Boolean);
    expect(piPids.length).toBeGreaterThan(0);
    // Its event loop no longer runs (here: stopped); the box and the runner stay alive.
    for (const pid of piPids) process.kill(pid, "SIGSTOP");
    try {
      const child = await waitFor("the run to settle", async () => {
        const t = (await api(`/api/threads/${childId}`)).body;
        return t.status === "failed" ? t : null;
      }, 30_000);
      expect([child.status, child.reason]).toEqual(["failed", "pi_session_orphaned"]);
      expect(child.detail).toMatch(/no heartbeat/);
    } finally {
      for (const pid of piPids) try { process.kill(pid, "SIGCONT"); } catch { /* gone */ }
      killProcessesOfThread(childId);
    }
  });

  it("pi killed with SIGKILL: the runner posts pi_failed", async () => {
    model.push({ hang: true });
    const envId = await environment();
    const before = model.requests.length;
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const childId = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "hang then die" } })).body.childThreadId;
    await waitFor("pi to call the model", async () => model.requests.length > before);
    const killed = killChildrenOfRunner(childId);
    expect(killed).toBeGreaterThanOrEqual(1);
    const child = await settled(childId);
    expect([child.status, child.reason]).toEqual(["failed", "pi_failed"]);
    const finished = (await entries(childId)).filter((e) => e.payload.type === "signal.thread.status_changed" && e.payload.status !== "running");
    expect(finished).toHaveLength(1);
    expect(String(finished[0].payload.reason)).toMatch(/SIGKILL|signal/i);
  });

  it("the stream unreachable for a while mid-run: every entry still lands once, in order", async () => {
    model.push(
      { toolCalls: [{ name: "bash", arguments: { command: "sleep 2; echo one" } }] },
      { toolCalls: [{ name: "bash", arguments: { command: "echo two" } }] },
      { text: "Finished after the outage." },
    );
    const envId = await environment();
    const before = model.requests.length;
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const childId = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "survive an outage" } })).body.childThreadId;
    await waitFor("the first tool call", async () => model.requests.length > before);
    streamPath.pause();
    await new Promise((r) => setTimeout(r, 2500));
    streamPath.resume();
    const child = await settled(childId);
    expect(child.status).toBe("completed");
    expect(streamPath.refused).toBeGreaterThan(0);
    const es = await entries(childId);
    expect(new Set(es.map((e) => e.id)).size).toBe(es.length);
    const results = es.filter((e) => e.payload.type === "pi.tool_result").map((e) => JSON.stringify(e.payload));
    expect(results).toHaveLength(2);
    expect(results[0]).toContain("one");
    expect(results[1]).toContain("two");
    const kinds = es.map((e) => e.payload.type).filter((k) => k.startsWith("pi.tool"));
    expect(kinds).toEqual(["pi.tool_call", "pi.tool_result", "pi.tool_call", "pi.tool_result"]);
    expect(statuses(es).filter((s) => s !== "running")).toEqual(["completed"]);
  });

  it("resume on a fresh box: the rebuilt session loads and the model sees the first turn", async () => {
    model.push({ text: "The first answer is BLUE." });
    const envId = await environment();
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const childId = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "pick a colour" } })).body.childThreadId;
    expect((await settled(childId)).status).toBe("completed");
    const firstBox = (await api(`/api/threads/${childId}`)).body.boxId;
    await waitFor("the first box to be reaped", async () => (await api(`/api/sandboxes/${firstBox}`)).body.state === "deleted", 30_000);

    model.push({ text: "You said BLUE before." });
    const before = model.requests.length;
    const r = await api(`/api/threads/${childId}/resume`, { method: "POST", json: { message: "what did you pick?" } });
    expect(r.status).toBe(202);
    const again = await settled(childId);
    expect(again.status).toBe("completed");
    expect(again.boxId).not.toBe(firstBox);
    const second = model.requests.slice(before)[0];
    const sent = JSON.stringify(second.messages);
    expect(sent).toContain("pick a colour");
    expect(sent).toContain("The first answer is BLUE.");
    expect(sent).toContain("what did you pick?");
    const es = await entries(childId);
    // Each run: its claim, its readiness milestone naming the box it runs on, its end.
    expect(statuses(es)).toEqual(["running", "running", "completed", "running", "running", "completed"]);
    const ready = es.filter((e) => e.id.startsWith("ready:")).map((e) => e.payload.boxId);
    expect(ready).toEqual([firstBox, again.boxId]);
    const launches = es.filter((e) => e.payload.type === "signal.run.launched").map((e) => [e.payload.boxReused, e.payload.session]);
    expect(launches).toEqual([[false, "new"], [false, "rebuilt"]]);
    expect(new Set(es.map((e) => e.id)).size).toBe(es.length);
    expect((await api(`/api/threads/${childId}/resume`, { method: "POST", json: {} })).status).toBe(400);
  });

  it("what a command prints of a secret or a sensitive file reaches the thread redacted, in entries and artifacts", async () => {
    model.push(
      { toolCalls: [{ name: "bash", arguments: { command: "cat priv.txt; echo \"key=$SCRIPTED_MODEL_KEY\"; cp priv.txt copy.txt; echo more >> priv.txt" } }] },
      { text: "Looked." },
    );
    const envId = await environment();
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { files: [{ path: "priv.txt", content: "PRIVATE-e2e-sensitive-77\n", sensitive: true }] } })).status).toBe(200);
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const childId = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "look at the files" } })).body.childThreadId;
    expect((await settled(childId)).status).toBe("completed");
    const files = await waitFor("the run's files", async () =>
      (await api(`/api/threads/${childId}/artifacts`)).body.artifacts.find((a: any) => a.payload.type === "artifact.files"), 30_000);
    const es = await entries(childId);
    const all = JSON.stringify(es);
    expect(all).not.toContain("PRIVATE-e2e-sensitive-77");
    expect(all).not.toContain("sk-e2e-secret-value");
    const output = String(es.find((e) => e.payload.type === "pi.tool_result")!.payload.output);
    expect(output).toContain("[redacted]");
    expect(output).toContain("key=[redacted]");
    const byPath = Object.fromEntries((files.payload.files as any[]).map((f) => [f.path, f]));
    expect(byPath["priv.txt"]).toMatchObject({ status: "modified", omitted: "secret" });
    expect(byPath["copy.txt"].content).toMatch(/^\[redacted\]\n?$/);
  });

  it("checks out a repository (a local path as file://) before the harness starts", async () => {
    const repo = tempDir("tb-repo-");
    const git = (cmd: string) => execSync(`git -c user.email=t@t -c user.name=t ${cmd}`, { cwd: repo, stdio: "pipe" });
    git("init -q -b main");
    writeFileSync(join(repo, "MARKER.txt"), "marker-from-repo\n");
    git("add MARKER.txt");
    git("commit -q -m init");
    model.push(
      { toolCalls: [{ name: "bash", arguments: { command: "cat MARKER.txt && git log --oneline | wc -l && echo changed-by-run >> MARKER.txt && echo fresh > NEW.txt && echo \"KEY=$SCRIPTED_MODEL_KEY\" > NOTES.txt" } }] },
      { text: "Read it." },
    );
    const envId = await environment();
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const d = await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "read the marker", repo: `file://${repo}`, branch: "main" } });
    expect(d.status).toBe(202);
    const child = await settled(d.body.childThreadId);
    expect(child.status).toBe("completed");
    const result = (await entries(d.body.childThreadId)).find((e) => e.payload.type === "pi.tool_result")!;
    expect(JSON.stringify(result.payload)).toContain("marker-from-repo");

    // A checkout's result is git status plus the diff against the commit the run started from.
    const { artifacts } = (await api(`/api/threads/${d.body.childThreadId}/artifacts`)).body;
    const diff = artifacts.find((a: any) => a.payload.type === "artifact.diff").payload;
    expect(diff.status).toContain(" M MARKER.txt");
    expect(diff.status).toContain("?? NEW.txt");
    expect(diff.diff).toContain("+changed-by-run");
    expect(diff.diff).toContain("+fresh");
    expect(diff.truncated).toBe(false);
    const files = artifacts.find((a: any) => a.payload.type === "artifact.files").payload.files;
    expect(files.map((f: any) => [f.path, f.status]).sort()).toEqual([["MARKER.txt", "modified"], ["NEW.txt", "added"], ["NOTES.txt", "added"]]);
    // An environment secret the run wrote into a file never reaches the thread.
    expect(JSON.stringify(artifacts)).not.toContain("sk-e2e-secret-value");
    expect(JSON.stringify(artifacts)).toContain("KEY=[redacted]");
  });

  it("stop, then resume on the same box: pi continues its own session file", async () => {
    // pi writes its session file once an assistant message exists: stop it inside a long tool call.
    model.push({ toolCalls: [{ name: "bash", arguments: { command: "sleep 60" } }] });
    const envId = await environment();
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const delegated = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "remember the word ORANGE" } })).body;
    const childId = delegated.childThreadId;
    await waitFor("the tool call to be mirrored", async () => (await entries(childId)).some((e) => e.payload.type === "pi.tool_call"));
    expect(processesOfRun(delegated.runId)).toBeGreaterThan(0);
    const stopped = await api(`/api/threads/${childId}/stop`, { method: "POST" });
    expect(stopped.status).toBe(200);
    expect([stopped.body.status, stopped.body.reason]).toEqual(["failed", "stopped"]);
    // The stop reaches the box: the stopped run's processes (runner, pi, its tool) are gone.
    await waitFor("the stopped run's processes to end", async () => processesOfRun(delegated.runId) === 0, 15_000);
    const boxId = stopped.body.boxId as string;
    expect((await api(`/api/sandboxes/${boxId}`)).body.state).toBe("live"); // a stopped run keeps its box

    model.push({ text: "The word was ORANGE." });
    const beforeResume = model.requests.length;
    expect((await api(`/api/threads/${childId}/resume`, { method: "POST", json: { message: "which word?" } })).status).toBe(202);
    const done = await settled(childId);
    expect(done.status).toBe("completed");
    expect(done.boxId).toBe(boxId);
    const sent = JSON.stringify(model.requests.slice(beforeResume)[0].messages);
    expect(sent).toContain("remember the word ORANGE");
    expect(sent).toContain("which word?");
    const es = await entries(childId);
    const launches = es.filter((e) => e.payload.type === "signal.run.launched").map((e) => [e.payload.boxReused, e.payload.session]);
    expect(launches).toEqual([[false, "new"], [true, "continued"]]);
    expect(new Set(es.map((e) => e.id)).size).toBe(es.length);
  });

  it("a resume on an environment's shared box continues its own thread's session, not the one another thread left there last", async () => {
    const envId = await environment();
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { boxMode: "shared" } })).status).toBe(200);
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const delegate = async (task: string) => (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task } })).body.childThreadId as string;
    model.push({ text: "Noted: APPLE." });
    const mine = await delegate("remember the word APPLE");
    expect((await settled(mine)).status).toBe("completed");
    model.push({ text: "Noted: PLUM." });
    const other = await delegate("remember the word PLUM");
    expect((await settled(other)).status).toBe("completed");

    model.push({ text: "The word was APPLE." });
    const beforeResume = model.requests.length;
    expect((await api(`/api/threads/${mine}/resume`, { method: "POST", json: { message: "which word?" } })).status).toBe(202);
    expect((await settled(mine)).status).toBe("completed");
    const sent = JSON.stringify(model.requests.slice(beforeResume)[0].messages);
    expect(sent).toContain("remember the word APPLE");
    expect(sent).not.toContain("PLUM");
    const es = await entries(mine);
    // Nothing of the other thread's conversation is mirrored onto this one.
    expect(JSON.stringify(es)).not.toContain("PLUM");
    expect(es.filter((e) => e.payload.type === "signal.run.launched").map((e) => e.payload.session)).toEqual(["new", "continued"]);
  });
});

describe("long runs", () => {
  // One run proves both: its writes after the first token expired land (the mirror and the runner
  // renew it), and so does a message posted then (the runner's thread watch reads with the new one).
  it("a run that outlives its stream token keeps writing, and a message posted after the first token expired still reaches pi, once", async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    model.push(
      { toolCalls: [{ name: "bash", arguments: { command: "sleep 12; echo slept" } }] },
      { text: "Done, message read.", until: held },
    );
    const envId = await environment();
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const childId = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "outlive the token, then listen" } })).body.childThreadId as string;
    await waitFor("pi's tool call", async () => (await entries(childId)).some((e) => e.payload.type === "pi.tool_call"), 30_000);
    // STREAM_TOKEN_TTL_SECONDS is 8 here: by now the token the run started with has expired.
    await new Promise((r) => setTimeout(r, 9_000));
    const before = model.requests.length;
    const posted = await api(`/api/threads/${childId}/entries`, { method: "POST", json: { payload: { type: "chat", text: "LATE: mention the token" } } });
    expect(posted.status).toBe(201);
    const chatId = posted.body.entries[0].id as string;
    await waitFor("the message to be delivered", async () => (await entries(childId)).some((e) => e.payload.type === "signal.run.message_delivered" && e.payload.entryId === chatId), 20_000);
    release();
    const child = await settled(childId);
    expect(child.status).toBe("completed");
    const es = await entries(childId);
    expect(es.filter((e) => e.payload.type === "signal.run.message_delivered" && e.payload.entryId === chatId)).toHaveLength(1);
    expect(es.filter((e) => e.payload.type === "pi.user" && e.payload.text === "LATE: mention the token")).toHaveLength(1);
    expect(JSON.stringify(es.find((e) => e.payload.type === "pi.tool_result")!.payload)).toContain("slept");
    expect(es.some((e) => e.payload.type === "pi.assistant" && e.payload.text === "Done, message read.")).toBe(true);
    expect(model.requests.slice(before).some((r) => JSON.stringify(r.body.messages).includes("LATE: mention the token"))).toBe(true);
    const ids = es.map((e) => e.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(statuses(es).filter((s) => s !== "running")).toEqual(["completed"]);
  });
});

describe("an environment's workspace", () => {
  it("its files are in the working directory, and a tool its allowed tools leave out is refused on the thread", async () => {
    model.push(
      { toolCalls: [{ name: "read", arguments: { path: "brief/notes.md" } }] },
      { toolCalls: [{ name: "bash", arguments: { command: "echo should-not-run > ran.txt" } }] },
      { text: "Read the notes; bash was not allowed." },
    );
    const envId = await environment();
    const patched = await api(`/api/environments/${envId}`, {
      method: "PATCH",
      json: { files: [{ path: "brief/notes.md", content: "notes-from-the-environment\n" }, { path: ".env.local", content: "TOKEN=tok-sensitive-123", sensitive: true }], allowedTools: ["read"] },
    });
    expect(patched.status).toBe(200);
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const childId = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "read the brief" } })).body.childThreadId as string;
    const child = await settled(childId);
    expect(child.status).toBe("completed");
    const es = await entries(childId);
    const results = es.filter((e) => e.payload.type === "pi.tool_result");
    expect(JSON.stringify(results[0].payload)).toContain("notes-from-the-environment");
    expect(results[1].payload.isError).toBe(true);
    expect(JSON.stringify(results[1].payload)).toMatch(/bash/i);
    expect(es.find((e) => e.payload.type === "signal.run.launched")!.payload).toMatchObject({ allowedTools: ["read"], files: ["brief/notes.md", ".env.local"] });
    // The refused command never ran; the sensitive file's content is on no entry (artifacts included).
    expect(JSON.stringify(es)).not.toContain("should-not-run\\n");
    expect(JSON.stringify(es)).not.toContain("tok-sensitive-123");
  });
});

describe("an environment's repositories", () => {
  it("every repository is cloned side by side into the working directory (real SDK git API)", async () => {
    const makeRepo = (file: string, text: string) => {
      const dir = tempDir("tb-envrepo-");
      const git = (cmd: string) => execSync(`git -c user.email=t@t -c user.name=t ${cmd}`, { cwd: dir, stdio: "pipe" });
      git("init -q -b main");
      writeFileSync(join(dir, file), text);
      git(`add ${file}`);
      git("commit -q -m init");
      return dir;
    };
    const a = makeRepo("A.txt", "from-repo-a\n");
    const b = makeRepo("B.txt", "from-repo-b\n");
    model.push({ toolCalls: [{ name: "bash", arguments: { command: "cat app/A.txt libs/b/B.txt" } }] }, { text: "Both are here." });
    const envId = await environment();
    const patched = await api(`/api/environments/${envId}`, { method: "PATCH", json: { repositories: [{ url: `file://${a}`, path: "app", branch: "main" }, { url: `file://${b}`, path: "libs/b" }] } });
    expect(patched.status).toBe(200);
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const childId = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "look at both repos" } })).body.childThreadId as string;
    expect((await settled(childId)).status).toBe("completed");
    const out = JSON.stringify((await entries(childId)).find((e) => e.payload.type === "pi.tool_result")!.payload);
    expect(out).toContain("from-repo-a");
    expect(out).toContain("from-repo-b");
  });
});

describe("an environment's plugins", () => {
  it("pi gets the environment's skill (advertised to the model) and runs its extension", async () => {
    model.push({ toolCalls: [{ name: "bash", arguments: { command: "cat ext-was-here.txt" } }] }, { text: "The extension ran." });
    const envId = await environment();
    const ext = `import { writeFileSync } from "node:fs";\nexport default function (pi: any) {\n  pi.on("session_start", () => writeFileSync("ext-was-here.txt", "extension-loaded\\n"));\n}\n`;
    const patched = await api(`/api/environments/${envId}`, {
      method: "PATCH",
      json: { plugins: { skills: [{ name: "house-style", description: "House style guide: use when writing prose for this team.", instructions: "Short sentences." }], extensions: [{ name: "marker", source: ext }] } },
    });
    expect(patched.status).toBe(200);
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const before = model.requests.length;
    const childId = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "check the plugins" } })).body.childThreadId as string;
    expect((await settled(childId)).status).toBe("completed");
    expect(JSON.stringify(model.requests[before].body.messages)).toContain("House style guide: use when writing prose for this team.");
    const es = await entries(childId);
    expect(JSON.stringify(es.find((e) => e.payload.type === "pi.tool_result")!.payload)).toContain("extension-loaded");
    expect(es.find((e) => e.payload.type === "signal.run.launched")!.payload.plugins).toEqual({ skills: ["house-style"], extensions: ["marker"], mcpServers: [] });
  });
});

describe("an environment's egress", () => {
  it("a run that may reach only its model cannot reach another loopback server, and still posts everything to its thread", async () => {
    const http = await import("node:http");
    const other = http.createServer((_q, r) => r.end("secret-internal-service"));
    await new Promise<void>((r) => other.listen(0, "127.0.0.1", () => r()));
    const otherPort = (other.address() as { port: number }).port;
    try {
      model.push(
        { toolCalls: [{ name: "bash", arguments: { command: `curl -s -m 3 http://127.0.0.1:${otherPort}/ || echo BLOCKED` } }] },
        { text: "It was blocked." },
      );
      const envId = await environment();
      const modelHost = new URL(model.baseUrl).host;
      expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { egress: { allow: [modelHost] } } })).status).toBe(200);
      const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
      const childId = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "try the internal service" } })).body.childThreadId as string;
      expect((await settled(childId)).status).toBe("completed");
      const es = await entries(childId);
      const out = JSON.stringify(es.find((e) => e.payload.type === "pi.tool_result")!.payload);
      expect(out).toContain("BLOCKED");
      expect(out).not.toContain("secret-internal-service");
      // The thread stream stayed reachable: the mirror's entries and the runner's signal arrived.
      expect(es.some((e) => e.payload.type === "pi.assistant" && e.payload.text === "It was blocked.")).toBe(true);
    } finally {
      other.close();
    }
  });

  it("an allow-list the local host cannot enforce fails the run with the host's reason, on a box of its own and on a shared box alike", async () => {
    for (const boxMode of ["ephemeral", "shared"]) {
      const envId = await environment();
      expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { boxMode, egress: { allow: ["example.com"] } } })).status).toBe(200);
      const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
      const childId = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "anything" } })).body.childThreadId as string;
      const row = await settled(childId);
      expect([boxMode, row.status, row.detail]).toEqual([boxMode, "failed", expect.stringContaining("cannot allow example.com")]);
    }
  });

  it("with egress deny the box reaches nothing but its stream: pi cannot reach the loopback model the test runs, and the failure still lands on the thread", async () => {
    const envId = await environment();
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { egress: "deny" } })).status).toBe(200);
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const before = model.requests.length;
    const childId = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "say hello" } })).body.childThreadId as string;
    const row = await settled(childId);
    expect(row.status).toBe("failed");
    expect(row.reason).toBe("pi_failed");
    // Nothing from this box reached the model server...
    expect(model.requests.length).toBe(before);
    // ...while the stream did: the launch, the runner's stderr tail and its finished-signal are on the thread.
    const es = await entries(childId);
    expect(es.some((e) => e.payload.type === "signal.run.launched")).toBe(true);
    const finished = es.filter((e) => e.payload.type === "signal.thread.status_changed" && e.payload.status !== "running");
    expect(finished).toHaveLength(1);
    expect(finished[0].authorId).not.toBe("threadbox");
  });
});

describe("a shared box", () => {
  it("runs of a shared environment use its one box; the second finds the repository at the new commit without a reclone, untracked work kept; with reset, the third finds exactly the new commit", async () => {
    const origin = tempDir("tb-shared-origin-");
    const git = (cmd: string) => execSync(`git -c user.email=t@t -c user.name=t ${cmd}`, { cwd: origin, stdio: "pipe" });
    git("init -q -b main");
    writeFileSync(join(origin, "VERSION"), "v1\n");
    git("add VERSION");
    git("commit -q -m v1");
    model.push(
      { toolCalls: [{ name: "bash", arguments: { command: "cat VERSION && echo mine > scratch.txt" } }] },
      { text: "Saw v1." },
      { toolCalls: [{ name: "bash", arguments: { command: "cat VERSION scratch.txt && echo local-edit >> VERSION && git reflog show HEAD | grep -c -e 'clone:' -e 'Fast-forward'" } }] },
      { text: "Saw v2." },
      { toolCalls: [{ name: "bash", arguments: { command: "cat VERSION; ls scratch.txt; echo changed=$(git status --porcelain | wc -l)" } }] },
      { text: "Saw v3." },
    );
    const envId = await environment();
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { boxMode: "shared", repositories: [{ url: `file://${origin}`, branch: "main", path: "app" }] } })).status).toBe(200);
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const first = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "check the version" } })).body.childThreadId as string;
    expect((await settled(first)).status).toBe("completed");
    const firstEntries = await entries(first);
    expect(JSON.stringify(firstEntries.find((e) => e.payload.type === "pi.tool_result")!.payload)).toContain("v1");
    const boxId = firstEntries.find((e) => e.payload.type === "signal.run.launched")!.payload.boxId as string;

    /** Commits `version` upstream, delegates again and returns what the run's tool printed (on the same box). */
    const nextRun = async (version: string, task: string) => {
      writeFileSync(join(origin, "VERSION"), `${version}\n`);
      git(`commit -q -am ${version}`);
      const child = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task } })).body.childThreadId as string;
      expect((await settled(child)).status).toBe("completed");
      const es = await entries(child);
      expect(es.find((e) => e.payload.type === "signal.run.launched")!.payload.boxId).toBe(boxId);
      return String(es.find((e) => e.payload.type === "pi.tool_result")!.payload.output);
    };
    const out = await nextRun("v2", "check again");
    expect(out).toContain("v2");
    expect(out).toContain("mine");
    // One clone and one fast-forward in HEAD's history: updated in place, not cloned again (which
    // would also have lost scratch.txt).
    expect(out.trim().split("\n").at(-1)).toBe("2");
    // The shared box outlives its runs.
    expect((await api(`/api/sandboxes/${boxId}`)).body).toMatchObject({ state: "live", ephemeral: false });

    // Asked to reset, the next run finds exactly the new commit: the local edit and the untracked file are gone.
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { repositories: [{ url: `file://${origin}`, branch: "main", path: "app", reset: true }] } })).status).toBe(200);
    const out3 = await nextRun("v3", "check once more");
    expect(out3).toContain("v3");
    expect(out3).not.toContain("local-edit");
    expect(out3).toMatch(/scratch\.txt'?: No such file/);
    expect(out3).toContain("changed=0");
  });
});

describe("a shared box whose repository moved", () => {
  it("fetches from the repository's new URL when the environment changes it: the next run finds the new repository's commit, not the old one's", async () => {
    const old = tempDir("tb-moved-old-");
    const git = (cmd: string, cwd: string) => execSync(`git -c user.email=t@t -c user.name=t ${cmd}`, { cwd, stdio: "pipe" });
    git("init -q -b main", old);
    writeFileSync(join(old, "WHERE"), "old home\n");
    git("add WHERE", old);
    git("commit -q -m v1", old);
    // The repository moved (a mirror, a fork taken over): same history, and new commits only there.
    const moved = tempDir("tb-moved-new-");
    execSync(`git clone -q ${old} ${moved}`, { stdio: "pipe" });
    writeFileSync(join(moved, "WHERE"), "new home\n");
    git("commit -q -am v2", moved);
    model.push(
      { toolCalls: [{ name: "bash", arguments: { command: "cat WHERE" } }] },
      { text: "Old." },
      { toolCalls: [{ name: "bash", arguments: { command: "cat WHERE; git remote get-url origin" } }] },
      { text: "New." },
    );
    const envId = await environment();
    const repo = (url: string) => ({ boxMode: "shared", repositories: [{ url, branch: "main", path: "app" }] });
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: repo(`file://${old}`) })).status).toBe(200);
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const first = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "where" } })).body.childThreadId as string;
    expect((await settled(first)).status).toBe("completed");
    expect(String((await entries(first)).find((e) => e.payload.type === "pi.tool_result")!.payload.output)).toContain("old home");

    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: repo(`file://${moved}`) })).status).toBe(200);
    const second = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "where now" } })).body.childThreadId as string;
    expect((await settled(second)).status).toBe("completed");
    const es = await entries(second);
    // The launch entry names the new URL, and the checkout is that repository.
    expect(es.find((e) => e.payload.type === "signal.run.launched")!.payload.repositories[0].url).toBe(`file://${moved}`);
    const out = String(es.find((e) => e.payload.type === "pi.tool_result")!.payload.output);
    expect(out).toContain("new home");
    expect(out).toContain(`file://${moved}`);
  });
});

describe("a shared box pinned to a commit, then unpinned", () => {
  it("a repository without branch or commit follows the remote's default branch again, also from the detached commit an earlier setting left", async () => {
    const origin = tempDir("tb-unpin-");
    const git = (cmd: string) => execSync(`git -c user.email=t@t -c user.name=t ${cmd}`, { cwd: origin, stdio: "pipe", encoding: "utf8" });
    git("init -q -b trunk");
    writeFileSync(join(origin, "VERSION"), "v1\n");
    git("add VERSION");
    git("commit -q -m v1");
    const v1 = git("rev-parse HEAD").trim();
    model.push(
      { toolCalls: [{ name: "bash", arguments: { command: "cat VERSION" } }] },
      { text: "v1." },
      { toolCalls: [{ name: "bash", arguments: { command: "cat VERSION; git branch --show-current" } }] },
      { text: "v2." },
    );
    const envId = await environment();
    const repo = (extra: object) => ({ boxMode: "shared", repositories: [{ url: `file://${origin}`, path: "app", ...extra }] });
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: repo({ ref: v1 }) })).status).toBe(200);
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const first = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "pinned" } })).body.childThreadId as string;
    expect((await settled(first)).status).toBe("completed");

    writeFileSync(join(origin, "VERSION"), "v2\n");
    git("commit -q -am v2");
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: repo({}) })).status).toBe(200);
    const second = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "unpinned" } })).body.childThreadId as string;
    const row = await settled(second);
    expect([row.status, row.detail]).toEqual(["completed", "stop"]);
    const out = String((await entries(second)).find((e) => e.payload.type === "pi.tool_result")!.payload.output);
    expect(out.trim().split("\n")).toEqual(["v2", "trunk"]);
  });
});

describe("a repository at a tag, as deep as asked", () => {
  it("a run finds the tag checked out though it is no branch's tip; on a shared box the next run finds the new tag, fetched in place", async () => {
    const origin = tempDir("tb-tag-");
    const git = (cmd: string) => execSync(`git -c user.email=t@t -c user.name=t ${cmd}`, { cwd: origin, stdio: "pipe", encoding: "utf8" });
    git("init -q -b main");
    for (const v of ["v1", "v2", "v3"]) {
      writeFileSync(join(origin, "VERSION"), `${v}\n`);
      git("add VERSION");
      git(`commit -q -m ${v}`);
      if (v !== "v3") git(`tag ${v}`);
    }
    const look = { toolCalls: [{ name: "bash", arguments: { command: "cat VERSION; git rev-list --count HEAD" } }] };
    model.push(look, { text: "Saw one." }, look, { text: "Saw two." });
    const envId = await environment();
    const repo = (ref: string) => ({ boxMode: "shared", repositories: [{ url: `file://${origin}`, path: "app", ref, depth: 1 }] });
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: repo("v1") })).status).toBe(200);
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const seen = async (task: string) => {
      const child = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task } })).body.childThreadId as string;
      expect((await settled(child)).status).toBe("completed");
      return String((await entries(child)).find((e) => e.payload.type === "pi.tool_result")!.payload.output).trim().split("\n");
    };
    expect(await seen("which version")).toEqual(["v1", "1"]);
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: repo("v2") })).status).toBe(200);
    expect((await seen("which version now"))[0]).toBe("v2");
  });
});

describe("a shared box and the environment's files", () => {
  it("what the environment no longer puts there leaves the box: a file taken out is gone for run_command at once, a file whose place moved is gone after the next run; a sensitive file taken out lets the box go", async () => {
    const origin = tempDir("tb-managed-");
    execSync("git init -q -b main && echo x > README && git add . && git -c user.email=t@t -c user.name=t commit -qm x", { cwd: origin, stdio: "pipe", shell: "/bin/bash" });
    model.push(
      { toolCalls: [{ name: "bash", arguments: { command: "ls" } }] }, { text: "Listed." },
      { toolCalls: [{ name: "bash", arguments: { command: "ls" } }] }, { text: "Listed again." },
    );
    const envId = await environment();
    const one = [{ url: `file://${origin}`, branch: "main", path: "app" }];
    const files = [{ path: "creds.txt", content: "very-secret-credential-value\n", sensitive: true }, { path: "notes.txt", content: "plain notes\n" }, { path: "todo.txt", content: "plain todo\n" }];
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { boxMode: "shared", repositories: one, files } })).status).toBe(200);
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const run = async () => {
      const child = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "look" } })).body.childThreadId as string;
      expect((await settled(child)).status).toBe("completed");
    };
    const exec = async (command: string) => (await api(`/api/environments/${envId}/exec`, { method: "POST", json: { command } })).body as { boxId: string; output: string };
    const sh = async (command: string) => String((await exec(command)).output);
    await run();
    expect(await sh("cat work/app/creds.txt")).toBe("[redacted]");

    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { files: files.slice(0, 2) } })).status).toBe(200);
    expect(await sh("cat work/app/todo.txt 2>&1; cat work/app/notes.txt")).toMatch(/No such file[\s\S]*plain notes/);

    // Two repositories: the working directory is work/, so notes.txt is written there now.
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { repositories: [...one, { url: `file://${origin}`, branch: "main", path: "other" }] } })).status).toBe(200);
    await run();
    expect(await sh("ls work/notes.txt work/app/notes.txt 2>&1")).toMatch(/work\/app\/notes\.txt.*No such file[\s\S]*^work\/notes\.txt$/m);

    // The box held the sensitive file, and whatever runs made of it, which redaction no longer
    // knows once it is taken out: the box is let go, and commands go to a new one.
    const held = (await exec("true")).boxId;
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { files: [files[1]] } })).status).toBe(200);
    const after = await exec("cat work/app/creds.txt 2>&1");
    expect([after.boxId === held, after.output]).toEqual([false, expect.stringContaining("No such file")]);
  });
});

describe("two runs at once on a shared box, with different harnesses", () => {
  it("keep each other's files: a claude-code run launched while a pi run works leaves pi's models.json and settings.json in place", async () => {
    // A stand-in for Claude Code on the box's PATH: it answers one scripted session and ends.
    const bin = tempDir("tb-fake-claude-");
    writeFileSync(join(bin, "claude"), `#!/bin/sh\ncat '${join(ROOT, "test/fixtures/claude-code-stream-json-success.jsonl")}'\n`, { mode: 0o755 });
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const before = model.requests.length;
    model.push({ text: "Done.", until: held });
    const envId = await environment({ PATH: `${bin}:${process.env.PATH}` });
    // Claude Code's run writes a file of its own: the MCP servers' .mcp.json.
    const plugins = { skills: [], extensions: [], mcpServers: { docs: { command: "docs-mcp", args: ["--stdio"] } } };
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { boxMode: "shared", plugins } })).status).toBe(200);
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const delegate = async (harness: string) => (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "work", harness } })).body.childThreadId as string;
    const sh = async (command: string) => String((await api(`/api/environments/${envId}/exec`, { method: "POST", json: { command } })).body.output);
    const pi = await delegate("pi");
    try {
      // pi runs, waiting on its model, with its config read from the box.
      await waitFor("pi to ask its model", async () => model.requests.length > before);
      const claude = await delegate("claude-code");
      await settled(claude);
      expect((await entries(claude)).some((e) => e.payload.type === "signal.run.launched")).toBe(true);
      expect(await sh("ls .threadbox/pi-agent/models.json .threadbox/pi-agent/settings.json 2>&1")).toBe(".threadbox/pi-agent/models.json\n.threadbox/pi-agent/settings.json\n");
      expect(await sh("ls work/.mcp.json")).toBe("work/.mcp.json\n");
    } finally {
      release();
    }
    expect((await settled(pi)).status).toBe("completed");
    // Both launches' files are still recorded: what the environment drops now leaves the box.
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { piSettings: null } })).status).toBe(200);
    expect(await sh("ls .threadbox/pi-agent/models.json .threadbox/pi-agent/settings.json 2>/dev/null")).toBe(".threadbox/pi-agent/models.json\n");
  });
});

describe("a shared box whose environment drops a file while a run launches there", () => {
  it("the launch that read the old environment does not bring the file back: it is gone for run_command once the run is up", async () => {
    const origin = tempDir("tb-managed-race-");
    execSync("git init -q -b main && echo x > README && git add . && git -c user.email=t@t -c user.name=t commit -qm x", { cwd: origin, stdio: "pipe", shell: "/bin/bash" });
    // git on the box's PATH that waits at a fetch while `hold` exists: the second launch is held
    // after it read the environment and before it writes the environment's files.
    const bin = tempDir("tb-held-git-");
    const realGit = execSync("command -v git", { encoding: "utf8", shell: "/bin/bash" }).trim();
    writeFileSync(join(bin, "git"), `#!/bin/sh
case " $* " in *" fetch "*) while [ -e '${bin}/hold' ]; do touch '${bin}/waiting'; sleep 0.1; done;; esac
exec '${realGit}' "$@"
`, { mode: 0o755 });
    model.push({ text: "One." }, { text: "Two." });
    const envId = await environment({ PATH: `${bin}:${process.env.PATH}` });
    const files = [{ path: "creds.txt", content: "very-secret-credential-value\n", sensitive: true }, { path: "notes.txt", content: "plain notes\n" }, { path: "todo.txt", content: "plain todo\n" }];
    const repositories = [{ url: `file://${origin}`, branch: "main", path: "app" }];
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { boxMode: "shared", repositories, files } })).status).toBe(200);
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const delegate = async () => (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "look" } })).body.childThreadId as string;
    const sh = async (command: string) => String((await api(`/api/environments/${envId}/exec`, { method: "POST", json: { command } })).body.output);
    expect((await settled(await delegate())).status).toBe("completed");

    writeFileSync(join(bin, "hold"), "");
    const second = await delegate();
    try {
      await waitFor("the second launch to reach its fetch", async () => existsSync(join(bin, "waiting")));
      // A plain file: a sensitive one taken out lets the whole box go (see "a shared box and the environment's files").
      expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { files: files.slice(0, 2) } })).status).toBe(200);
    } finally {
      rmSync(join(bin, "hold"), { force: true });
    }
    expect((await settled(second)).status).toBe("completed");
    expect(await sh("cat work/app/todo.txt 2>&1; cat work/app/notes.txt")).toMatch(/No such file[\s\S]*plain notes/);
  });
});

describe("a shared box whose environment gains a file while an earlier launch there is held up", () => {
  it("the earlier launch leaves the file a later run wrote: it is there for run_command after both runs", async () => {
    const origin = tempDir("tb-managed-order-");
    execSync("git init -q -b main && echo x > README && git add . && git -c user.email=t@t -c user.name=t commit -qm x", { cwd: origin, stdio: "pipe", shell: "/bin/bash" });
    // git on the box's PATH whose first fetch after `hold` appears waits until `held` is gone.
    const bin = tempDir("tb-held-once-git-");
    const realGit = execSync("command -v git", { encoding: "utf8", shell: "/bin/bash" }).trim();
    writeFileSync(join(bin, "git"), `#!/bin/sh
case " $* " in *" fetch "*) if mv '${bin}/hold' '${bin}/held' 2>/dev/null; then while [ -e '${bin}/held' ]; do touch '${bin}/waiting'; sleep 0.1; done; fi;; esac
exec '${realGit}' "$@"
`, { mode: 0o755 });
    model.push({ text: "One." }, { text: "Two." }, { text: "Three." });
    const envId = await environment({ PATH: `${bin}:${process.env.PATH}` });
    const notes = { path: "notes.txt", content: "plain notes\n" };
    const repositories = [{ url: `file://${origin}`, branch: "main", path: "app" }];
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { boxMode: "shared", repositories, files: [notes] } })).status).toBe(200);
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const delegate = async () => (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "look" } })).body.childThreadId as string;
    const sh = async (command: string) => String((await api(`/api/environments/${envId}/exec`, { method: "POST", json: { command } })).body.output);
    expect((await settled(await delegate())).status).toBe("completed");

    writeFileSync(join(bin, "hold"), "");
    const earlier = await delegate();
    try {
      await waitFor("the earlier launch to reach its fetch", async () => existsSync(join(bin, "waiting")));
      expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { files: [notes, { path: "added.txt", content: "added later\n" }] } })).status).toBe(200);
      expect((await settled(await delegate())).status).toBe("completed");
      expect(await sh("cat work/app/added.txt")).toBe("added later\n");
    } finally {
      rmSync(join(bin, "held"), { force: true });
    }
    expect((await settled(earlier)).status).toBe("completed");
    expect(await sh("cat work/app/added.txt 2>&1")).toBe("added later\n");
  });
});

describe("two runs at once on a shared box, in different working directories", () => {
  it("a delegate with its own repository launched while a run of the environment's repository works leaves that run's files", async () => {
    const origin = tempDir("tb-managed-cwd-");
    execSync("git init -q -b main && echo x > README && git add . && git -c user.email=t@t -c user.name=t commit -qm x", { cwd: origin, stdio: "pipe", shell: "/bin/bash" });
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const before = model.requests.length;
    model.push({ text: "Done.", until: held }, { text: "Two." });
    const envId = await environment();
    const json = { boxMode: "shared", repositories: [{ url: `file://${origin}`, branch: "main", path: "app" }], files: [{ path: "notes.txt", content: "plain notes\n" }] };
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json })).status).toBe(200);
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const delegate = async (extra: object) => (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "look", ...extra } })).body.childThreadId as string;
    const sh = async (command: string) => String((await api(`/api/environments/${envId}/exec`, { method: "POST", json: { command } })).body.output);
    // Its working directory is work/app; the delegate's own repository makes another's work/repo-<hash>.
    const first = await delegate({});
    try {
      await waitFor("the first run to ask its model", async () => model.requests.length > before);
      expect((await settled(await delegate({ repo: `file://${origin}` }))).status).toBe("completed");
      expect(await sh("ls work/app/notes.txt work/repo-*/notes.txt 2>&1")).toMatch(/^work\/app\/notes\.txt\nwork\/repo-[0-9a-f]{8}\/notes\.txt\n$/);
    } finally {
      release();
    }
    expect((await settled(first)).status).toBe("completed");
  });
});

describe("a launch whose upload the box did not take", () => {
  it("fails once, naming the path of the box in the way, not as an upload the provider did not confirm", async () => {
    const origin = tempDir("tb-upload-clash-");
    // The checkout has a file where the environment's file needs a directory, and a directory where one needs a file.
    execSync("git init -q -b main && echo x > conf && mkdir lib && echo x > lib/x.txt && git add . && git -c user.email=t@t -c user.name=t commit -qm x", { cwd: origin, stdio: "pipe", shell: "/bin/bash" });
    const envId = await environment();
    const json = { repositories: [{ url: `file://${origin}`, branch: "main", path: "app" }], files: [{ path: "conf/a.json", content: "{}" }] };
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json })).status).toBe(200);
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const child = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "anything" } })).body.childThreadId as string;
    const row = await settled(child);
    expect([row.status, row.detail]).toEqual(["failed", "launch failed: upload of work/app/conf/a.json failed: work/app/conf is a file in the box, not a directory"]);
    // One end, no retry: the launch's failure and nothing after it.
    const ends = (await entries(child)).filter((e) => e.payload.type === "signal.thread.status_changed" && e.payload.status !== "running");
    expect(ends.map((e) => e.payload.reason)).toEqual([row.detail]);
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { files: [{ path: "lib", content: "{}" }] } })).status).toBe(200);
    const second = await settled((await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "anything" } })).body.childThreadId as string);
    expect([second.status, second.detail]).toEqual(["failed", "launch failed: upload of work/app/lib failed: work/app/lib is a directory in the box, not a file"]);
  });
});

describe("delegates of different repositories on one shared box", () => {
  it("each gets a checkout of its own: the second does not turn the first's checkout to its repository while the first works there", async () => {
    const origins = ["alpha", "beta"].map((name) => {
      const dir = tempDir(`tb-two-repos-${name}-`);
      execSync(`git init -q -b main && echo ${name} > WHICH && git add . && git -c user.email=t@t -c user.name=t commit -qm ${name}`, { cwd: dir, stdio: "pipe", shell: "/bin/bash" });
      return dir;
    });
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const before = model.requests.length;
    model.push(
      { toolCalls: [{ name: "bash", arguments: { command: "cat WHICH; basename $(pwd)" } }], until: held },
      { toolCalls: [{ name: "bash", arguments: { command: "cat WHICH; basename $(pwd)" } }] },
      { text: "Beta done." },
      { text: "Alpha done." },
    );
    const envId = await environment();
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { boxMode: "shared" } })).status).toBe(200);
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const delegate = async (origin: string) => (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "which", repo: `file://${origin}` } })).body.childThreadId as string;
    const output = async (id: string) => String((await entries(id)).find((e) => e.payload.type === "pi.tool_result")!.payload.output).trim().split("\n");
    const alpha = await delegate(origins[0]);
    let beta: string;
    try {
      await waitFor("the alpha run to ask its model", async () => model.requests.length > before);
      beta = await delegate(origins[1]);
      expect((await settled(beta)).status).toBe("completed");
    } finally {
      release();
    }
    expect((await settled(alpha)).status).toBe("completed");
    const [alphaSaw, betaSaw] = [await output(alpha), await output(beta)];
    expect(alphaSaw[0]).toBe("alpha");
    expect(betaSaw[0]).toBe("beta");
    expect(alphaSaw[1]).toMatch(/^repo-[0-9a-f]{8}$/);
    expect(betaSaw[1]).not.toBe(alphaSaw[1]);
  });
});

describe("a shared box with a private repository", () => {
  it("clones with the token from a secret and fetches with it again when reconciling in place; the token is never kept in the checkout or shown", async () => {
    const root = tempDir("tb-git-root-");
    const work = tempDir("tb-git-work-");
    const sh = (cmd: string, cwd = work) => execSync(cmd, { cwd, stdio: "pipe", shell: "/bin/bash" });
    sh(`git init -q --bare -b main ${root}/app.git`);
    sh(`git init -q -b main && echo v1 > VERSION && git add . && git -c user.email=t@t -c user.name=t commit -qm v1 && git push -q ${root}/app.git main`);
    const secret = "ghp-private-token-e2e";
    const server = await startGitHttpServer(root, "x-access-token", secret);
    try {
      model.push(
        { toolCalls: [{ name: "bash", arguments: { command: "cat VERSION && cat .git/config" } }] },
        { text: "Saw v1." },
        { toolCalls: [{ name: "bash", arguments: { command: "cat VERSION && git reflog show HEAD | grep -c -e 'clone:' -e 'Fast-forward'" } }] },
        { text: "Saw v2." },
      );
      const envId = await environment();
      const patch = { boxMode: "shared", secrets: { GIT_TOKEN: secret }, repositories: [{ url: server.url("app.git"), branch: "main", path: "app", credentialsSecret: "GIT_TOKEN" }] };
      expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: patch })).status).toBe(200);
      const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
      const first = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "check the version" } })).body.childThreadId as string;
      expect((await settled(first)).status).toBe("completed");
      const out1 = String((await entries(first)).find((e) => e.payload.type === "pi.tool_result")!.payload.output);
      expect(out1).toContain("v1");
      expect(out1).toContain(server.url("app.git"));
      expect(out1).not.toContain(secret);

      sh(`echo v2 > VERSION && git -c user.email=t@t -c user.name=t commit -qam v2 && git push -q ${root}/app.git main`);
      const second = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "check again" } })).body.childThreadId as string;
      expect((await settled(second)).status).toBe("completed");
      const out2 = String((await entries(second)).find((e) => e.payload.type === "pi.tool_result")!.payload.output);
      expect(out2).toContain("v2");
      // One clone and one fast-forward: fetched in place with the token, not cloned again.
      expect(out2.trim().split("\n").at(-1)).toBe("2");
      // Every request without the token was refused; git asks anonymously first, then with it.
      expect(server.stats.served).toBeGreaterThan(0);
      for (const id of [first, second]) expect(JSON.stringify(await entries(id))).not.toContain(secret);
    } finally {
      await server.close();
    }
  });
});

describe("npm run snapshot -- --environment", () => {
  const snapshotScript = async (args: string[]) => {
    const env = {
      ...process.env, DAYTONA_API_URL: host.apiUrl, DAYTONA_API_KEY: SANDBOX_KEY, DAYTONA_TARGET: "local",
      THREADBOX_URL: worker.url, THREADBOX_TOKEN: token, XDG_CONFIG_HOME: tempDir("tb-snapcfg-"),
    };
    try {
      const r = await execFileAsync(process.execPath, [join(ROOT, "scripts", "snapshot.mjs"), ...args], { cwd: ROOT, env });
      return { code: 0, out: r.stdout + r.stderr };
    } catch (err: any) {
      return { code: err.code as number, out: String(err.stdout) + String(err.stderr) };
    }
  };
  const recorded = (name: string) => JSON.parse(readFileSync(join(host.root, "snapshots", `${name}.json`), "utf8")) as { buildInfo?: { dockerfileContent: string } };

  it("bakes the environment's packages into a snapshot named after them and points the environment at it", async () => {
    const envId = await environment();
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { packages: { npm: ["left-pad@1.3.0"], pip: ["requests==2.32.3"] } } })).status).toBe(200);
    const first = await snapshotScript(["--environment", envId]);
    expect(first.code, first.out).toBe(0);
    const name = (await api(`/api/environments/${envId}`)).body.snapshot as string;
    expect(name).toMatch(new RegExp(`^threadbox-env-${envId.replace(/_/g, "-")}-[0-9a-f]{12}$`));
    expect(first.out).toContain(`creating ${name}`);
    const dockerfile = recorded(name).buildInfo!.dockerfileContent;
    expect(dockerfile).toContain("npm install -g --prefix /usr/local --no-audit --no-fund left-pad@1.3.0");
    expect(dockerfile).toContain("pip install --no-cache-dir --break-system-packages requests==2.32.3");
    expect(dockerfile).toContain("@earendil-works/pi-coding-agent@");

    // The same packages: the snapshot is there already. Other packages: another snapshot.
    const again = await snapshotScript(["--environment", envId]);
    expect(again.out).toContain(`snapshot ${name} exists`);
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { packages: { npm: ["left-pad@1.3.0", "is-odd@3.0.1"] } } })).status).toBe(200);
    expect((await snapshotScript(["--environment", envId])).code).toBe(0);
    const next = (await api(`/api/environments/${envId}`)).body.snapshot as string;
    expect(next).not.toBe(name);
    expect(recorded(next).buildInfo!.dockerfileContent).toContain("is-odd@3.0.1");

    const missing = await snapshotScript(["--environment", "env_does_not_exist"]);
    expect(missing.code).toBe(1);
    expect(missing.out).toContain("404");
  });
});

describe("an environment's volume", () => {
  it("a file one run writes to the volume is there for the next run on a fresh box", async () => {
    model.push(
      { toolCalls: [{ name: "bash", arguments: { command: "echo remembered-across-boxes >> ~/memory/notes.txt && echo wrote" } }] },
      { text: "Noted." },
      { toolCalls: [{ name: "bash", arguments: { command: "cat ~/memory/notes.txt" } }] },
      { text: "Recalled." },
    );
    const envId = await environment();
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { volumes: [{ name: "memory", path: "memory" }] } })).status).toBe(200);
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const first = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "remember this" } })).body.childThreadId as string;
    expect((await settled(first)).status).toBe("completed");
    const firstBox = (await entries(first)).find((e) => e.payload.type === "signal.run.launched")!.payload.boxId;
    await waitFor("the first box to be reaped", async () => (await api(`/api/sandboxes/${firstBox}`)).body.state === "deleted", 30_000);

    const second = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "what do you remember?" } })).body.childThreadId as string;
    expect((await settled(second)).status).toBe("completed");
    const es = await entries(second);
    expect(es.find((e) => e.payload.type === "signal.run.launched")!.payload.boxId).not.toBe(firstBox);
    expect(JSON.stringify(es.find((e) => e.payload.type === "pi.tool_result")!.payload)).toContain("remembered-across-boxes");

    // Deleting the environment leaves the volume and what is in it.
    const volumes = async () => (await (await fetch(`${host.apiUrl}/volumes`, { headers: { authorization: `Bearer ${SANDBOX_KEY}` } })).json()) as { id: string; name: string }[];
    const before = await volumes();
    expect((await api(`/api/environments/${envId}`, { method: "DELETE" })).status).toBe(204);
    expect(await volumes()).toEqual(before);
    const notes = before.map((v) => join(host.root, "volumes", v.id, "notes.txt")).filter((f) => existsSync(f));
    expect(notes.map((f) => readFileSync(f, "utf8"))).toContain("remembered-across-boxes\n");
  });
});

describe("an environment's readwrite folder", () => {
  it("what a run changed in the folder comes back as its next version, listed on the thread; the next run starts from it", async () => {
    model.push(
      { toolCalls: [{ name: "bash", arguments: { command: "cat notes/todo.txt && echo two >> notes/todo.txt && echo fresh > notes/added.txt && mkdir -p notes/scratch && echo junk > notes/scratch/tmp.txt" } }] },
      { text: "Updated the notes." },
      { toolCalls: [{ name: "bash", arguments: { command: "cat notes/todo.txt notes/added.txt" } }] },
      { text: "Read them." },
    );
    const envId = await environment();
    // The environment's own files inside the folder (one sensitive) are the environment's, not the folder's.
    const files = [{ path: "notes/.creds", content: "sensitive-line-ABCDEFGH\n", sensitive: true }, { path: "notes/cfg [1].txt", content: "env file\n" }];
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { files, folders: [{ source: "notes", path: "notes", access: "readwrite", exclude: ["scratch"] }] } })).status).toBe(200);
    const up = await fetch(`${worker.url}/api/environments/${envId}/folders?name=notes`, {
      method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/x-tar" }, body: tarArchive({ "todo.txt": "one\n", "cfg [1].txt": "the folder's own\n" }),
    });
    expect(up.status).toBe(201);
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;

    const first = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "add to the notes" } })).body.childThreadId as string;
    expect((await settled(first)).status).toBe("completed");
    expect(JSON.stringify((await entries(first)).find((e) => e.payload.type === "pi.tool_result")!.payload)).toContain("one");
    const synced = await waitFor("the folder's new version on the thread", async () =>
      (await entries(first)).find((e) => e.payload.type === "artifact.folder"), 30_000);
    expect(synced.payload).toMatchObject({ folder: "notes", status: "synced", version: 2, baseVersion: 1 });
    const listed = (await api(`/api/threads/${first}/artifacts`)).body.artifacts.map((a: Entry) => a.payload.type);
    expect(listed).toContain("artifact.folder");

    const v2 = await fetch(`${worker.url}${synced.payload.download}`, { headers: { authorization: `Bearer ${token}` } });
    expect(v2.status).toBe(200);
    const dir = tempDir("tb-folder-");
    writeFileSync(join(dir, "v2.tar"), new Uint8Array(await v2.arrayBuffer()));
    execSync(`mkdir -p out && tar -xf v2.tar -C out`, { cwd: dir });
    expect(readFileSync(join(dir, "out/todo.txt"), "utf8")).toBe("one\ntwo\n");
    expect(readFileSync(join(dir, "out/added.txt"), "utf8")).toBe("fresh\n");
    expect(existsSync(join(dir, "out/scratch"))).toBe(false);
    expect(existsSync(join(dir, "out/.creds"))).toBe(false);
    // The folder's own file at the path of an environment's file stays the folder's, as uploaded.
    expect(readFileSync(join(dir, "out/cfg [1].txt"), "utf8")).toBe("the folder's own\n");

    // A second run, on a fresh box, starts from version 2; changing nothing makes no version 3.
    const second = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "read the notes" } })).body.childThreadId as string;
    expect((await settled(second)).status).toBe("completed");
    const es = await entries(second);
    expect(es.find((e) => e.payload.type === "signal.run.launched")!.payload.folders[0]).toMatchObject({ source: "notes", version: 2 });
    expect(JSON.stringify(es.find((e) => e.payload.type === "pi.tool_result")!.payload)).toContain("fresh");
    const unchanged = await waitFor("the second run's folder report", async () =>
      (await entries(second)).find((e) => e.payload.type === "artifact.folder"), 30_000);
    expect(unchanged.payload).toMatchObject({ folder: "notes", status: "unchanged" });
    const folders = (await api(`/api/environments/${envId}/folders`)).body.folders;
    expect(folders[0]).toMatchObject({ name: "notes", latest: 2 });
    expect(folders[0].versions[1]).toMatchObject({ version: 2, threadId: first, createdBy: "threadbox" });
  });
});

describe("a readwrite folder across a stop and a resume on the same box", () => {
  it("the resumed run finds the stopped run's work in the folder: it is not unpacked over again", async () => {
    const envId = await environment();
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { folders: [{ source: "work", path: "work", access: "readwrite", exclude: ["scratch"] }] } })).status).toBe(200);
    const up = await fetch(`${worker.url}/api/environments/${envId}/folders?name=work`, {
      method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/x-tar" }, body: tarArchive({ "base.txt": "base\n" }),
    });
    expect(up.status).toBe(201);
    // Work kept out of sync-back (scratch) exists only in the box: a fresh unpack would lose it.
    model.push({ toolCalls: [{ name: "bash", arguments: { command: "mkdir -p work/scratch && echo MYWORK > work/scratch/w.txt && sleep 60" } }] });
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const delegated = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "start the work" } })).body;
    const childId = delegated.childThreadId as string;
    await waitFor("the tool call to be mirrored", async () => (await entries(childId)).some((e) => e.payload.type === "pi.tool_call"));
    // The run's processes exist before its command has run: the file itself is waited for.
    await waitFor("the work to be written", async () =>
      execSync(`find '${join(host.root, "boxes")}' -path '*/scratch/w.txt' -exec grep -l MYWORK {} + 2>/dev/null || true`, { encoding: "utf8" }).trim() !== "");
    expect((await api(`/api/threads/${childId}/stop`, { method: "POST" })).status).toBe(200);
    await waitFor("the stopped run's processes to end", async () => processesOfRun(delegated.runId) === 0, 15_000);

    model.push({ toolCalls: [{ name: "bash", arguments: { command: "cat work/scratch/w.txt" } }] }, { text: "Read it." });
    expect((await api(`/api/threads/${childId}/resume`, { method: "POST", json: { message: "go on" } })).status).toBe(202);
    expect((await settled(childId)).status).toBe("completed");
    const es = await entries(childId);
    const launches = es.filter((e) => e.payload.type === "signal.run.launched");
    expect(launches.map((e) => e.payload.boxReused)).toEqual([false, true]);
    expect(JSON.stringify(es.filter((e) => e.payload.type === "pi.tool_result").at(-1)!.payload)).toContain("MYWORK");
  });
});

describe("a readwrite folder synced at a stop, then resumed on the same box", () => {
  it("what the stopped run changed is stored once: a resumed run that changes nothing more makes no second version", async () => {
    const envId = await environment();
    expect((await api(`/api/environments/${envId}`, { method: "PATCH", json: { folders: [{ source: "log", path: "log", access: "readwrite" }] } })).status).toBe(200);
    const up = await fetch(`${worker.url}/api/environments/${envId}/folders?name=log`, {
      method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/x-tar" }, body: tarArchive({ "log.txt": "one\n" }),
    });
    expect(up.status).toBe(201);
    model.push({ toolCalls: [{ name: "bash", arguments: { command: "echo two >> log/log.txt && sleep 60" } }] });
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const delegated = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "log something" } })).body;
    const childId = delegated.childThreadId as string;
    await waitFor("the change to be written", async () =>
      execSync(`find '${join(host.root, "boxes")}' -path '*/log/log.txt' -exec grep -l two {} + 2>/dev/null || true`, { encoding: "utf8" }).trim() !== "");
    expect((await api(`/api/threads/${childId}/stop`, { method: "POST" })).status).toBe(200);
    const folderReport = (runId: string) => waitFor(`run ${runId}'s folder report`, async () =>
      (await entries(childId)).find((e) => e.payload.type === "artifact.folder" && e.payload.runId === runId), 30_000);
    expect((await folderReport(delegated.runId)).payload).toMatchObject({ status: "synced", version: 2, baseVersion: 1 });
    await waitFor("the stopped run's processes to end", async () => processesOfRun(delegated.runId) === 0, 15_000);

    model.push({ toolCalls: [{ name: "bash", arguments: { command: "cat log/log.txt" } }] }, { text: "Read it." });
    const resumed = await api(`/api/threads/${childId}/resume`, { method: "POST", json: { message: "just read it" } });
    expect(resumed.status).toBe(202);
    expect((await settled(childId)).status).toBe("completed");
    const es = await entries(childId);
    expect(es.filter((e) => e.payload.type === "signal.run.launched").map((e) => e.payload.boxReused)).toEqual([false, true]);
    expect(JSON.stringify(es.filter((e) => e.payload.type === "pi.tool_result").at(-1)!.payload)).toContain("one\\ntwo");
    expect((await folderReport(resumed.body.runId)).payload).toMatchObject({ status: "unchanged" });
    expect((await api(`/api/environments/${envId}/folders`)).body.folders[0]).toMatchObject({ name: "log", latest: 2 });
  });
});

describe("a live run: talk to it, interrupt it", () => {
  const chatTo = async (threadId: string, text: string) => {
    const r = await api(`/api/threads/${threadId}/entries`, { method: "POST", json: { payload: { type: "chat", text } } });
    expect(r.status).toBe(201);
    return r.body.entries[0].id as string;
  };
  const delivered = (es: Entry[]) => es.filter((e) => e.payload.type === "signal.run.message_delivered");

  it("a chat posted while pi works reaches it as a steering message before its next model call, and is marked delivered", async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    model.push(
      // pi is busy in a tool call until the test has posted its message
      { toolCalls: [{ name: "bash", arguments: { command: "sleep 1; echo step-one" } }], until: Promise.resolve() },
      { text: "Done, with the footer.", until: held },
    );
    const envId = await environment();
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const childId = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "write the page" } })).body.childThreadId as string;
    await waitFor("pi's tool call", async () => (await entries(childId)).some((e) => e.payload.type === "pi.tool_call"), 30_000);
    const before = model.requests.length;
    const chatId = await chatTo(childId, "ALSO: add a footer");
    const marked = await waitFor("the message to be delivered", async () => delivered(await entries(childId)).find((e) => e.payload.entryId === chatId), 20_000);
    expect(marked.payload.mode).toBe("steer");
    release();
    const child = await settled(childId);
    expect(child.status).toBe("completed");
    // The model's next request carried the message.
    const next = model.requests.slice(before).map((r) => JSON.stringify(r.body.messages));
    expect(next.some((m) => m.includes("ALSO: add a footer"))).toBe(true);
    const es = await entries(childId);
    expect(delivered(es)).toHaveLength(1);
    expect(es.filter((e) => e.payload.type === "pi.user").map((e) => e.payload.text)).toContain("ALSO: add a footer");
  });

  it("interrupt aborts a hanging model call; the run stays and continues with the next message", async () => {
    model.push(
      { text: "never finishes", until: new Promise(() => {}) },
      { text: "Continued as asked." },
    );
    const envId = await environment();
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const childId = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "think forever" } })).body.childThreadId as string;
    const requestsBefore = model.requests.length;
    await waitFor("the hanging model call", async () => model.requests.length > requestsBefore || undefined, 30_000);

    const idle = (await api("/api/threads", { method: "POST", json: {} })).body;
    expect((await api(`/api/threads/${idle.id}/interrupt`, { method: "POST" })).status).toBe(409);

    const r = await api(`/api/threads/${childId}/interrupt`, { method: "POST" });
    expect(r.status).toBe(202);
    const aborted = await waitFor("the aborted turn", async () =>
      (await entries(childId)).find((e) => e.payload.type === "pi.assistant" && e.payload.stopReason === "aborted"), 20_000);
    expect(aborted).toBeTruthy();
    // Interrupted, not ended: the run is still running, waiting for what to do instead.
    expect((await api(`/api/threads/${childId}`)).body.status).toBe("running");

    const chatId = await chatTo(childId, "Skip that; just say you continued.");
    const child = await settled(childId);
    expect(child.status).toBe("completed");
    const es = await entries(childId);
    expect(delivered(es).map((e) => [e.payload.entryId, e.payload.mode])).toEqual([[chatId, "prompt"]]);
    expect(es.filter((e) => e.payload.type === "pi.assistant").at(-1)!.payload.text).toBe("Continued as asked.");
    expect(JSON.stringify(model.requests.at(-1)!.body.messages)).toContain("Skip that; just say you continued.");
    expect(statuses(es).filter((x) => x !== "running")).toEqual(["completed"]);
  });

  it("an interrupted run that gets no message within THREADBOX_IDLE_AFTER_INTERRUPT_MS ends as stopped and keeps its box", async () => {
    model.push({ text: "never finishes", until: new Promise(() => {}) });
    const envId = await environment({ THREADBOX_IDLE_AFTER_INTERRUPT_MS: "1500" });
    const parent = (await api("/api/threads", { method: "POST", json: { environmentId: envId } })).body;
    const childId = (await api(`/api/threads/${parent.id}/delegate`, { method: "POST", json: { task: "think forever" } })).body.childThreadId as string;
    const requestsBefore = model.requests.length;
    await waitFor("the hanging model call", async () => model.requests.length > requestsBefore || undefined, 30_000);
    expect((await api(`/api/threads/${childId}/interrupt`, { method: "POST" })).status).toBe(202);
    const child = await settled(childId);
    expect([child.status, child.reason]).toEqual(["failed", "stopped"]);
    expect(child.detail).toBe("no message within 1500 ms of the interrupt (THREADBOX_IDLE_AFTER_INTERRUPT_MS)");
    expect((await api(`/api/sandboxes/${child.boxId}`)).body.state).toBe("live");
    expect(statuses(await entries(childId)).filter((x) => x !== "running")).toEqual(["stopped"]);
  });

  it("interrupt during a tool call aborts the tool, not the run: it stays running and continues with the next message", async () => {
    model.push(
      // An odd length, so that its process is this test's alone.
      { toolCalls: [{ name: "bash", arguments: { command: "sleep 45.123; echo slept" } }] },
      { text: "Did the other thing instead." },
    );
    const childId = await delegateChild("sleep a while");
    await waitFor("the tool call", async () =>
      (await entries(childId)).find((e) => e.payload.type === "pi.assistant" && JSON.stringify(e.payload).includes("sleep 45")), 30_000);
    // The call is mirrored when the model's message ends; the command starts after it.
    const sleeping = () => readdirSync("/proc").some((pid) => {
      try { return readFileSync(`/proc/${pid}/cmdline`, "utf8") === "sleep\u000045.123\u0000"; } catch { return false; }
    });
    await waitFor("the command to run", async () => sleeping(), 30_000);

    expect((await api(`/api/threads/${childId}/interrupt`, { method: "POST" })).status).toBe(202);
    await waitFor("the aborted tool", async () => (await entries(childId)).find((e) => e.payload.type === "pi.tool_result"), 20_000);
    // The turn reads as aborted, as an interrupted model call's does.
    await waitFor("the aborted turn", async () =>
      (await entries(childId)).find((e) => e.payload.type === "pi.assistant" && e.payload.stopReason === "aborted"), 20_000);
    // Give a wrongly posted failure time to land before checking there is none.
    await new Promise((r) => setTimeout(r, 1_500));
    expect((await api(`/api/threads/${childId}`)).body.status).toBe("running");

    await chatTo(childId, "Never mind the sleep.");
    const child = await settled(childId);
    expect(child.status).toBe("completed");
    const es = await entries(childId);
    expect(es.filter((e) => e.payload.type === "pi.assistant").at(-1)!.payload.text).toBe("Did the other thing instead.");
    expect(statuses(es).filter((x) => x !== "running")).toEqual(["completed"]);
  });
});

describe("run_command", () => {
  it("runs a command on the environment's shared box, which outlives it", async () => {
    const e = (await api("/api/environments", { method: "POST", json: { name: "shared", sharedBox: true, env: { GREETING: "hello-shared" } } })).body;
    const r1 = await api(`/api/environments/${e.id}/exec`, { method: "POST", json: { command: "echo $GREETING > note.txt && cat note.txt" } });
    expect(r1.status).toBe(200);
    expect([r1.body.exitCode, r1.body.output.trim()]).toEqual([0, "hello-shared"]);
    const r2 = await api(`/api/environments/${e.id}/exec`, { method: "POST", json: { command: "cat note.txt; exit 7" } });
    expect([r2.body.boxId, r2.body.exitCode, r2.body.output.trim()]).toEqual([r1.body.boxId, 7, "hello-shared"]);
    const box = (await api(`/api/sandboxes/${r1.body.boxId}`)).body;
    expect([box.state, box.ephemeral]).toEqual(["live", false]);
    // A cwd the box refuses (outside it, or missing) is the client's mistake, not the provider's outage.
    for (const cwd of ["/etc", "../../..", "no-such-dir"]) {
      const bad = await api(`/api/environments/${e.id}/exec`, { method: "POST", json: { command: "pwd", cwd } });
      expect([cwd, bad.status, bad.body.error?.code]).toEqual([cwd, 400, "bad_request"]);
    }
  });

  it("a command printing 50 MB answers with its first and last 256 KiB per stream, marked cut, in the box: plain and streamed to a thread", async () => {
    const e = (await api("/api/environments", { method: "POST", json: { name: "loud", sharedBox: true } })).body;
    const thread = (await api("/api/threads", { method: "POST", json: { title: "loud output" } })).body;
    const MiB = 1024 * 1024;
    // 50 MiB on stdout (a head line, x's, a tail line), 1 MiB of y's on stderr, then exit 3.
    const command = `echo HEAD-LINE; head -c ${50 * MiB} /dev/zero | tr '\\0' x; echo; echo TAIL-LINE; head -c ${MiB} /dev/zero | tr '\\0' y >&2; exit 3`;
    for (const json of [{ command }, { command, threadId: thread.id }]) {
      const r = await api(`/api/environments/${e.id}/exec`, { method: "POST", json: { ...json, timeoutSec: 120 } });
      expect([r.status, r.body.exitCode, r.body.truncated]).toEqual([200, 3, true]);
      const out = String(r.body.output);
      // stdout: 10 + 50 MiB + 1 + 10 bytes; stderr: 1 MiB. Each keeps 2 × 256 KiB.
      expect(r.body.omittedBytes).toBe((50 * MiB + 21 - 512 * 1024) + (MiB - 512 * 1024));
      expect(out.length).toBeLessThan(MiB + 200);
      expect(out.startsWith("HEAD-LINE\nxxx") || out.startsWith("yyy")).toBe(true);
      expect(out).toContain("HEAD-LINE\n");
      expect(out).toContain("xxx\nTAIL-LINE\n");
      expect(out.match(/…\[cut by threadbox: \d+ bytes\]…/g)).toHaveLength(2);
      expect(out).not.toMatch(/tb-cut-/);
    }
    const live = (await entries(thread.id)).filter((x) => x.payload.type === "signal.exec.output");
    expect(live.some((x) => x.payload.truncated)).toBe(true);
    expect(live.some((x) => String(x.payload.text).includes("tb-cut-"))).toBe(false);
    // The worker is still there, and a short output comes back as it is.
    const after = await api(`/api/environments/${e.id}/exec`, { method: "POST", json: { command: "echo fine" } });
    expect([after.status, after.body.output, after.body.truncated]).toEqual([200, "fine\n", undefined]);
  }, 180_000);

  it("a command that leaves a process holding its output answers once it exits, also streamed to a thread (the output cut keeps no one waiting for it)", async () => {
    const e = (await api("/api/environments", { method: "POST", json: { name: "background", sharedBox: true } })).body;
    const thread = (await api("/api/threads", { method: "POST", json: { title: "background" } })).body;
    const t0 = Date.now();
    const r = await api(`/api/environments/${e.id}/exec`, { method: "POST", json: { command: "sleep 30 & echo $! > bg.pid; echo started", threadId: thread.id, timeoutSec: 60 } });
    expect([r.status, r.body.exitCode, r.body.output]).toEqual([200, 0, "started\n"]);
    expect(Date.now() - t0).toBeLessThan(15_000);
    await api(`/api/environments/${e.id}/exec`, { method: "POST", json: { command: "kill $(cat bg.pid)" } });
  }, 90_000);

  it("a shared box the provider stopped for idleness (Daytona's auto-stop) is started again: the next command runs on it, its files kept", async () => {
    const e = (await api("/api/environments", { method: "POST", json: { name: "dozing", sharedBox: true } })).body;
    const r1 = await api(`/api/environments/${e.id}/exec`, { method: "POST", json: { command: "echo kept > note.txt" } });
    expect(r1.status).toBe(200);
    const ref = (await api(`/api/sandboxes/${r1.body.boxId}`)).body.providerRef as string;
    const stop = await fetch(`${host.apiUrl}/sandbox/${ref}/stop`, { method: "POST", headers: { authorization: `Bearer ${SANDBOX_KEY}` } });
    expect(stop.status).toBe(200);
    const r2 = await api(`/api/environments/${e.id}/exec`, { method: "POST", json: { command: "cat note.txt" } });
    expect([r2.status, r2.body.boxId, r2.body.output?.trim()]).toEqual([200, r1.body.boxId, "kept"]);
  });

  it("egress set to deny after the shared box was made holds on it: the box is replaced, and the old one deleted", async () => {
    const http = await import("node:http");
    const other = http.createServer((_q, r) => r.end("internal"));
    await new Promise<void>((r) => other.listen(0, "127.0.0.1", () => r()));
    const port = (other.address() as { port: number }).port;
    try {
      const e = (await api("/api/environments", { method: "POST", json: { name: "tightened", sharedBox: true } })).body;
      const reach = { command: `curl -s -m 3 http://127.0.0.1:${port}/ || echo BLOCKED` };
      const open = await api(`/api/environments/${e.id}/exec`, { method: "POST", json: reach });
      expect(open.body.output).toBe("internal");
      expect((await api(`/api/environments/${e.id}`, { method: "PATCH", json: { egress: "deny" } })).status).toBe(200);
      const denied = await api(`/api/environments/${e.id}/exec`, { method: "POST", json: reach });
      expect([denied.status, denied.body.output?.trim()]).toEqual([200, "BLOCKED"]);
      expect(denied.body.boxId).not.toBe(open.body.boxId);
      expect((await api(`/api/sandboxes/${open.body.boxId}`)).body.state).toBe("deleted");
    } finally {
      other.close();
    }
  });

  it("with a threadId, a long command's output reaches the thread while it runs (real SDK session logs)", async () => {
    const e = (await api("/api/environments", { method: "POST", json: { name: "live", sharedBox: true } })).body;
    const thread = (await api("/api/threads", { method: "POST", json: { title: "live output" } })).body;
    const dir = `live-${Date.now()}`;
    await api(`/api/environments/${e.id}/exec`, { method: "POST", json: { command: `mkdir -p ${dir}` } });
    const pending = api(`/api/environments/${e.id}/exec`, {
      method: "POST",
      json: { command: `echo first; echo oops >&2; while [ ! -f ${dir}/go ]; do sleep 0.1; done; echo second`, threadId: thread.id, timeoutSec: 60 },
    });
    // The command is still waiting for its file: its first line can only be here if it streamed.
    await waitFor("the first line on the thread", async () =>
      (await entries(thread.id)).some((x) => x.payload.type === "signal.exec.output" && x.payload.text === "first\n"), 20_000);
    await api(`/api/environments/${e.id}/exec`, { method: "POST", json: { command: `touch ${dir}/go` } });
    const r = await pending;
    expect(r.status).toBe(200);
    expect(r.body.exitCode).toBe(0);
    expect(r.body.output).toContain("second");
    const out = (await entries(thread.id)).filter((x) => x.payload.type === "signal.exec.output");
    expect(out.filter((x) => x.payload.stream === "stdout").map((x) => x.payload.text).join("")).toBe("first\nsecond\n");
    expect(out.filter((x) => x.payload.stream === "stderr").map((x) => x.payload.text).join("")).toBe("oops\n");
    expect(new Set(out.map((x) => x.payload.execId))).toEqual(new Set([r.body.execId]));
  });

  it("a server started on the shared box is reached through its preview link", async () => {
    const e = (await api("/api/environments", { method: "POST", json: { name: "preview", sharedBox: true } })).body;
    const port = await freePort(); // the OS picks it: a random one could be in use (20000-40000 overlaps the ephemeral ports)
    const start = await api(`/api/environments/${e.id}/exec`, {
      method: "POST",
      json: { command: `echo preview-ok > index.html; nohup python3 -m http.server ${port} --bind 127.0.0.1 >/dev/null 2>&1 & sleep 0.5; echo started` },
    });
    expect(start.status).toBe(200);
    const boxId = start.body.boxId as string;
    const link = await api(`/api/sandboxes/${boxId}/ports/${port}/preview?expiresInSeconds=120`);
    expect(link.status).toBe(200);
    expect(link.body).toMatchObject({ boxId, port });
    expect(Date.parse(link.body.expiresAt) - Date.now()).toBeGreaterThan(100_000);
    const page = await waitFor("the preview to answer", async () => {
      const r = await fetch(`${link.body.url}index.html`).catch(() => null);
      const text = r?.ok ? await r.text() : "";
      return text.includes("preview-ok") ? text : undefined;
    }, 20_000);
    expect(page.trim()).toBe("preview-ok");

    expect((await api(`/api/sandboxes/${boxId}/ports/0/preview`)).status).toBe(400);
    expect((await api(`/api/sandboxes/${boxId}/ports/${port}/preview?expiresInSeconds=0`)).status).toBe(400);
  });
});

describe("run(): the synchronous host driver", () => {
  it("provisions, drives pi, reads the thread back and posts the finished-signal from the host", async () => {
    const provider = createDaytonaProvider({ apiUrl: host.apiUrl, apiKey: SANDBOX_KEY, target: "local" });
    const bundles = Object.fromEntries(["dist/runner/runner.mjs", "dist/runner/mirror.mjs"].map((p) => [p, readFileSync(join(ROOT, p), "utf8")]));
    const box = await provider.create({ labels: { house: "house-e2e" }, ephemeral: true });
    const home = await provider.homeDir(box.ref);
    const files = [
      { path: ".threadbox/pi-agent/models.json", content: JSON.stringify({ providers: { local: { baseUrl: model.baseUrl, api: "openai-completions", apiKey: "k", models: [{ id: "scripted-model" }] } } }) },
      { path: ".threadbox/pi-agent/settings.json", content: JSON.stringify({ retry: { enabled: false } }) },
    ];
    const env = { PI_CODING_AGENT_DIR: `${home}/.threadbox/pi-agent`, PI_OFFLINE: "1" };
    const runOnce = async (task: string) => {
      const t = (await api("/api/threads", { method: "POST", json: { title: task } })).body;
      // The token a launch would mint for the run: it also posts the run's artifacts.
      const runId = crypto.randomUUID();
      const streamToken = (await mintRunToken("test-token-secret-0123456789abcdef", "house-e2e", t.id, runId, "e2e-user")).token;
      const result = await run({
        provider, streamUrl: `${worker.url}/api/stream`, streamToken, runId, houseId: "house-e2e", threadId: t.id, task,
        model: "local/scripted-model", boxRef: box.ref, env, files, bundles, timeoutSec: 120,
      });
      return { id: t.id as string, result };
    };
    try {
      model.push({ text: "Synchronous answer." });
      const ok = await runOnce("answer synchronously");
      expect([ok.result.status, ok.result.finishedBy, ok.result.exitCode]).toEqual(["completed", "host", 0]);
      expect((await api(`/api/threads/${ok.id}`)).body.status).toBe("completed");
      const es = await entries(ok.id);
      expect(es.some((e) => e.payload.type === "pi.assistant" && e.payload.text === "Synchronous answer.")).toBe(true);
      expect(statuses(es)).toEqual(["running", "completed"]);

      model.push({ error: 400, message: "no thanks" });
      const bad = await runOnce("fail synchronously");
      expect(bad.result.status).toBe("pi_failed");
      expect(bad.result.finishedBy).toBe("already-on-thread"); // the mirror saw the error stop first
      expect(statuses(await entries(bad.id))).toEqual(["running", "pi_failed"]);
    } finally {
      await provider.delete(box.ref);
    }
  });
});
