// Launches: one whose alarm dies part-way is retried and converges on one box and one runner;
// one whose step fails ends the run visibly and releases its box.
import { describe, expect, it, vi } from "vitest";
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import type { HouseActor, SandboxActor, ThreadActor } from "./test-worker";
import { sharedTestProvider } from "./register-test-provider";
import { LABEL_RUN } from "../../src/sandbox/provider";
import { unwrapRpc } from "../../src/actors/rpc";
import { launchBoxId, type LaunchStep } from "../../src/threads/launch-progress";
import { lateBoxWatchId } from "../../src/actors/sandbox/late-box";
import { idempotentDelegation } from "../../src/threads/idempotency";
import { tarArchive } from "../support/tar";
import { call, createThread, houseToken, post, readAll, runToken } from "./helpers";
import { step } from "./inside-request";

const E = env as unknown as { THREADS: DurableObjectNamespace<ThreadActor>; SANDBOXES: DurableObjectNamespace<SandboxActor>; HOUSES: DurableObjectNamespace<HouseActor> };
const threadStub = (id: string) => E.THREADS.get(E.THREADS.idFromName(`thread:${id}`));
const boxStub = (id: string) => E.SANDBOXES.get(E.SANDBOXES.idFromName(id));

/** A thread of a test-provider environment (`envFields` added to it) that can launch, its actor prepared by `arrange`. */
async function launchableThread(houseId: string, arrange: (a: ThreadActor) => void = () => {}, envFields: Record<string, unknown> = {}) {
  const token = await houseToken(houseId);
  const envRes = await call("/api/environments", { method: "POST", token, json: { name: "launch", provider: "test", ...envFields } });
  const environmentId = ((await envRes.json()) as { id: string }).id;
  const t = await createThread(token, { environmentId });
  const stub = threadStub(t.id);
  await runInDurableObject(stub, (a: ThreadActor) => {
    a.setTestEnv({ THREADBOX_STREAM_URL: "http://stream.test/api/stream" });
    arrange(a);
  });
  return { token, t, stub, environmentId };
}

/** A run started on a thread of a test-provider environment, the thread actor prepared by `arrange` first. */
async function startLaunch(houseId: string, arrange: (a: ThreadActor) => void) {
  const { token, t, stub } = await launchableThread(houseId, arrange);
  const { runId } = await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
  return { token, t, stub, runId };
}

async function launchThatCrashesAt(houseId: string, step: LaunchStep) {
  const { token, t, runId } = await startLaunch(houseId, (a) => a.crashLaunchAt(step));
  // The alarm (due at once) runs the launch; the first attempt dies at `step`, and the runtime
  // retries the failed alarm, which must finish the same launch.
  await vi.waitFor(async () => {
    const launched = (await readAll(token, t.id)).entries.filter((e) => e.payload.type === "signal.run.launched");
    expect(launched).toHaveLength(1);
  }, { timeout: 15_000, interval: 100 });
  return { token, threadId: t.id, runId };
}

async function expectOneBoxAndOneRunner(token: string, threadId: string, runId: string) {
  const provider = sharedTestProvider();
  const boxes = await provider.list({ [LABEL_RUN]: runId });
  expect(boxes).toHaveLength(1);
  const ref = boxes[0].ref;
  expect(provider.calls.filter((c) => c.op === "create" && JSON.stringify(c.args).includes(runId))).toHaveLength(1);
  // One runner command in the box, however often the launch asked for it.
  expect([...provider.detached.values()].filter((d) => d.handle.ref === ref)).toHaveLength(1);
  const listed = (await (await call("/api/sandboxes", { token })).json()) as { sandboxes: { id: string; providerRef: string; threads: string[] }[] };
  expect(listed.sandboxes.map((s) => s.providerRef)).toEqual([ref]);
  const thread = (await (await call(`/api/threads/${threadId}`, { token })).json()) as { status: string; boxId: string };
  expect(thread.status).toBe("running");
  expect(thread.boxId).toBe(listed.sandboxes[0].id);
  const box = (await (await call(`/api/sandboxes/${thread.boxId}`, { token })).json()) as { threads: string[] };
  expect(box.threads).toEqual([threadId]);
}

describe("launch retried after the alarm died mid-launch", () => {
  it("after the box was created but before it was recorded: the retry finds the box by its run label", async () => {
    const { token, threadId, runId } = await launchThatCrashesAt("house-retry-a", "box_created");
    await expectOneBoxAndOneRunner(token, threadId, runId);
  }, 30_000);

  it("after the box was registered: the retry reuses it", async () => {
    const { token, threadId, runId } = await launchThatCrashesAt("house-retry-b", "box_registered");
    await expectOneBoxAndOneRunner(token, threadId, runId);
  }, 30_000);

  it("after the runner was spawned but before that was recorded: the retry finds the running command", async () => {
    const { token, threadId, runId } = await launchThatCrashesAt("house-retry-d", "runner_spawned");
    await expectOneBoxAndOneRunner(token, threadId, runId);
    expect(sharedTestProvider().calls.filter((c) => c.op === "startDetached" && JSON.stringify(c.args).includes(`tb-run-${runId}`)).length).toBe(2);
    // Each attempt uploaded a token file of its own; the runner took the first one, and the
    // retry, finding that runner, removed the one nobody will read.
    const calls = sharedTestProvider().calls;
    const tokenFiles = calls.filter((c) => c.op === "upload").flatMap((c) => c.args as string[]).filter((p) => p.startsWith(`.threadbox/runs/${runId}/stream-token-`));
    expect(new Set(tokenFiles).size).toBe(2);
    const removed = calls.filter((c) => c.op === "exec" && (c.args as { command: string }).command.startsWith(`rm -f '.threadbox/runs/${runId}/`)).map((c) => (c.args as { command: string }).command);
    expect(removed).toEqual([`rm -f '${tokenFiles[1]}'`]);
    const started = calls.filter((c) => c.op === "startDetached" && JSON.stringify(c.args).includes(`tb-run-${runId}`));
    expect(started.map((c) => (c.args as { opts: { env: Record<string, string> } }).opts.env.THREADBOX_STREAM_TOKEN_FILE)).toEqual(tokenFiles);
  }, 30_000);

  it("after the runner was started: the retry only records it, no second runner", async () => {
    const { token, threadId, runId } = await launchThatCrashesAt("house-retry-c", "runner_started");
    await expectOneBoxAndOneRunner(token, threadId, runId);
  }, 30_000);
});

async function launchIn(houseId: string, body: { repo?: string } = {}, environment: Record<string, unknown> = {}) {
  const token = await houseToken(houseId);
  const envRes = await call("/api/environments", { method: "POST", token, json: { name: "fails", provider: "test", ...environment } });
  const environmentId = ((await envRes.json()) as { id: string }).id;
  const t = await createThread(token, { environmentId });
  const stub = threadStub(t.id);
  await runInDurableObject(stub, (a: ThreadActor) => a.setTestEnv({ THREADBOX_STREAM_URL: "http://stream.test/api/stream" }));
  const { runId } = await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice", ...body }));
  return { token, threadId: t.id, runId };
}

async function expectLaunchFailed(token: string, threadId: string, runId: string, detail: string) {
  await vi.waitFor(async () => {
    const t = (await (await call(`/api/threads/${threadId}`, { token })).json()) as { status: string };
    expect(t.status).toBe("failed");
  }, { timeout: 10_000 });
  const t = (await (await call(`/api/threads/${threadId}`, { token })).json()) as { reason: string; detail: string };
  expect(t.reason).toBe("pi_failed");
  expect(t.detail).toContain(detail);
  const es = (await readAll(token, threadId)).entries;
  expect(es.filter((e) => e.payload.type === "signal.run.launched")).toEqual([]);
  expect(es.filter((e) => e.payload.type === "signal.thread.status_changed" && e.payload.status !== "running").map((e) => e.payload.runId)).toEqual([runId]);
  // The box made for the run is released, not leaked.
  await vi.waitFor(async () => expect(await sharedTestProvider().list({ [LABEL_RUN]: runId })).toEqual([]), { timeout: 10_000 });
  expect(sharedTestProvider().calls.filter((c) => c.op === "startDetached" && JSON.stringify(c.args).includes(runId))).toEqual([]);
}

describe("launch failures end the run visibly and release the box", () => {
  it("the harness install fails", async () => {
    const provider = sharedTestProvider();
    const previous = provider.execHandler;
    provider.execHandler = (box, command, opts) => {
      const house = provider.boxes.get(box.ref)?.labels["threadbox.house"];
      if (house === "house-launch-install" && /npm|command -v|pi --version/.test(command)) return { exitCode: 7, output: "npm ERR! network" };
      return previous(box, command, opts);
    };
    try {
      const { token, threadId, runId } = await launchIn("house-launch-install");
      // what the installer said is in the reason, not only its exit code
      await expectLaunchFailed(token, threadId, runId, "launch failed: installing pi failed (exit 7): npm ERR! network");
    } finally {
      provider.execHandler = previous;
    }
  }, 30_000);

  it("the environment's packages fail to install: the installer's last words are the reason", async () => {
    const provider = sharedTestProvider();
    const previous = provider.execHandler;
    provider.execHandler = (box, command, opts) => {
      const house = provider.boxes.get(box.ref)?.labels["threadbox.house"];
      if (house === "house-launch-packages" && command.includes("npm install -g --no-audit")) return { exitCode: 1, output: "npm ERR! 404 Not Found - GET https://registry.example/no-such-package" };
      return previous(box, command, opts);
    };
    try {
      const { token, threadId, runId } = await launchIn("house-launch-packages", {}, { packages: { npm: ["no-such-package"] } });
      await expectLaunchFailed(token, threadId, runId, "launch failed: installing the environment's npm packages failed (exit 1): npm ERR! 404 Not Found");
    } finally {
      provider.execHandler = previous;
    }
  }, 30_000);

  it("an installer that prints one of the environment's secrets: the reason shows it [redacted]", async () => {
    const secret = "npm-registry-token-4242";
    const provider = sharedTestProvider();
    const previous = provider.execHandler;
    provider.execHandler = (box, command, opts) => {
      const house = provider.boxes.get(box.ref)?.labels["threadbox.house"];
      if (house === "house-launch-install-secret" && command.includes("npm install -g --no-audit")) return { exitCode: 1, output: `npm ERR! 403 Forbidden - token ${secret} has no access` };
      return previous(box, command, opts);
    };
    try {
      const { token, threadId, runId } = await launchIn("house-launch-install-secret", {}, { packages: { npm: ["private-package"] }, secrets: { NPM_TOKEN: secret } });
      await expectLaunchFailed(token, threadId, runId, "npm ERR! 403 Forbidden - token [redacted] has no access");
      expect(JSON.stringify((await readAll(token, threadId)).entries)).not.toContain(secret);
    } finally {
      provider.execHandler = previous;
    }
  }, 30_000);

  it("an installer's output cut to its last words through a secret: no piece of the secret is in the reason", async () => {
    const secret = "npm-registry-token-4242-abcdefgh";
    const provider = sharedTestProvider();
    const previous = provider.execHandler;
    // The reason quotes the output's last 500 characters: they begin 12 characters before the secret's end.
    provider.execHandler = (box, command, opts) => {
      const house = provider.boxes.get(box.ref)?.labels["threadbox.house"];
      if (house === "house-launch-install-cut" && command.includes("npm install -g --no-audit")) return { exitCode: 1, output: `npm ERR! 403 Forbidden - token ${secret}${"x".repeat(488)}` };
      return previous(box, command, opts);
    };
    try {
      const { token, threadId, runId } = await launchIn("house-launch-install-cut", {}, { packages: { npm: ["private-package"] }, secrets: { NPM_TOKEN: secret } });
      await expectLaunchFailed(token, threadId, runId, `[redacted]${"x".repeat(488)}`);
      const shown = JSON.stringify((await readAll(token, threadId)).entries) + JSON.stringify(await (await call(`/api/threads/${threadId}`, { token })).json());
      expect(shown).not.toContain(secret.slice(-12));
    } finally {
      provider.execHandler = previous;
    }
  }, 30_000);

  it("the clone fails", async () => {
    sharedTestProvider().failOn("clone", "house-launch-clone", "clone https://example.invalid/repo.git: repository not found");
    const { token, threadId, runId } = await launchIn("house-launch-clone", { repo: "https://example.invalid/repo.git" });
    await expectLaunchFailed(token, threadId, runId, "repository not found");
  }, 30_000);

  it("the upload fails", async () => {
    sharedTestProvider().failOn("upload", "house-launch-upload", "upload of .threadbox/runner.mjs not confirmed");
    const { token, threadId, runId } = await launchIn("house-launch-upload");
    await expectLaunchFailed(token, threadId, runId, "upload of .threadbox/runner.mjs not confirmed");
  }, 30_000);
});

async function launchStoppedAt(houseId: string, step: LaunchStep) {
  const { token, t, stub, runId } = await startLaunch(houseId, (a) => a.stopLaunchAt(step));
  await vi.waitFor(async () => {
    const row = (await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string; reason: string };
    expect([row.status, row.reason]).toEqual(["failed", "stopped"]);
    // The launch item is done: nothing of this run is owed any more.
    const owed = await runInDurableObject(stub, (a: ThreadActor) => a.testOutboxKeys());
    expect(owed.filter((k) => k.startsWith("launch:"))).toEqual([]);
  }, { timeout: 15_000, interval: 100 });
  return { token, threadId: t.id, runId };
}

describe("a run stopped while it launches", () => {
  it("before its box was assigned: no runner is started, nothing more is recorded, and the box made for it is deleted", async () => {
    const { token, threadId, runId } = await launchStoppedAt("house-stop-launch-a", "box_registered");
    const provider = sharedTestProvider();
    await vi.waitFor(async () => expect(await provider.list({ [LABEL_RUN]: runId })).toEqual([]), { timeout: 10_000 });
    expect(provider.calls.filter((c) => c.op === "startDetached" && JSON.stringify(c.args).includes(runId))).toEqual([]);
    const types = (await readAll(token, threadId)).entries.map((e) => e.payload.type);
    expect(types).not.toContain("signal.thread.box_assigned");
    expect(types).not.toContain("signal.run.launched");
  }, 30_000);

  it("after its runner was spawned: the runner is ended and the box detached and kept, as a stopped run's box is", async () => {
    const { token, threadId, runId } = await launchStoppedAt("house-stop-launch-b", "runner_spawned");
    const provider = sharedTestProvider();
    const [box] = await provider.list({ [LABEL_RUN]: runId });
    const runner = [...provider.detached.values()].find((d) => d.handle.ref === box.ref)!;
    await vi.waitFor(() => expect(runner.exitCode).toBeDefined(), { timeout: 10_000 });
    const types = (await readAll(token, threadId)).entries.map((e) => e.payload.type);
    expect(types).not.toContain("signal.run.launched");
    // The stop ends the runner first and detaches the box after that.
    const view = await vi.waitFor(async () => {
      const listed = (await (await call("/api/sandboxes", { token })).json()) as { sandboxes: { id: string; providerRef: string; state: string; threads: string[] }[] };
      const v = listed.sandboxes.find((s) => s.providerRef === box.ref)!;
      expect(v).toMatchObject({ state: "live", threads: [] });
      return v;
    }, { timeout: 10_000, interval: 50 });
    // Idle, so a plain delete is no longer refused as "threads are running on this box".
    const del = await call(`/api/sandboxes/${view.id}`, { method: "DELETE", token });
    expect(del.status).toBe(200);
  }, 30_000);
});

/** A plain delete of a box a launch holds: refused while launching, or, once its run attached meanwhile, as running it. */
const IN_USE_CONFLICT = /^conflict: (a run is launching on this box|1 thread\(s\) are running on this box)/;

describe("a box deleted while its run launches", () => {
  it("is refused until the thread is attached (the run named in its labels is using it): the run goes on", async () => {
    const { token, t, stub, runId } = await startLaunch("house-delete-launching", (a) => a.deleteBoxAt("box_registered"));
    await vi.waitFor(async () => {
      const launched = (await readAll(token, t.id)).entries.filter((e) => e.payload.type === "signal.run.launched");
      expect(launched).toHaveLength(1);
    }, { timeout: 15_000, interval: 100 });
    const answer = await runInDurableObject(stub, (a: ThreadActor) => a.testDeleteBoxAnswer());
    expect(answer).toMatch(IN_USE_CONFLICT);
    await expectOneBoxAndOneRunner(token, t.id, runId);
  }, 30_000);
});

describe("an environment deleted right after a run started in its shared box", () => {
  it("is a 409 while that run runs, before the box counts it as attached; after the run, the delete goes through", async () => {
    const houseId = "house-delete-env-launching";
    const { token, t, stub, environmentId } = await launchableThread(houseId, undefined, { boxMode: "shared" });
    await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
    const refused = await call(`/api/environments/${environmentId}`, { method: "DELETE", token });
    expect(refused.status).toBe(409);
    expect(((await refused.json()) as { error: { message: string } }).error.message).toContain(t.id);
    await call(`/api/threads/${t.id}/stop`, { method: "POST", token });
    await vi.waitFor(async () => {
      const r = await call(`/api/environments/${environmentId}`, { method: "DELETE", token });
      expect(r.status).toBe(204);
    }, { timeout: 15_000, interval: 200 });
  }, 30_000);
});

describe("a run whose environment is deleted after its request was checked and before its launch", () => {
  it("fails visibly naming the environment: it is not launched without the environment (on another provider, without its egress rules, secrets or model)", async () => {
    const houseId = "house-env-deleted-before-launch";
    const { token, t, stub, environmentId } = await launchableThread(houseId, undefined, { egress: "deny", model: "local/m" });
    // The delegate or resume route found the environment; the DELETE lands before the run is claimed.
    expect((await call(`/api/environments/${environmentId}`, { method: "DELETE", token })).status).toBe(204);
    const { runId } = await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", model: "local/m", resume: false, authorId: "alice" }));
    await vi.waitFor(async () => {
      const row = (await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string };
      expect(row.status).toBe("failed");
    }, { timeout: 20_000, interval: 100 });
    const row = (await (await call(`/api/threads/${t.id}`, { token })).json()) as { reason: string; detail: string };
    expect(row.reason).toBe("pi_failed");
    expect(row.detail).toBe(`launch failed: environment ${environmentId} of this thread no longer exists`);
    const es = (await readAll(token, t.id)).entries;
    expect(es.filter((e) => e.payload.type === "signal.run.launched" || e.payload.type === "signal.thread.box_assigned")).toEqual([]);
    const listed = (await (await call("/api/sandboxes", { token })).json()) as { sandboxes: unknown[] };
    expect(listed.sandboxes).toEqual([]);
    expect(await sharedTestProvider().list({ [LABEL_RUN]: runId })).toEqual([]);
  }, 30_000);
});

describe("a shared box whose environment changed its egress while a run works on it", () => {
  it("is replaced for what comes next, but kept for the running run: only then is it reaped as an ephemeral box", async () => {
    const houseId = "house-respec-running";
    const { token, t, stub, environmentId } = await launchableThread(houseId, undefined, { boxMode: "shared" });
    sharedTestProvider().execHandler = () => ({ exitCode: 0, output: "" });
    await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
    await launchedOnce(token, t.id, 1);
    const box = async (id: string) => (await (await call(`/api/sandboxes/${id}`, { token })).json()) as { state: string; ephemeral: boolean; threads: string[] };
    const old = ((await (await call(`/api/threads/${t.id}`, { token })).json()) as { boxId: string }).boxId;
    expect((await call(`/api/environments/${environmentId}`, { method: "PATCH", token, json: { egress: "deny" } })).status).toBe(200);
    const next = ((await (await call(`/api/environments/${environmentId}/exec`, { method: "POST", token, json: { command: "true" } })).json()) as { boxId: string }).boxId;
    expect(next).not.toBe(old);
    expect(await box(old)).toMatchObject({ state: "live", ephemeral: true, threads: [t.id] });
    expect(((await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string }).status).toBe("running");
    expect(await box(next)).toMatchObject({ state: "live", ephemeral: false });

    // Stopped, the run keeps the old box a while; resumed, it goes on on the environment's box as
    // it is now (here the box the resume's launch finds current: this test's thread actor has a
    // stream URL the exec route has not, and the egress a box gets names the stream's host).
    await call(`/api/threads/${t.id}/stop`, { method: "POST", token });
    await vi.waitFor(async () => expect((await box(old)).threads).toEqual([]), { timeout: 10_000, interval: 100 });
    await unwrapRpc(stub.startRun(houseId, { task: "again", harness: "pi", resume: true, authorId: "alice" }));
    await launchedOnce(token, t.id, 2);
    const launched = (await readAll(token, t.id)).entries.filter((e) => e.payload.type === "signal.run.launched").at(-1)!;
    const current = ((await (await call(`/api/environments/${environmentId}`, { token })).json()) as { sharedBoxId: string }).sharedBoxId;
    expect([launched.payload.boxId === old, launched.payload.boxId]).toEqual([false, current]);
    // It waits out the stopped-box grace as any kept ephemeral box does, and is reaped then.
    expect(await box(old)).toMatchObject({ ephemeral: true, threads: [] });
  }, 30_000);
});

describe("a run of a shared-box environment whose box is replaced between the launch picking it and holding it", () => {
  it("goes on on the environment's new box: it does not fail because the box it picked is being deleted", async () => {
    const houseId = "house-shared-box-replaced-mid-pick";
    const { token, t, stub, environmentId } = await launchableThread(houseId, () => {}, { boxMode: "shared" });
    const provider = sharedTestProvider();
    const exec = async () => (await (await call(`/api/environments/${environmentId}/exec`, { method: "POST", token, json: { command: "true" } })).json()) as { boxId: string };
    const old = (await exec()).boxId;
    const ensureStarted = provider.ensureStarted;
    let replaced: string | null = null;
    // The launch has found the environment's box live; before it holds it, a change to the
    // environment and a command make a new box, and the old one is retired (deleted at once).
    provider.ensureStarted = async function (this: typeof provider, ref) {
      if (provider.boxes.get(ref)?.labels["threadbox.house"] === houseId) {
        provider.ensureStarted = ensureStarted;
        expect((await call(`/api/environments/${environmentId}`, { method: "PATCH", token, json: { image: "other:2" } })).status).toBe(200);
        replaced = (await exec()).boxId;
      }
      return ensureStarted.call(this, ref);
    };
    try {
      await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
      await vi.waitFor(async () => {
        const es = (await readAll(token, t.id)).entries;
        expect(es.some((e) => e.payload.type === "signal.run.launched" || (e.payload.type === "signal.thread.status_changed" && e.payload.status !== "running"))).toBe(true);
      }, { timeout: 15_000, interval: 100 });
    } finally {
      provider.ensureStarted = ensureStarted;
    }
    expect(replaced).not.toBeNull();
    expect(replaced).not.toBe(old);
    const row = (await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string; detail: string | null };
    expect(row).toMatchObject({ status: "running" });
    const launched = (await readAll(token, t.id)).entries.find((e) => e.payload.type === "signal.run.launched")!;
    expect(launched.payload.boxId).toBe(replaced);
  }, 30_000);
});

describe("a run of a shared-box environment whose secrets change while it launches", () => {
  it("goes on with the values it read, on a box the environment lets go: no command is run where that run leaves them", async () => {
    const houseId = "house-shared-box-secret-mid-launch";
    const { token, t, stub, environmentId } = await launchableThread(houseId, () => {}, { boxMode: "shared", secrets: { API_KEY: "key-before-launch" } });
    const provider = sharedTestProvider();
    const ensureStarted = provider.ensureStarted;
    // `cat` shows a file of the box as the launch (or a run) left it.
    provider.execHandler = (box, command) => {
      const file = provider.boxes.get(box.ref)?.files.get(/^cat (\S+)$/.exec(command)?.[1] ?? "");
      return { exitCode: 0, output: file ? new TextDecoder().decode(file) : "" };
    };
    try {
      const exec = async (command: string) => (await (await call(`/api/environments/${environmentId}/exec`, { method: "POST", token, json: { command } })).json()) as { boxId: string; output: string };
      const old = (await exec("true")).boxId;
      // The launch read the environment and found its box live; before it holds it, the secret
      // changes (the box is let go, and deleted at once), and the box it then picks is a new one.
      provider.ensureStarted = async function (this: typeof provider, ref) {
        if (provider.boxes.get(ref)?.labels["threadbox.house"] === houseId) {
          provider.ensureStarted = ensureStarted;
          expect((await call(`/api/environments/${environmentId}`, { method: "PATCH", token, json: { secrets: { API_KEY: "key-after-launch" } } })).status).toBe(200);
        }
        return ensureStarted.call(this, ref);
      };
      await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
      await launchedOnce(token, t.id, 1);
      const launched = (await readAll(token, t.id)).entries.find((e) => e.payload.type === "signal.run.launched")!;
      const runBox = launched.payload.boxId as string;
      expect(runBox).not.toBe(old);
      const { providerRef: ref } = (await (await call(`/api/sandboxes/${runBox}`, { token })).json()) as { providerRef: string };
      // The run has the value it was launched with, and leaves it where it runs (`env > env.txt`, say).
      expect(JSON.stringify(provider.calls.filter((c) => c.op === "startDetached" && c.ref === ref))).toContain("key-before-launch");
      provider.boxes.get(ref)!.files.set("env.txt", new TextEncoder().encode("API_KEY=key-before-launch\n"));
      const r = await exec("cat env.txt");
      expect(r.output).not.toContain("key-before-launch");
      expect(r.boxId).not.toBe(runBox);
      // The run keeps its box until it ends; the box is reaped as an ephemeral one then.
      expect(((await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string }).status).toBe("running");
      expect(await (await call(`/api/sandboxes/${runBox}`, { token })).json()).toMatchObject({ state: "live", ephemeral: true, threads: [t.id] });
    } finally {
      provider.ensureStarted = ensureStarted;
      provider.execHandler = () => ({ exitCode: 0, output: "" });
    }
  }, 30_000);
});

describe("a run whose actor dies right after its start is committed", () => {
  it("still launches: the alarm was armed with the start, and a retry with the same run finds it", async () => {
    const houseId = "house-crash-after-start";
    const { token, t, stub } = await launchableThread(houseId, (a) => a.crashBeforeOutboxCalls());
    const crashed = await stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice", runId: "run-crash-1" }).then(() => null, (e: unknown) => e);
    expect(crashed).not.toBeNull();
    // A stub to the crashed actor stays broken: the actor as it restarts is reached through a new one.
    const restarted = threadStub(t.id);
    const stored = await runInDurableObject(restarted, async (a: ThreadActor, state) => ({ status: a.testRow()!.status, alarm: await state.storage.getAlarm() }));
    expect(stored.status).toBe("running");
    expect(stored.alarm).not.toBeNull();
    // The alarm, when it comes, launches the run.
    await runDurableObjectAlarm(restarted);
    await vi.waitFor(async () => {
      const types = (await readAll(token, t.id)).entries.map((e) => e.payload.type);
      expect(types).toContain("signal.run.launched");
    }, { timeout: 15_000, interval: 100 });
    // A retry naming the same run (an Idempotency-Key) is a replay.
    expect(await unwrapRpc(restarted.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice", runId: "run-crash-1" }))).toMatchObject({ runId: "run-crash-1", replayed: true });
  }, 30_000);
});

/** Waits until the thread holds `n` launched signals. */
const launchedOnce = async (token: string, threadId: string, n: number) => vi.waitFor(async () => {
  const launched = (await readAll(token, threadId)).entries.filter((e) => e.payload.type === "signal.run.launched");
  expect(launched).toHaveLength(n);
}, { timeout: 15_000, interval: 100 });

describe("a launch's readiness milestone", () => {
  it("a running status naming the run's box follows the box's assignment, before the harness starts; it starts no second run", async () => {
    const houseId = "house-readiness";
    const { token, t, runId } = await startLaunch(houseId, () => {});
    await launchedOnce(token, t.id, 1);
    const entries = (await readAll(token, t.id)).entries;
    const at = (id: string) => entries.findIndex((e) => e.id === id);
    const boxId = entries[at(`box:${runId}`)].payload.boxId;
    expect(boxId).toMatch(/^box_/);
    const ready = entries[at(`ready:${runId}`)];
    expect(ready).toMatchObject({ authorId: "threadbox", payload: { type: "signal.thread.status_changed", status: "running", runId, boxId } });
    expect(entries[at(`claim:${runId}`)].payload.boxId).toBeUndefined();
    expect([at(`claim:${runId}`) < at(`box:${runId}`), at(`box:${runId}`) < at(`ready:${runId}`), at(`ready:${runId}`) < at(`launched:${runId}`)]).toEqual([true, true, true]);
    const r = (await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string; runId: string; boxId: string };
    expect(r).toMatchObject({ status: "running", runId, boxId });
  }, 30_000);
});

describe("a run stopped and resumed while its launch still goes on", () => {
  it("the resume goes on on the box the stopped run was given: the first launch, giving up, keeps that box", async () => {
    const houseId = "house-stop-resume-launching";
    const { token, t, stub } = await launchableThread(houseId, (a) => a.stopAndResumeLaunchAt("runner_started"));
    const { runId } = await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
    await launchedOnce(token, t.id, 1);
    const entries = (await readAll(token, t.id)).entries;
    const given = entries.find((e) => e.payload.type === "signal.thread.box_assigned" && e.payload.runId === runId)!.payload.boxId;
    const launched = entries.filter((e) => e.payload.type === "signal.run.launched");
    expect(launched.map((e) => e.payload.runId)).not.toContain(runId);
    expect(launched[0].payload).toMatchObject({ boxId: given, boxReused: true });
  }, 30_000);
});

describe("a box a launch picked but has not attached yet", () => {
  it("an environment's shared box: a plain delete is a 409 and the run goes on", async () => {
    const houseId = "house-delete-shared-launching";
    const { token, t, stub } = await launchableThread(houseId, (a) => a.deleteBoxAt("box_chosen"), { boxMode: "shared" });
    await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
    await launchedOnce(token, t.id, 1);
    expect(await runInDurableObject(stub, (a: ThreadActor) => a.testDeleteBoxAnswer())).toMatch(IN_USE_CONFLICT);
    expect(((await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string }).status).toBe("running");
  }, 30_000);

  it("the box a stopped run kept, picked by its resume: a plain delete is a 409 and the resume runs on it", async () => {
    await deleteTheKeptBoxWhileTheResumeLaunches("house-delete-resumed-box");
  }, 30_000);

  it("the same, with the delete's checks slow to answer: the resume's thread attaching meanwhile still makes it a 409", async () => {
    // The attach ends the reservation the delete's checks look for: the delete must see the thread.
    const box = await deleteTheKeptBoxWhileTheResumeLaunches("house-delete-resumed-box-slow", 300);
    expect(box.state).toBe("live");
  }, 30_000);

  /** A run stopped on its box, then resumed, with a plain delete of that box when the resume has picked it. */
  async function deleteTheKeptBoxWhileTheResumeLaunches(houseId: string, checkDelayMs = 0) {
    const { token, t, stub } = await launchableThread(houseId);
    await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
    await launchedOnce(token, t.id, 1);
    const kept = ((await (await call(`/api/threads/${t.id}/stop`, { method: "POST", token })).json()) as { boxId: string }).boxId;
    await vi.waitFor(async () => {
      const box = (await (await call(`/api/sandboxes/${kept}`, { token })).json()) as { threads: string[]; state: string };
      expect({ threads: box.threads, state: box.state }).toEqual({ threads: [], state: "live" });
    }, { timeout: 10_000, interval: 100 });
    await runInDurableObject(stub, (a: ThreadActor) => {
      a.deleteBoxAt("box_chosen");
      a.delayRunIsCurrent(checkDelayMs);
    });
    await unwrapRpc(stub.startRun(houseId, { task: "again", harness: "pi", resume: true, authorId: "alice" }));
    await launchedOnce(token, t.id, 2);
    expect(await runInDurableObject(stub, (a: ThreadActor) => a.testDeleteBoxAnswer())).toMatch(IN_USE_CONFLICT);
    const launched = (await readAll(token, t.id)).entries.filter((e) => e.payload.type === "signal.run.launched").at(-1)!;
    expect(launched.payload).toMatchObject({ boxId: kept, boxReused: true });
    return (await (await call(`/api/sandboxes/${kept}`, { token })).json()) as { state: string; threads: string[] };
  }
});

describe("a stopped run whose runner never took its stream token", () => {
  it("has the token file removed from the box it keeps, by the stop", async () => {
    // The test provider's runner takes nothing: the token file stays, as it does in a real box when
    // the launch died after uploading it and before the runner started.
    const houseId = "house-stop-token-cleanup";
    const { token, t, stub } = await launchableThread(houseId);
    const provider = sharedTestProvider();
    const previous = provider.execHandler;
    provider.execHandler = (b, command, opts) => {
      const rm = /^rm -f "\$HOME\/(.+)"\*; true$/.exec(command);
      if (rm) for (const path of [...provider.boxes.get(b.ref)!.files.keys()]) if (path.startsWith(rm[1])) provider.boxes.get(b.ref)!.files.delete(path);
      return previous(b, command, opts);
    };
    try {
      const { runId } = await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
      await launchedOnce(token, t.id, 1);
      const box = [...provider.boxes.values()].find((b) => b.labels[LABEL_RUN] === runId)!;
      const tokenFiles = () => [...box.files.keys()].filter((p) => p.startsWith(`.threadbox/runs/${runId}/stream-token-`));
      expect(tokenFiles()).toHaveLength(1);
      expect((await call(`/api/threads/${t.id}/stop`, { method: "POST", token })).status).toBe(200);
      await runDurableObjectAlarm(stub);
      await vi.waitFor(() => expect(provider.calls.filter((c) => c.op === "killDetached" && c.ref === box.ref)).toHaveLength(1), { timeout: 10_000 });
      expect(tokenFiles()).toEqual([]);
      expect([...box.files.keys()].some((p) => p.endsWith("/prompt.txt"))).toBe(true); // the rest of the box stays
    } finally {
      provider.execHandler = previous;
    }
  }, 30_000);
});

describe("runs of a shared-box environment", () => {
  it("report boxReused false for the run that made the box and true for the next one on it", async () => {
    const houseId = "house-shared-box-reused";
    const { token, t: first, stub, environmentId } = await launchableThread(houseId, () => {}, { boxMode: "shared" });
    await unwrapRpc(stub.startRun(houseId, { task: "one", harness: "pi", resume: false, authorId: "alice" }));
    await launchedOnce(token, first.id, 1);
    const second = await createThread(token, { environmentId });
    const secondStub = threadStub(second.id);
    await runInDurableObject(secondStub, (a: ThreadActor) => a.setTestEnv({ THREADBOX_STREAM_URL: "http://stream.test/api/stream" }));
    await unwrapRpc(secondStub.startRun(houseId, { task: "two", harness: "pi", resume: false, authorId: "alice" }));
    await launchedOnce(token, second.id, 1);
    const launched = async (id: string) => (await readAll(token, id)).entries.find((e) => e.payload.type === "signal.run.launched")!.payload;
    const [a, b] = [await launched(first.id), await launched(second.id)];
    expect(a.boxId).toBe(b.boxId);
    expect([a.boxReused, b.boxReused]).toEqual([false, true]);
  }, 30_000);
});

describe("a delegated child whose actor dies right after it is made", () => {
  it("still runs its task: the child and its first run are one commit, with the alarm that launches it", async () => {
    const houseId = "house-crash-delegate";
    const token = await houseToken(houseId);
    const envRes = await call("/api/environments", { method: "POST", token, json: { name: "launch", provider: "test", model: "local/m" } });
    const environmentId = ((await envRes.json()) as { id: string }).id;
    const parent = await createThread(token, { environmentId });
    const { childId } = await idempotentDelegation(houseId, "alice", parent.id, "k-crash");
    await runInDurableObject(threadStub(childId), (a: ThreadActor) => {
      a.setTestEnv({ THREADBOX_STREAM_URL: "http://stream.test/api/stream" });
      a.crashBeforeOutboxCalls();
    });
    const r = await call(`/api/threads/${parent.id}/delegate`, { method: "POST", token, json: { task: "do it" }, headers: { "idempotency-key": "k-crash" } });
    expect(r.status).toBeGreaterThanOrEqual(500); // the child's actor died under the request
    await r.body?.cancel();
    const child = threadStub(childId);
    const stored = await runInDurableObject(child, async (a: ThreadActor, state) => ({ status: a.testRow()?.status, alarm: await state.storage.getAlarm() }));
    expect(stored.status).toBe("running");
    expect(stored.alarm).not.toBeNull();
    await runDurableObjectAlarm(child);
    await vi.waitFor(async () => {
      const types = (await readAll(token, childId)).entries.map((e) => e.payload.type);
      expect(types).toContain("signal.run.launched");
    }, { timeout: 15_000, interval: 100 });
  }, 30_000);
});

describe("what a run's box is made from", () => {
  it("the worker's THREADBOX_SNAPSHOT and THREADBOX_FALLBACK_IMAGE when the environment names neither", async () => {
    const houseId = "house-snapshot-vars";
    const { token, t, stub } = await launchableThread(houseId, (a) => a.setTestEnv({
      THREADBOX_STREAM_URL: "http://stream.test/api/stream", THREADBOX_SNAPSHOT: "custom-harness-v9", THREADBOX_FALLBACK_IMAGE: "registry.example/node:22",
    }));
    const { runId } = await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
    await vi.waitFor(async () => {
      expect((await readAll(token, t.id)).entries.some((e) => e.payload.type === "signal.run.launched")).toBe(true);
    }, { timeout: 15_000, interval: 100 });
    const box = [...sharedTestProvider().boxes.values()].find((b) => b.labels[LABEL_RUN] === runId)!;
    expect({ snapshot: box.create.snapshot, image: box.create.image }).toEqual({ snapshot: "custom-harness-v9", image: "registry.example/node:22" });
  }, 30_000);
});

describe("a run stopped while its launch uploads", () => {
  it("gets no runner, and the box it keeps gets no stream token file (a later run's commands would read it)", async () => {
    const houseId = "house-stop-during-upload";
    const { token, t, stub } = await launchableThread(houseId);
    const provider = sharedTestProvider();
    let stopping = false;
    let stopped = false;
    provider.beforeUpload = async (_ref, paths) => {
      if (stopping || !paths.some((p) => p.endsWith("/prompt.txt"))) return;
      stopping = true;
      const r = await call(`/api/threads/${t.id}/stop`, { method: "POST", token });
      expect(r.status).toBe(200);
      stopped = true;
    };
    try {
      const { runId } = await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
      await vi.waitFor(() => expect(stopped).toBe(true), { timeout: 15_000, interval: 50 });
      const box = () => [...provider.boxes.values()].find((b) => b.labels[LABEL_RUN] === runId)!;
      // The launch finds its run stopped after the uploads and lets the box go, keeping it (a stopped run's box is kept).
      await vi.waitFor(async () => {
        expect(await runInDurableObject(stub, (a: ThreadActor) => a.testOutboxKeys().filter((k) => k.startsWith("launch:")))).toEqual([]);
        const view = (await (await call(`/api/sandboxes?state=live`, { token })).json()) as { sandboxes: { providerRef: string; threads: string[] }[] };
        expect(view.sandboxes.find((b) => b.providerRef === box().ref)?.threads).toEqual([]);
      }, { timeout: 15_000, interval: 100 });
      expect([...box().files.keys()].some((p) => p.endsWith("/prompt.txt"))).toBe(true);
      expect([...box().files.keys()].filter((p) => p.includes("stream-token"))).toEqual([]);
      expect(provider.calls.some((c) => c.op === "startDetached" && c.ref === box().ref)).toBe(false);
    } finally {
      provider.beforeUpload = null;
    }
  }, 30_000);
});

describe("a run of a shared-box environment stopped before its launch writes the environment's files", () => {
  it("writes none of them onto the box, nor into the box's record of them", async () => {
    const houseId = "house-stop-before-env-files";
    const { token, t, stub } = await launchableThread(houseId, () => {}, { boxMode: "shared", files: [{ path: "notes.txt", content: "the environment's notes\n" }] });
    const provider = sharedTestProvider();
    const before = provider.execHandler;
    let stopped = false;
    // The stop lands while the launch reads what the box holds of the environment (before it writes).
    provider.execHandler = async (b, command, opts) => {
      if (!stopped && command.startsWith("cat '.threadbox/environment-files'")) {
        const r = await call(`/api/threads/${t.id}/stop`, { method: "POST", token });
        expect(r.status).toBe(200);
        stopped = true;
      }
      return before(b, command, opts);
    };
    try {
      await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
      await vi.waitFor(async () => {
        expect(stopped).toBe(true);
        expect(await runInDurableObject(stub, (a: ThreadActor) => a.testOutboxKeys().filter((k) => k.startsWith("launch:")))).toEqual([]);
      }, { timeout: 15_000, interval: 100 });
      const boxId = ((await (await call(`/api/threads/${t.id}`, { token })).json()) as { boxId: string }).boxId;
      const ref = ((await (await call(`/api/sandboxes/${boxId}`, { token })).json()) as { providerRef: string }).providerRef;
      const onBox = provider.calls.filter((c) => c.ref === ref);
      expect(onBox.filter((c) => c.op === "upload").flatMap((c) => c.args as string[]).filter((p) => p.endsWith("notes.txt"))).toEqual([]);
      expect(onBox.filter((c) => c.op === "exec" && JSON.stringify(c.args).includes("environment-files.lock"))).toEqual([]);
      expect([...provider.boxes.get(ref)!.files.keys()].filter((p) => p.endsWith("notes.txt"))).toEqual([]);
      expect(onBox.some((c) => c.op === "startDetached")).toBe(false);
    } finally {
      provider.execHandler = before;
    }
  }, 30_000);
});

describe("a shared box a launch reserved and never got", () => {
  it("does not count as another run on the box for good: the next launch still removes a file whose place moved", async () => {
    const houseId = "house-shared-stale-reservation";
    const { token, t, stub, environmentId } = await launchableThread(houseId, () => {}, { boxMode: "shared", files: [{ path: "notes.txt", content: "n\n" }] });
    const provider = sharedTestProvider();
    const before = provider.execHandler;
    // The box's record: an earlier version of the environment (one repository) put notes.txt in work/app.
    provider.execHandler = (_b, command) => ({ exitCode: 0, output: command.startsWith("cat '.threadbox/environment-files'") ? "file:notes.txt\twork/app/notes.txt\n" : "" });
    try {
      const made = (await (await call(`/api/environments/${environmentId}/exec`, { method: "POST", token, json: { command: "true" } })).json()) as { boxId: string };
      // A launch that reserved the box and was stopped before its thread was attached leaves its reservation.
      const gone = await createThread(token, { environmentId });
      await unwrapRpc(boxStub(made.boxId).reserve(houseId, gone.id, "run-stopped-while-launching"));
      await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
      await launchedOnce(token, t.id, 1);
      const commands = provider.calls.filter((c) => c.op === "exec").map((c) => JSON.stringify(c.args));
      expect(commands.some((c) => c.includes("rm -f -- 'work/app/notes.txt'"))).toBe(true);
    } finally {
      provider.execHandler = before;
    }
  }, 30_000);
});

describe("a run that ends before its launch has recorded its runner (a very fast run)", () => {
  it("is a finished run: its runner is not signalled, its launch is recorded, and its box is deleted at once", async () => {
    const houseId = "house-fast-run";
    const { token, t, environmentId } = await launchableThread(houseId, () => {}, { folders: [{ source: "notes", path: "notes", access: "readwrite" }] });
    const up = await call(`/api/environments/${environmentId}/folders?name=notes`, { method: "POST", token, body: tarArchive({ "todo.txt": "old" }), headers: { "content-type": "application/x-tar" } });
    expect(up.status).toBe(201);
    const provider = sharedTestProvider();
    let ended: { ref: string; runId: string } | null = null;
    // The folder reads the same before and after the run (its digest): the sync-back finds it unchanged.
    const previous = provider.execHandler;
    provider.execHandler = (b, command, opts) => /\.(digest|sync)\.tar/.test(command) ? { exitCode: 0, output: `${"a".repeat(64)}\n` } : previous(b, command, opts);
    // The runner's whole run happens before the launch hears back from starting it: it posts the
    // run's finished-signal and exits.
    provider.afterStartDetached = async (handle, opts) => {
      if (opts.env?.THREADBOX_THREAD_ID !== t.id) return;
      const runId = opts.env.THREADBOX_RUN_ID;
      const r = await post(await runToken(houseId, t.id, runId), t.id, { payload: { type: "signal.thread.status_changed", status: "completed", reason: "done", runId } });
      expect(r.status).toBe(201);
      provider.finishDetached(handle, 0);
      ended = { ref: handle.ref, runId };
    };
    try {
      await unwrapRpc(threadStub(t.id).startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
      await vi.waitFor(async () => {
        expect(ended).not.toBeNull();
        expect(await runInDurableObject(threadStub(t.id), (a: ThreadActor) => a.testOutboxKeys())).toEqual([]);
      }, { timeout: 15_000, interval: 100 });
      const { ref, runId } = ended!;
      const thread = (await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string; reason: string };
      expect([thread.status, thread.reason]).toEqual(["completed", "completed"]);
      // The launch recorded what it put in place, once.
      const launched = (await readAll(token, t.id)).entries.filter((e) => e.payload.type === "signal.run.launched");
      expect.soft(launched.map((e) => e.payload.runId)).toEqual([runId]);
      // What the run changed in its readwrite folder is owed a sync-back, as after any run.
      const synced = (await readAll(token, t.id)).entries.filter((e) => e.payload.type === "artifact.folder" && e.payload.runId === runId);
      expect.soft(synced.length).toBeGreaterThan(0);
      // Nothing was stopped: the run ended by itself.
      const onBox = provider.calls.filter((c) => c.ref === ref);
      expect.soft(onBox.filter((c) => c.op === "exec" && (c.args as { command: string }).command.includes("kill -TERM"))).toEqual([]);
      expect.soft(onBox.filter((c) => c.op === "killDetached")).toEqual([]);
      // Its ephemeral box went as any ended run's does, not kept as a stopped run's.
      expect.soft(await provider.list({ [LABEL_RUN]: runId })).toEqual([]);
    } finally {
      provider.afterStartDetached = null;
      provider.execHandler = previous;
    }
  }, 30_000);
});

describe("a readwrite folder whose sync-back fails", () => {
  it("the failed artifact.folder entry quotes the box's words with the environment's secrets redacted, also where they were cut", async () => {
    const houseId = "house-sync-fails-secret";
    const secret = "folder-sync-secret-0123456789";
    const { token, t, environmentId } = await launchableThread(houseId, () => {}, { folders: [{ source: "notes", path: "notes", access: "readwrite" }], secrets: { SYNC_TOKEN: secret } });
    const up = await call(`/api/environments/${environmentId}/folders?name=notes`, { method: "POST", token, body: tarArchive({ "todo.txt": "old" }), headers: { "content-type": "application/x-tar" } });
    expect(up.status).toBe(201);
    const provider = sharedTestProvider();
    const previous = provider.execHandler;
    const lastLine = `\ntar: ${secret}: Cannot stat`;
    // Copy-in reads the folder fine; reading it back after the run fails, the box's last words quoting the
    // secret whole and, 300 characters from their end, cut through it (12 of its characters left).
    provider.execHandler = (b, command, opts) => /\.digest\.tar/.test(command) ? { exitCode: 0, output: `${"a".repeat(64)}\n` }
      : /\.sync\.tar/.test(command) ? { exitCode: 2, output: `tar: ${secret}${"x".repeat(300 - 12 - lastLine.length)}${lastLine}\n` }
      : previous(b, command, opts);
    let runId = "";
    provider.afterStartDetached = async (handle, opts) => {
      if (opts.env?.THREADBOX_THREAD_ID !== t.id) return;
      runId = opts.env.THREADBOX_RUN_ID;
      const r = await post(await runToken(houseId, t.id, runId), t.id, { payload: { type: "signal.thread.status_changed", status: "completed", reason: "done", runId } });
      expect(r.status).toBe(201);
      provider.finishDetached(handle, 0);
    };
    try {
      await unwrapRpc(threadStub(t.id).startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
      const failed = await vi.waitFor(async () => {
        const e = (await readAll(token, t.id)).entries.find((x) => x.payload.type === "artifact.folder" && x.payload.status === "failed");
        expect(e).toBeDefined();
        return e!;
      }, { timeout: 15_000, interval: 100 });
      expect(failed.payload.runId).toBe(runId);
      expect(String(failed.payload.error)).toMatch(/^reading folder work\/notes failed \(exit 2\): (tar: )?\[redacted\]x+\ntar: \[redacted\]: Cannot stat$/);
      expect(JSON.stringify((await readAll(token, t.id)).entries)).not.toContain(secret.slice(-12));
    } finally {
      provider.afterStartDetached = null;
      provider.execHandler = previous;
    }
  }, 30_000);
});

describe("a resume whose launch fails on the box its stopped run kept", () => {
  it("leaves that box kept as the stop did (deleted only once the grace is over): a later resume still goes on there", async () => {
    const houseId = "house-resume-fails-on-kept-box";
    const { token, t, stub } = await launchableThread(houseId);
    await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
    await launchedOnce(token, t.id, 1);
    const kept = ((await (await call(`/api/threads/${t.id}/stop`, { method: "POST", token })).json()) as { boxId: string }).boxId;
    const view = async () => (await (await call(`/api/sandboxes/${kept}`, { token })).json()) as { state: string; threads: string[]; providerRef: string };
    await vi.waitFor(async () => expect(await view()).toMatchObject({ threads: [], state: "live" }), { timeout: 10_000, interval: 100 });

    const provider = sharedTestProvider();
    const previous = provider.execHandler;
    provider.execHandler = (box, command, opts) => {
      const house = provider.boxes.get(box.ref)?.labels["threadbox.house"];
      if (house === houseId && /npm|command -v|pi --version/.test(command)) return { exitCode: 7, output: "npm ERR! network" };
      return previous(box, command, opts);
    };
    try {
      await unwrapRpc(stub.startRun(houseId, { task: "again", harness: "pi", resume: true, authorId: "alice" }));
      await vi.waitFor(async () => {
        const row = (await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string; reason: string; detail: string };
        expect([row.status, row.reason]).toEqual(["failed", "pi_failed"]);
        expect(row.detail).toContain("installing pi failed");
        expect(await runInDurableObject(stub, (a: ThreadActor) => a.testOutboxKeys())).toEqual([]);
      }, { timeout: 15_000, interval: 100 });
    } finally {
      provider.execHandler = previous;
    }
    // The stopped run's workspace is still there, waiting out a grace period as a stopped run's box does.
    const after = await view();
    expect(after).toMatchObject({ state: "live", threads: [] });
    expect(provider.boxes.has(after.providerRef)).toBe(true);
    expect(await runInDurableObject(boxStub(kept), (_a: SandboxActor, state) => state.storage.getAlarm())).not.toBeNull();
    // Once the cause is fixed, a resume goes on there.
    await unwrapRpc(stub.startRun(houseId, { task: "once more", harness: "pi", resume: true, authorId: "alice" }));
    await launchedOnce(token, t.id, 2);
    const launched = (await readAll(token, t.id)).entries.filter((e) => e.payload.type === "signal.run.launched").at(-1)!;
    expect(launched.payload).toMatchObject({ boxId: kept, boxReused: true });
  }, 30_000);
});

describe("a launch whose box registers while the house index is down", () => {
  it("goes on, and leaks no box: the index learns of the box later, and the box is deleted when the run ends", async () => {
    const houseId = "house-register-index-down";
    const { token, t, stub } = await launchableThread(houseId);
    const house = E.HOUSES.get(E.HOUSES.idFromName(houseId));
    await runInDurableObject(house, (h: HouseActor) => h.failBoxUpserts(1));
    const { runId } = await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
    await vi.waitFor(async () => {
      expect(await runInDurableObject(stub, (a: ThreadActor) => a.testOutboxKeys().filter((k) => k.startsWith("launch:")))).toEqual([]);
    }, { timeout: 15_000, interval: 100 });
    const provider = sharedTestProvider();
    const [made] = await provider.list({ [LABEL_RUN]: runId });
    expect(made).toBeDefined();
    // The outage cost the run nothing: it runs on that box, which the house's listing shows.
    const thread = (await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string; boxId: string; detail: string };
    expect([thread.status, thread.detail]).toEqual(["running", `pi running on box ${thread.boxId}`]);
    const listed = (await (await call("/api/sandboxes", { token })).json()) as { sandboxes: { id: string; providerRef: string; threads: string[] }[] };
    expect(listed.sandboxes).toMatchObject([{ id: thread.boxId, providerRef: made.ref, threads: [t.id] }]);
    // The run ends: its box goes, as any ended run's.
    const runner = [...provider.detached.values()].find((d) => d.handle.ref === made.ref)!;
    provider.finishDetached(runner.handle, 0);
    const end = await post(await runToken(houseId, t.id, runId), t.id, { payload: { type: "signal.thread.status_changed", status: "completed", reason: "done", runId } });
    expect(end.status).toBe(201);
    await vi.waitFor(async () => expect(await provider.list({ [LABEL_RUN]: runId })).toEqual([]), { timeout: 10_000, interval: 100 });
  }, 30_000);
});

describe("a launch that fails between making its box and assigning it to the run", () => {
  it("fails the run visibly and deletes the box it made: nothing else knows of that box to reap it", async () => {
    const houseId = "house-register-fails";
    const { token, t, stub } = await launchableThread(houseId);
    const runId = crypto.randomUUID();
    await runInDurableObject(boxStub(launchBoxId(runId)), (a: SandboxActor) => a.failRegisters(1));
    await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice", runId }));
    await expectLaunchFailed(token, t.id, runId, "box actor unavailable (test)");
  }, 30_000);

  it("a box whose delete the provider then fails is not left live: a watch of it retries the delete until the provider confirms", async () => {
    const houseId = "house-register-fails-delete-fails";
    const { token, t, stub } = await launchableThread(houseId);
    const provider = sharedTestProvider();
    const runId = crypto.randomUUID();
    await runInDurableObject(boxStub(launchBoxId(runId)), (a: SandboxActor) => a.failRegisters(1));
    provider.failDeletes(2, "unavailable");
    await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice", runId }));
    await vi.waitFor(async () => {
      expect(((await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string }).status).toBe("failed");
    }, { timeout: 10_000 });
    const [made] = await provider.list({ [LABEL_RUN]: runId });
    expect(made).toBeDefined(); // its delete failed: still there
    const watch = boxStub(lateBoxWatchId("test", made.ref));
    for (let look = 1; look <= 2; look++) {
      await runInDurableObject(watch, (a: SandboxActor) => { a.advanceClock(10 * 60_000); });
      expect(await runDurableObjectAlarm(watch), `look ${look}`).toBe(true);
    }
    expect(await provider.list({ [LABEL_RUN]: runId })).toEqual([]);
    expect(await runDurableObjectAlarm(watch)).toBe(false);
  }, 30_000);
});

describe("a launch's never-registered box whose delete fails and whose late-box watch cannot be started", () => {
  it("is not left live: the thread's outbox keeps its release, and the next alarm deletes it", async () => {
    const houseId = "house-register-fails-watch-fails";
    // The thread's clock runs an hour ahead, so its alarms come only when the test runs them.
    const { token, t, stub } = await launchableThread(houseId, (a) => a.advanceClock(60 * 60_000));
    const provider = sharedTestProvider();
    const runId = crypto.randomUUID();
    await runInDurableObject(boxStub(launchBoxId(runId)), (a: SandboxActor) => a.failRegisters(1));
    await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice", runId }));
    provider.failDeletes(1, "unavailable");
    await runInDurableObject(boxStub("any-box"), (a: SandboxActor) => a.failLateBoxWatches(1));
    try {
      expect(await runDurableObjectAlarm(stub)).toBe(true); // the launch, and its release's first try
      expect(((await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string }).status).toBe("failed");
      const [made] = await provider.list({ [LABEL_RUN]: runId });
      expect(made).toBeDefined(); // neither deleted nor watched: only the thread still knows of it
      expect(await runInDurableObject(stub, (a: ThreadActor) => a.testOutboxKeys())).toContain(`release_box:${runId}`);
    } finally {
      await runInDurableObject(boxStub("any-box"), (a: SandboxActor) => a.failLateBoxWatches(0));
    }
    await runInDurableObject(stub, (a: ThreadActor) => a.advanceClock(60 * 60_000));
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await provider.list({ [LABEL_RUN]: runId })).toEqual([]);
    expect(await runInDurableObject(stub, (a: ThreadActor) => a.testOutboxKeys())).toEqual([]);
  }, 30_000);
});

describe("a launch whose create the provider did not answer, when the watch for the box it may still bring cannot be started", () => {
  it("fails the run naming that box, the only word anyone has of it", async () => {
    const houseId = "house-late-box-unwatched-launch";
    // The thread's clock runs an hour ahead, so its alarms come only when the test runs them.
    const { token, t, stub } = await launchableThread(houseId, (a) => a.advanceClock(60 * 60_000));
    const provider = sharedTestProvider();
    provider.hangCreates(houseId);
    await runInDurableObject(boxStub("any-box"), (a: SandboxActor) => a.failLateBoxWatches(1));
    try {
      await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
      expect(await runDurableObjectAlarm(stub)).toBe(true); // the launch
    } finally {
      provider.hangCreates(houseId, false);
      await runInDurableObject(boxStub("any-box"), (a: SandboxActor) => a.failLateBoxWatches(0));
    }
    const names = [...provider.lateBoxes.entries()].filter(([, b]) => b.labels["threadbox.house"] === houseId).map(([n]) => n);
    expect(names).toHaveLength(1);
    const row = (await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string; detail: string };
    expect(row.status).toBe("failed");
    expect(row.detail).toContain(`box ${names[0]} at sandbox provider test was not confirmed created and may still appear`);
    provider.lateBoxes.delete(names[0]);
  }, 30_000);
});

describe("a shared box retired while a launch holds it, the launch then failing before the box is the run's", () => {
  it("is deleted once that run has failed: it is no longer the environment's box, and nothing else would ever delete it", async () => {
    const houseId = "house-retired-reserved-launch-fails";
    const { token, t, stub, environmentId } = await launchableThread(houseId, (a) => a.failLaunchAt("box_chosen"), { boxMode: "shared" });
    const provider = sharedTestProvider();
    const exec = async () => ((await (await call(`/api/environments/${environmentId}/exec`, { method: "POST", token, json: { command: "true" } })).json()) as { boxId: string }).boxId;
    const old = await exec();
    const oldRef = ((await (await call(`/api/sandboxes/${old}`, { token })).json()) as { providerRef: string }).providerRef;
    // The launch holds the box; a change to the environment and a command replace it meanwhile.
    const replaced = step("the change and command during the launch's reserve", async () => ({
      patched: (await call(`/api/environments/${environmentId}`, { method: "PATCH", token, json: { image: "other:2" } })).status,
      boxId: await exec(),
    }));
    await runInDurableObject(boxStub(old), (b: SandboxActor) => b.duringNextReserve(replaced));
    const { runId } = await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
    await vi.waitFor(async () => {
      const row = (await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string; detail: string };
      expect([row.status, row.detail]).toEqual(["failed", "launch failed: launch step after box_chosen failed (test)"]);
    }, { timeout: 15_000, interval: 100 });
    expect(replaced.value().patched).toBe(200);
    expect(replaced.value().boxId).not.toBe(old);
    const es = (await readAll(token, t.id)).entries;
    expect(es.filter((e) => e.payload.type === "signal.thread.box_assigned" && e.payload.runId === runId)).toEqual([]);
    await vi.waitFor(async () => {
      expect(((await (await call(`/api/sandboxes/${old}`, { token })).json()) as { state: string }).state).toBe("deleted");
    }, { timeout: 10_000, interval: 100 });
    expect(provider.boxes.has(oldRef)).toBe(false);
  }, 30_000);
});

describe("a resume whose launch fails after picking the box its stopped run kept, before that box is the run's", () => {
  it("leaves that box waiting out the stop's grace, not kept for good", async () => {
    const houseId = "house-resume-fails-before-assign";
    const { token, t, stub } = await launchableThread(houseId);
    await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" }));
    await launchedOnce(token, t.id, 1);
    const kept = ((await (await call(`/api/threads/${t.id}/stop`, { method: "POST", token })).json()) as { boxId: string }).boxId;
    await vi.waitFor(async () => expect(((await (await call(`/api/sandboxes/${kept}`, { token })).json()) as { threads: string[] }).threads).toEqual([]), { timeout: 10_000, interval: 100 });
    await runInDurableObject(stub, (a: ThreadActor) => a.failLaunchAt("box_chosen"));
    await unwrapRpc(stub.startRun(houseId, { task: "again", harness: "pi", resume: true, authorId: "alice" }));
    await vi.waitFor(async () => {
      const row = (await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string; detail: string };
      expect([row.status, row.detail]).toEqual(["failed", "launch failed: launch step after box_chosen failed (test)"]);
      expect(await runInDurableObject(stub, (a: ThreadActor) => a.testOutboxKeys())).toEqual([]);
    }, { timeout: 15_000, interval: 100 });
    expect(((await (await call(`/api/sandboxes/${kept}`, { token })).json()) as { state: string }).state).toBe("live");
    expect(await runInDurableObject(boxStub(kept), (_a: SandboxActor, state) => state.storage.getAlarm())).not.toBeNull();
  }, 30_000);
});

describe("a launch that died right after making its box, retried after its environment was deleted", () => {
  it("fails naming the environment and deletes that box at the provider that made it: the box was never registered, so only the launch knows of it", async () => {
    const houseId = "house-crash-then-env-deleted";
    const { token, t, stub, environmentId } = await launchableThread(houseId, (a) => a.crashLaunchAt("box_created"));
    const provider = sharedTestProvider();
    const create = provider.create;
    // The environment goes while the provider makes the box (a real create takes seconds); the
    // attempt then dies before it records the box, and its retry finds the environment gone.
    provider.create = async function (this: typeof provider, opts) {
      if (opts.labels.house === houseId) {
        provider.create = create;
        expect((await call(`/api/environments/${environmentId}`, { method: "DELETE", token })).status).toBe(204);
      }
      return create.call(this, opts);
    };
    let runId: string;
    try {
      ({ runId } = await unwrapRpc(stub.startRun(houseId, { task: "do it", harness: "pi", resume: false, authorId: "alice" })));
      await vi.waitFor(async () => {
        const row = (await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string; detail: string };
        expect([row.status, row.detail]).toEqual(["failed", `launch failed: environment ${environmentId} of this thread no longer exists`]);
        // A fresh stub: the one that saw the crash stays broken.
        expect(await runInDurableObject(threadStub(t.id), (a: ThreadActor) => a.testOutboxKeys())).toEqual([]);
      }, { timeout: 20_000, interval: 100 });
    } finally {
      provider.create = create;
    }
    expect(provider.calls.filter((c) => c.op === "create" && JSON.stringify(c.args).includes(runId))).toHaveLength(1);
    expect(await provider.list({ [LABEL_RUN]: runId })).toEqual([]);
  }, 30_000);
});

describe("a launch's box whose release does not reach the box's actor", () => {
  /**
   * The launch of a fresh box ends without its run (`arrange` stops it or fails it before the box is
   * assigned) while every delete of a box fails (its actor unreachable); then the actor answers again.
   * The thread's clock runs an hour ahead, so its alarms come only when the test runs them.
   */
  async function releaseUnreached(houseId: string, arrange: (a: ThreadActor) => void) {
    const provider = sharedTestProvider();
    const { token, t, stub, runId } = await startLaunch(houseId, (a) => {
      a.advanceClock(60 * 60_000);
      arrange(a);
    });
    await runInDurableObject(boxStub("any-box"), (a: SandboxActor) => a.failDeletesOfAnyBox(1_000));
    try {
      expect(await runDurableObjectAlarm(stub)).toBe(true); // the launch
      const row = (await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string };
      expect(row.status).toBe("failed");
      expect((await runInDurableObject(stub, (a: ThreadActor) => a.testOutboxKeys())).filter((k) => k.startsWith("launch:"))).toEqual([]);
      // The launch is over and its box's actor was not reached: the box is still live.
      expect(await provider.list({ [LABEL_RUN]: runId })).toHaveLength(1);
      expect(((await (await call(`/api/sandboxes/${launchBoxId(runId)}`, { token })).json()) as { state: string }).state).toBe("live");
      // Still unreachable at the next alarm: asked again later.
      expect(await runDurableObjectAlarm(stub)).toBe(true);
      expect(await provider.list({ [LABEL_RUN]: runId })).toHaveLength(1);
    } finally {
      await runInDurableObject(boxStub("any-box"), (a: SandboxActor) => a.failDeletesOfAnyBox(0));
    }
    await runInDurableObject(stub, (a: ThreadActor) => a.advanceClock(60 * 60_000));
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await provider.list({ [LABEL_RUN]: runId })).toEqual([]);
    expect(((await (await call(`/api/sandboxes/${launchBoxId(runId)}`, { token })).json()) as { state: string }).state).toBe("deleted");
    expect(await runInDurableObject(stub, (a: ThreadActor) => a.testOutboxKeys())).toEqual([]);
  }

  it("stopped before the box was assigned: the thread's alarm asks again until the box is deleted", async () => {
    await releaseUnreached("house-abandon-unreached", (a) => a.stopLaunchAt("box_registered"));
  }, 30_000);

  it("failed before the box was assigned: the thread's alarm asks again until the box is deleted", async () => {
    await releaseUnreached("house-release-unreached", (a) => a.failLaunchAt("box_chosen"));
  }, 30_000);

  it("stopped after its runner was spawned, the box kept: the runner is ended, and the detach the box's actor missed is asked again by the thread's alarm", async () => {
    const houseId = "house-keep-release-unreached";
    const provider = sharedTestProvider();
    const { token, t, stub, runId } = await startLaunch(houseId, (a) => {
      a.advanceClock(60 * 60_000);
      a.stopLaunchAt("runner_spawned");
    });
    const boxId = launchBoxId(runId);
    const view = async () => (await (await call(`/api/sandboxes/${boxId}`, { token })).json()) as { state: string; threads: string[] };
    await runInDurableObject(boxStub(boxId), (a: SandboxActor) => a.failDetaches(1_000));
    try {
      expect(await runDurableObjectAlarm(stub)).toBe(true); // the launch, stopped, and its release's first try
      const row = (await (await call(`/api/threads/${t.id}`, { token })).json()) as { status: string; reason: string };
      expect([row.status, row.reason]).toEqual(["failed", "stopped"]);
      expect(await runInDurableObject(stub, (a: ThreadActor) => a.testOutboxKeys())).toContain(`release_box:${runId}`);
      const [made] = await provider.list({ [LABEL_RUN]: runId });
      expect([...provider.detached.values()].find((d) => d.handle.ref === made.ref)?.exitCode).toBeDefined(); // ended before the detach
      expect(await view()).toMatchObject({ state: "live", threads: [t.id] }); // not detached yet
    } finally {
      await runInDurableObject(boxStub(boxId), (a: SandboxActor) => a.failDetaches(0));
    }
    await runInDurableObject(stub, (a: ThreadActor) => a.advanceClock(60 * 60_000));
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await view()).toMatchObject({ state: "live", threads: [] }); // detached and kept, as a stopped run's box is
    expect(await runInDurableObject(stub, (a: ThreadActor) => a.testOutboxKeys())).toEqual([]);
  }, 30_000);
});
