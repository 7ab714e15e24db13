// The ambient gate: a one-shot YES/NO completion against the scripted model server.
import { describe, expect, it } from "vitest";
import { askGate, gateTimeoutMs, parseGateAnswer } from "../../src/dispatch/gate";
import type { ModelApi } from "../../src/dispatch/models";
import { received, SCRIPTED_KEY, scriptedModel, scriptModel } from "./model-script";

describe("parseGateAnswer", () => {
  it.each([
    ["YES", true],
    ["yes", true],
    ["Yes.", true],
    ["**YES**", true],
    ["Yes, the user asked the bot directly.", true],
    ["NO", false],
    ["no.", false],
    [" No - it is small talk between people.", false],
    ["I think yes", true],
    ["Answer: NO", false],
  ])("%j -> %s", (text, want) => expect(parseGateAnswer(text)).toBe(want));

  it.each(["", "maybe", "It depends.", "Nope", "Yesterday", "I would say yes, or no"])("%j is unclear", (text) => {
    expect(parseGateAnswer(text)).toBeUndefined();
  });
});

describe.each<ModelApi>(["openai-completions", "anthropic-messages"])("askGate over %s", (api) => {
  const recent = [
    { role: "user" as const, text: "anyone know how to rebase?", authorId: "alice" },
    { role: "assistant" as const, text: "I can help with git." },
    { role: "tool" as const, toolCallId: "t", name: "run_command", output: "SECRET-TOOL-OUTPUT" },
    { role: "user" as const, text: "@reviewer what about this diff", authorId: "bob" },
  ];

  it("says reply when the model answers YES, after asking a YES/NO question with the conversation", async () => {
    const s = await scriptModel([{ text: "YES" }]);
    const r = await askGate({ model: scriptedModel(api, s), botName: "helper", botInstructions: "You help with git questions.", recent });
    expect(r).toEqual({ reply: true, reason: "gate said yes" });
    const reqs = await s.requests();
    expect(reqs).toHaveLength(1);
    const got = received(reqs[0]);
    expect(got.system).toContain("You help with git questions.");
    expect(got.system).toMatch(/YES or NO/);
    expect(got.tools).toEqual([]);
    expect(got.turns).toHaveLength(1);
    expect(got.turns[0].text).toContain("alice: anyone know how to rebase?");
    expect(got.turns[0].text).toContain("helper: I can help with git.");
    expect(got.turns[0].text).toContain("bob: @reviewer what about this diff");
    expect(got.turns[0].text).not.toContain("SECRET-TOOL-OUTPUT");
    expect(got.apiKeyHeader).toContain(SCRIPTED_KEY);
  });

  it("says no reply when the model answers NO", async () => {
    const s = await scriptModel([{ text: "No." }]);
    expect(await askGate({ model: scriptedModel(api, s), botName: "helper", botInstructions: "", recent })).toEqual({ reply: false, reason: "gate said no" });
  });

  it("says no reply, with the reason, when the answer is unclear", async () => {
    const s = await scriptModel([{ text: "Perhaps later" }]);
    const r = await askGate({ model: scriptedModel(api, s), botName: "helper", botInstructions: "", recent });
    expect(r.reply).toBe(false);
    expect(r.reason).toMatch(/unclear.*Perhaps later/);
  });

  it("an unclear answer is quoted cut short with no piece of a secret the cut went through", async () => {
    // The key's first 10 characters fall within the 80 quoted.
    const s = await scriptModel([{ text: `Perhaps ${"x".repeat(62)}${SCRIPTED_KEY} later` }]);
    const r = await askGate({ model: scriptedModel(api, s), botName: "helper", botInstructions: "", recent });
    expect(r.reason).toMatch(/unclear.*Perhaps x+\[redacted\]/);
    expect(r.reason).not.toContain(SCRIPTED_KEY.slice(0, 6));
  });

  it("says no reply when the model keeps failing, without leaking the key", async () => {
    const s = await scriptModel([], { error: 503, message: `bad key ${SCRIPTED_KEY}` });
    const r = await askGate({ model: scriptedModel(api, s), botName: "helper", botInstructions: "", recent });
    expect(r.reply).toBe(false);
    expect(r.reason).toMatch(/^gate failed: .*HTTP 503/);
    expect(r.reason).not.toContain(SCRIPTED_KEY);
    expect((await s.requests()).length).toBeGreaterThanOrEqual(1);
  });

  it("says no reply when the model hangs past the timeout", async () => {
    const s = await scriptModel([{ hang: true }]);
    const r = await askGate({ model: scriptedModel(api, s), botName: "helper", botInstructions: "", recent, requestTimeoutMs: 200 });
    expect(r.reply).toBe(false);
    expect(r.reason).toMatch(/gate failed: .*timeout/);
  });
});

describe("the gate's time limits, from the environment's piModels", () => {
  const recent = [{ role: "user" as const, text: "@helper are you there?", authorId: "alice" }];
  const steadyYes = "YES, the latest message asks for helper.";

  it("a configured requestTimeoutMs replaces the gate's default: a slow model that streams steadily for longer is heard", async () => {
    // The default is 30 s (the last test); askGate is given 2 s here, so as not to outwait 30 s.
    // ~3.8 s of steady streaming, a chunk every 200 ms: well within its idle timeout, past the default.
    const defaultTimeoutMs = 2_000;
    const slowYes = { text: steadyYes, chunks: 16, chunkDelayMs: 200 };
    const s = await scriptModel([slowYes]);
    const model = scriptedModel("openai-completions", s, { requestTimeoutMs: 60_000, idleTimeoutMs: 5_000 });
    const started = Date.now();
    const r = await askGate({ model, botName: "helper", botInstructions: "", recent, defaultTimeoutMs });
    expect(r).toEqual({ reply: true, reason: "gate said yes" });
    expect(Date.now() - started).toBeGreaterThan(defaultTimeoutMs);
    // Without the setting, the same stream is cut at that default: it is what the setting replaced.
    const unset = await scriptModel([slowYes]);
    const cut = await askGate({ model: scriptedModel("openai-completions", unset), botName: "helper", botInstructions: "", recent, defaultTimeoutMs });
    expect(cut).toEqual({ reply: false, reason: `gate failed: the model did not finish its answer within ${defaultTimeoutMs} ms (timeout)`, failed: true });
  }, 30_000);

  it("a configured requestTimeoutMs shorter than 30 s bounds the gate", async () => {
    const s = await scriptModel([{ text: steadyYes, chunks: 20, chunkDelayMs: 100 }]);
    const r = await askGate({ model: scriptedModel("openai-completions", s, { requestTimeoutMs: 500 }), botName: "helper", botInstructions: "", recent });
    expect(r).toEqual({ reply: false, reason: "gate failed: the model did not finish its answer within 500 ms (timeout)", failed: true });
  });

  it("a model that hangs fails the gate by its configured idle timeout, long before its configured requestTimeoutMs", async () => {
    const s = await scriptModel([], { hang: true });
    const started = Date.now();
    const r = await askGate({ model: scriptedModel("openai-completions", s, { requestTimeoutMs: 60_000, idleTimeoutMs: 300 }), botName: "helper", botInstructions: "", recent });
    expect(r.reply).toBe(false);
    expect(r.reason).toMatch(/^gate failed: .*idle timeout/);
    expect(Date.now() - started).toBeLessThan(10_000);
  }, 20_000);

  it("takes the model's requestTimeoutMs when set, else its idleTimeoutMs plus 30 s when that is set, else 30 s", async () => {
    const s = await scriptModel([]);
    const limit = (entry: Record<string, unknown>) => gateTimeoutMs(scriptedModel("openai-completions", s, entry));
    expect(limit({})).toBe(30_000);
    expect(limit({ requestTimeoutMs: 120_000 })).toBe(120_000);
    expect(limit({ requestTimeoutMs: 5_000, idleTimeoutMs: 1_000 })).toBe(5_000);
    expect(limit({ idleTimeoutMs: 90_000 })).toBe(120_000);
    // askGate's defaultTimeoutMs (a test's short default) stands where 30 s would.
    expect(gateTimeoutMs(scriptedModel("openai-completions", s), 2_000)).toBe(2_000);
    expect(gateTimeoutMs(scriptedModel("openai-completions", s, { idleTimeoutMs: 90_000 }), 2_000)).toBe(92_000);
  });
});
