import { call, createThread, houseToken, readAll } from "./helpers";
import { scriptModel } from "./model-script";
import type { ScriptStep } from "../support/model-server";

export type Step = ScriptStep;

/** A scripted OpenAI-compatible model of this test's own (a session of the shared model server). */
export async function scriptedModel(script: Step[] = [], fallback?: Step) {
  const s = await scriptModel(script, fallback);
  return { baseUrl: s.openaiBaseUrl, push: s.push, requests: s.requests, release: s.release };
}

export const MODEL_KEY = "sk-dispatch-secret-value";

export async function modelEnvironment(token: string, baseUrl: string, extra: Record<string, unknown> = {}) {
  const r = await call("/api/environments", {
    method: "POST", token,
    json: {
      name: "bots", provider: "test", sharedBox: true, secrets: { MODEL_KEY },
      piModels: { providers: { local: { baseUrl, api: "openai-completions", apiKey: "$MODEL_KEY", models: [{ id: "scripted-model" }] } } },
      ...extra,
    },
  });
  if (r.status !== 201) throw new Error(`environment: ${r.status} ${await r.text()}`);
  return ((await r.json()) as { id: string }).id;
}

export async function createAgent(token: string, body: Record<string, unknown>) {
  const r = await call("/api/agents", { method: "POST", token, json: { model: "local/scripted-model", ...body } });
  if (r.status !== 201) throw new Error(`agent: ${r.status} ${await r.text()}`);
  return (await r.json()) as { id: string; handle: string };
}

/** A house with a bot on a scripted model of its own (`script`, more by `model.push`), and a thread in its environment. */
export async function botThread(houseId: string, bot: { name: string; handle: string }, script: Step[] = []) {
  const token = await houseToken(houseId);
  const model = await scriptedModel(script);
  const envId = await modelEnvironment(token, model.baseUrl);
  const agent = await createAgent(token, { ...bot, environmentId: envId });
  const thread = await createThread(token, { environmentId: envId });
  return { token, model, envId, bot: agent, t: thread };
}

type E = Awaited<ReturnType<typeof readAll>>["entries"][number];

/** Polls the thread until `pred` holds on its entries (an event, not a sleep). */
export async function waitForEntries(token: string, threadId: string, pred: (es: E[]) => boolean, what = "entries", timeoutMs = 20_000): Promise<E[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { entries } = await readAll(token, threadId);
    if (pred(entries)) return entries;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(entries.map((e) => [e.authorId, e.payload.type, e.payload.text ?? e.payload.reason]))}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function decisions(token: string, threadId: string) {
  const r = await call(`/api/threads/${threadId}/dispatch`, { token });
  if (r.status !== 200) throw new Error(`decisions: ${r.status} ${await r.text()}`);
  return ((await r.json()) as { decisions: { agentId: string; reason: string; verdict: string; detail: string | null; triggerEntryId: string; turnId: string | null }[] }).decisions;
}
