import { describe, expect, it, vi } from "vitest";
import { call, chat, createThread, houseToken, post, readAll, streamToken } from "./helpers";
import { createAgent, decisions, MODEL_KEY, modelEnvironment, scriptedModel, botThread, waitForEntries, type Step } from "./dispatch-helpers";
import { sharedTestProvider } from "./register-test-provider";
import { NO_SANDBOX } from "../../src/dispatch/tools/no-sandbox";
import { LABEL_ENVIRONMENT, LABEL_THREAD } from "../../src/sandbox/provider";
import { abortAllDurableObjects, env, runInDurableObject } from "cloudflare:test";
import { boundedRound, closeInterruptedCalls, MAX_BOT_TEXT_CHARS, MAX_ROUND_TOOL_ARGS_CHARS, TURN_KEEPALIVE_MS } from "../../src/actors/thread/dispatch";
import { DEFAULT_MAX_TOOL_CALLS_PER_ROUND } from "../../src/dispatch/tool-loop";
import type { HouseActor, ThreadActor } from "./test-worker";

const E = env as unknown as { THREADS: DurableObjectNamespace<ThreadActor>; HOUSES: DurableObjectNamespace<HouseActor> };

/** An environment on the test provider: `body`'s fields over that. */
async function testEnvironment(token: string, body: Record<string, unknown>): Promise<string> {
  const r = await call("/api/environments", { method: "POST", token, json: { provider: "test", ...body } });
  if (r.status !== 201) throw new Error(`environment: ${r.status} ${await r.text()}`);
  return ((await r.json()) as { id: string }).id;
}

/** The bot's tool results in `es`, as [isError, output]. */
const toolResults = (es: { payload: Record<string, unknown> }[]) =>
  es.filter((e) => e.payload.type === "pi.tool_result").map((e) => [e.payload.isError, String(e.payload.output)]);

const chatsBy = <T extends { authorId?: string; payload: { type: string } }>(es: T[], author: string) => es.filter((e) => e.payload.type === "chat" && e.authorId === author);

describe("dispatch: a bot's turn", () => {
  it("mention -> tool round persisted as pi.assistant + pi.tool_result, then one chat reply by the bot at depth 1", async () => {
    const token = await houseToken("house-turn-1");
    const model = await scriptedModel([
      { toolCalls: [{ id: "c1", name: "run_command", arguments: { command: "cat hello.txt" } }] },
      { text: "The file says hi." },
    ]);
    sharedTestProvider().execHandler = (_box, command) => ({ exitCode: 0, output: `ran: ${command}` });
    const envId = await modelEnvironment(token, model.baseUrl);
    const coder = await createAgent(token, { name: "Coder", handle: "coder", systemPrompt: "Be brief." });
    const thread = await createThread(token, { environmentId: envId });
    const r = await post(token, thread.id, chat("@coder what is in hello.txt?"));
    expect(r.status).toBe(201);

    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, coder.id).length === 1, "the reply");
    const turn = es.filter((e) => e.authorId === coder.id && e.payload.type !== "signal.exec.output");
    expect(turn.map((e) => e.payload.type)).toEqual(["pi.assistant", "pi.tool_result", "pi.assistant", "chat"]);
    // The command's output also went to the thread as it ran (live output has its own tests).
    expect(es.filter((e) => e.payload.type === "signal.exec.output").map((e) => e.payload.text)).toEqual(["ran: cat hello.txt"]);
    expect(turn.every((e) => e.payload.depth === 1)).toBe(true);
    expect(turn[0].payload.toolCalls).toEqual([{ id: "c1", name: "run_command", args: { command: "cat hello.txt" } }]);
    expect(turn[1].payload.output).toContain("ran: cat hello.txt");
    expect(turn[3].payload.text).toBe("The file says hi.");

    const reqs = await model.requests();
    expect(reqs).toHaveLength(2);
    expect(reqs[0].headers.authorization).toBe(`Bearer ${MODEL_KEY}`);
    expect(JSON.stringify(reqs[0].body.messages)).toContain("@coder what is in hello.txt?");
    expect(JSON.stringify(reqs[0].body.messages)).toContain("Be brief.");
    expect(reqs[0].body.tools.map((t: any) => t.function.name).sort()).toEqual(["create_agent", "create_thread", "delegate_task", "list_threads", "post_to_thread", "preview_link", "run_command"]);
    expect(JSON.stringify(reqs[1].body.messages)).toContain("ran: cat hello.txt");
    expect(JSON.stringify(es)).not.toContain(MODEL_KEY);

    const ds = await decisions(token, thread.id);
    expect(ds.find((d) => d.agentId === coder.id && d.reason === "mentioned")).toBeTruthy();
    // The reply is itself a trigger; its author does not answer itself. (That trigger is decided
    // by the alarm after the reply is stored, not with it.)
    await waitForDecision(token, thread.id, (d) => d.agentId === coder.id && d.reason === "author");
  });

  it("preview_link: a URL to a port on the environment's shared box once it runs; a plain answer before", async () => {
    const token = await houseToken("house-turn-preview");
    const model = await scriptedModel([
      { toolCalls: [{ id: "p0", name: "preview_link", arguments: { port: 8080 } }] },
      { toolCalls: [{ id: "c1", name: "run_command", arguments: { command: "start the server" } }] },
      { toolCalls: [{ id: "p1", name: "preview_link", arguments: { port: 8080, expiresInSeconds: 600 } }] },
      { text: "Open the link." },
    ]);
    sharedTestProvider().execHandler = () => ({ exitCode: 0, output: "serving" });
    const envId = await modelEnvironment(token, model.baseUrl);
    const coder = await createAgent(token, { name: "Coder", handle: "coder" });
    const thread = await createThread(token, { environmentId: envId });
    await post(token, thread.id, chat("@coder serve it and give me a link"));
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, coder.id).length === 1, "the reply");
    const results = es.filter((e) => e.authorId === coder.id && e.payload.type === "pi.tool_result");
    expect(String(results[0].payload.output)).toMatch(/not running yet/);
    const link = JSON.parse(String(results[2].payload.output));
    expect(link.url).toContain("8080-");
    expect(link.port).toBe(8080);
    expect(Date.parse(link.expiresAt)).toBeGreaterThan(Date.now() + 500_000);
  });

  it("a model error (HTTP 500) ends the turn with one signal.dispatch.error; the thread keeps working", async () => {
    const token = await houseToken("house-turn-500");
    // Enough 500s to outlast any bounded retry.
    const failing = await scriptedModel(Array.from({ length: 6 }, () => ({ error: 500, message: "upstream exploded" })));
    const failingEnv = await modelEnvironment(token, failing.baseUrl);
    const bot = await createAgent(token, { name: "Bot", handle: "bot", environmentId: failingEnv });
    const thread = await createThread(token, {});
    await post(token, thread.id, chat("@bot hello"));
    const es = await waitForEntries(token, thread.id, (es) => es.some((e) => e.payload.type === "signal.dispatch.error"), "the error");
    const errors = es.filter((e) => e.payload.type === "signal.dispatch.error");
    expect(errors).toHaveLength(1);
    expect(errors[0].authorId).toBe(bot.id);
    expect(String(errors[0].payload.reason)).toMatch(/500/);
    expect(chatsBy(es, bot.id)).toHaveLength(0);
    expect((await decisions(token, thread.id)).find((d) => d.agentId === bot.id && d.reason === "error")?.detail).toMatch(/500/);
    const calls = (await failing.requests()).length;
    expect(calls).toBeGreaterThanOrEqual(1);
    expect(calls).toBeLessThanOrEqual(4); // bounded retries, no loop

    const healthy = await scriptedModel([{ text: "back again" }]);
    const healthyEnv = await modelEnvironment(token, healthy.baseUrl);
    expect((await call(`/api/agents/${bot.id}`, { method: "PATCH", token, json: { environmentId: healthyEnv } })).status).toBe(200);
    await post(token, thread.id, chat("@bot again?"));
    const later = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).length === 1, "the next reply");
    expect(chatsBy(later, bot.id)[0].payload.text).toBe("back again");
    expect(later.filter((e) => e.payload.type === "signal.dispatch.error")).toHaveLength(1);
  }, 60_000);

  it("a model whose every answer stops before its finish reason: retried, then one signal.dispatch.error, and no partial answer posted", async () => {
    const { token, model, bot, t } = await botThread("house-turn-cut-short", { name: "Bot", handle: "bot" });
    await model.push(...Array.from({ length: 6 }, () => ({ text: "half of an answer that never ends", endAfterChunks: 2 })));
    await post(token, t.id, chat("@bot hello", "ask-cut"));
    const es = await waitForEntries(token, t.id, (es) => es.some((e) => e.payload.type === "signal.dispatch.error"), "the error");
    const errors = es.filter((e) => e.payload.type === "signal.dispatch.error");
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ authorId: bot.id, payload: { triggerEntryId: "ask-cut" } });
    expect(String(errors[0].payload.reason)).toBe("the model API's answer ended before it was finished (no finish reason) (after 3 attempts)");
    expect(es.filter((e) => e.authorId === bot.id && e.payload.type !== "signal.dispatch.error")).toEqual([]);
    expect(await model.requests()).toHaveLength(3);
  }, 30_000);

  it("no model resolvable: the turn ends with a signal.dispatch.error saying so, and never calls a model", async () => {
    const token = await houseToken("house-turn-nomodel");
    const bot = await createAgent(token, { name: "Bot", handle: "bot", model: "nowhere/model-x" });
    const bare = await createThread(token, {});
    await post(token, bare.id, chat("@bot hi"));
    const es = await waitForEntries(token, bare.id, (es) => es.some((e) => e.payload.type === "signal.dispatch.error"));
    expect(String(es.find((e) => e.payload.type === "signal.dispatch.error")!.payload.reason)).toMatch(/no model/i);

    const model = await scriptedModel();
    const envId = await modelEnvironment(token, model.baseUrl);
    const bound = await createThread(token, { environmentId: envId });
    await post(token, bound.id, chat("@bot hi"));
    const es2 = await waitForEntries(token, bound.id, (es) => es.some((e) => e.payload.type === "signal.dispatch.error"));
    expect(String(es2.find((e) => e.payload.type === "signal.dispatch.error")!.payload.reason)).toContain("nowhere");
    expect(await model.requests()).toHaveLength(0);
    expect(chatsBy(es2, bot.id)).toHaveLength(0);
  });

  it("a bot whose environment was deleted is told so, not that it has none", async () => {
    const { token, envId, t } = await botThread("house-turn-env-gone", { name: "Bot", handle: "bot" });
    expect((await call(`/api/environments/${envId}`, { method: "DELETE", token })).status).toBe(204);
    await post(token, t.id, chat("@bot hi"));
    const es = await waitForEntries(token, t.id, (es) => es.some((e) => e.payload.type === "signal.dispatch.error"));
    expect(String(es.find((e) => e.payload.type === "signal.dispatch.error")!.payload.reason))
      .toBe(`no model: the environment ${envId} of bot @bot no longer exists (give the bot another environment, or none to use the thread's)`);

    await createAgent(token, { name: "Bare", handle: "bare" });
    await post(token, t.id, chat("@bare hi", "to-bare"));
    const es2 = await waitForEntries(token, t.id, (es) => es.some((e) => e.payload.type === "signal.dispatch.error" && e.payload.triggerEntryId === "to-bare"));
    expect(String(es2.find((e) => e.payload.triggerEntryId === "to-bare" && e.payload.type === "signal.dispatch.error")!.payload.reason))
      .toBe(`no model: this thread's environment ${envId} no longer exists, and bot @bare has none of its own (give the bot an environment with piModels)`);
  });

  it("a malformed tool call (unknown tool, bad arguments) is answered as an error result; the bot recovers", async () => {
    const token = await houseToken("house-turn-malformed");
    const model = await scriptedModel([
      { toolCalls: [{ id: "x1", name: "launch_missiles", arguments: {} }, { id: "x2", name: "run_command", arguments: { cmd: "ls" } }] },
      { text: "Sorry, fixed." },
    ]);
    const envId = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Bot", handle: "bot" });
    const thread = await createThread(token, { environmentId: envId });
    await post(token, thread.id, chat("@bot go"));
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).length === 1);
    const results = es.filter((e) => e.payload.type === "pi.tool_result");
    expect(results).toHaveLength(2);
    expect(results.every((r) => r.payload.isError === true)).toBe(true);
    expect(String(results[1].payload.output)).toMatch(/invalid arguments/i);
    expect(chatsBy(es, bot.id)[0].payload.text).toBe("Sorry, fixed.");
  });

  it("delegate_task with a blank task, or a branch without a repo, is an error result the bot reads: no child thread", async () => {
    const token = await houseToken("house-turn-blank-task");
    const model = await scriptedModel([
      { toolCalls: [{ id: "d1", name: "delegate_task", arguments: { task: " \n " } }, { id: "d2", name: "delegate_task", arguments: { task: "fix it", branch: "main" } }] },
      { text: "I need a task." },
    ]);
    // A model for the run too: nothing but the arguments stands in the way of a delegation.
    const envId = await modelEnvironment(token, model.baseUrl, { model: "local/scripted-model" });
    const bot = await createAgent(token, { name: "Bot", handle: "bot" });
    const thread = await createThread(token, { environmentId: envId });
    await post(token, thread.id, chat("@bot delegate something"));
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).length >= 1);
    const results = es.filter((e) => e.payload.type === "pi.tool_result");
    expect(results.map((r) => [r.payload.isError, String(r.payload.output)])).toEqual([
      [true, "invalid arguments: task: task is empty or only whitespace"],
      [true, expect.stringContaining("invalid arguments: branch: branch needs repo")],
    ]);
    const children = (await (await call(`/api/threads?parent=${thread.id}`, { token })).json()) as { threads: unknown[] };
    expect(children.threads).toEqual([]);
  });

  it("delegate_task takes repo and branch only as POST /delegate does: a bad one is an error result and no child thread", async () => {
    const token = await houseToken("house-turn-bad-repo");
    const bad = [
      { repo: "--upload-pack=touch /tmp/pwned" },
      { repo: "https://user:ghp_secret@example.com/r.git" },
      { repo: "not a url" },
      // On a shared box the branch becomes `git fetch origin <branch>`: as an option, it runs the command.
      { repo: "https://example.com/r.git", branch: "--upload-pack=touch /tmp/pwned" },
    ];
    const model = await scriptedModel([
      { toolCalls: bad.map((b, i) => ({ id: `d${i}`, name: "delegate_task", arguments: { task: "fix it", ...b } })) },
      { text: "Those were bad." },
    ]);
    const envId = await modelEnvironment(token, model.baseUrl, { model: "local/scripted-model" });
    const bot = await createAgent(token, { name: "Bot", handle: "bot" });
    const thread = await createThread(token, { environmentId: envId });
    for (const b of bad) {
      const r = await call(`/api/threads/${thread.id}/delegate`, { method: "POST", token, json: { task: "fix it", ...b } });
      expect(r.status, JSON.stringify(b)).toBe(400);
    }
    await post(token, thread.id, chat("@bot delegate with these repos"));
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).some((e) => e.payload.text === "Those were bad."));
    const results = es.filter((e) => e.payload.type === "pi.tool_result");
    const badUrl = expect.stringMatching(/^invalid arguments: repo: an http\(s\), git, ssh or file URL/);
    expect(results.map((r) => [r.payload.isError, String(r.payload.output)])).toEqual([
      [true, badUrl], [true, badUrl], [true, badUrl],
      [true, expect.stringMatching(/^invalid arguments: branch: a git branch name/)],
    ]);
    const children = (await (await call(`/api/threads?parent=${thread.id}`, { token })).json()) as { threads: unknown[] };
    expect(children.threads).toEqual([]);
  });

  it("run_command without an environment: a plain 'no sandbox' result, and the bot answers normally", async () => {
    const token = await houseToken("house-turn-nobox");
    const model = await scriptedModel([{ toolCalls: [{ id: "r1", name: "run_command", arguments: { command: "ls" } }] }, { text: "Nowhere to run that." }]);
    const envId = await modelEnvironment(token, model.baseUrl);
    // The bot resolves its model from its own environment; the thread has none, so no sandbox.
    const bot = await createAgent(token, { name: "Bot", handle: "bot", environmentId: envId });
    const thread = await createThread(token, {});
    await post(token, thread.id, chat("@bot ls please"));
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).length === 1);
    const result = es.find((e) => e.payload.type === "pi.tool_result")!;
    expect(result.payload.isError).toBe(false);
    expect(String(result.payload.output)).toMatch(/no sandbox is bound to this thread/);
  });

  it("a chat written through the Durable Streams protocol (a stream token) wakes bots too", async () => {
    const token = await houseToken("house-turn-stream");
    const model = await scriptedModel([{ text: "heard you over the stream" }]);
    const envId = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Bot", handle: "bot" });
    const thread = await createThread(token, { environmentId: envId });
    const r = await call(`/api/stream/thread-${thread.id}`, {
      method: "POST", token: await streamToken("house-turn-stream", thread.id),
      headers: { "content-type": "application/json" }, body: JSON.stringify({ payload: { type: "chat", text: "@bot ping" } }),
    });
    expect(r.status).toBe(204);
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).length === 1);
    expect(chatsBy(es, bot.id)[0].payload.text).toBe("heard you over the stream");
  });

  it("the bot sees the conversation before a burst of other entries (a command's live output, a run's rounds)", async () => {
    const token = await houseToken("house-turn-history");
    const model = await scriptedModel([{ text: "It was PINEAPPLE." }]);
    const envId = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Bot", handle: "bot" });
    const thread = await createThread(token, { environmentId: envId });
    await post(token, thread.id, chat("the secret word is PINEAPPLE", "word"));
    // One run_command streams up to 200 output entries; a run on the thread writes many pi.* rounds.
    const burst = Array.from({ length: 300 }, (_, i) => ({ id: `out-${i}`, payload: { type: "signal.exec.output", execId: "x", stream: "stdout", text: `line ${i}\n` } }));
    const call = { id: "call-x", payload: { type: "pi.tool_call", toolCallId: "x", name: "bash", args: { command: "build" } } };
    expect((await post(token, thread.id, [call, ...burst])).status).toBe(201);
    await post(token, thread.id, chat("@bot what was the secret word?", "ask"));
    await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).length === 1);
    const sent = JSON.stringify((await model.requests())[0].body.messages);
    expect(sent).toContain("what was the secret word?");
    expect(sent).toContain("the secret word is PINEAPPLE");
    expect(sent).not.toContain("line 1\\n");
  });

  it("the agent's tool allow-list is all the model is offered", async () => {
    const token = await houseToken("house-turn-allow");
    const model = await scriptedModel([{ text: "ok" }]);
    const envId = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Bot", handle: "bot", tools: ["list_threads"] });
    const thread = await createThread(token, { environmentId: envId });
    await post(token, thread.id, chat("@bot hi"));
    await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).length === 1);
    expect((await model.requests())[0].body.tools.map((t: any) => t.function.name)).toEqual(["list_threads"]);
  });

  it("create_agent takes every field POST /api/agents does: a bot can make an ambient bot with its own gate model", async () => {
    const token = await houseToken("house-turn-create-agent");
    const model = await scriptedModel([
      { toolCalls: [{ id: "a1", name: "create_agent", arguments: { name: "Watcher", handle: "watcher", model: "local/scripted-model", triggerMode: "ambient", gateModel: "local/scripted-gate" } }] },
      { text: "Made it." },
    ]);
    const envId = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Bot", handle: "bot" });
    const thread = await createThread(token, { environmentId: envId });
    await post(token, thread.id, chat("@bot make a watcher"));
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).length === 1);
    const result = es.find((e) => e.authorId === bot.id && e.payload.type === "pi.tool_result");
    expect(result?.payload.isError ?? false).toBe(false);
    const agents = (await (await call("/api/agents", { token })).json()) as { agents: Array<{ handle: string; gateModel?: string; triggerMode: string }> };
    expect(agents.agents.find((a) => a.handle === "watcher")).toMatchObject({ triggerMode: "ambient", gateModel: "local/scripted-gate" });
  });
});

describe("dispatch: delegate_task names the environment and model its run uses, as POST /delegate does", () => {
  const childrenOf = async (token: string, threadId: string) =>
    ((await (await call(`/api/threads?parent=${threadId}`, { token })).json()) as { threads: { id: string; environmentId: string | null; createdAt: string }[] }).threads;

  it("a thread whose environment was deleted: the bot is told to name another, names it by id or by name, and the child runs in it", async () => {
    const token = await houseToken("house-delegate-env");
    const model = await scriptedModel();
    // The bot's model comes from an environment of its own; the thread's is deleted under it.
    const botEnv = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Bot", handle: "bot", environmentId: botEnv });
    const gone = await testEnvironment(token, { name: "gone", model: "local/m" });
    const other = await testEnvironment(token, { name: "other", model: "local/m", env: { WHICH: "other" } });
    const thread = await createThread(token, { environmentId: gone });
    expect((await call(`/api/environments/${gone}`, { method: "DELETE", token })).status).toBe(204);
    // The bot's children can launch (their ids are not known before the calls make them).
    await runInDurableObject(E.THREADS.get(E.THREADS.idFromName(`thread:${thread.id}`)), (a: ThreadActor) => a.setChildTestEnv({ THREADBOX_STREAM_URL: "http://stream.test/api/stream" }));
    await model.push(
      { toolCalls: [{ id: "d1", name: "delegate_task", arguments: { task: "fix it" } }] },
      { toolCalls: [{ id: "d2", name: "delegate_task", arguments: { task: "fix it", environmentId: other } }] },
      { toolCalls: [{ id: "d3", name: "delegate_task", arguments: { task: "and test it", environmentName: "other" } }] },
      { text: "Delegated twice." },
    );
    await post(token, thread.id, chat("@bot fix it"));
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).some((e) => e.payload.text === "Delegated twice."), "the reply");
    const results = toolResults(es);
    // Not the route's words ("name another environmentId"): the tool takes a name too.
    expect(results[0]).toEqual([true, `not_found: this thread's environment ${gone} no longer exists: name another of this house's environments by environmentId or environmentName`]);
    expect(results.slice(1).map(([isError]) => isError)).toEqual([false, false]);
    const made = results.slice(1).map(([, out]) => JSON.parse(out as string).childThreadId as string);
    const children = await childrenOf(token, thread.id);
    expect(children.map((c) => c.id).sort()).toEqual([...made].sort());
    expect(children.map((c) => c.environmentId)).toEqual([other, other]);
    // The run launched on a box of that environment: its labels and its env vars.
    for (const childId of made) {
      await vi.waitFor(async () => {
        expect((await readAll(token, childId)).entries.some((e) => e.payload.type === "signal.run.launched")).toBe(true);
      }, { timeout: 15_000, interval: 100 });
      const box = [...sharedTestProvider().boxes.values()].find((b) => b.labels[LABEL_THREAD] === childId)!;
      expect(box.labels[LABEL_ENVIRONMENT]).toBe(other);
      expect(box.create.env).toMatchObject({ WHICH: "other" });
    }
  });

  it("another house's environment, by id or by name, is the not-found result a missing one is: the model reads it, no child is made", async () => {
    const token = await houseToken("house-delegate-own");
    const foreignToken = await houseToken("house-delegate-foreign");
    const foreign = await testEnvironment(foreignToken, { name: "theirs", model: "local/m" });
    const missing = "env_doesnotexist";
    const model = await scriptedModel([
      { toolCalls: [
        { id: "d1", name: "delegate_task", arguments: { task: "fix it", environmentId: foreign } },
        { id: "d2", name: "delegate_task", arguments: { task: "fix it", environmentId: missing } },
        { id: "d3", name: "delegate_task", arguments: { task: "fix it", environmentName: "theirs" } },
        { id: "d4", name: "delegate_task", arguments: { task: "fix it", environmentName: "nobody-has-this" } },
      ] },
      { text: "No such environment." },
    ]);
    const envId = await modelEnvironment(token, model.baseUrl, { model: "local/scripted-model" });
    const bot = await createAgent(token, { name: "Bot", handle: "bot" });
    const thread = await createThread(token, { environmentId: envId });
    await post(token, thread.id, chat("@bot delegate over there"));
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).length >= 1, "the reply");
    // What POST /delegate answers for the other house's id, word for word.
    const http = (await (await call(`/api/threads/${thread.id}/delegate`, { method: "POST", token, json: { task: "fix it", environmentId: foreign } })).json()) as { error: { code: string; message: string } };
    expect(toolResults(es)).toEqual([
      [true, `${http.error.code}: ${http.error.message}`],
      [true, "not_found: environment not found"],
      [true, 'not_found: no environment named "theirs" in this house'],
      [true, 'not_found: no environment named "nobody-has-this" in this house'],
    ]);
    expect(http.error.code).toBe("not_found");
    const seen = JSON.stringify((await model.requests())[1].body.messages);
    expect(seen).toContain("environment not found");
    expect(seen).toContain('no environment named \\"theirs\\" in this house');
    expect(await childrenOf(token, thread.id)).toEqual([]);
  });

  it("an unknown name, a name two environments share, or both an id and a name: an error result the bot reads, and no child", async () => {
    const token = await houseToken("house-delegate-names");
    const a = await testEnvironment(token, { name: "twin", model: "local/m" });
    const b = await testEnvironment(token, { name: "twin", model: "local/m" });
    const model = await scriptedModel();
    const envId = await modelEnvironment(token, model.baseUrl, { model: "local/scripted-model" });
    await model.push(
      { toolCalls: [
        { id: "d1", name: "delegate_task", arguments: { task: "fix it", environmentName: "tw1n" } },
        { id: "d2", name: "delegate_task", arguments: { task: "fix it", environmentName: "twin" } },
        { id: "d3", name: "delegate_task", arguments: { task: "fix it", environmentId: a, environmentName: "twin" } },
      ] },
      { text: "Which one?" },
    );
    const bot = await createAgent(token, { name: "Bot", handle: "bot" });
    const thread = await createThread(token, { environmentId: envId });
    await post(token, thread.id, chat("@bot delegate to twin"));
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).length >= 1, "the reply");
    expect(toolResults(es)).toEqual([
      [true, 'not_found: no environment named "tw1n" in this house'],
      [true, expect.stringMatching(/^conflict: 2 environments are named "twin": name one by environmentId \(/)],
      [true, "invalid arguments: environmentName: give environmentId or environmentName, not both"],
    ]);
    const ambiguous = String(toolResults(es)[1][1]);
    expect(ambiguous).toContain(a);
    expect(ambiguous).toContain(b);
    expect(await childrenOf(token, thread.id)).toEqual([]);
  });

  it("an environment without a default model: the bot is told to pass model, passes it, and the child's run uses it", async () => {
    const token = await houseToken("house-delegate-model");
    const model = await scriptedModel([
      { toolCalls: [{ id: "d1", name: "delegate_task", arguments: { task: "fix it" } }] },
      { toolCalls: [{ id: "d2", name: "delegate_task", arguments: { task: "fix it", model: "local/scripted-model" } }] },
      { text: "Delegated." },
    ]);
    const envId = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Bot", handle: "bot" });
    const thread = await createThread(token, { environmentId: envId });
    await post(token, thread.id, chat("@bot fix it"));
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).some((e) => e.payload.text === "Delegated."), "the reply");
    const results = toolResults(es);
    expect(results[0]).toEqual([true, expect.stringContaining(`validation_failed: no model for this run: environment ${envId} has no default model; pass "model"`)]);
    expect(results[1]).toEqual([false, expect.stringContaining("childThreadId")]);
    const childId = JSON.parse(String(results[1][1])).childThreadId as string;
    // The run's claim records what it runs with.
    const claim = (await readAll(token, childId)).entries.find((e) => e.id.startsWith("claim:"))!;
    expect(claim.payload).toMatchObject({ model: "local/scripted-model" });
  });
});

describe("dispatch: run_command and preview_link name the environment they work in, as delegate_task does", () => {
  const envOf = (token: string, body: Record<string, unknown>) => testEnvironment(token, { sharedBox: true, ...body });
  /**
   * A bot asked `ask` in a thread of an environment (named "ephemeral") that keeps no shared box,
   * whose model makes `calls` and then says "Ask for a shared box.": that environment and the results.
   */
  const askWithoutSharedBox = async (houseId: string, ask: string, calls: Step[]) => {
    const token = await houseToken(houseId);
    const model = await scriptedModel();
    const botEnv = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Bot", handle: "bot", environmentId: botEnv });
    const ephemeral = await envOf(token, { name: "ephemeral", sharedBox: false });
    const thread = await createThread(token, { environmentId: ephemeral });
    await model.push(...calls, { text: "Ask for a shared box." });
    await post(token, thread.id, chat(ask));
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).some((e) => e.payload.text === "Ask for a shared box."), "the reply");
    return { token, ephemeral, results: toolResults(es) };
  };
  /** The environment whose box a command ran on, by the box's labels. */
  const environmentOfBox = (ref: string) => sharedTestProvider().boxes.get(ref)!.labels[LABEL_ENVIRONMENT];
  const gone = (id: string) => `not_found: this thread's environment ${id} no longer exists: name another of this house's environments by environmentId or environmentName`;

  it("a thread whose environment was deleted: run_command is told to name another, then runs on its shared box as POST /exec does (secrets redacted, output live on this thread)", async () => {
    const token = await houseToken("house-run-named-env");
    const model = await scriptedModel();
    // The bot's model comes from an environment of its own; the thread's is deleted under it.
    const botEnv = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Bot", handle: "bot", environmentId: botEnv });
    const deleted = await envOf(token, { name: "deleted" });
    const other = await envOf(token, { name: "other", env: { WHICH: "other" }, secrets: { OTHER_KEY: "sk-other-never-shown" } });
    const thread = await createThread(token, { environmentId: deleted });
    expect((await call(`/api/environments/${deleted}`, { method: "DELETE", token })).status).toBe(204);
    const ranIn: string[] = [];
    sharedTestProvider().execHandler = (box, command, opts) => {
      ranIn.push(environmentOfBox(box.ref));
      return { exitCode: 0, output: `ran ${command} in ${opts.env?.WHICH} with sk-other-never-shown` };
    };
    await model.push(
      { toolCalls: [{ id: "r1", name: "run_command", arguments: { command: "ls" } }] },
      { toolCalls: [{ id: "r2", name: "run_command", arguments: { command: "ls", environmentName: "other" } }] },
      { toolCalls: [{ id: "r3", name: "run_command", arguments: { command: "ls", environmentId: other } }] },
      { text: "Ran it there." },
    );
    await post(token, thread.id, chat("@bot ls"));
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).some((e) => e.payload.text === "Ran it there."), "the reply");
    // What POST /api/environments/:id/exec answers for the same command, on the same box.
    const http = (await (await call(`/api/environments/${other}/exec`, { method: "POST", token, json: { command: "ls" } })).json()) as { boxId: string; exitCode: number; output: string };
    expect(http.output).toBe("ran ls in other with [redacted]");
    expect(toolResults(es)).toEqual([
      [true, gone(deleted)],
      [false, `exit code ${http.exitCode}\n${http.output}`],
      [false, `exit code ${http.exitCode}\n${http.output}`],
    ]);
    expect(ranIn).toEqual([other, other, other]);
    // The model read the way on.
    expect(JSON.stringify((await model.requests())[1].body.messages)).toContain(gone(deleted).replace("not_found: ", ""));
    // Live output reached the bot's own thread, as the bot, redacted.
    const live = es.filter((e) => e.payload.type === "signal.exec.output");
    expect(live.map((e) => [e.payload.execId, e.authorId, e.payload.text])).toEqual([
      ["r2", bot.id, "ran ls in other with [redacted]"],
      ["r3", bot.id, "ran ls in other with [redacted]"],
    ]);
    expect(JSON.stringify(es)).not.toContain("sk-other-never-shown");
    expect(JSON.stringify(await model.requests())).not.toContain("sk-other-never-shown");
    // One shared box for the environment, the route's and the bot's alike.
    expect([...sharedTestProvider().boxes.values()].filter((b) => b.labels[LABEL_ENVIRONMENT] === other)).toHaveLength(1);
  });

  it("a thread with no environment: the 'no sandbox' answer says an environment may be named, and naming one runs there", async () => {
    const token = await houseToken("house-run-no-env");
    const model = await scriptedModel([
      { toolCalls: [{ id: "r1", name: "run_command", arguments: { command: "pwd" } }] },
      { toolCalls: [{ id: "r2", name: "run_command", arguments: { command: "pwd", environmentName: "work" } }] },
      { text: "Done." },
    ]);
    const botEnv = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Bot", handle: "bot", environmentId: botEnv });
    const work = await envOf(token, { name: "work" });
    const ranIn: string[] = [];
    sharedTestProvider().execHandler = (box, command) => { ranIn.push(environmentOfBox(box.ref)); return { exitCode: 0, output: `ran ${command}` }; };
    const thread = await createThread(token, {});
    await post(token, thread.id, chat("@bot pwd"));
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).some((e) => e.payload.text === "Done."), "the reply");
    expect(toolResults(es)).toEqual([[false, NO_SANDBOX], [false, "exit code 0\nran pwd"]]);
    expect(NO_SANDBOX).toMatch(/^no sandbox is bound to this thread .*environmentId or environmentName/);
    expect(ranIn).toEqual([work]);
  });

  it("another house's environment, by id or by name, is the not-found result a missing one is; a shared name is a conflict; both is invalid: nothing runs", async () => {
    const token = await houseToken("house-run-own");
    const foreignToken = await houseToken("house-run-foreign");
    const foreign = await envOf(foreignToken, { name: "theirs" });
    const a = await envOf(token, { name: "twin" });
    const b = await envOf(token, { name: "twin" });
    const ran: string[] = [];
    sharedTestProvider().execHandler = (_box, command) => { ran.push(command); return { exitCode: 0, output: "" }; };
    const model = await scriptedModel([
      { toolCalls: [
        { id: "r1", name: "run_command", arguments: { command: "ls", environmentId: foreign } },
        { id: "r2", name: "run_command", arguments: { command: "ls", environmentId: "env_doesnotexist" } },
        { id: "r3", name: "run_command", arguments: { command: "ls", environmentName: "theirs" } },
        { id: "p1", name: "preview_link", arguments: { port: 8080, environmentId: foreign } },
        { id: "p2", name: "preview_link", arguments: { port: 8080, environmentName: "theirs" } },
        { id: "r4", name: "run_command", arguments: { command: "ls", environmentName: "twin" } },
        { id: "r5", name: "run_command", arguments: { command: "ls", environmentId: a, environmentName: "twin" } },
      ] },
      { text: "Not there." },
    ]);
    const envId = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Bot", handle: "bot" });
    const thread = await createThread(token, { environmentId: envId });
    await post(token, thread.id, chat("@bot run it over there"));
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).length >= 1, "the reply");
    // What POST /api/environments/:id/exec answers for the other house's id, word for word.
    const http = (await (await call(`/api/environments/${foreign}/exec`, { method: "POST", token, json: { command: "ls" } })).json()) as { error: { code: string; message: string } };
    expect(http.error).toMatchObject({ code: "not_found" });
    const results = toolResults(es);
    expect(results.slice(0, 5)).toEqual([
      [true, `${http.error.code}: ${http.error.message}`],
      [true, "not_found: environment not found"],
      [true, 'not_found: no environment named "theirs" in this house'],
      [true, `${http.error.code}: ${http.error.message}`],
      [true, 'not_found: no environment named "theirs" in this house'],
    ]);
    expect(results[5]).toEqual([true, expect.stringMatching(/^conflict: 2 environments are named "twin": name one by environmentId \(/)]);
    expect(results[5][1]).toContain(a);
    expect(results[5][1]).toContain(b);
    expect(results[6]).toEqual([true, "invalid arguments: environmentName: give environmentId or environmentName, not both"]);
    expect(ran).toEqual([]);
    expect([...sharedTestProvider().boxes.values()].filter((x) => [foreign, a, b].includes(x.labels[LABEL_ENVIRONMENT]))).toEqual([]);
  });

  it("preview_link by name: a link to the port on the named environment's shared box, once a command named it there", async () => {
    const token = await houseToken("house-preview-named");
    const model = await scriptedModel();
    const botEnv = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Bot", handle: "bot", environmentId: botEnv });
    const deleted = await envOf(token, { name: "deleted" });
    const web = await envOf(token, { name: "web" });
    const thread = await createThread(token, { environmentId: deleted });
    expect((await call(`/api/environments/${deleted}`, { method: "DELETE", token })).status).toBe(204);
    sharedTestProvider().execHandler = () => ({ exitCode: 0, output: "serving" });
    await model.push(
      { toolCalls: [{ id: "p0", name: "preview_link", arguments: { port: 8080 } }] },
      { toolCalls: [{ id: "p1", name: "preview_link", arguments: { port: 8080, environmentName: "web" } }] },
      { toolCalls: [{ id: "c1", name: "run_command", arguments: { command: "serve", environmentName: "web" } }] },
      { toolCalls: [{ id: "p2", name: "preview_link", arguments: { port: 8080, expiresInSeconds: 600, environmentName: "web" } }] },
      { text: "Open the link." },
    );
    await post(token, thread.id, chat("@bot serve it in web and give me a link"));
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).some((e) => e.payload.text === "Open the link."), "the reply");
    const results = toolResults(es);
    expect(results[0]).toEqual([true, gone(deleted)]);
    expect(results[1]).toEqual([false, expect.stringMatching(/^that environment's sandbox box is not running yet: start the server with run_command naming the same environment first/)]);
    expect(results[2]).toEqual([false, "exit code 0\nserving"]);
    const link = JSON.parse(results[3][1] as string);
    const box = [...sharedTestProvider().boxes.entries()].find(([, b]) => b.labels[LABEL_ENVIRONMENT] === web)!;
    expect(link.url).toContain(`8080-tok${box[0]}8080`);
    expect(link.port).toBe(8080);
  });

  it("preview_link on an environment that keeps no shared box: told so, and that the user can give it one, not to wait for a box that never comes", async () => {
    const { ephemeral, results } = await askWithoutSharedBox("house-preview-no-shared-box", "@bot give me a link to port 8080", [
      { toolCalls: [{ id: "p0", name: "preview_link", arguments: { port: 8080 } }] },
      { toolCalls: [{ id: "p1", name: "preview_link", arguments: { port: 8080, environmentName: "ephemeral" } }] },
    ]);
    expect(results).toHaveLength(2);
    expect(results[0]).toEqual([false, expect.stringMatching(/^this thread's environment keeps no shared sandbox box/)]);
    expect(results[1]).toEqual([false, expect.stringMatching(/^that environment keeps no shared sandbox box/)]);
    for (const [, text] of results) {
      expect(text).toContain(`sharedBox: true on environment ${ephemeral}`);
      expect(text).not.toMatch(/not running yet/);
    }
    expect([...sharedTestProvider().boxes.values()].filter((x) => x.labels[LABEL_ENVIRONMENT] === ephemeral)).toEqual([]);
  });

  it("run_command on an environment that keeps no shared box: told that the user can give it one (a bot cannot) and that delegate_task still works there", async () => {
    const { token, ephemeral, results } = await askWithoutSharedBox("house-run-no-shared-box", "@bot list the files", [
      { toolCalls: [{ id: "r0", name: "run_command", arguments: { command: "ls" } }] },
      { toolCalls: [{ id: "r1", name: "run_command", arguments: { command: "ls", environmentName: "ephemeral" } }] },
    ]);
    expect(results).toHaveLength(2);
    expect(results[0]).toEqual([true, expect.stringMatching(/^conflict: this thread's environment keeps no shared sandbox box/)]);
    expect(results[1]).toEqual([true, expect.stringMatching(/^conflict: that environment keeps no shared sandbox box/)]);
    for (const [, text] of results) {
      expect(text).toContain(`tell the user, who can give it one by setting sharedBox: true on environment ${ephemeral} (bots cannot change environments)`);
      expect(text).toContain("delegate_task");
    }
    // The HTTP route's words are for a user, who can change the environment.
    const r = await call(`/api/environments/${ephemeral}/exec`, { method: "POST", token, json: { command: "ls" } });
    expect([r.status, ((await r.json()) as { error: { message: string } }).error.message]).toEqual([409, "this environment keeps no shared box (set sharedBox: true)"]);
  });
});

describe("dispatch: selection end to end", () => {
  it("two always bots talking stop at depth 8", async () => {
    const token = await houseToken("house-pingpong");
    const model = await scriptedModel([], { text: "and you?" });
    const envId = await modelEnvironment(token, model.baseUrl);
    const a = await createAgent(token, { name: "A", handle: "alpha", triggerMode: "always" });
    const b = await createAgent(token, { name: "B", handle: "beta", triggerMode: "always" });
    const thread = await createThread(token, { environmentId: envId });
    // With both bots always-on, only one may answer the person: the other then answers it, and so on.
    await call(`/api/threads/${thread.id}/config`, { method: "PATCH", token, json: { dispatch: { widthCap: 1 } } });
    await post(token, thread.id, chat("talk among yourselves"));
    const es = await waitForEntries(token, thread.id, (es) => es.some((e) => e.payload.type === "chat" && e.payload.depth === 8), "depth 8");
    // Let the last trigger be decided: depth cap for both bots.
    await waitForDecision(token, thread.id, (d) => d.reason === "depth_cap");
    const final = (await readAll(token, thread.id)).entries;
    const botChats = final.filter((e) => e.payload.type === "chat" && (e.authorId === a.id || e.authorId === b.id));
    expect(botChats.map((e) => e.payload.depth)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    for (let i = 1; i < botChats.length; i++) expect(botChats[i].authorId).not.toBe(botChats[i - 1].authorId);
    expect(es.length).toBeGreaterThan(0);
  });

  it("DM thread: the agent answers without a mention; the config says always and can be overridden", async () => {
    const token = await houseToken("house-dm");
    const model = await scriptedModel([], { text: "hello human" });
    const envId = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Pal", handle: "pal", environmentId: envId });
    const dm = await createThread(token, { parent: { kind: "agent", id: bot.id } });
    const cfg = (await (await call(`/api/threads/${dm.id}/config`, { token })).json()) as { dispatch: { perAgent: Record<string, { triggerMode: string }>; widthCap: number } };
    expect(cfg.dispatch.perAgent).toEqual({ [bot.id]: { triggerMode: "always" } });
    expect(cfg.dispatch.widthCap).toBe(3);
    await post(token, dm.id, chat("hi there"));
    await waitForEntries(token, dm.id, (es) => chatsBy(es, bot.id).length === 1);

    const patched = await call(`/api/threads/${dm.id}/config`, { method: "PATCH", token, json: { dispatch: { perAgent: { [bot.id]: { triggerMode: "mention" } } } } });
    expect(patched.status).toBe(200);
    await post(token, dm.id, chat("still there?", "msg-2"));
    // Triggers are decided in order: once the later mention is decided, "still there?" was too.
    await post(token, dm.id, chat("@pal now?", "msg-3"));
    await waitForDecision(token, dm.id, (d) => d.triggerEntryId === "msg-3" && d.reason === "mentioned");
    const ds = await decisions(token, dm.id);
    expect(ds.filter((d) => d.triggerEntryId === "msg-2")).toEqual([]);
    await waitForEntries(token, dm.id, (es) => chatsBy(es, bot.id).length === 2);

    expect((await call("/api/threads", { method: "POST", token, json: { parent: { kind: "agent", id: "ag_missing" } } })).status).toBe(404);
  });

  it("DM thread is private: the house's `always` bots stay out unless named", async () => {
    const token = await houseToken("house-dm-private");
    const model = await scriptedModel([], { text: "here" });
    const envId = await modelEnvironment(token, model.baseUrl);
    const pal = await createAgent(token, { name: "Pal", handle: "pal", environmentId: envId });
    const loud = await createAgent(token, { name: "Loud", handle: "loud", environmentId: envId, triggerMode: "always" });
    const dm = await createThread(token, { parent: { kind: "agent", id: pal.id } });
    const cfg = (await (await call(`/api/threads/${dm.id}/config`, { token })).json()) as { dispatch: { othersTriggerMode?: string } };
    expect(cfg.dispatch.othersTriggerMode).toBe("mention");
    await post(token, dm.id, chat("just between us", "dm-1"));
    await waitForEntries(token, dm.id, (es) => chatsBy(es, pal.id).length === 1);
    await post(token, dm.id, chat("@loud you may speak", "dm-2"));
    await waitForDecision(token, dm.id, (d) => d.triggerEntryId === "dm-2" && d.agentId === loud.id && d.reason === "mentioned");
    const ds = await decisions(token, dm.id);
    expect(ds.filter((d) => d.agentId === loud.id && d.triggerEntryId === "dm-1")).toEqual([]);
    // Opening it up is a config change: null clears it.
    const open = await call(`/api/threads/${dm.id}/config`, { method: "PATCH", token, json: { dispatch: { othersTriggerMode: null } } });
    expect(((await open.json()) as { dispatch: { othersTriggerMode?: string } }).dispatch.othersTriggerMode).toBeUndefined();
  }, 30_000);

  it("a chat with dispatch:false never triggers, even with a mention", async () => {
    const token = await houseToken("house-nodispatch");
    const model = await scriptedModel();
    const envId = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Bot", handle: "bot", triggerMode: "always" });
    const thread = await createThread(token, { environmentId: envId });
    await post(token, thread.id, { id: "quiet", payload: { type: "chat", text: "@bot done", dispatch: false } });
    await post(token, thread.id, chat("@bot now", "loud"));
    await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).length === 1);
    const ds = await decisions(token, thread.id);
    expect(ds.some((d) => d.triggerEntryId === "quiet")).toBe(false);
    expect(ds.some((d) => d.triggerEntryId === "loud" && d.reason === "mentioned")).toBe(true);
    expect(await model.requests()).toHaveLength(1);
  });

  it("ambient: the gate model decides; a 'no' is recorded as gated_no and nothing is posted", async () => {
    const token = await houseToken("house-ambient");
    const model = await scriptedModel([{ text: "no" }, { text: "yes" }, { text: "I can help." }]);
    const envId = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Lurker", handle: "lurker", triggerMode: "ambient" });
    const thread = await createThread(token, { environmentId: envId });
    await call(`/api/threads/${thread.id}/config`, { method: "PATCH", token, json: { dispatch: { ambientDelayMs: 0 } } });
    await post(token, thread.id, chat("nice weather", "w1"));
    await waitForDecision(token, thread.id, (d) => d.triggerEntryId === "w1" && d.reason === "gated_no");
    await post(token, thread.id, chat("how do I revert a commit?", "w2"));
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).length === 1);
    expect(chatsBy(es, bot.id)[0].payload.text).toBe("I can help.");
    expect((await decisions(token, thread.id)).some((d) => d.triggerEntryId === "w2" && d.reason === "gated_yes")).toBe(true);
  });

  it("ambient: a gate that cannot be asked is recorded as an error with its detail, not a 'no'", async () => {
    const token = await houseToken("house-ambient-broken");
    const model = await scriptedModel([], { error: 400, message: "bad gate request" });
    const envId = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Lurker", handle: "lurker", triggerMode: "ambient" });
    const thread = await createThread(token, { environmentId: envId });
    await call(`/api/threads/${thread.id}/config`, { method: "PATCH", token, json: { dispatch: { ambientDelayMs: 0 } } });
    await post(token, thread.id, chat("anyone?", "g1"));
    const ds = await waitForDecision(token, thread.id, (d) => d.triggerEntryId === "g1" && d.agentId === bot.id && d.verdict === "skip");
    expect(ds.find((d) => d.triggerEntryId === "g1" && d.verdict === "skip")).toMatchObject({ reason: "error", detail: expect.stringContaining("gate failed") });
    expect(chatsBy((await readAll(token, thread.id)).entries, bot.id)).toEqual([]);
  }, 30_000);

  it("a failed gate's or turn's detail cut short leaves no piece of a secret of the environment its model's key did not use", async () => {
    const token = await houseToken("house-ambient-cut-secret");
    const other = "pw-Q7zK9mV2rT8nB4xL6cJ1yH";
    // A provider's error quoting another secret of the environment, over and over: every cut of it goes through one.
    const model = await scriptedModel([], { error: 400, message: `bad request: ${`=${other}`.repeat(60)}` });
    const envId = await modelEnvironment(token, model.baseUrl, { secrets: { MODEL_KEY, OTHER: other } });
    const lurker = await createAgent(token, { name: "Lurker", handle: "lurker", triggerMode: "ambient" });
    const thread = await createThread(token, { environmentId: envId });
    await call(`/api/threads/${thread.id}/config`, { method: "PATCH", token, json: { dispatch: { ambientDelayMs: 0 } } });
    await post(token, thread.id, chat("anyone?", "g1"));
    const ds = await waitForDecision(token, thread.id, (d) => d.triggerEntryId === "g1" && d.agentId === lurker.id && d.verdict === "skip");
    const gate = ds.find((d) => d.triggerEntryId === "g1" && d.agentId === lurker.id)!.detail!;
    const coder = await createAgent(token, { name: "Coder", handle: "coder" });
    await post(token, thread.id, chat("@coder hello", "m1"));
    const es = await waitForEntries(token, thread.id, (es) => es.some((e) => e.payload.type === "signal.dispatch.error" && e.authorId === coder.id), "the failure");
    const turn = es.find((e) => e.payload.type === "signal.dispatch.error" && e.authorId === coder.id)!.payload.reason as string;
    for (const detail of [gate, turn]) {
      expect(detail).toMatch(/HTTP 400: .*bad request: =\[redacted\]=\[redacted\]/);
      const pieces = Array.from({ length: other.length - 3 }, (_, i) => other.slice(i, i + 4));
      expect(pieces.filter((p) => detail.includes(p))).toEqual([]);
    }
  }, 30_000);

  it("ambient: a bot with no model for its gate posts nothing into a conversation nobody asked it into; named, it says why", async () => {
    const token = await houseToken("house-ambient-no-model");
    const bot = await createAgent(token, { name: "Lurker", handle: "lurker", triggerMode: "ambient" });
    const thread = await createThread(token, {});
    await call(`/api/threads/${thread.id}/config`, { method: "PATCH", token, json: { dispatch: { ambientDelayMs: 0 } } });
    await post(token, thread.id, chat("just chatting", "a1"));
    await post(token, thread.id, chat("still chatting", "a2"));
    const ds = await waitForDecision(token, thread.id, (d) => d.triggerEntryId === "a2" && d.agentId === bot.id && d.verdict === "skip");
    expect(ds.filter((d) => d.agentId === bot.id && d.verdict === "skip").map((d) => [d.triggerEntryId, d.reason, d.detail?.startsWith("no model")]))
      .toEqual([["a2", "error", true], ["a1", "error", true]]);
    expect((await readAll(token, thread.id)).entries.filter((e) => e.authorId === bot.id)).toEqual([]);
    await post(token, thread.id, chat("@lurker are you there?", "a3"));
    const es = await waitForEntries(token, thread.id, (es) => es.some((e) => e.payload.type === "signal.dispatch.error"), "the error of the named bot");
    expect(es.filter((e) => e.authorId === bot.id).map((e) => [e.payload.type, e.payload.triggerEntryId])).toEqual([["signal.dispatch.error", "a3"]]);
  }, 30_000);

  it("width cap: at most widthCap bots answer one entry; the others are recorded as width_cap", async () => {
    const token = await houseToken("house-width");
    const model = await scriptedModel([], { text: "me too" });
    const envId = await modelEnvironment(token, model.baseUrl);
    const bots = [];
    for (const h of ["b1", "b2", "b3", "b4"]) bots.push(await createAgent(token, { name: h, handle: h }));
    const thread = await createThread(token, { environmentId: envId });
    await call(`/api/threads/${thread.id}/config`, { method: "PATCH", token, json: { dispatch: { widthCap: 2 } } });
    await post(token, thread.id, chat("@b1 @b2 @b3 @b4 roll call", "rc"));
    await waitForEntries(token, thread.id, (es) => es.filter((e) => e.payload.type === "chat" && e.authorId?.startsWith("ag_")).length === 2);
    const ds = (await decisions(token, thread.id)).filter((d) => d.triggerEntryId === "rc");
    expect(ds.filter((d) => d.reason === "mentioned").map((d) => d.agentId).sort()).toEqual([bots[0].id, bots[1].id].sort());
    expect(ds.filter((d) => d.reason === "width_cap").map((d) => d.agentId).sort()).toEqual([bots[2].id, bots[3].id].sort());
  });
});

describe("dispatch: cooldown", () => {
  it("an always bot's reply under way counts: chats in a row within the cooldown start one turn, not one each", async () => {
    const token = await houseToken("house-dispatch-cooldown");
    const model = await scriptedModel([], { text: "one answer", delayMs: 1_000 });
    const envId = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Eager", handle: "eager", environmentId: envId, triggerMode: "always" });
    const t = await createThread(token, { environmentId: envId });
    expect((await call(`/api/threads/${t.id}/config`, { method: "PATCH", token, json: { dispatch: { cooldownMs: 60_000 } } })).status).toBe(200);
    for (const [i, text] of ["one", "two", "three"].entries()) await post(token, t.id, chat(text, `c${i}`));
    await waitForEntries(token, t.id, (es) => chatsBy(es, bot.id).length >= 1, "the answer");
    await new Promise((r) => setTimeout(r, 1_500));
    expect(chatsBy((await readAll(token, t.id)).entries, bot.id)).toHaveLength(1);
    const ds = (await decisions(token, t.id)).filter((d) => d.agentId === bot.id && d.reason !== "author").map((d) => d.reason).sort();
    expect(ds).toEqual(["always", "cooldown", "cooldown"]);
  }, 30_000);
});

describe("dispatch: what a bot's answer may be", () => {
  it("an empty answer posts no empty chat: the turn fails, saying so", async () => {
    const token = await houseToken("house-dispatch-empty");
    const model = await scriptedModel([{ text: "   " }]);
    const envId = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Mute", handle: "mute", environmentId: envId });
    const t = await createThread(token, { environmentId: envId });
    await post(token, t.id, chat("@mute say something"));
    const es = await waitForEntries(token, t.id, (es) => es.some((e) => e.payload.type === "signal.dispatch.error"), "the failure");
    expect(es.find((e) => e.payload.type === "signal.dispatch.error")!.payload.reason).toMatch(/empty/);
    expect(chatsBy(es, bot.id)).toEqual([]);
  }, 30_000);

  it("an answer longer than an entry should hold is cut, saying how much was left out", async () => {
    const token = await houseToken("house-dispatch-long");
    const model = await scriptedModel([{ text: "x".repeat(MAX_BOT_TEXT_CHARS + 5_000) }]);
    const envId = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Verbose", handle: "verbose", environmentId: envId });
    const t = await createThread(token, { environmentId: envId });
    await post(token, t.id, chat("@verbose tell me everything"));
    const es = await waitForEntries(token, t.id, (es) => chatsBy(es, bot.id).length === 1, "the answer");
    const text = chatsBy(es, bot.id)[0].payload.text as string;
    expect(text.length).toBeLessThan(MAX_BOT_TEXT_CHARS + 100);
    expect(text).toMatch(/\[cut: 5000 more characters\]$/);
    const round = es.find((e) => e.authorId === bot.id && e.payload.type === "pi.assistant")!;
    expect((round.payload.text as string).length).toBeLessThan(MAX_BOT_TEXT_CHARS + 100);
  }, 30_000);
});

describe("dispatch: the turn's entry ids are its own", () => {
  it("a client cannot take the id of a bot's answer (or any id the control plane writes by) first: the answer still arrives", async () => {
    // The turn id is public (the decisions list, the turn's first round) and the answer's id is
    // derived from it: an entry posted under it first would have the answer dropped as a duplicate.
    const { token, model, bot, t } = await botThread("house-dispatch-squat", { name: "Slow", handle: "slow" }, [{ text: "the real answer", held: true }]);
    await post(token, t.id, chat("@slow hi"));
    const turnId = (await waitForDecision(token, t.id, (d) => d.turnId !== null)).find((d) => d.turnId)!.turnId;
    const run = await streamToken("house-dispatch-squat", t.id);
    for (const id of [`reply:${turnId}`, `turn:${turnId}:0`, `dispatch_error:${turnId}`, `post:${turnId}:c1:abc`, "child_result:th_x:1", "child_finished:th_x:1"]) {
      const rest = await post(token, t.id, { id, payload: { type: "chat", text: "fake answer" } });
      expect(rest.status, id).toBe(403);
      await rest.body?.cancel();
      const stream = await call(`/api/stream/thread-${t.id}`, { method: "POST", token: run, json: { id, payload: { type: "chat", text: "fake answer" } } });
      expect(stream.status, id).toBe(403);
      await stream.body?.cancel();
    }
    await model.release();
    const es = await waitForEntries(token, t.id, (es) => chatsBy(es, bot.id).length === 1, "the answer");
    expect(chatsBy(es, bot.id)[0]).toMatchObject({ id: `reply:${turnId}`, payload: { text: "the real answer" } });
    expect(es.some((e) => e.payload.text === "fake answer")).toBe(false);
  }, 30_000);
});

describe("dispatch: a failed turn's reason", () => {
  it("shows none of the environment's secrets, not only the model's key", async () => {
    const token = await houseToken("house-dispatch-redact");
    const other = "zz-other-secret-value-123";
    const model = await scriptedModel([], { error: 500, message: `upstream rejected key ${MODEL_KEY} with OTHER=${other} and "${other}"` });
    const envId = await modelEnvironment(token, model.baseUrl, { secrets: { MODEL_KEY, OTHER: other } });
    const bot = await createAgent(token, { name: "Leaky", handle: "leaky", environmentId: envId });
    const t = await createThread(token, { environmentId: envId });
    await post(token, t.id, chat("@leaky hi"));
    const es = await waitForEntries(token, t.id, (es) => es.some((e) => e.payload.type === "signal.dispatch.error"), "the failure");
    const reason = es.find((e) => e.payload.type === "signal.dispatch.error")!.payload.reason as string;
    expect(reason).toContain("[redacted]");
    expect(reason).not.toContain(other);
    expect(reason).not.toContain(MODEL_KEY);
    const ds = (await decisions(token, t.id)).filter((d) => d.agentId === bot.id);
    expect(JSON.stringify(ds)).not.toContain(other);
  }, 30_000);
});

describe("dispatch: turns that take long", () => {
  it("a bot whose model hangs does not hold up another bot's answer in the same thread", async () => {
    const token = await houseToken("house-dispatch-hang");
    const stuck = await scriptedModel([{ hang: true }]);
    const quick = await scriptedModel([], { text: "quick answer" });
    const stuckEnv = await modelEnvironment(token, stuck.baseUrl);
    const quickEnv = await modelEnvironment(token, quick.baseUrl);
    await createAgent(token, { name: "Slow", handle: "slow", environmentId: stuckEnv });
    const fast = await createAgent(token, { name: "Fast", handle: "fast", environmentId: quickEnv });
    const t = await createThread(token, { environmentId: quickEnv });
    await post(token, t.id, chat("@slow think hard"));
    const deadline = Date.now() + 10_000;
    while ((await stuck.requests()).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect((await stuck.requests()).length).toBeGreaterThan(0); // slow's turn is waiting on its model now
    await post(token, t.id, chat("@fast hi"));
    const es = await waitForEntries(token, t.id, (es) => chatsBy(es, fast.id).length === 1, "fast's answer");
    expect(chatsBy(es, fast.id)[0].payload.text).toBe("quick answer");
  }, 30_000);

  it("a model that goes silent is given up after its idleTimeoutMs: the bot's next message is answered without waiting out the call", async () => {
    const token = await houseToken("house-dispatch-idle");
    const model = await scriptedModel([
      { text: "never finished", stallAfterChunks: 1 },
      { hang: true },
      { text: "never finished either", stallAfterChunks: 0 },
      { text: "second answer" },
    ]);
    const envId = await modelEnvironment(token, model.baseUrl, {
      piModels: { providers: { local: { baseUrl: model.baseUrl, api: "openai-completions", apiKey: "$MODEL_KEY", idleTimeoutMs: 300, models: [{ id: "scripted-model" }] } } },
    });
    const bot = await createAgent(token, { name: "Bot", handle: "bot", environmentId: envId });
    const t = await createThread(token, { environmentId: envId });
    await post(token, t.id, chat("@bot first", "first"));
    await post(token, t.id, chat("@bot second", "second"));
    const es = await waitForEntries(token, t.id, (es) => chatsBy(es, bot.id).length === 1, "the answer to the second message", 15_000);
    expect(chatsBy(es, bot.id)[0].payload).toMatchObject({ text: "second answer", triggerEntryId: "second" });
    const errors = es.filter((e) => e.payload.type === "signal.dispatch.error");
    expect(errors.map((e) => [e.payload.triggerEntryId, e.payload.reason])).toEqual([["first", "the model API sent nothing for 300 ms (idle timeout) (after 3 attempts)"]]);
    expect(await model.requests()).toHaveLength(4);
  }, 30_000);

  // The turn's lease is 1.5 s here (DISPATCH_TURN_LEASE_MS), 60 s deployed; the old whole-call cap
  // was twice a lease. Scaled alike, this answer streams for over four leases, twice the old cap.
  it("a model that streams steadily for longer than several leases answers once, in one call and one attempt", async () => {
    const token = await houseToken("house-dispatch-long-stream");
    const text = "a long answer streamed one small piece at a time, steadily.";
    const model = await scriptedModel([{ text, chunks: text.length, chunkDelayMs: 150 }]);
    const envId = await modelEnvironment(token, model.baseUrl, {
      piModels: { providers: { local: { baseUrl: model.baseUrl, api: "openai-completions", apiKey: "$MODEL_KEY", idleTimeoutMs: 1_000, requestTimeoutMs: 30_000, models: [{ id: "scripted-model" }] } } },
    });
    const bot = await createAgent(token, { name: "Writer", handle: "writer", environmentId: envId });
    const t = await createThread(token, { environmentId: envId });
    const started = Date.now();
    await post(token, t.id, chat("@writer write it all", "ask"));
    const es = await waitForEntries(token, t.id, (es) => chatsBy(es, bot.id).length > 0 || es.some((e) => e.payload.type === "signal.dispatch.error"), "the answer", 25_000);
    expect(Date.now() - started).toBeGreaterThan(6_000);
    expect(es.filter((e) => e.payload.type === "signal.dispatch.error")).toEqual([]);
    expect(chatsBy(es, bot.id).map((e) => e.payload.text)).toEqual([text]);
    // Not resumed by a later alarm as if its incarnation had died: that would ask the model again.
    expect(await model.requests()).toHaveLength(1);
    const stub = E.THREADS.get(E.THREADS.idFromName(`thread:${t.id}`));
    const turns = await runInDurableObject(stub, (_a: ThreadActor, state: DurableObjectState) =>
      state.storage.sql.exec(`select state, attempts from dispatch_turns`).toArray());
    expect(turns).toEqual([{ state: "done", attempts: 1 }]);
  }, 40_000);

  it("a model's requestTimeoutMs bounds its whole call, however steadily it streams, and is not retried", async () => {
    const token = await houseToken("house-dispatch-request-timeout");
    const text = "an answer that takes longer than the model may take.";
    const model = await scriptedModel([{ text, chunks: text.length, chunkDelayMs: 150 }]);
    const envId = await modelEnvironment(token, model.baseUrl, {
      piModels: { providers: { local: { baseUrl: model.baseUrl, api: "openai-completions", apiKey: "$MODEL_KEY", requestTimeoutMs: 60_000, models: [{ id: "scripted-model", requestTimeoutMs: 1_000 }] } } },
    });
    const bot = await createAgent(token, { name: "Writer", handle: "writer", environmentId: envId });
    const t = await createThread(token, { environmentId: envId });
    await post(token, t.id, chat("@writer write it all", "ask"));
    const es = await waitForEntries(token, t.id, (es) => es.some((e) => e.payload.type === "signal.dispatch.error") || chatsBy(es, bot.id).length > 0, "the failure", 20_000);
    expect(chatsBy(es, bot.id)).toEqual([]);
    expect(es.filter((e) => e.payload.type === "signal.dispatch.error").map((e) => e.payload.reason)).toEqual(["the model did not finish its answer within 1000 ms (timeout)"]);
    expect(await model.requests()).toHaveLength(1);
  }, 30_000);

  it("while a turn waits on its model the thread's alarm keeps coming: an idle actor would be evicted mid-call", async () => {
    const token = await houseToken("house-dispatch-keepalive");
    const model = await scriptedModel([{ hang: true }]);
    const envId = await modelEnvironment(token, model.baseUrl);
    await createAgent(token, { name: "Thinker", handle: "thinker", environmentId: envId });
    const t = await createThread(token, { environmentId: envId });
    await post(token, t.id, chat("@thinker take your time"));
    const deadline = Date.now() + 10_000;
    while ((await model.requests()).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect((await model.requests()).length).toBeGreaterThan(0);
    // Past the turn's lease (1.5 s here): the turn is alive in this actor, so its lease's end is no
    // deadline (the alarm would fire again and again for nothing), but the keep-alive is.
    await new Promise((r) => setTimeout(r, 2_500));
    const stub = E.THREADS.get(E.THREADS.idFromName(`thread:${t.id}`));
    const alarmIn = () => runInDurableObject(stub, async (_a: ThreadActor, state: DurableObjectState) => {
      const at = await state.storage.getAlarm();
      return at === null ? null : at - Date.now();
    });
    // Every keep-alive period, or sooner: a lease (1.5 s here), so a crash still resumes in time.
    // Ahead, not at the lease's end that has passed. A loaded machine delivers an alarm late, so
    // one look may find it due and not yet run: it must be seen ahead at some look.
    await vi.waitFor(async () => {
      const ms = await alarmIn();
      expect(ms).not.toBeNull();
      expect(ms!).toBeGreaterThan(0);
      expect(ms!).toBeLessThanOrEqual(Math.min(TURN_KEEPALIVE_MS, 1_500));
    }, { timeout: 5_000, interval: 100 });
  }, 30_000);

  it("a bot deleted while its turn waits on the model posts no reply", async () => {
    const { token, model, bot, t } = await botThread("house-dispatch-deleted", { name: "Gone", handle: "gone" }, [{ text: "too late", held: true }]);
    await post(token, t.id, chat("@gone are you there?", "ask"));
    const deadline = Date.now() + 10_000;
    while ((await model.requests()).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect((await model.requests()).length).toBeGreaterThan(0);
    expect((await call(`/api/agents/${bot.id}`, { method: "DELETE", token })).status).toBe(204);
    await model.release();
    await waitForDecision(token, t.id, (d) => d.agentId === bot.id && d.reason === "error" && /deleted/.test(d.detail ?? ""));
    const es = (await readAll(token, t.id)).entries;
    expect(chatsBy(es, bot.id)).toEqual([]);
    // Nor as its final round.
    expect(es.filter((e) => e.authorId === bot.id && e.payload.type === "pi.assistant")).toEqual([]);
  }, 30_000);

  it("a bot deleted while its turn waits on the model runs none of the tools the model then asks for", async () => {
    const { token, model, envId, bot, t } = await botThread("house-dispatch-deleted-tools", { name: "Gone", handle: "gone" });
    const other = await createThread(token, { environmentId: envId });
    await model.push(
      { toolCalls: [{ id: "p1", name: "post_to_thread", arguments: { threadId: other.id, text: "posted by a deleted bot" } }], held: true },
      { text: "done" },
    );
    await post(token, t.id, chat("@gone tell the other thread", "ask-tools"));
    const deadline = Date.now() + 10_000;
    while ((await model.requests()).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect((await call(`/api/agents/${bot.id}`, { method: "DELETE", token })).status).toBe(204);
    await model.release();
    await waitForDecision(token, t.id, (d) => d.agentId === bot.id && d.reason === "error" && /deleted/.test(d.detail ?? ""));
    expect((await readAll(token, other.id)).entries.map((e) => e.payload.text)).toEqual([]);
    const es = (await readAll(token, t.id)).entries;
    expect(es.filter((e) => e.authorId === bot.id).map((e) => e.payload.type)).toEqual([]);
    expect((await model.requests()).length).toBe(1);
  }, 30_000);
});

describe("dispatch: a bot edited while its turn runs", () => {
  it("a tool removed from the bot while its model answers runs no more: not the call it asked for, nor in later rounds", async () => {
    const { token, model, bot, t } = await botThread("house-dispatch-revoked", { name: "Ops", handle: "ops" });
    let ran = 0;
    sharedTestProvider().execHandler = (_box, command) => {
      ran += command.includes("rm -rf build") ? 1 : 0;
      return { exitCode: 0, output: `ran ${command}` };
    };
    await model.push(
      { toolCalls: [{ id: "k1", name: "run_command", arguments: { command: "rm -rf build" } }], held: true },
      { toolCalls: [{ id: "k2", name: "run_command", arguments: { command: "rm -rf build" } }] },
      { text: "I can no longer run commands." },
    );
    await post(token, t.id, chat("@ops clean the build", "ask-revoke"));
    const deadline = Date.now() + 10_000;
    while ((await model.requests()).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect((await model.requests()).length).toBe(1);
    const patched = await call(`/api/agents/${bot.id}`, { method: "PATCH", token, json: { tools: ["list_threads"] } });
    expect(patched.status).toBe(200);
    await model.release();
    const es = await waitForEntries(token, t.id, (es) => chatsBy(es, bot.id).length === 1 || es.some((e) => e.payload.type === "signal.dispatch.error"), "the answer");
    expect(chatsBy(es, bot.id).map((e) => e.payload.text)).toEqual(["I can no longer run commands."]);
    expect(ran).toBe(0);
    const results = es.filter((e) => e.payload.type === "pi.tool_result");
    expect(results.map((e) => [e.payload.toolCallId, e.payload.isError])).toEqual([["k1", true], ["k2", true]]);
    expect(String(results[0].payload.output)).toMatch(/run_command.*no longer/);
    // From the next round on the model is offered, and told of, only the tools the bot has now.
    const reqs = await model.requests();
    expect(reqs).toHaveLength(3);
    expect(reqs[0].body.tools.map((x: any) => x.function.name)).toContain("run_command");
    for (const r of reqs.slice(1)) {
      expect(r.body.tools.map((x: any) => x.function.name)).toEqual(["list_threads"]);
      expect(JSON.stringify(r.body.messages[0])).not.toContain("run_command");
    }
  }, 30_000);
});

describe("dispatch: a bot changed in the middle of a round", () => {
  /** An exec handler whose command `hold` waits until `release()`; `ran` lists the commands run. */
  function heldExec() {
    const ran: string[] = [];
    let release!: () => void;
    const released = new Promise<void>((r) => { release = r; });
    sharedTestProvider().execHandler = async (_box, command) => {
      ran.push(command);
      if (command.includes("hold")) await released;
      return { exitCode: 0, output: `ran ${command}` };
    };
    // Polled, not awaited: a promise settled by the actor's request would be awaited from the test's.
    const held = () => vi.waitFor(() => expect(ran.some((c) => c.includes("hold"))).toBe(true), { timeout: 10_000, interval: 50 });
    return { ran, held, release };
  }

  it("a tool removed while an earlier call of the round runs is not run for the round's later calls", async () => {
    const { token, model, bot, t } = await botThread("house-dispatch-revoked-mid-round", { name: "Ops", handle: "ops" });
    const exec = heldExec();
    await model.push(
      { toolCalls: [
        { id: "m1", name: "run_command", arguments: { command: "hold; make" } },
        { id: "m2", name: "run_command", arguments: { command: "rm -rf build" } },
      ] },
      { text: "Stopped." },
    );
    await post(token, t.id, chat("@ops build, then clean", "ask-mid-round"));
    await exec.held();
    expect((await call(`/api/agents/${bot.id}`, { method: "PATCH", token, json: { tools: ["list_threads"] } })).status).toBe(200);
    exec.release();
    const es = await waitForEntries(token, t.id, (es) => chatsBy(es, bot.id).length === 1 || es.some((e) => e.payload.type === "signal.dispatch.error"), "the answer");
    expect(exec.ran.filter((c) => c.includes("rm -rf build"))).toEqual([]);
    const results = es.filter((e) => e.payload.type === "pi.tool_result");
    expect(results.map((e) => [e.payload.toolCallId, e.payload.isError])).toEqual([["m1", false], ["m2", true]]);
    expect(String(results[1].payload.output)).toMatch(/run_command.*no longer available/);
    expect(chatsBy(es, bot.id).map((e) => e.payload.text)).toEqual(["Stopped."]);
  }, 30_000);

  it("a bot deleted while an earlier call of the round runs makes none of the round's later calls", async () => {
    const { token, model, envId, bot, t } = await botThread("house-dispatch-deleted-mid-round", { name: "Gone", handle: "gone" });
    const other = await createThread(token, { environmentId: envId });
    const exec = heldExec();
    await model.push(
      { toolCalls: [
        { id: "d1", name: "run_command", arguments: { command: "hold; make" } },
        { id: "d2", name: "post_to_thread", arguments: { threadId: other.id, text: "posted by a deleted bot" } },
      ] },
      { text: "done" },
    );
    await post(token, t.id, chat("@gone build and tell the other thread", "ask-deleted-mid-round"));
    await exec.held();
    expect((await call(`/api/agents/${bot.id}`, { method: "DELETE", token })).status).toBe(204);
    exec.release();
    await waitForDecision(token, t.id, (d) => d.agentId === bot.id && d.reason === "error" && /deleted/.test(d.detail ?? ""));
    expect((await readAll(token, other.id)).entries.map((e) => e.payload.text)).toEqual([]);
    const es = (await readAll(token, t.id)).entries;
    expect(es.filter((e) => e.payload.type === "pi.tool_result").map((e) => e.payload.toolCallId)).toEqual(["d1"]);
    expect(chatsBy(es, bot.id)).toEqual([]);
    expect((await model.requests()).length).toBe(1);
  }, 30_000);
});

describe("dispatch: how many tool calls a round may ask for", () => {
  it("a round asking for more than the cap ends the turn with an error saying so, and runs none of them", async () => {
    const { token, model, bot, t } = await botThread("house-dispatch-many-calls", { name: "Flood", handle: "flood" });
    let ran = 0;
    sharedTestProvider().execHandler = () => {
      ran += 1;
      return { exitCode: 0, output: "" };
    };
    const calls = Array.from({ length: 10_000 }, (_, i) => ({ id: `f${i}`, name: "run_command", arguments: { command: `echo ${i}` } }));
    await model.push({ toolCalls: calls }, { text: "should not be asked" });
    await post(token, t.id, chat("@flood go", "ask-flood"));
    const es = await waitForEntries(token, t.id, (es) => es.some((e) => e.payload.type === "signal.dispatch.error") || chatsBy(es, bot.id).length > 0, "the end of the turn", 60_000);
    const errors = es.filter((e) => e.payload.type === "signal.dispatch.error");
    expect(errors.map((e) => e.payload.reason)).toEqual([`the model asked for 10000 tool calls in one round; a round may ask for at most ${DEFAULT_MAX_TOOL_CALLS_PER_ROUND}, and none of them were run`]);
    expect(ran).toBe(0);
    expect(es.filter((e) => e.payload.type === "pi.tool_result")).toEqual([]);
    expect(chatsBy(es, bot.id)).toEqual([]);
    expect((await model.requests()).length).toBe(1);
  }, 90_000);
});

describe("dispatch: post_to_thread", () => {
  it("wakes a bot in another thread of the house (depth + 1) and is refused for another house's thread", async () => {
    const token = await houseToken("house-post");
    const model = await scriptedModel();
    const envId = await modelEnvironment(token, model.baseUrl);
    const other = await createThread(token, { environmentId: envId });
    const foreign = await createThread(await houseToken("house-post-other"), {});
    await model.push(
      { toolCalls: [
        { id: "p1", name: "post_to_thread", arguments: { threadId: other.id, text: "@scout please look into it" } },
        { id: "p2", name: "post_to_thread", arguments: { threadId: foreign.id, text: "hello neighbour" } },
      ] },
      { text: "Asked scout." },
    );
    // Scout's turn and Boss's next call run at the same time: one script for both would hand out
    // the answers in whichever order the calls arrive.
    const scoutModel = await scriptedModel([{ text: "Scout here, on it." }]);
    const scoutEnv = await modelEnvironment(token, scoutModel.baseUrl);
    const boss = await createAgent(token, { name: "Boss", handle: "boss" });
    const scout = await createAgent(token, { name: "Scout", handle: "scout", environmentId: scoutEnv });
    const home = await createThread(token, { environmentId: envId });
    await post(token, home.id, chat("@boss get scout on this"));

    const homeEs = await waitForEntries(token, home.id, (es) => chatsBy(es, boss.id).length === 1);
    const results = homeEs.filter((e) => e.payload.type === "pi.tool_result");
    expect(results[0].payload.isError).toBe(false);
    expect(results[1].payload.isError).toBe(true);
    expect(String(results[1].payload.output)).toMatch(/not_found/);
    const otherEs = await waitForEntries(token, other.id, (es) => chatsBy(es, scout.id).length === 1, "scout's reply");
    const posted = chatsBy(otherEs, boss.id);
    expect(posted).toHaveLength(1);
    expect(posted[0].payload).toMatchObject({ text: "@scout please look into it", depth: 1, sourceThreadId: home.id });
    expect(chatsBy(otherEs, scout.id)[0].payload).toMatchObject({ text: "Scout here, on it.", depth: 2 });
    expect((await readAll(await houseToken("house-post-other"), foreign.id)).entries).toHaveLength(0);
  });
});

async function waitForDecision(token: string, threadId: string, pred: (d: Awaited<ReturnType<typeof decisions>>[number]) => boolean) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const ds = await decisions(token, threadId);
    if (ds.some(pred)) return ds;
    if (Date.now() > deadline) throw new Error(`timed out waiting for a decision: ${JSON.stringify(ds)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("dispatch: post_to_thread's width cap", () => {
  it("counts the posts that landed, not the attempts: a refused post (another house's thread, a typo) leaves the budget as it was", async () => {
    const foreign = await createThread(await houseToken("house-post-budget-other"), {});
    const { token, model, envId, bot, t: thread } = await botThread("house-post-budget", { name: "Poster", handle: "poster" });
    const other = await createThread(token, { environmentId: envId });
    await model.push(
      { toolCalls: [{ id: "p1", name: "post_to_thread", arguments: { threadId: foreign.id, text: "to another house" } }] },
      { toolCalls: [{ id: "p2", name: "post_to_thread", arguments: { threadId: other.id, text: "FIRST post" } }] },
      { toolCalls: [{ id: "p3", name: "post_to_thread", arguments: { threadId: other.id, text: "SECOND post" } }] },
      { text: "Posted." },
    );
    expect((await call(`/api/threads/${thread.id}/config`, { method: "PATCH", token, json: { dispatch: { widthCap: 1 } } })).status).toBe(200);
    await post(token, thread.id, chat("@poster post"));
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).length === 1, "the reply");
    const results = es.filter((e) => e.payload.type === "pi.tool_result").map((e) => [e.payload.toolCallId, e.payload.isError, String(e.payload.output).split(":")[0]]);
    expect(results).toEqual([["p1", true, "not_found"], ["p2", false, "{\"posted\""], ["p3", true, "forbidden"]]);
    expect((await readAll(token, other.id)).entries.map((e) => e.payload.text)).toEqual(["FIRST post"]);
  }, 30_000);
});

describe("dispatch: durable turns", () => {
  it("an actor evicted mid-turn resumes from the persisted rounds: no repeated tool call, exactly one reply", async () => {
    const token = await houseToken("house-evict");
    let commands = 0;
    sharedTestProvider().execHandler = (_box, command) => {
      commands += command.includes("step-one") ? 1 : 0;
      return { exitCode: 0, output: `did ${command}` };
    };
    const model = await scriptedModel([
      { toolCalls: [{ id: "s1", name: "run_command", arguments: { command: "echo step-one" } }] },
      { hang: true }, // the second model call never answers: the actor goes away meanwhile
      { text: "Finished after the restart." },
    ]);
    const envId = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Bot", handle: "bot" });
    const thread = await createThread(token, { environmentId: envId });
    await post(token, thread.id, chat("@bot do the steps"));
    await waitForEntries(token, thread.id, (es) => es.some((e) => e.payload.type === "pi.tool_result"), "round one");
    const deadline = Date.now() + 20_000;
    while ((await model.requests()).length < 2) {
      if (Date.now() > deadline) throw new Error("second model call never came");
      await new Promise((r) => setTimeout(r, 50));
    }
    // The actor dies with the model call in flight (a graceful eviction would wait for it).
    await abortAllDurableObjects();

    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).length === 1, "the resumed reply");
    expect(chatsBy(es, bot.id)[0].payload.text).toBe("Finished after the restart.");
    expect(es.filter((e) => e.payload.type === "pi.tool_result")).toHaveLength(1);
    expect(commands).toBe(1);
    const reqs = await model.requests();
    expect(reqs).toHaveLength(3);
    // The resumed call carries round one from the thread, not a fresh start.
    expect(JSON.stringify(reqs[2].body.messages)).toContain("did echo step-one");
    expect(es.filter((e) => e.payload.type === "signal.dispatch.error")).toHaveLength(0);
    expect(new Set(es.map((e) => e.id)).size).toBe(es.length);
  }, 60_000);

  it("a turn resumed after an eviction keeps the model and instructions it began with; the bot's next turn has the new ones", async () => {
    const token = await houseToken("house-evict-settings");
    sharedTestProvider().execHandler = (_box, command) => ({ exitCode: 0, output: `did ${command}` });
    const model = await scriptedModel([
      { toolCalls: [{ id: "s1", name: "run_command", arguments: { command: "echo step-one" } }] },
      { hang: true },
      { text: "Finished as I began." },
      { text: "Answered as I am now." },
    ]);
    const envId = await modelEnvironment(token, model.baseUrl, {
      piModels: { providers: { local: { baseUrl: model.baseUrl, api: "openai-completions", apiKey: "$MODEL_KEY", models: [{ id: "scripted-model" }, { id: "other-model" }] } } },
    });
    const bot = await createAgent(token, { name: "Bot", handle: "bot", systemPrompt: "OLD instructions." });
    const thread = await createThread(token, { environmentId: envId });
    await post(token, thread.id, chat("@bot do the steps", "steps"));
    const deadline = Date.now() + 20_000;
    while ((await model.requests()).length < 2) {
      if (Date.now() > deadline) throw new Error("second model call never came");
      await new Promise((r) => setTimeout(r, 50));
    }
    const patched = await call(`/api/agents/${bot.id}`, { method: "PATCH", token, json: { systemPrompt: "NEW instructions.", model: "local/other-model" } });
    expect(patched.status).toBe(200);
    await abortAllDurableObjects();

    await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).length === 1, "the resumed reply");
    const resumed = (await model.requests())[2];
    expect(resumed.body.model).toBe("scripted-model");
    expect(JSON.stringify(resumed.body.messages)).toContain("OLD instructions.");
    expect(JSON.stringify(resumed.body.messages)).not.toContain("NEW instructions.");

    await post(token, thread.id, chat("@bot again", "again"));
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).length === 2, "the next reply");
    expect(chatsBy(es, bot.id).map((e) => e.payload.text)).toEqual(["Finished as I began.", "Answered as I am now."]);
    const next = (await model.requests())[3];
    expect(next.body.model).toBe("other-model");
    expect(JSON.stringify(next.body.messages)).toContain("NEW instructions.");
    expect(es.filter((e) => e.payload.type === "signal.dispatch.error")).toHaveLength(0);
  }, 60_000);

  it("a turn an older actor began (its rounds in one progress value) resumes from those rounds", async () => {
    const { token, model, bot, t } = await botThread("house-evict-legacy", { name: "Old", handle: "old" });
    sharedTestProvider().execHandler = (_box, command) => ({ exitCode: 0, output: `did ${command}` });
    await model.push(
      { toolCalls: [{ id: "s1", name: "run_command", arguments: { command: "echo legacy-step" } }] },
      { hang: true },
      { text: "Finished where the old actor left off." },
    );
    await post(token, t.id, chat("@old do the steps"));
    const deadline = Date.now() + 20_000;
    while ((await model.requests()).length < 2) {
      if (Date.now() > deadline) throw new Error("second model call never came");
      await new Promise((r) => setTimeout(r, 50));
    }
    await abortAllDurableObjects();
    // The storage as the previous release left it: the rounds in dispatch_turns.progress, no rounds table.
    const stub = E.THREADS.get(E.THREADS.idFromName(`thread:${t.id}`));
    await runInDurableObject(stub, (_a: ThreadActor, state: DurableObjectState) => {
      const sql = state.storage.sql;
      const rounds = sql.exec(`select body from dispatch_turn_rounds order by idx`).toArray().map((r) => JSON.parse(r.body as string));
      expect(rounds).toHaveLength(2);
      sql.exec(`update dispatch_turns set progress = ? where state = 'running'`, JSON.stringify(rounds));
      sql.exec(`drop table dispatch_turn_rounds`);
    });
    await abortAllDurableObjects();
    const es = await waitForEntries(token, t.id, (es) => chatsBy(es, bot.id).length === 1, "the resumed reply");
    expect(chatsBy(es, bot.id)[0].payload.text).toBe("Finished where the old actor left off.");
    expect(es.filter((e) => e.payload.type === "pi.tool_result")).toHaveLength(1);
    const reqs = await model.requests();
    expect(reqs).toHaveLength(3);
    expect(JSON.stringify(reqs[2].body.messages)).toContain("did echo legacy-step");
    expect(new Set(es.map((e) => e.id)).size).toBe(es.length);
  }, 60_000);

  it("a resumed turn's next post_to_thread is a post of its own, and counts the posts made before the restart against the width cap", async () => {
    const { token, model, envId, bot, t: thread } = await botThread("house-evict-post", { name: "Poster", handle: "poster" });
    const other = await createThread(token, { environmentId: envId });
    await model.push(
      { toolCalls: [{ id: "call_0", name: "post_to_thread", arguments: { threadId: other.id, text: "FIRST post" } }] },
      { hang: true },
      // Some providers number calls per response: the resumed round's call has the same id.
      { toolCalls: [{ id: "call_0", name: "post_to_thread", arguments: { threadId: other.id, text: "SECOND post" } }] },
      { toolCalls: [{ id: "call_1", name: "post_to_thread", arguments: { threadId: other.id, text: "THIRD post" } }] },
      { text: "Posted." },
    );
    // The width cap allows two posts per turn.
    expect((await call(`/api/threads/${thread.id}/config`, { method: "PATCH", token, json: { dispatch: { widthCap: 2 } } })).status).toBe(200);
    await post(token, thread.id, chat("@poster post twice"));
    const deadline = Date.now() + 20_000;
    while ((await model.requests()).length < 2) {
      if (Date.now() > deadline) throw new Error("second model call never came");
      await new Promise((r) => setTimeout(r, 50));
    }
    await abortAllDurableObjects();
    await waitForEntries(token, thread.id, (es) => chatsBy(es, bot.id).length === 1, "the resumed reply");
    const posted = (await readAll(token, other.id)).entries.filter((e) => e.payload.type === "chat").map((e) => e.payload.text);
    expect(posted).toEqual(["FIRST post", "SECOND post"]);
    const results = (await readAll(token, thread.id)).entries.filter((e) => e.payload.type === "pi.tool_result").map((e) => e.payload.output as string);
    expect(results.at(-1)).toContain("width cap");
  }, 60_000);

  it("a tool call cut off before its result is not run again: the model is told it was interrupted", () => {
    const closed = closeInterruptedCalls([
      { role: "assistant", text: "", toolCalls: [{ id: "a", name: "delegate_task", args: { task: "x" } }, { id: "b", name: "run_command", args: { command: "ls" } }] },
      { role: "tool", toolCallId: "a", name: "delegate_task", output: "{}" },
    ]);
    expect(closed).toHaveLength(3);
    expect(closed[2]).toMatchObject({ role: "tool", toolCallId: "b", isError: true });
    expect(closeInterruptedCalls([{ role: "assistant", text: "done" }])).toHaveLength(1);
  });
});

describe("dispatch: a long turn with large tool outputs", () => {
  it("keeps working past what one storage row holds: every round is kept, and the bot answers", async () => {
    const token = await houseToken("house-dispatch-big-turn");
    // A binary file's bytes: each result the model sees is cut to 16 KiB, and every control byte
    // takes 6 in JSON, so the turn's rounds come to about 11 MB, past a row's limit (2 MB
    // deployed; workerd's local one is larger).
    sharedTestProvider().execHandler = (_box, command) => ({ exitCode: 0, output: `${command}\n${"\u0001".repeat(17_000)}` });
    const ROUNDS = 10;
    const CALLS = 12;
    const script: Step[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      script.push({ toolCalls: Array.from({ length: CALLS }, (_, i) => ({ id: `r${r}c${i}`, name: "run_command", arguments: { command: `cat part-${r}-${i}.bin` } })) });
    }
    script.push({ text: "Read every part." });
    const model = await scriptedModel(script);
    const envId = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Reader", handle: "reader", environmentId: envId, tools: ["run_command"] });
    const t = await createThread(token, { environmentId: envId });
    await post(token, t.id, chat("@reader read all the parts"));
    const ended = (es: Entry[]) => chatsBy(es, bot.id).length > 0 || es.some((e) => e.payload.type === "signal.dispatch.error");
    const deadline = Date.now() + 60_000;
    let es = await readEvery(token, t.id);
    while (!ended(es)) {
      if (Date.now() > deadline) throw new Error(`no answer: ${es.filter((e) => e.payload.type === "pi.tool_result").length} tool results so far`);
      await new Promise((r) => setTimeout(r, 250));
      es = await readEvery(token, t.id);
    }
    expect(es.filter((e) => e.payload.type === "signal.dispatch.error").map((e) => e.payload.reason)).toEqual([]);
    expect(chatsBy(es, bot.id).map((e) => e.payload.text)).toEqual(["Read every part."]);
    expect(es.filter((e) => e.payload.type === "pi.tool_result")).toHaveLength(ROUNDS * CALLS);
    const reqs = await model.requests();
    expect(reqs).toHaveLength(ROUNDS + 1);
    // The last call saw every result, each as the tool gave it (cut to 16 KiB).
    const results = reqs[ROUNDS].body.messages.filter((m: { role: string }) => m.role === "tool");
    expect(results).toHaveLength(ROUNDS * CALLS);
    expect(results.every((m: { content: string }) => m.content.includes("[output truncated"))).toBe(true);
    // The rounds are on the thread: the ended turn keeps no copy of them.
    const stub = E.THREADS.get(E.THREADS.idFromName(`thread:${t.id}`));
    const kept = await runInDurableObject(stub, (_a: ThreadActor, state: DurableObjectState) =>
      state.storage.sql.exec(`select count(*) as n from dispatch_turn_rounds`).one().n);
    expect(kept).toBe(0);
  }, 120_000);
});

describe("dispatch: a turn that fails on our side, not the model's", () => {
  it("a round of megabytes of tool-call arguments is kept cut, and the turn goes on to its answer", async () => {
    const token = await houseToken("house-dispatch-huge-args");
    // Past a row's limit both deployed (2 MB) and in workerd here.
    const model = await scriptedModel([
      { toolCalls: [{ id: "big1", name: "run_command", arguments: { command: `echo ${"x".repeat(12 * 1024 * 1024)}` } }] },
      { text: "That was too long; sorry." },
    ]);
    const envId = await modelEnvironment(token, model.baseUrl);
    const bot = await createAgent(token, { name: "Rambler", handle: "rambler", environmentId: envId, tools: ["run_command"] });
    const t = await createThread(token, { environmentId: envId });
    await post(token, t.id, chat("@rambler run it"));
    const es = await waitForEntries(token, t.id, (es) => chatsBy(es, bot.id).length > 0 || es.some((e) => e.payload.type === "signal.dispatch.error"), "the end of the turn", 60_000);
    expect(es.filter((e) => e.payload.type === "signal.dispatch.error").map((e) => e.payload.reason)).toEqual([]);
    expect(chatsBy(es, bot.id).map((e) => e.payload.text)).toEqual(["That was too long; sorry."]);
    const round = es.find((e) => e.authorId === bot.id && e.payload.type === "pi.assistant" && Array.isArray(e.payload.toolCalls))!;
    expect(JSON.stringify(round.payload).length).toBeLessThan(MAX_ROUND_TOOL_ARGS_CHARS + 1_000);
    const [c] = round.payload.toolCalls as { id: string; name: string; args: { cut?: string } }[];
    expect(c).toMatchObject({ id: "big1", name: "run_command" });
    expect(c.args.cut).toMatch(/\[cut: \d+ more characters of the arguments\]$/);
    // The tool was asked as the model asked, and said what it thought of that.
    const result = es.find((e) => e.payload.type === "pi.tool_result" && e.payload.toolCallId === "big1")!;
    expect(result.payload.isError).toBe(true);
  }, 90_000);

  it("a round's calls together are bounded too, however many there are", () => {
    const calls = Array.from({ length: 40 }, (_, i) => ({ id: `c${i}`, name: "run_command", args: { command: "y".repeat(20_000) } }));
    const kept = boundedRound({ kind: "assistant", text: "", toolCalls: calls, stopReason: "toolUse" });
    if (kept.kind !== "assistant") throw new Error("not a round");
    expect(kept.toolCalls.map((c) => c.id)).toEqual(calls.map((c) => c.id));
    expect(JSON.stringify(kept.toolCalls).length).toBeLessThan(MAX_ROUND_TOOL_ARGS_CHARS + 40 * 200);
  });

  it("storage refusing a round is reported as that, not as the model's failure, and shows no SQLite text", async () => {
    const { token, bot, t, model } = await botThread("house-dispatch-store-fails", { name: "Keeper", handle: "keeper" }, [{ text: "first answer" }]);
    await post(token, t.id, chat("@keeper hello"));
    await waitForEntries(token, t.id, (es) => chatsBy(es, bot.id).length === 1, "the first answer");
    // The thread's storage now refuses every round a turn saves, as it refuses a row past its limit.
    const stub = E.THREADS.get(E.THREADS.idFromName(`thread:${t.id}`));
    await runInDurableObject(stub, (_a: ThreadActor, state: DurableObjectState) => {
      state.storage.sql.exec(`create trigger refuse_rounds before insert on dispatch_turn_rounds begin select raise(abort, 'string or blob too big'); end`);
    });
    model.push({ text: "second answer" });
    await post(token, t.id, chat("@keeper again"));
    const es = await waitForEntries(token, t.id, (es) => es.some((e) => e.payload.type === "signal.dispatch.error"), "the failure");
    const reason = es.find((e) => e.payload.type === "signal.dispatch.error")!.payload.reason as string;
    expect(reason).toMatch(/could not be saved to the thread: it is too large to store/);
    expect(reason).not.toMatch(/model call failed|SQLITE|blob/i);
    expect(chatsBy(es, bot.id).map((e) => e.payload.text)).toEqual(["first answer"]);
  }, 30_000);

  it("an internal error that quotes a secret of the environment is logged with it redacted", async () => {
    const { token, bot, t, model } = await botThread("house-dispatch-store-fails-secret", { name: "Keeper", handle: "keeper" }, [{ text: "first answer" }]);
    await post(token, t.id, chat("@keeper hello"));
    await waitForEntries(token, t.id, (es) => chatsBy(es, bot.id).length === 1, "the first answer");
    // The storage's own error quotes the secret, as an error carrying a provider's or a tool's text may.
    const stub = E.THREADS.get(E.THREADS.idFromName(`thread:${t.id}`));
    await runInDurableObject(stub, (_a: ThreadActor, state: DurableObjectState) => {
      state.storage.sql.exec(`create trigger refuse_rounds before insert on dispatch_turn_rounds begin select raise(abort, 'refused ${MODEL_KEY}'); end`);
    });
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      model.push({ text: "second answer" });
      await post(token, t.id, chat("@keeper again"));
      await failureOf(token, t.id);
      const lines = logged.mock.calls.map((c) => c.map(String).join(" ")).filter((l) => l.includes("dispatch_turn_failed"));
      expect(lines).toHaveLength(1);
      expect(lines[0]).toContain("refused [redacted]");
      expect(lines[0]).not.toContain(MODEL_KEY);
    } finally {
      logged.mockRestore();
    }
  }, 30_000);

  /** A bot whose model is answering its first round (held), with the house actor's stub. */
  async function turnWaitingOnModel(houseId: string) {
    const r = await botThread(houseId, { name: "Keeper", handle: "keeper" }, [
      { toolCalls: [{ id: "l1", name: "list_threads", arguments: {} }], held: true },
      { text: "never posted" },
    ]);
    await post(r.token, r.t.id, chat("@keeper list them"));
    await vi.waitFor(async () => expect((await r.model.requests()).length).toBe(1), { timeout: 10_000, interval: 50 });
    return { ...r, house: E.HOUSES.get(E.HOUSES.idFromName(houseId)) };
  }

  async function failureOf(token: string, threadId: string) {
    const es = await waitForEntries(token, threadId, (es) => es.some((e) => e.payload.type === "signal.dispatch.error"), "the failure");
    return { es, reason: es.find((e) => e.payload.type === "signal.dispatch.error")!.payload.reason as string };
  }

  it("the house not answering for the bot mid-turn is reported as that, not as the model's failure", async () => {
    const { token, model, bot, t, house } = await turnWaitingOnModel("house-dispatch-house-fails");
    await runInDurableObject(house, (h: HouseActor) => h.failAgentReads(1));
    await model.release();
    const { es, reason } = await failureOf(token, t.id);
    expect(reason).toBe("the bot's settings could not be read from its house (not an error of the model); ask it again");
    expect(es.filter((e) => e.authorId === bot.id && e.payload.type !== "signal.dispatch.error")).toEqual([]);
    expect((await decisions(token, t.id)).find((d) => d.agentId === bot.id && d.reason === "error")?.detail).toBe(reason);
  }, 30_000);

  it("the bot's tools failing to be built mid-turn is reported as that, not as the model's failure, and shows no raw error", async () => {
    const { token, model, bot, t, house } = await turnWaitingOnModel("house-dispatch-tools-fail");
    // A stored allow-list that is not a list: building the tools from it throws.
    await runInDurableObject(house, (_h: HouseActor, state: DurableObjectState) => {
      state.storage.sql.exec(`update agents set body = json_set(body, '$.tools', 5) where id = ?`, bot.id);
    });
    await model.release();
    const { es, reason } = await failureOf(token, t.id);
    expect(reason).toBe("the bot's tools could not be prepared (not an error of the model)");
    expect(reason).not.toMatch(/iterable|TypeError|model call failed/);
    expect(es.filter((e) => e.payload.type === "pi.tool_result")).toEqual([]);
  }, 30_000);
});

type Entry = Awaited<ReturnType<typeof readAll>>["entries"][number];

/** Every entry of the thread (one read returns a page). */
async function readEvery(token: string, threadId: string): Promise<Entry[]> {
  const out: Entry[] = [];
  let offset = "-1";
  for (;;) {
    const page = await readAll(token, threadId, offset);
    out.push(...page.entries);
    if (page.upToDate || page.entries.length === 0) return out;
    offset = page.nextOffset;
  }
}

describe("dispatch: messages that arrive while a bot's turn runs", () => {
  it("the bot's next turn waits for its answer and sees it: the earlier message is not answered again", async () => {
    const { token, model, bot, t } = await botThread("house-dispatch-queue", { name: "Bot", handle: "bot" }, [{ text: "answer to one", held: true }]);
    model.push({ text: "answer to two" });
    await post(token, t.id, chat("@bot one", "m1"));
    const deadline = Date.now() + 10_000;
    while ((await model.requests()).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect((await model.requests()).length).toBe(1);
    await post(token, t.id, chat("@bot two", "m2"));
    // The second message is decided while the first answer is held; its turn must not run beside it.
    await waitForDecision(token, t.id, (d) => d.agentId === bot.id && d.triggerEntryId === "m2" && d.reason === "mentioned");
    await new Promise((r) => setTimeout(r, 500));
    expect((await model.requests()).length).toBe(1);
    await model.release();
    const es = await waitForEntries(token, t.id, (es) => chatsBy(es, bot.id).length === 2, "both answers");
    expect(chatsBy(es, bot.id).map((e) => [e.payload.triggerEntryId, e.payload.text])).toEqual([["m1", "answer to one"], ["m2", "answer to two"]]);
    const second = (await model.requests())[1].body.messages.filter((m: any) => m.role !== "system").map((m: any) => [m.role, typeof m.content === "string" ? m.content : JSON.stringify(m.content)]);
    expect(second.slice(-3)).toEqual([["user", expect.stringContaining("@bot one")], ["assistant", expect.stringContaining("answer to one")], ["user", expect.stringContaining("@bot two")]]);
  }, 30_000);
});

describe("dispatch: a queued message and an eviction", () => {
  it("the turn cut off is resumed first, then the queued one: each message answered once, in order", async () => {
    const { token, model, bot, t } = await botThread("house-dispatch-queue-evict", { name: "Bot", handle: "bot" }, [{ hang: true }]);
    model.push({ text: "answer to one" }, { text: "answer to two" });
    await post(token, t.id, chat("@bot one", "m1"));
    const deadline = Date.now() + 10_000;
    while ((await model.requests()).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await post(token, t.id, chat("@bot two", "m2"));
    await waitForDecision(token, t.id, (d) => d.agentId === bot.id && d.triggerEntryId === "m2" && d.reason === "mentioned");
    await abortAllDurableObjects();
    const es = await waitForEntries(token, t.id, (es) => chatsBy(es, bot.id).length === 2, "both answers");
    expect(chatsBy(es, bot.id).map((e) => [e.payload.triggerEntryId, e.payload.text])).toEqual([["m1", "answer to one"], ["m2", "answer to two"]]);
    expect(await model.requests()).toHaveLength(3);
    expect(es.filter((e) => e.payload.type === "signal.dispatch.error")).toEqual([]);
  }, 60_000);
});

describe("dispatch: the context a turn sends", () => {
  it("is bounded however long the chats before it are: the newest are kept, and the message it answers", async () => {
    const { token, model, bot, t } = await botThread("house-dispatch-context", { name: "Bot", handle: "bot" }, [{ text: "read it" }]);
    // 39 pasted documents of 200,000 characters each: 7.8 million characters, past any model's window.
    for (let i = 0; i < 39; i++) expect((await post(token, t.id, chat(`doc ${i} ${"x".repeat(200_000)}`, `doc-${i}`))).status).toBe(201);
    await post(token, t.id, chat(`@bot summarize ${"y".repeat(150_000)} END-OF-ASK`, "ask"));
    // The thread is past one read page: the answer's own trigger decision says it was posted.
    await waitForDecision(token, t.id, (d) => d.agentId === bot.id && d.reason === "author");
    const messages = (await model.requests())[0].body.messages as { role: string; content: unknown }[];
    const sent = messages.map((m) => (typeof m.content === "string" ? m.content : JSON.stringify(m.content)));
    expect(sent.join("").length).toBeLessThanOrEqual(400_000);
    expect(sent.at(-1)).toContain("@bot summarize");
    expect(sent.some((s) => s.includes("doc 38 "))).toBe(true);
  }, 90_000);
});
