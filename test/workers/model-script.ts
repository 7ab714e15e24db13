// Workers-side client of the scripted model server's session API (test/support/model-server.ts).
import { inject } from "vitest";
import type { ModelApi, ResolvedModel } from "../../src/dispatch/models";
import { resolveModel } from "../../src/dispatch/models";
import type { RecordedRequest, ScriptStep } from "../support/model-server";

export const SCRIPTED_KEY = "sk-scripted-secret-0123456789";

export type ScriptedModel = {
  id: string;
  openaiBaseUrl: string;
  anthropicBaseUrl: string;
  requests(): Promise<RecordedRequest[]>;
  push(...steps: ScriptStep[]): Promise<void>;
  /** Lets the session's `held` steps answer. */
  release(): Promise<void>;
};

export async function scriptModel(script: ScriptStep[], fallback?: ScriptStep): Promise<ScriptedModel> {
  const origin = inject("modelServerOrigin");
  const r = await fetch(`${origin}/__sessions`, { method: "POST", body: JSON.stringify({ script, fallback }) });
  if (r.status !== 201) throw new Error(`model server session: ${r.status}`);
  const s = (await r.json()) as { id: string; openaiBaseUrl: string; anthropicBaseUrl: string };
  return {
    ...s,
    async requests() {
      const res = await fetch(`${origin}/__sessions/${s.id}/requests`);
      return ((await res.json()) as { requests: RecordedRequest[] }).requests;
    },
    async push(...steps) {
      await fetch(`${origin}/__sessions/${s.id}/steps`, { method: "POST", body: JSON.stringify({ steps }) });
    },
    async release() {
      await fetch(`${origin}/__sessions/${s.id}/release`, { method: "POST" });
    },
  };
}

/** The model a bot would get from an environment pointing at the scripted server, through resolveModel. */
export function scriptedModel(api: ModelApi, s: ScriptedModel, modelEntry: Record<string, unknown> = {}): ResolvedModel {
  const r = resolveModel(
    "scripted/test-model",
    {
      providers: {
        scripted: {
          baseUrl: api === "anthropic-messages" ? s.anthropicBaseUrl : s.openaiBaseUrl,
          api,
          apiKey: "$SCRIPTED_KEY",
          models: [{ id: "test-model", ...modelEntry }],
        },
      },
    },
    { SCRIPTED_KEY },
  );
  if (!r.ok) throw new Error(r.reason);
  return r.model;
}

export type ReceivedTurn = {
  role: string;
  text?: string;
  toolCalls?: { id: string; name: string; args: unknown }[];
  toolResult?: { id: string; text: string; isError: boolean };
};
export type Received = { system: string; tools: string[]; turns: ReceivedTurn[]; apiKeyHeader: unknown };

/** What a request carried, in one shape for both APIs: the system prompt, tool names and turns. */
export function received(req: RecordedRequest): Received {
  if (req.api === "anthropic-messages") {
    const system = typeof req.body.system === "string" ? req.body.system : (req.body.system ?? []).map((b: any) => b.text).join("");
    const turns: ReceivedTurn[] = [];
    for (const m of req.messages) {
      const blocks = typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content;
      for (const b of blocks) {
        if (b.type === "text") turns.push({ role: m.role, text: b.text });
        else if (b.type === "tool_use") turns.push({ role: "assistant", toolCalls: [{ id: b.id, name: b.name, args: b.input }] });
        else if (b.type === "tool_result") {
          const text = typeof b.content === "string" ? b.content : (b.content ?? []).map((c: any) => c.text).join("");
          turns.push({ role: "tool", toolResult: { id: b.tool_use_id, text, isError: b.is_error === true } });
        }
      }
    }
    return { system, tools: (req.body.tools ?? []).map((t: any) => t.name) as string[], turns, apiKeyHeader: req.headers["x-api-key"] };
  }
  const sys = req.messages.filter((m: any) => m.role === "system" || m.role === "developer");
  const text = (c: any) => (typeof c === "string" ? c : (c ?? []).map((p: any) => p.text).join(""));
  const turns: ReceivedTurn[] = [];
  for (const m of req.messages) {
    if (m.role === "system" || m.role === "developer") continue;
    if (m.role === "tool") {
      turns.push({ role: "tool", toolResult: { id: m.tool_call_id, text: text(m.content), isError: false } });
      continue;
    }
    if (text(m.content)) turns.push({ role: m.role, text: text(m.content) });
    for (const tc of m.tool_calls ?? []) turns.push({ role: "assistant", toolCalls: [{ id: tc.id, name: tc.function.name, args: JSON.parse(tc.function.arguments) }] });
  }
  return {
    system: sys.map((m: any) => text(m.content)).join("\n"),
    tools: (req.body.tools ?? []).map((t: any) => t.function.name) as string[],
    turns,
    apiKeyHeader: req.headers.authorization,
  };
}
