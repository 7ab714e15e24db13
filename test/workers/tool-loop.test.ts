// The bot tool loop against the scripted model server, for both provider APIs, inside workerd.
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { ModelApi } from "../../src/dispatch/models";
import { retryAfterMs } from "../../src/dispatch/model-call";
import { DEFAULT_MAX_TOOL_CALLS_PER_ROUND, runToolLoop, type LoopEvent, type ToolSpec } from "../../src/dispatch/tool-loop";
import { received, SCRIPTED_KEY, scriptedModel, scriptModel } from "./model-script";

function echoTool(calls: Record<string, unknown>[] = []): ToolSpec {
  return {
    name: "echo",
    description: "Echo the given text back",
    parameters: { type: "object", properties: { text: { type: "string" } }, required: ["text"], additionalProperties: false },
    async execute(args) {
      calls.push(args);
      return { output: `echo: ${String(args.text)}` };
    },
  };
}

const fast = { retryBaseDelayMs: 5 };

describe.each<ModelApi>(["openai-completions", "anthropic-messages"])("runToolLoop over %s", (api) => {
  it("an answer the model's output limit cut off says so: it is not posted as if it were whole", async () => {
    const s = await scriptModel([{ text: "The three steps are: first, open the", finishReason: "length" }]);
    const events: LoopEvent[] = [];
    const r = await runToolLoop({ model: scriptedModel(api, s), systemPrompt: "", messages: [{ role: "user", text: "explain" }], tools: [], onEvent: async (e) => void events.push(e) });
    expect(r.ok).toBe(true);
    const text = r.ok ? r.finalText : "";
    expect(text.startsWith("The three steps are: first, open the")).toBe(true);
    expect(text).toMatch(/\[cut: the model reached its output limit\]$/);
    expect(events[0]).toMatchObject({ kind: "assistant", text, stopReason: "length" });
  });

  it("an output limit reached before any answer (a reasoning model thinking it away) fails saying so, not as an empty answer", async () => {
    const s = await scriptModel([{ text: "", finishReason: "length" }]);
    const r = await runToolLoop({ model: scriptedModel(api, s, { maxTokens: 1024 }), systemPrompt: "", messages: [{ role: "user", text: "explain" }], tools: [], onEvent: async () => {} });
    expect(r).toEqual({ ok: false, reason: "the model reached its output limit (maxTokens 1024) before it wrote an answer; give the model a higher maxTokens in piModels", rounds: 1 });
  });

  it("returns the model's text when it calls no tool, having sent the prompt, history, tools and key", async () => {
    const s = await scriptModel([{ text: "Hello Alice." }]);
    const events: LoopEvent[] = [];
    const r = await runToolLoop({
      model: scriptedModel(api, s),
      systemPrompt: "You are coder, a helpful bot.",
      messages: [
        { role: "user", text: "hi there", authorId: "alice" },
        { role: "assistant", text: "Earlier answer." },
        { role: "user", text: "say hello", authorId: "alice" },
      ],
      tools: [echoTool()],
      onEvent: async (e) => void events.push(e),
    });
    expect(r).toEqual({ ok: true, finalText: "Hello Alice.", rounds: 1 });
    expect(events).toEqual([{ kind: "assistant", text: "Hello Alice.", toolCalls: [], stopReason: "stop" }]);
    const reqs = await s.requests();
    expect(reqs).toHaveLength(1);
    const got = received(reqs[0]);
    expect(got.system).toContain("You are coder, a helpful bot.");
    expect(got.tools).toEqual(["echo"]);
    expect(got.turns).toEqual([
      { role: "user", text: "[alice] hi there" },
      { role: "assistant", text: "Earlier answer." },
      { role: "user", text: "[alice] say hello" },
    ]);
    expect(got.apiKeyHeader).toContain(SCRIPTED_KEY);
    expect(reqs[0].body.stream).toBe(true);
  });

  it("runs a tool, persists the round before the next call, and feeds the result back", async () => {
    const s = await scriptModel([
      { text: "Let me echo.", toolCalls: [{ id: "c1", name: "echo", arguments: { text: "abc" } }] },
      { text: "Echoed abc." },
    ]);
    const calls: Record<string, unknown>[] = [];
    const events: LoopEvent[] = [];
    const r = await runToolLoop({
      model: scriptedModel(api, s),
      systemPrompt: "sys",
      messages: [{ role: "user", text: "echo abc" }],
      tools: [echoTool(calls)],
      onEvent: async (e) => void events.push(e),
    });
    expect(r).toEqual({ ok: true, finalText: "Echoed abc.", rounds: 2 });
    expect(calls).toEqual([{ text: "abc" }]);
    expect(events).toEqual([
      { kind: "assistant", text: "Let me echo.", toolCalls: [{ id: "c1", name: "echo", args: { text: "abc" } }], stopReason: "toolUse" },
      { kind: "tool_result", toolCallId: "c1", name: "echo", output: "echo: abc", isError: false },
      { kind: "assistant", text: "Echoed abc.", toolCalls: [], stopReason: "stop" },
    ]);
    const second = received((await s.requests())[1]);
    expect(second.turns).toEqual([
      { role: "user", text: "echo abc" },
      { role: "assistant", text: "Let me echo." },
      { role: "assistant", toolCalls: [{ id: "c1", name: "echo", args: { text: "abc" } }] },
      { role: "tool", toolResult: { id: "c1", text: "echo: abc", isError: false } },
    ]);
  });

  it("awaits onEvent before the next model call: a failed persist stops the turn", async () => {
    const s = await scriptModel([{ toolCalls: [{ id: "p", name: "echo", arguments: { text: "x" } }] }, { text: "must not be asked" }]);
    const calls: Record<string, unknown>[] = [];
    const run = runToolLoop({
      model: scriptedModel(api, s),
      systemPrompt: "sys",
      messages: [{ role: "user", text: "go" }],
      tools: [echoTool(calls)],
      onEvent: async (e) => {
        if (e.kind === "tool_result") throw new Error("storage unavailable");
      },
    });
    await expect(run).rejects.toThrow("storage unavailable");
    expect(calls).toHaveLength(1);
    expect(await s.requests()).toHaveLength(1);
  });

  it("runs several tools across several rounds, in order, with the whole history each time", async () => {
    const s = await scriptModel([
      { toolCalls: [{ id: "a", name: "echo", arguments: { text: "one" } }, { id: "b", name: "echo", arguments: { text: "two" } }] },
      { toolCalls: [{ id: "c", name: "echo", arguments: { text: "three" } }] },
      { text: "one two three" },
    ]);
    const calls: Record<string, unknown>[] = [];
    const events: LoopEvent[] = [];
    const r = await runToolLoop({
      model: scriptedModel(api, s),
      systemPrompt: "sys",
      messages: [{ role: "user", text: "count" }],
      tools: [echoTool(calls)],
      onEvent: async (e) => void events.push(e),
    });
    expect(r).toEqual({ ok: true, finalText: "one two three", rounds: 3 });
    expect(calls.map((c) => c.text)).toEqual(["one", "two", "three"]);
    expect(events.map((e) => (e.kind === "assistant" ? `A:${e.toolCalls.map((c) => c.id).join(",")}` : `R:${e.toolCallId}`))).toEqual([
      "A:a,b", "R:a", "R:b", "A:c", "R:c", "A:",
    ]);
    const third = received((await s.requests())[2]);
    expect(third.turns.filter((t) => t.toolResult).map((t) => [t.toolResult!.id, t.toolResult!.text])).toEqual([
      ["a", "echo: one"], ["b", "echo: two"], ["c", "echo: three"],
    ]);
  });

  it("answers malformed tool calls (unknown tool, non-JSON args, schema failure) as error results the model sees", async () => {
    const s = await scriptModel([
      {
        toolCalls: [
          { id: "u", name: "rm_rf", arguments: { path: "/" } },
          { id: "j", name: "echo", arguments: '{"text": "unterminated' },
          { id: "v", name: "echo", arguments: { nope: 1 } },
        ],
      },
      { text: "Sorry, fixed." },
    ]);
    const calls: Record<string, unknown>[] = [];
    const events: LoopEvent[] = [];
    const r = await runToolLoop({
      model: scriptedModel(api, s),
      systemPrompt: "sys",
      messages: [{ role: "user", text: "go" }],
      tools: [echoTool(calls)],
      onEvent: async (e) => void events.push(e),
    });
    expect(r).toEqual({ ok: true, finalText: "Sorry, fixed.", rounds: 2 });
    expect(calls).toEqual([]);
    const results = events.filter((e) => e.kind === "tool_result") as Extract<LoopEvent, { kind: "tool_result" }>[];
    expect(results.map((e) => [e.toolCallId, e.isError])).toEqual([["u", true], ["j", true], ["v", true]]);
    expect(results[0].output).toMatch(/Unknown tool "rm_rf".*echo/);
    expect(results[1].output).toMatch(/not valid JSON/);
    expect(results[2].output).toMatch(/Invalid arguments for tool "echo"/);
    const sent = received((await s.requests())[1]).turns.filter((t) => t.toolResult).map((t) => t.toolResult!);
    expect(sent.map((t) => t.id)).toEqual(["u", "j", "v"]);
    expect(sent[0].text).toMatch(/Unknown tool "rm_rf"/);
    expect(sent[1].text).toMatch(/not valid JSON/);
    if (api === "anthropic-messages") expect(sent.every((t) => t.isError)).toBe(true);
  });

  it("ends the turn when the model sends nothing but malformed calls three rounds in a row, not after a round with a good one", async () => {
    const bad = { toolCalls: [{ id: "u", name: "rm_rf", arguments: { path: "/" } }] };
    const mixed = { toolCalls: [{ id: "m1", name: "rm_rf", arguments: {} }, { id: "m2", name: "echo", arguments: { text: "ok" } }] };
    const s = await scriptModel([bad, bad, mixed, bad, bad, bad, { text: "never asked" }]);
    const calls: Record<string, unknown>[] = [];
    const r = await runToolLoop({
      model: scriptedModel(api, s),
      systemPrompt: "sys",
      messages: [{ role: "user", text: "go" }],
      tools: [echoTool(calls)],
      onEvent: async () => {},
    });
    expect(r.ok).toBe(false);
    expect(r).toMatchObject({ rounds: 6 });
    expect(r.ok ? "" : r.reason).toMatch(/^malformed tool calls 3 rounds in a row: Unknown tool "rm_rf"/);
    expect(calls).toEqual([{ text: "ok" }]);
    expect(await s.requests()).toHaveLength(6);
  });

  it("answers a tool that throws as an error result and goes on", async () => {
    const s = await scriptModel([{ toolCalls: [{ id: "t", name: "boom", arguments: {} }] }, { text: "It failed." }]);
    const events: LoopEvent[] = [];
    const r = await runToolLoop({
      model: scriptedModel(api, s),
      systemPrompt: "sys",
      messages: [{ role: "user", text: "go" }],
      tools: [{ name: "boom", description: "fails", parameters: { type: "object", properties: {} }, execute: async () => { throw new Error("disk on fire"); } }],
      onEvent: async (e) => void events.push(e),
    });
    expect(r).toEqual({ ok: true, finalText: "It failed.", rounds: 2 });
    expect(events[1]).toEqual({ kind: "tool_result", toolCallId: "t", name: "boom", output: 'Tool "boom" failed: disk on fire', isError: true });
  });

  it("retries an HTTP 500 and succeeds", async () => {
    const s = await scriptModel([{ error: 500 }, { text: "recovered" }]);
    const events: LoopEvent[] = [];
    const r = await runToolLoop({ model: scriptedModel(api, s), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async (e) => void events.push(e), ...fast });
    expect(r).toEqual({ ok: true, finalText: "recovered", rounds: 1 });
    expect(events).toHaveLength(1);
    expect(await s.requests()).toHaveLength(2);
  });

  it("retries a 429 (honouring retry-after-ms) and succeeds", async () => {
    const s = await scriptModel([{ error: 429, headers: { "retry-after-ms": "20" } }, { text: "after the limit" }]);
    const r = await runToolLoop({ model: scriptedModel(api, s), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async () => {}, ...fast });
    expect(r).toEqual({ ok: true, finalText: "after the limit", rounds: 1 });
    expect(await s.requests()).toHaveLength(2);
  });

  it("reads a provider's Retry-After in seconds or as an HTTP date", () => {
    const now = Date.parse("2026-11-27T06:00:00Z");
    const wait = (h: Record<string, string>) => retryAfterMs(new Headers(h), now);
    expect(wait({ "retry-after": "7" })).toBe(7_000);
    expect(wait({ "retry-after": "Fri, 27 Nov 2026 06:00:30 GMT" })).toBe(30_000);
    expect(wait({ "retry-after": "Fri, 27 Nov 2026 05:59:00 GMT" })).toBe(0);
    expect(wait({ "retry-after-ms": "250", "retry-after": "7" })).toBe(250);
    expect(wait({ "retry-after": "soon" })).toBeUndefined();
  });

  it("ends ok:false after bounded retries when the API keeps failing, without leaking the key", async () => {
    const s = await scriptModel([], { error: 500, message: `upstream rejected key ${SCRIPTED_KEY}` });
    const events: LoopEvent[] = [];
    const r = await runToolLoop({ model: scriptedModel(api, s), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async (e) => void events.push(e), retries: 2, ...fast });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.rounds).toBe(0);
    expect(r.reason).toMatch(/HTTP 500/);
    expect(r.reason).toMatch(/after 3 attempts/);
    expect(r.reason).not.toContain(SCRIPTED_KEY);
    expect(r.reason).toContain("[redacted]");
    expect(events).toEqual([]);
    expect(await s.requests()).toHaveLength(3);
  });

  // workerd logs "Network connection lost" as an uncaught rejection for a dropped fetch even when it is caught
  it("retries a dropped connection and an answer cut mid-stream, and succeeds", async () => {
    const s = await scriptModel([{ drop: true }, { text: "a long answer that breaks", dropAfterChunks: 3 }, { text: "whole answer" }]);
    const events: LoopEvent[] = [];
    const r = await runToolLoop({ model: scriptedModel(api, s), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async (e) => void events.push(e), ...fast });
    expect(r).toEqual({ ok: true, finalText: "whole answer", rounds: 1 });
    // the broken attempts left no trace: one assistant event, from the whole answer
    expect(events).toEqual([{ kind: "assistant", text: "whole answer", toolCalls: [], stopReason: "stop" }]);
    expect(await s.requests()).toHaveLength(3);
  });

  it("retries an answer whose stream ends cleanly before its finish reason, and posts only the whole answer", async () => {
    // Cut after the text began (openai: role + one piece; anthropic: start, ping, block start, one piece).
    const s = await scriptModel([{ text: "the first half of a long answer", endAfterChunks: api === "anthropic-messages" ? 4 : 2 }, { text: "whole answer" }]);
    const events: LoopEvent[] = [];
    const r = await runToolLoop({ model: scriptedModel(api, s), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async (e) => void events.push(e), ...fast });
    expect(r).toEqual({ ok: true, finalText: "whole answer", rounds: 1 });
    expect(events).toEqual([{ kind: "assistant", text: "whole answer", toolCalls: [], stopReason: "stop" }]);
    expect(await s.requests()).toHaveLength(2);
  });

  it("ends ok:false, saying the answer was cut short, when every stream ends before its finish reason", async () => {
    const s = await scriptModel([], { text: "never finished", endAfterChunks: 1 });
    const events: LoopEvent[] = [];
    const r = await runToolLoop({ model: scriptedModel(api, s), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async (e) => void events.push(e), retries: 2, ...fast });
    expect(r).toMatchObject({ ok: false, rounds: 0 });
    expect(!r.ok && r.reason).toBe("the model API's answer ended before it was finished (no finish reason) (after 3 attempts)");
    expect(events).toEqual([]);
    expect(await s.requests()).toHaveLength(3);
  });

  it("ends ok:false when the connection keeps dropping", async () => {
    const s = await scriptModel([], { drop: true });
    const r = await runToolLoop({ model: scriptedModel(api, s), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async () => {}, retries: 1, ...fast });
    expect(r).toMatchObject({ ok: false, rounds: 0 });
    expect(!r.ok && r.reason).toMatch(/could not reach the model API.*after 2 attempts/);
    expect(await s.requests()).toHaveLength(2);
  });

  it("a model API it cannot reach is named without the credentials its baseUrl carries (user info, query)", async () => {
    const s = await scriptModel([]);
    // Nothing listens on port 1: the call cannot connect.
    const r = await runToolLoop({ model: scriptedModel(api, s, { baseUrl: "http://tb-user:sk-userinfo-secret@127.0.0.1:1/v1?api-key=sk-query-secret" }), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async () => {}, retries: 0, ...fast });
    const reason = !r.ok ? r.reason : "";
    expect(reason).toContain("could not reach the model API at http://127.0.0.1:1/v1:");
    expect(reason).not.toMatch(/sk-userinfo-secret|sk-query-secret|tb-user/);
  });

  it("an answer that is a page or a whole JSON body, not the event stream asked for, fails at once saying so", async () => {
    for (const [raw, contentType] of [["<html><body>Welcome to our site</body></html>", "text/html; charset=utf-8"], ['{"id":"x","choices":[]}', "application/json"]]) {
      const s = await scriptModel([{ raw, contentType }, { text: "not asked" }]);
      const r = await runToolLoop({ model: scriptedModel(api, s), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async () => {}, ...fast });
      expect(r).toEqual({ ok: false, reason: `the model API answered HTTP 200 with ${contentType}, not an event stream (is the provider's baseUrl its API's?)`, rounds: 0 });
      expect(await s.requests()).toHaveLength(1);
    }
  });

  it("a gateway's HTML error page is told by its title, and retried as its 5xx", async () => {
    const page = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n";
    const s = await scriptModel([], { raw: page, status: 502, contentType: "text/html" });
    const r = await runToolLoop({ model: scriptedModel(api, s), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async () => {}, retries: 1, ...fast });
    expect(r).toEqual({ ok: false, reason: "the model API answered HTTP 502: 502 Bad Gateway (an HTML page) (after 2 attempts)", rounds: 0 });
  });

  it("does not retry a client error (400)", async () => {
    const s = await scriptModel([{ error: 400, message: "bad request body" }, { text: "never" }]);
    const r = await runToolLoop({ model: scriptedModel(api, s), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async () => {}, ...fast });
    expect(r).toMatchObject({ ok: false, rounds: 0 });
    // The provider's own words, not its JSON body with the status again in front.
    expect(!r.ok && r.reason).toBe("the model API answered HTTP 400: bad request body");
    expect(await s.requests()).toHaveLength(1);
  });

  it("ends ok:false with a timeout reason when the model hangs past the per-call timeout", async () => {
    const s = await scriptModel([{ text: "first", toolCalls: [{ id: "x", name: "echo", arguments: { text: "y" } }] }, { hang: true }]);
    const events: LoopEvent[] = [];
    const r = await runToolLoop({
      model: scriptedModel(api, s),
      systemPrompt: "sys",
      messages: [{ role: "user", text: "hi" }],
      tools: [echoTool()],
      onEvent: async (e) => void events.push(e),
      requestTimeoutMs: 300,
      ...fast,
    });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.reason).toMatch(/timeout/);
    expect(r.reason).toContain("300 ms");
    expect(r.rounds).toBe(1);
    // the first round was persisted before the hang
    expect(events.map((e) => e.kind)).toEqual(["assistant", "tool_result"]);
    expect(await s.requests()).toHaveLength(2);
  });

  it("gives up a call that receives nothing for the model's idleTimeoutMs (no headers, or nothing after them) and retries it", async () => {
    const s = await scriptModel([{ hang: true }, { text: "never finished", stallAfterChunks: 2 }, { text: "answered at last" }]);
    const events: LoopEvent[] = [];
    const started = Date.now();
    const r = await runToolLoop({ model: scriptedModel(api, s, { idleTimeoutMs: 300 }), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async (e) => void events.push(e), ...fast });
    expect(r).toEqual({ ok: true, finalText: "answered at last", rounds: 1 });
    expect(events).toEqual([{ kind: "assistant", text: "answered at last", toolCalls: [], stopReason: "stop" }]);
    expect(await s.requests()).toHaveLength(3);
    // Not the per-call timeout (30 minutes): two idle periods and the backoff.
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("ends ok:false with an idle-timeout reason when the model keeps going silent after its headers", async () => {
    const s = await scriptModel([], { text: "never finished", stallAfterChunks: 0 });
    const r = await runToolLoop({ model: scriptedModel(api, s, { idleTimeoutMs: 200 }), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async () => {}, retries: 1, ...fast });
    expect(r).toEqual({ ok: false, reason: "the model API sent nothing for 200 ms (idle timeout) (after 2 attempts)", rounds: 0 });
    expect(await s.requests()).toHaveLength(2);
  });

  it("a model slower than its idle timeout in all but its gaps is not cut off", async () => {
    const s = await scriptModel([{ text: "slow but steady answer", chunkDelayMs: 150 }]);
    const r = await runToolLoop({ model: scriptedModel(api, s, { idleTimeoutMs: 1_000 }), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async () => {}, ...fast });
    expect(r).toEqual({ ok: true, finalText: "slow but steady answer", rounds: 1 });
    expect(await s.requests()).toHaveLength(1);
  });

  it("stops after maxRounds when the model never stops calling tools", async () => {
    const s = await scriptModel([], { toolCalls: [{ name: "echo", arguments: { text: "again" } }] });
    const calls: Record<string, unknown>[] = [];
    const r = await runToolLoop({ model: scriptedModel(api, s), systemPrompt: "sys", messages: [{ role: "user", text: "loop" }], tools: [echoTool(calls)], onEvent: async () => {}, maxRounds: 3 });
    expect(r).toEqual({ ok: false, reason: "too many tool rounds", rounds: 3 });
    expect(calls).toHaveLength(3);
    expect(await s.requests()).toHaveLength(3);
  });

  it("runs a round of as many calls as the cap allows, and ends the turn on a round of one more, running none of it", async () => {
    const round = (n: number, tag: string) => ({ toolCalls: Array.from({ length: n }, (_, i) => ({ id: `${tag}${i}`, name: "echo", arguments: { text: `${tag}${i}` } })) });
    const s = await scriptModel([round(DEFAULT_MAX_TOOL_CALLS_PER_ROUND, "a"), round(DEFAULT_MAX_TOOL_CALLS_PER_ROUND + 1, "b"), { text: "not asked" }]);
    const calls: Record<string, unknown>[] = [];
    const events: LoopEvent[] = [];
    const r = await runToolLoop({ model: scriptedModel(api, s), systemPrompt: "sys", messages: [{ role: "user", text: "many" }], tools: [echoTool(calls)], onEvent: async (e) => void events.push(e), ...fast });
    expect(r).toEqual({ ok: false, reason: `the model asked for ${DEFAULT_MAX_TOOL_CALLS_PER_ROUND + 1} tool calls in one round; a round may ask for at most ${DEFAULT_MAX_TOOL_CALLS_PER_ROUND}, and none of them were run`, rounds: 1 });
    expect(calls).toHaveLength(DEFAULT_MAX_TOOL_CALLS_PER_ROUND);
    expect(calls.every((c) => String(c.text).startsWith("a"))).toBe(true);
    // The refused round is not recorded: only the first round and its results were.
    expect(events.filter((e) => e.kind === "assistant")).toHaveLength(1);
    expect(await s.requests()).toHaveLength(2);
  });

  it("sends a prior tool round from the thread's history in the provider's shape (empty turns left out)", async () => {
    const s = await scriptModel([{ text: "continuing" }]);
    const r = await runToolLoop({
      model: scriptedModel(api, s),
      systemPrompt: "sys",
      messages: [
        { role: "user", text: "list files", authorId: "bob" },
        { role: "assistant", text: "Looking.", toolCalls: [{ id: "h1", name: "echo", args: { text: "ls" } }] },
        { role: "tool", toolCallId: "h1", name: "echo", output: "a.txt b.txt" },
        { role: "assistant", text: "" },
        { role: "user", text: "and now?", authorId: "bob" },
      ],
      tools: [echoTool()],
      onEvent: async () => {},
    });
    expect(r.ok).toBe(true);
    expect(received((await s.requests())[0]).turns).toEqual([
      { role: "user", text: "[bob] list files" },
      { role: "assistant", text: "Looking." },
      { role: "assistant", toolCalls: [{ id: "h1", name: "echo", args: { text: "ls" } }] },
      { role: "tool", toolResult: { id: "h1", text: "a.txt b.txt", isError: false } },
      { role: "user", text: "[bob] and now?" },
    ]);
  });

  it("stops when the caller aborts", async () => {
    const s = await scriptModel([{ hang: true }]);
    const ctl = new AbortController();
    const p = runToolLoop({ model: scriptedModel(api, s), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async () => {}, signal: ctl.signal });
    while ((await s.requests()).length === 0) await scheduler.wait(10);
    ctl.abort();
    expect(await p).toEqual({ ok: false, reason: "the turn was cancelled", rounds: 0 });
  });

  it("runs inside a Durable Object", async () => {
    const s = await scriptModel([{ toolCalls: [{ id: "d", name: "echo", arguments: { text: "in a DO" } }] }, { text: "done in DO" }]);
    const model = scriptedModel(api, s);
    const threads = (env as unknown as { THREADS: DurableObjectNamespace }).THREADS;
    const stub = threads.get(threads.idFromName(`llm-loop-${api}-${crypto.randomUUID()}`));
    const r = await runInDurableObject(stub, async () => {
      const events: LoopEvent[] = [];
      const result = await runToolLoop({ model, systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [echoTool()], onEvent: async (e) => void events.push(e) });
      return { result, events };
    });
    expect(r.result).toEqual({ ok: true, finalText: "done in DO", rounds: 2 });
    expect(r.events[1]).toMatchObject({ kind: "tool_result", output: "echo: in a DO" });
  });
});

describe("runToolLoop over anthropic-messages: the stream's error events", () => {
  it("an error event in the stream says the provider's words; an overloaded provider is retried, a refused request is not", async () => {
    const event = (type: string, message: string) => `event: error\ndata: ${JSON.stringify({ type: "error", error: { type, message } })}\n\n`;
    const s = await scriptModel([{ raw: event("overloaded_error", "Overloaded") }, { text: "after the load" }]);
    const r = await runToolLoop({ model: scriptedModel("anthropic-messages", s), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async () => {}, ...fast });
    expect(r).toEqual({ ok: true, finalText: "after the load", rounds: 1 });
    const refused = await scriptModel([{ raw: event("invalid_request_error", `prompt too long for key ${SCRIPTED_KEY}`) }, { text: "not asked" }]);
    const r2 = await runToolLoop({ model: scriptedModel("anthropic-messages", refused), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async () => {}, ...fast });
    expect(r2).toEqual({ ok: false, reason: "the model API reported an error mid-answer (invalid_request_error): prompt too long for key [redacted]", rounds: 0 });
    expect(await refused.requests()).toHaveLength(1);
  });
});

describe("runToolLoop over openai-completions: the stream's error events", () => {
  it("an OpenAI-style error event in the stream says the provider's words; a server error is retried, another is not", async () => {
    const event = (error: Record<string, unknown>) => `data: ${JSON.stringify({ error })}\n\n`;
    const s = await scriptModel([{ raw: event({ message: "upstream timed out", code: 502 }) }, { text: "after the glitch" }]);
    const r = await runToolLoop({ model: scriptedModel("openai-completions", s), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async () => {}, ...fast });
    expect(r).toEqual({ ok: true, finalText: "after the glitch", rounds: 1 });
    const refused = await scriptModel([{ raw: event({ message: `context too long for ${SCRIPTED_KEY}`, type: "invalid_request_error" }) }, { text: "not asked" }]);
    const r2 = await runToolLoop({ model: scriptedModel("openai-completions", refused), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async () => {}, ...fast });
    expect(r2).toEqual({ ok: false, reason: "the model API reported an error mid-answer (invalid_request_error): context too long for [redacted]", rounds: 0 });
    expect(await refused.requests()).toHaveLength(1);
    // A provider echoing the key anywhere in its error is scrubbed there too.
    const echoing = await scriptModel([{ raw: event({ message: "no", type: `key_${SCRIPTED_KEY}_refused` }) }]);
    const r3 = await runToolLoop({ model: scriptedModel("openai-completions", echoing), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async () => {}, ...fast });
    expect(r3).toEqual({ ok: false, reason: "the model API reported an error mid-answer (key_[redacted]_refused): no", rounds: 0 });
  });

  it("finish_reason \"error\" (OpenRouter's mark of an upstream provider failing mid-answer) is retried; when retries run out the failure says what the provider did", async () => {
    const chunk = (delta: Record<string, unknown>, finish: string | null, extra: Record<string, unknown> = {}) =>
      `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta, finish_reason: finish }], ...extra })}\n\n`;
    const broke = chunk({ role: "assistant", content: "Half an ans" }, null) + chunk({ content: "" }, "error") + "data: [DONE]\n\n";
    const s = await scriptModel([{ raw: broke, contentType: "text/event-stream" }, { text: "the whole answer" }]);
    const r = await runToolLoop({ model: scriptedModel("openai-completions", s), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async () => {}, ...fast });
    expect(r).toEqual({ ok: true, finalText: "the whole answer", rounds: 1 });
    expect(await s.requests()).toHaveLength(2);
    // An error object whose code names no known transient kind is still the upstream's failure.
    const named = chunk({ content: "" }, "error", { error: { code: "provider_unavailable", message: "Upstream provider went away" } }) + "data: [DONE]\n\n";
    const out = await scriptModel([{ raw: broke, contentType: "text/event-stream" }, { raw: named, contentType: "text/event-stream" }]);
    const r2 = await runToolLoop({ model: scriptedModel("openai-completions", out), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async () => {}, ...fast, retries: 1 });
    expect(r2).toEqual({ ok: false, reason: "the model API reported an error mid-answer (provider_unavailable): Upstream provider went away (after 2 attempts)", rounds: 0 });
    const bare = await scriptModel([{ raw: broke, contentType: "text/event-stream" }, { raw: broke, contentType: "text/event-stream" }]);
    const r3 = await runToolLoop({ model: scriptedModel("openai-completions", bare), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async () => {}, ...fast, retries: 1 });
    expect(r3).toEqual({ ok: false, reason: "the model API ended its answer with finish_reason \"error\" (its upstream provider failed mid-answer) (after 2 attempts)", rounds: 0 });
  });

  it("a server configured as sending no finish reason (compat.supportsFinishReason false) is taken at its stream's end", async () => {
    // role + three pieces of text, then the end: no finish reason, no usage, no [DONE]
    const s = await scriptModel([{ text: "all of it", endAfterChunks: 4 }]);
    const r = await runToolLoop({ model: scriptedModel("openai-completions", s, { compat: { supportsFinishReason: false } }), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async () => {}, ...fast });
    expect(r).toEqual({ ok: true, finalText: "all of it", rounds: 1 });
    expect(await s.requests()).toHaveLength(1);
  });

  it("a stream event that is not JSON fails the call saying so", async () => {
    const s = await scriptModel([{ raw: `data: {"id":"c","choices":[]}\n\ndata: <html>oops ${SCRIPTED_KEY}\n\n` }, { text: "not asked" }]);
    const r = await runToolLoop({ model: scriptedModel("openai-completions", s), systemPrompt: "sys", messages: [{ role: "user", text: "hi" }], tools: [], onEvent: async () => {}, ...fast });
    expect(r).toEqual({ ok: false, reason: "the model API sent a stream event that is not JSON: <html>oops [redacted]", rounds: 0 });
    expect(await s.requests()).toHaveLength(1);
  });
});
