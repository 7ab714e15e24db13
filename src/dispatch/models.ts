// TEMPORARY STAND-IN for the llm helper's module (contract: /work/briefs/dispatch-llm-interface.md). Replaced on merge.
export type ModelApi = "openai-completions" | "anthropic-messages";
export type ResolvedModel = {
  ref: string; api: ModelApi; provider: string; modelId: string; baseUrl: string; apiKey: string | undefined; headers?: Record<string, string>;
};
export type PiModelsConfig = { providers: Record<string, { baseUrl?: string; api?: string; apiKey?: string; headers?: Record<string, string>; models?: { id: string; [k: string]: unknown }[] }> };

export function resolveModel(ref: string, piModels: PiModelsConfig | null | undefined, secrets: Record<string, string>):
  { ok: true; model: ResolvedModel } | { ok: false; reason: string } {
  const slash = ref.indexOf("/");
  if (slash <= 0) return { ok: false, reason: `model "${ref}" is not provider/modelId` };
  const provider = ref.slice(0, slash);
  const modelId = ref.slice(slash + 1);
  const p = piModels?.providers?.[provider];
  if (!p) return { ok: false, reason: `no provider "${provider}" in the environment's piModels` };
  if (!p.baseUrl) return { ok: false, reason: `provider "${provider}" has no baseUrl` };
  const api = p.api === "anthropic-messages" ? "anthropic-messages" : p.api === "openai-completions" ? "openai-completions" : null;
  if (!api) return { ok: false, reason: `provider "${provider}" uses an unsupported api` };
  const apiKey = p.apiKey?.startsWith("$") ? secrets[p.apiKey.slice(1)] : p.apiKey;
  return { ok: true, model: { ref, api, provider, modelId, baseUrl: p.baseUrl, apiKey, headers: p.headers } };
}
