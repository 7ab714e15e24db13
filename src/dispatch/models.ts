/**
 * Resolves a bot's `provider/modelId` from an environment's `piModels` (the shape of pi's
 * models.json) and its write-only secrets, so one provider config serves bots and boxes.
 * Pure: no I/O. Reasons are shown to users, so they name secrets but never contain a value.
 */

export type ModelApi = "openai-completions" | "anthropic-messages";
export const MODEL_APIS: readonly ModelApi[] = ["openai-completions", "anthropic-messages"];

export type ResolvedModel = {
  ref: string;
  api: ModelApi;
  provider: string;
  modelId: string;
  baseUrl: string;
  /** resolved from secrets; never logged, never in an entry */
  apiKey: string | undefined;
  /** may carry resolved secrets too: treat like apiKey */
  headers?: Record<string, string>;
  /** every secret value to scrub from its errors: those the key and headers were built from (a bot's turn adds the rest of its environment's) */
  secretValues: string[];
  name: string;
  contextWindow: number;
  maxTokens: number;
  reasoning: boolean;
  input: ("text" | "image")[];
  cost: { input: number; output: number; cacheRead: number; cacheWrite: number };
  compat?: Record<string, unknown>;
  /** How long a call may receive nothing (no headers, no bytes) before it is given up and retried. */
  idleTimeoutMs?: number;
  /** How long a whole call may take, streaming or not, before it is given up (not retried). */
  requestTimeoutMs?: number;
  /**
   * Which of the two the environment set rather than left to the defaults: an ambient bot's gate
   * has its own short default whole-call limit, which only a configured value replaces.
   */
  configuredTimeouts?: { idle: boolean; request: boolean };
};

export type PiModelsConfig = {
  providers: Record<
    string,
    {
      baseUrl?: string;
      api?: string;
      apiKey?: string;
      headers?: Record<string, string>;
      idleTimeoutMs?: number;
      requestTimeoutMs?: number;
      models?: { id: string; [k: string]: unknown }[];
    }
  >;
};

export type ResolveResult = { ok: true; model: ResolvedModel } | { ok: false; reason: string };

/** Where a provider listed without `baseUrl` is served, per API (as pi's built-in providers). */
const DEFAULT_BASE_URL: Record<ModelApi, string> = {
  "openai-completions": "https://api.openai.com/v1",
  "anthropic-messages": "https://api.anthropic.com",
};

const DEFAULT_CONTEXT_WINDOW = 128_000;
/**
 * A model that sends nothing for this long has most likely hung; a bot answers one message at a
 * time, so its later messages would wait out the whole call. A model that thinks in silence for
 * longer (some reasoning models stream nothing until they answer) needs `idleTimeoutMs` set.
 */
export const DEFAULT_IDLE_TIMEOUT_MS = 60_000;
export const MAX_IDLE_TIMEOUT_MS = 86_400_000;
/**
 * A hung model is caught by the idle timeout; this only bounds one that keeps sending and never
 * finishes. A steady answer may take long: a slow local model, extended thinking, a whole file
 * written as a tool call's argument (8,192 tokens at 5 tokens a second is 27 minutes).
 */
export const DEFAULT_REQUEST_TIMEOUT_MS = 1_800_000;
const DEFAULT_MAX_TOKENS = 8_192;

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * pi's config-value syntax, restricted to what a bot can honour: `$NAME` / `${NAME}` read a
 * secret, `$$` is a literal `$`, anything else is literal. `!command` (pi runs a shell) is refused.
 */
export function resolveConfigValue(
  value: string,
  secrets: Record<string, string>,
  what: string,
): { ok: true; value: string; used: string[] } | { ok: false; reason: string } {
  if (value.startsWith("!")) return { ok: false, reason: `${what} uses a shell command (!…), which bots cannot run; use "$SECRET_NAME"` };
  let out = "";
  const missing: string[] = [];
  const used: string[] = [];
  for (let i = 0; i < value.length; ) {
    const dollar = value.indexOf("$", i);
    if (dollar < 0) {
      out += value.slice(i);
      break;
    }
    out += value.slice(i, dollar);
    const next = value[dollar + 1];
    if (next === "$" || next === "!") {
      out += next;
      i = dollar + 2;
      continue;
    }
    let name: string | undefined;
    let end = dollar + 1;
    if (next === "{") {
      const close = value.indexOf("}", dollar + 2);
      const inner = close < 0 ? "" : value.slice(dollar + 2, close);
      if (close >= 0 && /^[A-Za-z_][A-Za-z0-9_]*$/.test(inner)) {
        name = inner;
        end = close + 1;
      }
    } else {
      const m = /^[A-Za-z_][A-Za-z0-9_]*/.exec(value.slice(dollar + 1));
      if (m) {
        name = m[0];
        end = dollar + 1 + m[0].length;
      }
    }
    if (name === undefined) {
      out += "$";
      i = dollar + 1;
      continue;
    }
    const secret = Object.prototype.hasOwnProperty.call(secrets, name) ? secrets[name] : undefined;
    if (secret === undefined || secret === "") missing.push(name);
    else {
      out += secret;
      used.push(secret);
    }
    i = end;
  }
  if (missing.length) {
    const names = [...new Set(missing)].join(", ");
    return { ok: false, reason: `${what} needs the secret ${names}, which the environment does not have` };
  }
  return { ok: true, value: out, used };
}

function positiveInt(v: unknown, fallback: number): number {
  return typeof v === "number" && Number.isInteger(v) && v > 0 ? v : fallback;
}

function costOf(v: unknown): ResolvedModel["cost"] {
  const c = isRecord(v) ? v : {};
  const n = (x: unknown) => (typeof x === "number" && Number.isFinite(x) && x >= 0 ? x : 0);
  return { input: n(c.input), output: n(c.output), cacheRead: n(c.cacheRead), cacheWrite: n(c.cacheWrite) };
}

export function resolveModel(
  ref: string,
  piModels: PiModelsConfig | null | undefined,
  secrets: Record<string, string>,
): ResolveResult {
  const slash = ref.indexOf("/");
  if (slash <= 0 || slash === ref.length - 1) {
    return { ok: false, reason: `model "${ref}" is not of the form provider/modelId` };
  }
  const provider = ref.slice(0, slash);
  const modelId = ref.slice(slash + 1);

  const providers = isRecord(piModels) && isRecord(piModels.providers) ? piModels.providers : undefined;
  if (!providers || Object.keys(providers).length === 0) {
    return { ok: false, reason: `no model providers are configured (the environment has no piModels.providers) for "${ref}"` };
  }
  const p = Object.prototype.hasOwnProperty.call(providers, provider) ? providers[provider] : undefined;
  if (!isRecord(p)) {
    const known = Object.keys(providers).sort().join(", ");
    return { ok: false, reason: `unknown provider "${provider}" for model "${ref}" (configured providers: ${known})` };
  }
  const models = Array.isArray(p.models) ? p.models.filter(isRecord) : [];
  const m = models.find((x) => x.id === modelId);
  if (!m) {
    const known = models.map((x) => String(x.id)).join(", ") || "none";
    return { ok: false, reason: `unknown model id "${modelId}" for provider "${provider}" (listed models: ${known})` };
  }

  const api = (typeof m.api === "string" ? m.api : p.api) as unknown;
  if (typeof api !== "string" || api === "") {
    return { ok: false, reason: `provider "${provider}" sets no api; bots support ${MODEL_APIS.join(" and ")}` };
  }
  if (!(MODEL_APIS as readonly string[]).includes(api)) {
    return { ok: false, reason: `unsupported api "${api}" for model "${ref}"; bots support ${MODEL_APIS.join(" and ")}` };
  }

  const rawBaseUrl = typeof m.baseUrl === "string" ? m.baseUrl : typeof p.baseUrl === "string" ? p.baseUrl : undefined;
  const baseUrl = rawBaseUrl ?? DEFAULT_BASE_URL[api as ModelApi];
  try {
    const u = new URL(baseUrl);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new Error("scheme");
  } catch {
    return { ok: false, reason: `provider "${provider}" has an invalid baseUrl (must be an http(s) URL)` };
  }

  const secretValues: string[] = [];
  let apiKey: string | undefined;
  if (typeof p.apiKey === "string" && p.apiKey !== "") {
    const r = resolveConfigValue(p.apiKey, secrets, `the apiKey of provider "${provider}"`);
    if (!r.ok) return r;
    apiKey = r.value;
    secretValues.push(...r.used);
  }

  let headers: Record<string, string> | undefined;
  const rawHeaders = { ...(isRecord(p.headers) ? p.headers : {}), ...(isRecord(m.headers) ? m.headers : {}) };
  for (const [k, v] of Object.entries(rawHeaders)) {
    if (typeof v !== "string") continue;
    const r = resolveConfigValue(v, secrets, `header "${k}" of provider "${provider}"`);
    if (!r.ok) return r;
    (headers ??= {})[k] = r.value;
    secretValues.push(...r.used);
  }
  // Both SDKs refuse to send a request without credentials; say so now rather than at call time.
  const authHeaders = Object.keys(headers ?? {}).map((h) => h.toLowerCase());
  if (!apiKey && !authHeaders.some((h) => h === "authorization" || h === "x-api-key")) {
    return {
      ok: false,
      reason: `provider "${provider}" sets no apiKey: set "apiKey": "$SECRET_NAME" (any placeholder for an endpoint that needs no key)`,
    };
  }

  // What the environment sets (0 when it sets nothing valid): the model's entry, else its provider's.
  const idleSet = positiveInt(m.idleTimeoutMs, positiveInt(p.idleTimeoutMs, 0));
  const requestSet = positiveInt(m.requestTimeoutMs, positiveInt(p.requestTimeoutMs, 0));
  const compat = isRecord(m.compat) ? m.compat : isRecord((p as Record<string, unknown>).compat) ? ((p as Record<string, unknown>).compat as Record<string, unknown>) : undefined;
  const input = Array.isArray(m.input) && m.input.every((x) => x === "text" || x === "image") && m.input.length
    ? (m.input as ("text" | "image")[])
    : ["text" as const];

  return {
    ok: true,
    model: {
      ref,
      api: api as ModelApi,
      provider,
      modelId,
      baseUrl,
      apiKey,
      ...(headers ? { headers } : {}),
      secretValues,
      name: typeof m.name === "string" && m.name ? m.name : modelId,
      contextWindow: positiveInt(m.contextWindow, DEFAULT_CONTEXT_WINDOW),
      maxTokens: positiveInt(m.maxTokens, DEFAULT_MAX_TOKENS),
      reasoning: m.reasoning === true,
      input,
      cost: costOf(m.cost),
      ...(compat ? { compat } : {}),
      // A timer's delay past 2^31 - 1 ms fires at once.
      idleTimeoutMs: Math.min(MAX_IDLE_TIMEOUT_MS, idleSet || DEFAULT_IDLE_TIMEOUT_MS),
      requestTimeoutMs: Math.min(MAX_IDLE_TIMEOUT_MS, requestSet || DEFAULT_REQUEST_TIMEOUT_MS),
      configuredTimeouts: { idle: idleSet > 0, request: requestSet > 0 },
    },
  };
}
