// Bots end to end on loopback: the worker under `wrangler dev`, the local Daytona-compatible
// sandbox host, the real pi CLI in a box, and two scripted OpenAI-compatible model servers: one
// answers the bots (the worker's tool loop), the other answers pi in the box, so their scripts
// cannot interleave.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSandboxHost } from "../../sandbox-host/server.mjs";
import { freePort, startWorker } from "../../scripts/lib/wrangler-dev.mjs";
import { startModelServer, type ModelServer } from "../support/model-server";
import { jsonApi } from "../support/json-api";
import { botsAndBoxesEnvironment } from "../support/bots-and-boxes-env";

const SANDBOX_KEY = "e2e-dispatch-sandbox-key";
const BOT_KEY = "sk-bot-secret-value";
const PI_KEY = "sk-pi-secret-value";
let host: Awaited<ReturnType<typeof startSandboxHost>>;
let worker: Awaited<ReturnType<typeof startWorker>>;
let workerOpts: Parameters<typeof startWorker>[0];
let token: string;
let botModel: ModelServer;
let piModel: ModelServer;

type Entry = { id: string; offset: string; authorId?: string; payload: { type: string; [k: string]: any } };

const api = jsonApi(() => ({ url: worker.url, token }));

async function entries(threadId: string, as?: string): Promise<Entry[]> {
  return (await api(`/api/threads/${threadId}/entries?offset=-1&limit=10000`, { as })).body.entries;
}

async function waitFor<T>(what: string, fn: () => Promise<T | null | undefined | false>, timeoutMs = 90_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

const chatsBy = (es: Entry[], author: string) => es.filter((e) => e.payload.type === "chat" && e.authorId === author);

async function environment(): Promise<string> {
  // One provider config serves the bots (in the worker) and pi (in boxes).
  const r = await api("/api/environments", {
    method: "POST",
    json: botsAndBoxesEnvironment({ name: "bots-and-boxes", botBaseUrl: botModel.baseUrl, piBaseUrl: piModel.baseUrl, botKey: BOT_KEY, piKey: PI_KEY }),
  });
  expect(r.status).toBe(201);
  return r.body.id as string;
}

async function agent(body: Record<string, unknown>) {
  const r = await api("/api/agents", { method: "POST", json: { model: "bots/bot-model", ...body } });
  expect(r.status).toBe(201);
  return r.body as { id: string; handle: string };
}

beforeAll(async () => {
  host = await startSandboxHost({ port: 0, apiKey: SANDBOX_KEY });
  botModel = await startModelServer([]);
  piModel = await startModelServer([]);
  const port = await freePort();
  workerOpts = {
    port,
    vars: {
      DAYTONA_API_URL: host.apiUrl,
      DAYTONA_API_KEY: SANDBOX_KEY,
      DAYTONA_TARGET: "local",
      THREADBOX_STREAM_URL: `http://127.0.0.1:${port}/api/stream`,
      ORPHAN_SILENCE_MS: "20000",
      PROBE_INTERVAL_MS: "3000",
      PROBE_CONFIRM_MS: "500",
      DISPATCH_TURN_LEASE_MS: "2000",
    },
  };
  worker = await startWorker(workerOpts);
  token = await worker.mintHouseToken("house-bots", "alice", "owner");
}, 180_000);

afterAll(async () => {
  await worker?.stop();
  await botModel?.close();
  await piModel?.close();
  await host?.close();
});

describe("talk to a bot", () => {
  it("@coder write hello.txt containing hi -> delegate_task -> pi in a box -> one child_finished and one result chat by coder, no second turn", async () => {
    const envId = await environment();
    const coder = await agent({ name: "Coder", handle: "coder", systemPrompt: "Delegate coding work." });
    botModel.push(
      { toolCalls: [{ id: "d1", name: "delegate_task", arguments: { task: "write hello.txt containing hi" } }] },
      { text: "On it: a coding agent is writing hello.txt." },
    );
    piModel.push(
      { toolCalls: [{ name: "bash", arguments: { command: "printf hi > hello.txt && cat hello.txt" } }] },
      { text: "Wrote hello.txt containing hi." },
    );
    const botCallsBefore = botModel.requests.length;
    const parent = (await api("/api/threads", { method: "POST", json: { title: "talk", environmentId: envId } })).body;
    const posted = await api(`/api/threads/${parent.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: "@coder write hello.txt containing hi" } } });
    expect(posted.status).toBe(201);

    const child = await waitFor("the child thread", async () => {
      const list = (await api(`/api/threads?parent=${parent.id}`)).body.threads as { id: string }[];
      return list[0];
    });
    const settled = await waitFor("the child to settle", async () => {
      const t = (await api(`/api/threads/${child.id}`)).body;
      return t.status === "completed" || t.status === "failed" ? t : null;
    });
    expect(settled.status).toBe("completed");
    const childEs = await entries(child.id);
    expect(childEs[0].payload).toMatchObject({ type: "chat", text: "write hello.txt containing hi" });
    // Everything on the child is authored by the delegating bot: the prompt and all of pi's work.
    const authored = childEs.filter((e) => e.payload.type === "chat" || e.payload.type.startsWith("pi."));
    expect(authored.length).toBeGreaterThan(2);
    expect(new Set(authored.map((e) => e.authorId))).toEqual(new Set([coder.id]));
    expect(JSON.stringify(childEs.find((e) => e.payload.type === "pi.tool_result")!.payload)).toContain("hi");

    const parentEs = await waitFor("the result on the parent", async () => {
      const es = await entries(parent.id);
      return es.some((e) => e.payload.type === "signal.thread.child_finished") && chatsBy(es, coder.id).length >= 2 ? es : null;
    });
    // Give a wrongly re-fired dispatch every chance to show up before counting.
    await waitFor("the decision on the result chat", async () => {
      const ds = (await api(`/api/threads/${parent.id}/dispatch`)).body.decisions as { reason: string }[];
      return ds.length >= 2 ? ds : null;
    });
    const finals = (await entries(parent.id));
    expect(finals.filter((e) => e.payload.type === "signal.thread.child_finished")).toHaveLength(1);
    const results = chatsBy(finals, coder.id).filter((e) => e.payload.origin === "child_finished");
    expect(results).toHaveLength(1);
    expect(results[0].payload.text).toContain("Wrote hello.txt containing hi.");
    const turnReplies = chatsBy(finals, coder.id).filter((e) => e.payload.origin !== "child_finished");
    expect(turnReplies).toHaveLength(1);
    expect(turnReplies[0].payload).toMatchObject({ text: "On it: a coding agent is writing hello.txt.", depth: 1 });
    expect(botModel.requests.length - botCallsBefore).toBe(2); // one turn, two rounds, no second turn
    expect(parentEs.find((e) => e.payload.type === "pi.tool_result")!.payload.output).toContain(child.id);
    // Secrets: the bot's key reached its model server only, never a thread.
    expect(botModel.requests.at(-1)!.headers.authorization).toBe(`Bearer ${BOT_KEY}`);
    expect(JSON.stringify([...finals, ...childEs])).not.toMatch(/sk-(bot|pi)-secret-value/);
    expect(JSON.stringify(botModel.requests.map((r) => r.body))).not.toMatch(/sk-(bot|pi)-secret-value/);
  });

  it("two always bots talking to each other stop at depth 8", async () => {
    const envId = await environment();
    const a = await agent({ name: "Ping", handle: "ping", triggerMode: "always", environmentId: envId });
    const b = await agent({ name: "Pong", handle: "pong", triggerMode: "always", environmentId: envId });
    const t = (await api("/api/threads", { method: "POST", json: {} })).body;
    // Only these two bots: the other bots of the house stay quiet; one bot answers each entry.
    expect((await api(`/api/threads/${t.id}/config`, { method: "PATCH", json: { dispatch: { widthCap: 1 } } })).status).toBe(200);
    for (let i = 0; i < 8; i++) botModel.push({ text: `reply ${i + 1}` });
    await api(`/api/threads/${t.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: "start" } } });
    await waitFor("the depth cap", async () => {
      const ds = (await api(`/api/threads/${t.id}/dispatch`)).body.decisions as { reason: string }[];
      return ds.some((d) => d.reason === "depth_cap");
    });
    const es = await entries(t.id);
    const botChats = es.filter((e) => e.payload.type === "chat" && (e.authorId === a.id || e.authorId === b.id));
    expect(botChats.map((e) => e.payload.depth)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    await api(`/api/agents/${a.id}`, { method: "DELETE" });
    await api(`/api/agents/${b.id}`, { method: "DELETE" });
  });

  it("post_to_thread wakes a bot in another thread of the house; another house's thread is refused", async () => {
    const envId = await environment();
    const lead = await agent({ name: "Lead", handle: "lead", environmentId: envId, tools: ["post_to_thread"] });
    const scout = await agent({ name: "Scout", handle: "scout", environmentId: envId, tools: [] });
    const research = (await api("/api/threads", { method: "POST", json: { title: "research" } })).body;
    const otherHouse = await worker.mintHouseToken("house-elsewhere", "eve", "owner");
    const foreign = (await api("/api/threads", { method: "POST", json: {}, as: otherHouse })).body;
    botModel.push(
      { toolCalls: [
        { id: "p1", name: "post_to_thread", arguments: { threadId: research.id, text: "@scout find the answer" } },
        { id: "p2", name: "post_to_thread", arguments: { threadId: foreign.id, text: "hi from another house" } },
      ] },
      { text: "Asked scout in the research thread." },
      { text: "Scout reporting: found it." },
    );
    const home = (await api("/api/threads", { method: "POST", json: {} })).body;
    await api(`/api/threads/${home.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: "@lead get the scout going" } } });
    const researchEs = await waitFor("scout's reply", async () => {
      const es = await entries(research.id);
      return chatsBy(es, scout.id).length === 1 ? es : null;
    });
    expect(chatsBy(researchEs, lead.id)[0].payload).toMatchObject({ text: "@scout find the answer", depth: 1 });
    expect(chatsBy(researchEs, scout.id)[0].payload).toMatchObject({ text: "Scout reporting: found it.", depth: 2 });
    const homeEs = await waitFor("lead's reply", async () => {
      const es = await entries(home.id);
      return chatsBy(es, lead.id).length === 1 ? es : null;
    });
    const denied = homeEs.filter((e) => e.payload.type === "pi.tool_result" && e.payload.isError);
    expect(denied).toHaveLength(1);
    expect(denied[0].payload.toolCallId).toBe("p2");
    expect(await entries(foreign.id, otherHouse)).toEqual([]);
  });

  it("a worker restart mid-turn (state persisted) resumes the turn: exactly one reply", async () => {
    const envId = await environment();
    const bot = await agent({ name: "Steady", handle: "steady", environmentId: envId, tools: [] });
    const t = (await api("/api/threads", { method: "POST", json: {} })).body;
    botModel.push({ hang: true }, { text: "Survived the restart." });
    const before = botModel.requests.length;
    await api(`/api/threads/${t.id}/entries`, { method: "POST", json: { payload: { type: "chat", text: "@steady are you there?" } } });
    await waitFor("the model call in flight", async () => botModel.requests.length > before);
    await worker.stop({ keepState: true });
    worker = await startWorker({ ...workerOpts, persistTo: worker.persistTo });
    const es = await waitFor("the resumed reply", async () => {
      const all = await entries(t.id);
      return chatsBy(all, bot.id).length >= 1 ? all : null;
    });
    // A second, wrong reply would follow the first at once; the decisions say the reply was answered by nobody.
    await waitFor("the reply's own decisions", async () => {
      const ds = (await api(`/api/threads/${t.id}/dispatch`)).body.decisions as { triggerEntryId: string }[];
      return ds.some((d) => d.triggerEntryId.startsWith("reply:"));
    });
    const final = await entries(t.id);
    expect(chatsBy(final, bot.id)).toHaveLength(1);
    expect(chatsBy(final, bot.id)[0].payload.text).toBe("Survived the restart.");
    expect(final.filter((e) => e.payload.type === "signal.dispatch.error")).toHaveLength(0);
    expect(botModel.requests.length - before).toBe(2);
    expect(es.length).toBeGreaterThan(0);
  });
});
