/** Session rebuild from thread entries (pure). The real-pi load is in runner-e2e.test.ts. */
import { describe, expect, it } from "vitest";
import { piMessageToEntries, rebuildPiSession, type ThreadEntry } from "../../src/sandbox/harness/index";

const lines = (jsonl: string) => jsonl.trim().split("\n").map((l) => JSON.parse(l));

function expectChain(parsed: any[]) {
  expect(parsed[0]).toMatchObject({ type: "session", version: 3 });
  let parent: string | null = null;
  for (const e of parsed.slice(1)) {
    expect(e.parentId).toBe(parent);
    expect(e.id).toMatch(/^[0-9a-f]{8}$/);
    parent = e.id;
  }
}

describe("rebuildPiSession", () => {
  it("mirror entries (with raw) -> header, messages in order, unbroken parent chain", () => {
    const assistant = {
      role: "assistant",
      content: [{ type: "text", text: "checking" }, { type: "toolCall", id: "c1", name: "bash", arguments: { command: "ls" } }],
      api: "openai-completions",
      provider: "local",
      model: "m",
      usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, totalTokens: 2, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } },
      stopReason: "toolUse",
      timestamp: 1000,
    };
    const entries: ThreadEntry[] = [
      { id: "p", ts: 900, payload: { type: "chat", text: "list files" } },
      ...piMessageToEntries({ role: "user", content: [{ type: "text", text: "list files" }], timestamp: 950 }),
      { payload: { type: "signal.heartbeat" } },
      ...piMessageToEntries(assistant),
      ...piMessageToEntries({ role: "toolResult", toolCallId: "c1", toolName: "bash", content: [{ type: "text", text: "a\nb\n" }], isError: false, timestamp: 1100 }),
      ...piMessageToEntries({ ...assistant, content: [{ type: "text", text: "two files" }], stopReason: "stop", timestamp: 1200 }),
      { payload: { type: "signal.thread.status_changed", status: "completed" } },
      { payload: { type: "chat", text: "and now?" } },
    ];
    const r = rebuildPiSession(entries, { cwd: "/home/daytona/repo", sessionId: "s-1", now: 5000 });
    const parsed = lines(r.jsonl);
    expectChain(parsed);
    expect(parsed[0]).toEqual({ type: "session", version: 3, id: "s-1", timestamp: new Date(5000).toISOString(), cwd: "/home/daytona/repo" });
    const msgs = parsed.slice(1).map((e) => e.message);
    expect(msgs.map((m) => m.role)).toEqual(["user", "assistant", "toolResult", "assistant"]);
    expect(msgs[0].content).toEqual([{ type: "text", text: "list files" }]); // chat + pi.user = one turn
    expect(msgs[1]).toEqual(assistant); // raw restored
    expect(msgs[2]).toMatchObject({ toolCallId: "c1", toolName: "bash", content: [{ type: "text", text: "a\nb\n" }], isError: false });
    expect(r.messageCount).toBe(4);
    expect(r.pendingPrompt).toBe("and now?");
    const withTrailing = rebuildPiSession(entries, { cwd: "/x", trailingChat: "include" });
    expect(withTrailing.messageCount).toBe(5);
    expect(withTrailing.pendingPrompt).toBeUndefined();
  });

  it("entries without raw (other harnesses, bots): text + following tool calls; missing results synthesized, orphans dropped", () => {
    const entries: ThreadEntry[] = [
      { payload: { type: "chat", text: "fix the bug" } },
      { payload: { type: "pi.assistant", text: "looking", stopReason: "toolUse", model: "claude" } },
      { payload: { type: "pi.tool_call", toolCallId: "t1", name: "Bash", args: { command: "npm test" } } },
      { payload: { type: "pi.tool_call", toolCallId: "t2", name: "Read", args: { file_path: "a.ts" } } },
      { payload: { type: "pi.tool_result", toolCallId: "t1", output: "1 failing", isError: true } },
      { payload: { type: "pi.tool_result", toolCallId: "zzz", output: "orphan", isError: false } },
      { payload: { type: "pi.tool_call", toolCallId: "t3", name: "bash", args: { command: "ls" } } }, // codex-style: no assistant before
      { payload: { type: "pi.tool_result", toolCallId: "t3", output: "x", isError: false } },
      { payload: { type: "pi.assistant", text: "", stopReason: "error", errorMessage: "boom" } },
      { payload: { type: "pi.error", message: "boom" } },
      { payload: { type: "pi.assistant", text: "fixed", stopReason: "stop" } },
    ];
    const r = rebuildPiSession(entries, { cwd: "/w", model: { provider: "anthropic", modelId: "claude-sonnet-4-5" } });
    const parsed = lines(r.jsonl);
    expectChain(parsed);
    expect(parsed[1]).toMatchObject({ type: "model_change", provider: "anthropic", modelId: "claude-sonnet-4-5" });
    const msgs = parsed.slice(2).map((e) => e.message);
    expect(msgs.map((m) => m.role)).toEqual(["user", "assistant", "toolResult", "toolResult", "assistant", "toolResult", "assistant"]);
    expect(msgs[1].content).toEqual([
      { type: "text", text: "looking" },
      { type: "toolCall", id: "t1", name: "Bash", arguments: { command: "npm test" } },
      { type: "toolCall", id: "t2", name: "Read", arguments: { file_path: "a.ts" } },
    ]);
    expect(msgs[2]).toMatchObject({ toolCallId: "t1", toolName: "Bash", isError: true });
    expect(msgs[3]).toMatchObject({ toolCallId: "t2", toolName: "Read", isError: true, content: [{ text: "[tool result not recorded on the thread]" }] });
    expect(msgs[4]).toMatchObject({ role: "assistant", stopReason: "toolUse", content: [{ type: "toolCall", id: "t3" }] });
    expect(msgs[6]).toMatchObject({ content: [{ type: "text", text: "fixed" }], stopReason: "stop" });
    expect(JSON.stringify(msgs)).not.toContain("orphan");
  });

  it("an empty thread gives a header-only session", () => {
    const r = rebuildPiSession([], { cwd: "/w", sessionId: "x" });
    expect(lines(r.jsonl)).toHaveLength(1);
    expect(r.messageCount).toBe(0);
  });
});
