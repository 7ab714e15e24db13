// The harness modules are pure: they load and run inside workerd (no node: imports).
import { describe, expect, it } from "vitest";
import { decideOutcome, piMessageToEntries, rebuildPiSession, runnerLaunch, getCodingAgent } from "../../src/sandbox/harness/index";

describe("harness modules in workerd", () => {
  it("decideOutcome, rebuild and launch run without node built-ins", () => {
    const es = [
      { payload: { type: "chat", text: "task" } },
      ...piMessageToEntries({ role: "user", content: "task", timestamp: 1 }),
      ...piMessageToEntries({ role: "assistant", content: [{ type: "text", text: "done" }], stopReason: "stop", timestamp: 2 }),
    ];
    expect(decideOutcome(es, 0).status).toBe("completed");
    const r = rebuildPiSession(es, { cwd: "/home/daytona" });
    expect(r.messageCount).toBe(2);
    expect(r.sessionId).toMatch(/^[0-9a-f-]{36}$/);
    expect(runnerLaunch({ threadId: "t", streamUrl: "u", streamToken: "k", runId: "r", prompt: "p" }).env.THREADBOX_RUN_ID).toBe("r");
    expect(getCodingAgent("codex").createParser().push('{"type":"turn.failed","error":{"message":"x"}}')[0].payload.type).toBe("pi.error");
  });
});
