// TEMPORARY STAND-IN for the llm helper's module (contract: /work/briefs/dispatch-llm-interface.md). Replaced on merge.
import type { ResolvedModel } from "./models";
import { runToolLoop, type LoopMessage } from "./tool-loop";

export async function askGate(opts: { model: ResolvedModel; botName: string; botInstructions: string; recent: LoopMessage[]; requestTimeoutMs?: number }): Promise<{ reply: boolean; reason: string }> {
  const r = await runToolLoop({ model: opts.model, systemPrompt: `Should ${opts.botName} reply? Answer yes or no.`, messages: opts.recent, tools: [], onEvent: async () => {} });
  if (!r.ok) return { reply: false, reason: r.reason };
  return { reply: /^\s*yes/i.test(r.finalText), reason: r.finalText.slice(0, 200) };
}
