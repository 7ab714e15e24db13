import { describe, expect, it } from "vitest";
import { env, evictDurableObject, runInDurableObject } from "cloudflare:test";
import type { ThreadActor } from "./test-worker";
import { call, chat, createThread, houseToken, post } from "./helpers";
import { createAgent, decisions, modelEnvironment, scriptedModel, waitForEntries } from "./dispatch-helpers";

/**
 * A thread decides chats that address nobody from its cached copy of the house's agents (so such a
 * chat costs no trigger row and no alarm). These pin down that the copy never hides a change.
 */
const threadActor = (id: string) => {
  const ns = (env as unknown as { THREADS: DurableObjectNamespace<ThreadActor> }).THREADS;
  return ns.get(ns.idFromName(`thread:${id}`));
};

describe("dispatch: the thread's cached agent set follows the house", () => {
  const chatsBy = <T extends { authorId?: string; payload: { type: string } }>(es: T[], author: string) => es.filter((e) => e.payload.type === "chat" && e.authorId === author);

  async function warmThread(house: string) {
    const token = await houseToken(house);
    const model = await scriptedModel([], { text: "ok" });
    const envId = await modelEnvironment(token, model.baseUrl);
    const quiet = await createAgent(token, { name: "Quiet", handle: "quiet" });
    const thread = await createThread(token, { environmentId: envId });
    // A mention makes the thread load the house's agents; after the reply the copy is warm.
    await post(token, thread.id, chat("@quiet hi"));
    await waitForEntries(token, thread.id, (es) => chatsBy(es, quiet.id).length === 1, "quiet's reply");
    return { token, thread, quiet, envId };
  }

  it("an `always` bot created after the thread cached the set answers the next unaddressed chat", async () => {
    const { token, thread } = await warmThread("house-agent-cache-create");
    const echo = await createAgent(token, { name: "Echo", handle: "echo", triggerMode: "always" });
    const r = await post(token, thread.id, chat("nobody named here"));
    expect(r.status).toBe(201);
    // Echo may also answer quiet's earlier reply, whose trigger can still be pending when echo is
    // made (an always bot answers bots too): what is pinned here is its answer to the new chat.
    const answersNewChat = (es: Awaited<ReturnType<typeof waitForEntries>>) => {
      const asked = es.find((e) => e.payload.type === "chat" && (e.payload as { text?: string }).text === "nobody named here");
      return chatsBy(es, echo.id).filter((e) => asked !== undefined && (e.payload as { triggerEntryId?: string }).triggerEntryId === asked.id);
    };
    const es = await waitForEntries(token, thread.id, (es) => answersNewChat(es).length > 0, "echo's reply");
    expect(answersNewChat(es).map((e) => (e.payload as { text?: string }).text)).toEqual(["ok"]);
  });

  it("a bot switched from mention to always by PATCH answers the next unaddressed chat", async () => {
    const { token, thread, quiet } = await warmThread("house-agent-cache-patch");
    const p = await call(`/api/agents/${quiet.id}`, { method: "PATCH", token, json: { triggerMode: "always" } });
    expect(p.status).toBe(200);
    await post(token, thread.id, chat("still nobody named"));
    await waitForEntries(token, thread.id, (es) => chatsBy(es, quiet.id).length === 2, "quiet's second reply");
  });

  it("a thread config that makes a bot `always` takes effect on the next unaddressed chat", async () => {
    const { token, thread, quiet } = await warmThread("house-agent-cache-config");
    const p = await call(`/api/threads/${thread.id}/config`, { method: "PATCH", token, json: { dispatch: { perAgent: { [quiet.id]: { triggerMode: "always" } } } } });
    expect(p.status).toBe(200);
    await post(token, thread.id, chat("no handle in this one"));
    await waitForEntries(token, thread.id, (es) => chatsBy(es, quiet.id).length === 2, "quiet's second reply");
  });

  it("a mention written full-width (an input method's ＠ｑｕｉｅｔ) wakes the bot, with the set cached", async () => {
    const { token, thread, quiet } = await warmThread("house-agent-cache-fullwidth");
    await post(token, thread.id, chat("＠ｑｕｉｅｔ、もう一度お願いします"));
    await waitForEntries(token, thread.id, (es) => chatsBy(es, quiet.id).length === 2, "quiet's second reply");
  });

  it("a handle created after the thread cached the set is recognised at once", async () => {
    const { token, thread, envId } = await warmThread("house-agent-cache-handle");
    const late = await createAgent(token, { name: "Late", handle: "late", environmentId: envId });
    await post(token, thread.id, chat("@late are you there?"));
    await waitForEntries(token, thread.id, (es) => chatsBy(es, late.id).length === 1, "late's reply");
  });

  it("a new thread knows the house's bots from its creation: its first unaddressed chat is decided inline, with no trigger", async () => {
    const token = await houseToken("house-agent-cache-new-thread");
    const model = await scriptedModel([], { text: "ok" });
    const envId = await modelEnvironment(token, model.baseUrl);
    const quiet = await createAgent(token, { name: "Quiet", handle: "quiet" });
    const thread = await createThread(token, { environmentId: envId });
    const stub = threadActor(thread.id);
    expect(await runInDurableObject(stub, (a: ThreadActor) => a.testAgentCache())).toMatchObject({ ids: [quiet.id] });
    expect((await post(token, thread.id, chat("nobody named here"))).status).toBe(201);
    expect(await runInDurableObject(stub, (a: ThreadActor) => a.testPendingTriggers())).toBe(0);
    // The copy does not stop a mention from reaching the bot.
    expect((await post(token, thread.id, chat("@quiet hi"))).status).toBe(201);
    await waitForEntries(token, thread.id, (es) => chatsBy(es, quiet.id).length === 1, "quiet's reply");
    expect((await decisions(token, thread.id)).some((d) => d.agentId === quiet.id && d.reason === "mentioned")).toBe(true);
  });

  it("the copy outlives an eviction: an unaddressed chat to the woken thread needs no trigger, and a later change still reaches it", async () => {
    const token = await houseToken("house-agent-cache-evicted");
    const model = await scriptedModel([], { text: "ok" });
    const envId = await modelEnvironment(token, model.baseUrl);
    await createAgent(token, { name: "Quiet", handle: "quiet" });
    const thread = await createThread(token, { environmentId: envId });
    const stub = threadActor(thread.id);
    await evictDurableObject(stub);
    expect((await post(token, thread.id, chat("nobody named, after a restart"))).status).toBe(201);
    expect(await runInDurableObject(stub, (a: ThreadActor) => a.testPendingTriggers())).toBe(0);
    // An `always` bot made while the thread is asleep again: the house's notice wakes it and the
    // kept copy is dropped, so the next unaddressed chat is decided by the alarm and answered.
    await evictDurableObject(stub);
    const echo = await createAgent(token, { name: "Echo", handle: "echo", triggerMode: "always" });
    await post(token, thread.id, chat("anyone?"));
    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, echo.id).length === 1, "echo's reply");
    expect(chatsBy(es, echo.id)[0].payload.text).toBe("ok");
  });
});
