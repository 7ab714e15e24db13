// TEMPORARY STAND-IN for the llm helper's module (contract: /work/briefs/dispatch-llm-interface.md). Replaced on merge.
import type { ResolvedModel } from "./models";

export type ToolSpec = {
  name: string; description: string; parameters: Record<string, unknown>;
  execute(args: Record<string, unknown>, signal: AbortSignal): Promise<{ output: string; isError?: boolean }>;
};
export type LoopMessage =
  | { role: "user"; text: string; authorId?: string }
  | { role: "assistant"; text: string; toolCalls?: { id: string; name: string; args: Record<string, unknown> }[] }
  | { role: "tool"; toolCallId: string; name: string; output: string; isError?: boolean };
export type LoopEvent =
  | { kind: "assistant"; text: string; toolCalls: { id: string; name: string; args: Record<string, unknown> }[]; stopReason: string }
  | { kind: "tool_result"; toolCallId: string; name: string; output: string; isError: boolean };
export type LoopResult = { ok: true; finalText: string; rounds: number } | { ok: false; reason: string; rounds: number };

function toOpenAi(systemPrompt: string, messages: LoopMessage[]) {
  const out: unknown[] = [{ role: "system", content: systemPrompt }];
  for (const m of messages) {
    if (m.role === "user") out.push({ role: "user", content: m.text });
    else if (m.role === "assistant") out.push({ role: "assistant", content: m.text, ...(m.toolCalls?.length ? { tool_calls: m.toolCalls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: JSON.stringify(c.args) } })) } : {}) });
    else out.push({ role: "tool", tool_call_id: m.toolCallId, content: m.output });
  }
  return out;
}

export async function runToolLoop(opts: {
  model: ResolvedModel; systemPrompt: string; messages: LoopMessage[]; tools: ToolSpec[]; onEvent: (e: LoopEvent) => Promise<void>;
  maxRounds?: number; requestTimeoutMs?: number; retries?: number; signal?: AbortSignal;
}): Promise<LoopResult> {
  const messages = [...opts.messages];
  const maxRounds = opts.maxRounds ?? 20;
  for (let round = 0; round < maxRounds; round++) {
    let body: any;
    try {
      const r = await fetch(`${opts.model.baseUrl}/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", ...(opts.model.apiKey ? { authorization: `Bearer ${opts.model.apiKey}` } : {}) },
        body: JSON.stringify({ model: opts.model.modelId, stream: false, messages: toOpenAi(opts.systemPrompt, messages),
          tools: opts.tools.map((t) => ({ type: "function", function: { name: t.name, description: t.description, parameters: t.parameters } })) }),
        signal: AbortSignal.timeout(opts.requestTimeoutMs ?? 120_000),
      });
      if (!r.ok) return { ok: false, reason: `model answered HTTP ${r.status}`, rounds: round };
      body = await r.json();
    } catch (err) {
      return { ok: false, reason: `model call failed: ${(err as Error).message}`, rounds: round };
    }
    const msg = body.choices?.[0]?.message ?? {};
    const toolCalls = (msg.tool_calls ?? []).map((c: any) => {
      let args: Record<string, unknown> = {};
      try { args = JSON.parse(c.function.arguments || "{}"); } catch { args = {}; }
      return { id: c.id, name: c.function.name, args };
    });
    const text = msg.content ?? "";
    await opts.onEvent({ kind: "assistant", text, toolCalls, stopReason: toolCalls.length ? "toolUse" : "stop" });
    messages.push({ role: "assistant", text, toolCalls });
    if (toolCalls.length === 0) return { ok: true, finalText: text, rounds: round + 1 };
    for (const c of toolCalls) {
      const tool = opts.tools.find((t) => t.name === c.name);
      const res = tool ? await tool.execute(c.args, new AbortController().signal) : { output: `unknown tool ${c.name}`, isError: true };
      await opts.onEvent({ kind: "tool_result", toolCallId: c.id, name: c.name, output: res.output, isError: !!res.isError });
      messages.push({ role: "tool", toolCallId: c.id, name: c.name, output: res.output, isError: !!res.isError });
    }
  }
  return { ok: false, reason: "too many tool rounds", rounds: maxRounds };
}
