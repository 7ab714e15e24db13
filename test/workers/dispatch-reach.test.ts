// A bot acts with no more reach than the writer who woke it: a chat written with a token for one
// thread (a shared stream token, a run's box token) wakes bots that act within that thread only.
import { describe, expect, it } from "vitest";
import { abortAllDurableObjects, env, runInDurableObject } from "cloudflare:test";
import { call, chat, createThread, houseToken, post, runToken, streamToken } from "./helpers";
import { botThread, createAgent, decisions, modelEnvironment, scriptedModel, waitForEntries } from "./dispatch-helpers";
import { sharedTestProvider } from "./register-test-provider";
import type { ThreadActor } from "./test-worker";

const E = env as unknown as { THREADS: DurableObjectNamespace<ThreadActor> };

const ALL_TOOLS = ["create_agent", "create_thread", "delegate_task", "list_threads", "post_to_thread", "preview_link", "run_command"];
const SECRET_TITLE = "acquisition-of-initech-confidential";

const chatsBy = <T extends { authorId?: string; payload: { type: string } }>(es: T[], author: string) => es.filter((e) => e.payload.type === "chat" && e.authorId === author);
const toolNames = (req: { body: { tools?: { function: { name: string } }[] } }) => (req.body.tools ?? []).map((t) => t.function.name).sort();
const toolResults = (es: { payload: Record<string, unknown> }[]) =>
  es.filter((e) => e.payload.type === "pi.tool_result").map((e) => ({ tool: e.payload.toolName, isError: e.payload.isError, output: String(e.payload.output) }));

async function waitForDecision(token: string, threadId: string, pred: (d: Awaited<ReturnType<typeof decisions>>[number] & { reach?: string }) => boolean) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const ds = await decisions(token, threadId);
    if (ds.some(pred)) return ds as (typeof ds[number] & { reach?: string })[];
    if (Date.now() > deadline) throw new Error(`timed out waiting for a decision: ${JSON.stringify(ds)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("dispatch: a bot acts within the reach of the writer who woke it", () => {
  it("a stream token's @bot chat: no house-wide tool is offered, a forced call is told it is not available, and nothing of other threads gets out", async () => {
    const houseId = "house-reach-stream";
    const { token, model, bot, t } = await botThread(houseId, { name: "Helper", handle: "helper" });
    const other = await createThread(token, { title: SECRET_TITLE });
    let commands = 0;
    sharedTestProvider().execHandler = () => ((commands += 1), { exitCode: 0, output: "ran" });
    // A model that does what the chat asks, whatever it was offered.
    await model.push(
      { toolCalls: [{ id: "l1", name: "list_threads", arguments: {} }] },
      { toolCalls: [{ id: "p1", name: "post_to_thread", arguments: { threadId: other.id, text: "hello from the outside" } }] },
      { toolCalls: [{ id: "r1", name: "run_command", arguments: { command: "ls /workspace" } }] },
      { text: "I can only help within this thread." },
    );
    const r = await post(await streamToken(houseId, t.id), t.id, chat("@helper list the threads of this house and post their titles here"));
    expect(r.status).toBe(201);

    const es = await waitForEntries(token, t.id, (es) => chatsBy(es, bot.id).length === 1, "the reply");
    expect(chatsBy(es, bot.id)[0].payload.text).toBe("I can only help within this thread.");
    const reqs = await model.requests();
    expect(reqs).toHaveLength(4);
    for (const req of reqs) expect(toolNames(req)).toEqual([]);
    expect(JSON.stringify(reqs[0].body.messages)).toContain("this thread only");
    for (const [i, tool] of ["list_threads", "post_to_thread", "run_command"].entries()) {
      const result = toolResults(es)[i];
      expect(result).toMatchObject({ tool, isError: true });
      expect(result.output).toContain(`The tool "${tool}" is not available for this message`);
    }
    expect(JSON.stringify(reqs)).not.toContain(SECRET_TITLE);
    expect(JSON.stringify(es)).not.toContain(SECRET_TITLE);
    expect(es.some((e) => e.payload.type === "signal.dispatch.error")).toBe(false);
    expect(commands).toBe(0);
    const otherEs = await waitForEntries(token, other.id, () => true);
    expect(otherEs).toHaveLength(0);
    const ds = await waitForDecision(token, t.id, (d) => d.agentId === bot.id && d.reason === "mentioned");
    expect(ds.find((d) => d.reason === "mentioned")?.reach).toBe("thread");
  });

  it("the same chat written with a house token offers every tool, and list_threads answers", async () => {
    const houseId = "house-reach-house";
    const { token, model, bot, t } = await botThread(houseId, { name: "Helper", handle: "helper" });
    await createThread(token, { title: SECRET_TITLE });
    await model.push({ toolCalls: [{ id: "l1", name: "list_threads", arguments: {} }] }, { text: "Listed." });
    expect((await post(token, t.id, chat("@helper list the threads of this house"))).status).toBe(201);

    const es = await waitForEntries(token, t.id, (es) => chatsBy(es, bot.id).length === 1, "the reply");
    const reqs = await model.requests();
    expect(toolNames(reqs[0])).toEqual(ALL_TOOLS);
    expect(JSON.stringify(reqs[0].body.messages)).not.toContain("this thread only");
    expect(toolResults(es)[0]).toMatchObject({ tool: "list_threads", isError: false });
    expect(toolResults(es)[0].output).toContain(SECRET_TITLE);
    const ds = await waitForDecision(token, t.id, (d) => d.agentId === bot.id && d.reason === "mentioned");
    expect(ds.find((d) => d.reason === "mentioned")?.reach).toBe("house");

    // The Durable Streams write path takes the writer's reach alike.
    await model.push({ text: "Again." });
    const r = await call(`/api/stream/thread-${t.id}`, {
      method: "POST", token, headers: { "content-type": "application/json" },
      body: JSON.stringify({ id: "again", payload: { type: "chat", text: "@helper once more" } }),
    });
    expect(r.status).toBe(204);
    const again = await waitForDecision(token, t.id, (d) => d.triggerEntryId === "again" && d.reason === "mentioned");
    expect(again.find((d) => d.triggerEntryId === "again")?.reach).toBe("house");
    await waitForEntries(token, t.id, (es) => chatsBy(es, bot.id).length === 2, "the second reply");
    expect(toolNames((await model.requests())[2])).toEqual(ALL_TOOLS);
  });

  it("down the depth chain: a bot answering a thread-reach bot's reply acts within the thread too", async () => {
    const houseId = "house-reach-chain";
    const token = await houseToken(houseId);
    const first = await scriptedModel([{ text: "@second your turn: list the house's threads" }]);
    const second = await scriptedModel([{ toolCalls: [{ id: "l1", name: "list_threads", arguments: {} }] }, { text: "Cannot from here." }]);
    const firstEnv = await modelEnvironment(token, first.baseUrl);
    const secondEnv = await modelEnvironment(token, second.baseUrl);
    const a = await createAgent(token, { name: "First", handle: "first", environmentId: firstEnv });
    const b = await createAgent(token, { name: "Second", handle: "second", environmentId: secondEnv });
    const t = await createThread(token, { environmentId: firstEnv });
    await createThread(token, { title: SECRET_TITLE });
    expect((await post(await streamToken(houseId, t.id), t.id, chat("@first ask the other bot"))).status).toBe(201);

    const es = await waitForEntries(token, t.id, (es) => chatsBy(es, b.id).length === 1, "the second bot's reply");
    expect(chatsBy(es, a.id)[0].payload.depth).toBe(1);
    expect(chatsBy(es, b.id)[0].payload).toMatchObject({ text: "Cannot from here.", depth: 2 });
    for (const req of [...(await first.requests()), ...(await second.requests())]) expect(toolNames(req)).toEqual([]);
    expect(toolResults(es)).toEqual([expect.objectContaining({ tool: "list_threads", isError: true })]);
    expect(JSON.stringify(es)).not.toContain(SECRET_TITLE);
    const ds = await waitForDecision(token, t.id, (d) => d.agentId === b.id && d.reason === "mentioned");
    expect(ds.filter((d) => d.reason === "mentioned").map((d) => [d.agentId, d.reach]).sort()).toEqual([[a.id, "thread"], [b.id, "thread"]].sort());
  });

  it("a run's box token (it names its run) reaches its thread only, on the Durable Streams write path too", async () => {
    const houseId = "house-reach-run";
    const { token, model, bot, t } = await botThread(houseId, { name: "Helper", handle: "helper" });
    await model.push({ toolCalls: [{ id: "l1", name: "list_threads", arguments: {} }] }, { text: "Only this thread." });
    const box = await runToken(houseId, t.id, "run_reach1");
    // A run's token writes while its run is the thread's current one: the run starts first.
    const claim = { id: "claim:run_reach1", payload: { type: "signal.thread.status_changed", status: "running", runId: "run_reach1" } };
    expect((await post(box, t.id, claim)).status).toBe(201);
    const r = await call(`/api/stream/thread-${t.id}`, {
      method: "POST", token: box,
      headers: { "content-type": "application/json" }, body: JSON.stringify({ payload: { type: "chat", text: "@helper what other threads are there?" } }),
    });
    expect(r.status).toBe(204);

    const es = await waitForEntries(token, t.id, (es) => chatsBy(es, bot.id).length === 1, "the reply");
    for (const req of await model.requests()) expect(toolNames(req)).toEqual([]);
    expect(toolResults(es)).toEqual([expect.objectContaining({ tool: "list_threads", isError: true })]);
    const ds = await waitForDecision(token, t.id, (d) => d.agentId === bot.id && d.reason === "mentioned");
    expect(ds.find((d) => d.reason === "mentioned")?.reach).toBe("thread");
  });

  it("an actor whose dispatch tables predate the reach column gets it, and runs the trigger it had pending as before (house reach)", async () => {
    const houseId = "house-reach-legacy";
    const { token, model, bot, t } = await botThread(houseId, { name: "Helper", handle: "helper" });
    await model.push({ text: "Answered after the upgrade." });
    // The chat the old release had recorded a trigger for (posted here without waking anyone).
    const written = await post(token, t.id, { id: "old-chat", payload: { type: "chat", text: "@helper an old question", dispatch: false } });
    expect(written.status).toBe(201);
    const stub = () => E.THREADS.get(E.THREADS.idFromName(`thread:${t.id}`));
    await runInDurableObject(stub(), (_a: ThreadActor, state: DurableObjectState) => {
      const sql = state.storage.sql;
      for (const table of ["dispatch_triggers", "dispatch_turns", "dispatch_decisions", "dispatch_replies"]) sql.exec(`drop table if exists ${table}`);
      // The tables as the previous release created them.
      sql.exec(`create table dispatch_triggers (
          entry_id text primary key, seq integer not null, author_id text, text text not null, depth integer not null, mentions text);
        create table dispatch_turns (
          id text primary key, agent_id text not null, trigger_entry_id text not null, trigger_seq integer not null, depth integer not null,
          state text not null, run_at integer not null, attempts integer not null default 0, progress text not null default '[]',
          updated_at integer not null);
        create unique index dispatch_turns_once on dispatch_turns(trigger_entry_id, agent_id);
        create table dispatch_decisions (
          seq integer primary key autoincrement, at integer not null, trigger_entry_id text not null, agent_id text not null,
          verdict text not null, reason text not null, detail text, turn_id text);
        create table dispatch_replies (agent_id text primary key, at integer not null)`);
      const seq = sql.exec(`select seq from messages where entry_id = 'old-chat'`).one().seq as number;
      sql.exec(`insert into dispatch_triggers (entry_id, seq, author_id, text, depth, mentions) values ('old-chat', ?, 'alice', '@helper an old question', 0, null)`, seq);
      return state.storage.setAlarm(Date.now() + 500);
    });
    // The next incarnation is the new release's, woken by the alarm the old one had set.
    await abortAllDurableObjects();

    const es = await waitForEntries(token, t.id, (es) => chatsBy(es, bot.id).length === 1, "the reply to the pending trigger");
    expect(chatsBy(es, bot.id)[0].payload).toMatchObject({ text: "Answered after the upgrade.", triggerEntryId: "old-chat" });
    expect(toolNames((await model.requests())[0])).toEqual(ALL_TOOLS);
    const ds = await waitForDecision(token, t.id, (d) => d.agentId === bot.id && d.reason === "mentioned");
    expect(ds.find((d) => d.reason === "mentioned")?.reach).toBe("house");
    await runInDurableObject(stub(), (_a: ThreadActor, state: DurableObjectState) => {
      for (const table of ["dispatch_triggers", "dispatch_turns", "dispatch_decisions"]) {
        expect(state.storage.sql.exec(`pragma table_info(${table})`).toArray().map((c) => c.name), table).toContain("reach");
      }
    });
  });
});
