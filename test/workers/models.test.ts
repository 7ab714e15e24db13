// resolveModel: pure resolution of "provider/modelId" from an environment's piModels + secrets.
import { describe, expect, it } from "vitest";
import { resolveConfigValue, resolveModel, type PiModelsConfig } from "../../src/dispatch/models";

const KEY = "sk-live-abcdef0123456789";
const piModels: PiModelsConfig = {
  providers: {
    openai: { baseUrl: "https://api.openai.com/v1", api: "openai-completions", apiKey: "$OPENAI_API_KEY", models: [{ id: "gpt-4.1-mini" }] },
    anthropic: {
      api: "anthropic-messages",
      apiKey: "${ANTHROPIC_KEY}",
      headers: { "x-team": "eng-$TEAM_ID" },
      models: [{ id: "claude-sonnet", contextWindow: 200_000, maxTokens: 4096, reasoning: true, name: "Claude Sonnet" }],
    },
    local: { baseUrl: "http://127.0.0.1:8080/v1", api: "openai-completions", apiKey: "literal-key", models: [{ id: "llama" }, { id: "other", api: "anthropic-messages", baseUrl: "http://127.0.0.1:9090" }] },
    nokey: { baseUrl: "http://127.0.0.1:8081/v1", api: "openai-completions", models: [{ id: "m" }] },
    google: { baseUrl: "https://generativelanguage.googleapis.com", api: "google-generative-ai", apiKey: "$G", models: [{ id: "gemini" }] },
    shell: { api: "openai-completions", apiKey: "!cat ~/.key", models: [{ id: "m" }] },
    noapi: { baseUrl: "http://127.0.0.1:1/v1", apiKey: "k", models: [{ id: "m" }] },
    badurl: { baseUrl: "ftp://x", api: "openai-completions", apiKey: "k", models: [{ id: "m" }] },
  },
};
const secrets = { OPENAI_API_KEY: KEY, ANTHROPIC_KEY: "sk-ant-999999", TEAM_ID: "team-4242", G: "g-secret-7777" };

function reasonOf(ref: string, cfg: PiModelsConfig | null | undefined = piModels, sec: Record<string, string> = secrets) {
  const r = resolveModel(ref, cfg, sec);
  if (r.ok) throw new Error(`expected ${ref} to be unresolvable`);
  for (const v of Object.values(sec)) if (v) expect(r.reason).not.toContain(v);
  return r.reason;
}

describe("resolveModel", () => {
  it("resolves an openai-completions model with its key read from a secret", () => {
    const r = resolveModel("openai/gpt-4.1-mini", piModels, secrets);
    expect(r).toMatchObject({
      ok: true,
      model: { ref: "openai/gpt-4.1-mini", api: "openai-completions", provider: "openai", modelId: "gpt-4.1-mini", baseUrl: "https://api.openai.com/v1", apiKey: KEY },
    });
    if (!r.ok) return;
    expect(r.model.contextWindow).toBeGreaterThan(0);
    expect(r.model.maxTokens).toBeGreaterThan(0);
    expect(r.model.input).toEqual(["text"]);
    expect(r.model.headers).toBeUndefined();
  });

  it("resolves an anthropic-messages model: ${NAME} keys, secret headers, model fields and the default base URL", () => {
    const r = resolveModel("anthropic/claude-sonnet", piModels, secrets);
    expect(r).toMatchObject({
      ok: true,
      model: {
        api: "anthropic-messages",
        baseUrl: "https://api.anthropic.com",
        apiKey: "sk-ant-999999",
        headers: { "x-team": "eng-team-4242" },
        contextWindow: 200_000,
        maxTokens: 4096,
        reasoning: true,
        name: "Claude Sonnet",
      },
    });
  });

  it("accepts a literal key, no key, and a per-model api/baseUrl override", () => {
    expect(resolveModel("local/llama", piModels, {})).toMatchObject({ ok: true, model: { apiKey: "literal-key", api: "openai-completions" } });
    const bearer = { providers: { h: { baseUrl: "http://127.0.0.1:1/v1", api: "openai-completions", headers: { Authorization: "Bearer $TOK" }, models: [{ id: "m" }] } } };
    expect(resolveModel("h/m", bearer, { TOK: "tok-123456" })).toMatchObject({ ok: true, model: { apiKey: undefined, headers: { Authorization: "Bearer tok-123456" }, secretValues: ["tok-123456"] } });
    expect(resolveModel("local/other", piModels, {})).toMatchObject({ ok: true, model: { api: "anthropic-messages", baseUrl: "http://127.0.0.1:9090" } });
  });

  it("reads idleTimeoutMs from the model entry, else its provider, else 60 s; a value that is not a positive integer is the default", () => {
    const cfg = (provider: Record<string, unknown>, model: Record<string, unknown> = {}): PiModelsConfig =>
      ({ providers: { p: { baseUrl: "http://127.0.0.1:1/v1", api: "openai-completions", apiKey: "k", ...provider, models: [{ id: "m", ...model }] } } });
    const idle = (c: PiModelsConfig) => {
      const r = resolveModel("p/m", c, {});
      return r.ok ? r.model.idleTimeoutMs : r.reason;
    };
    expect(idle(cfg({}))).toBe(60_000);
    expect(idle(cfg({ idleTimeoutMs: 180_000 }))).toBe(180_000);
    expect(idle(cfg({ idleTimeoutMs: 180_000 }, { idleTimeoutMs: 5_000 }))).toBe(5_000);
    expect(idle(cfg({ idleTimeoutMs: "90s" }))).toBe(60_000);
    expect(idle(cfg({ idleTimeoutMs: -1 }))).toBe(60_000);
    expect(idle(cfg({ idleTimeoutMs: 1e15 }))).toBe(86_400_000);
  });

  it("reads requestTimeoutMs from the model entry, else its provider, else 30 minutes; a value that is not a positive integer is the default", () => {
    const cfg = (provider: Record<string, unknown>, model: Record<string, unknown> = {}): PiModelsConfig =>
      ({ providers: { p: { baseUrl: "http://127.0.0.1:1/v1", api: "openai-completions", apiKey: "k", ...provider, models: [{ id: "m", ...model }] } } });
    const whole = (c: PiModelsConfig) => {
      const r = resolveModel("p/m", c, {});
      return r.ok ? r.model.requestTimeoutMs : r.reason;
    };
    expect(whole(cfg({}))).toBe(1_800_000);
    expect(whole(cfg({ requestTimeoutMs: 3_600_000 }))).toBe(3_600_000);
    expect(whole(cfg({ requestTimeoutMs: 3_600_000 }, { requestTimeoutMs: 300_000 }))).toBe(300_000);
    expect(whole(cfg({ requestTimeoutMs: "1h" }))).toBe(1_800_000);
    expect(whole(cfg({ requestTimeoutMs: 0 }))).toBe(1_800_000);
    expect(whole(cfg({ requestTimeoutMs: 1e15 }))).toBe(86_400_000);
  });

  it("keeps slashes in the model id (provider is the first segment)", () => {
    const cfg = { providers: { or: { baseUrl: "https://openrouter.ai/api/v1", api: "openai-completions", apiKey: "k", models: [{ id: "meta/llama-3" }] } } };
    expect(resolveModel("or/meta/llama-3", cfg, {})).toMatchObject({ ok: true, model: { provider: "or", modelId: "meta/llama-3" } });
  });

  it("explains a malformed reference", () => {
    expect(reasonOf("gpt-4.1-mini")).toMatch(/provider\/modelId/);
    expect(reasonOf("openai/")).toMatch(/provider\/modelId/);
    expect(reasonOf("/x")).toMatch(/provider\/modelId/);
  });

  it("explains a missing config", () => {
    expect(reasonOf("openai/gpt-4.1-mini", null)).toMatch(/no model providers are configured/);
    expect(resolveModel("openai/gpt-4.1-mini", undefined, secrets)).toMatchObject({ ok: false, reason: expect.stringMatching(/no model providers/) });
    expect(reasonOf("openai/gpt-4.1-mini", { providers: {} })).toMatch(/no model providers/);
  });

  it("explains an unknown provider, naming the configured ones", () => {
    const reason = reasonOf("mistral/large");
    expect(reason).toMatch(/unknown provider "mistral"/);
    expect(reason).toContain("openai");
    expect(reasonOf("constructor/x")).toMatch(/unknown provider "constructor"/);
  });

  it("explains an unknown model id, naming the listed ones", () => {
    const reason = reasonOf("openai/gpt-5");
    expect(reason).toMatch(/unknown model id "gpt-5"/);
    expect(reason).toContain("gpt-4.1-mini");
  });

  it("explains an unsupported or missing api", () => {
    expect(reasonOf("google/gemini")).toMatch(/unsupported api "google-generative-ai".*openai-completions and anthropic-messages/);
    expect(reasonOf("noapi/m")).toMatch(/sets no api/);
  });

  it("explains a missing secret by name, never with a value", () => {
    const reason = reasonOf("openai/gpt-4.1-mini", piModels, { ANTHROPIC_KEY: "sk-ant-999999" });
    expect(reason).toMatch(/needs the secret OPENAI_API_KEY/);
    expect(reasonOf("anthropic/claude-sonnet", piModels, { ANTHROPIC_KEY: "sk-ant-999999" })).toMatch(/header "x-team".*TEAM_ID/);
    expect(reasonOf("openai/gpt-4.1-mini", piModels, { OPENAI_API_KEY: "" })).toMatch(/OPENAI_API_KEY/);
  });

  it("lists the secrets it used, so errors can be scrubbed", () => {
    const r = resolveModel("anthropic/claude-sonnet", piModels, secrets);
    expect(r.ok && r.model.secretValues).toEqual(["sk-ant-999999", "team-4242"]);
    expect(resolveModel("local/llama", piModels, {})).toMatchObject({ ok: true, model: { secretValues: [] } });
  });

  it("explains a provider without credentials", () => {
    expect(reasonOf("nokey/m")).toMatch(/provider "nokey" sets no apiKey/);
  });

  it("refuses shell-command keys and non-http base URLs", () => {
    expect(reasonOf("shell/m")).toMatch(/shell command/);
    expect(reasonOf("badurl/m")).toMatch(/invalid baseUrl/);
  });
});

describe("resolveConfigValue", () => {
  const s = { A: "1", B_2: "two" };
  it.each([
    ["$A", "1"],
    ["${B_2}", "two"],
    ["x-$A-${B_2}", "x-1-two"],
    ["literal", "literal"],
    ["cost $$5", "cost $5"],
    ["$", "$"],
    ["${not valid}", "${not valid}"],
  ])("%j -> %j", (value, want) => expect(resolveConfigValue(value, s, "v")).toMatchObject({ ok: true, value: want }));

  it("names every missing secret", () => {
    expect(resolveConfigValue("$X-$Y-$A", s, "the key")).toEqual({ ok: false, reason: "the key needs the secret X, Y, which the environment does not have" });
  });
});
