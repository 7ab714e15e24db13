/**
 * Harness adapters on recorded streams: pi `--mode json` (recorded from the real pi 0.87.1
 * against the scripted model), Claude Code `stream-json` and Codex `exec --json`, each through
 * its parser and decideOutcome.
 */
import { codexMcpToml, mcpServerSchema } from "../../src/workspace/box-config";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  buildClaudeCodeCommand,
  buildCodexCommand,
  codexSandboxArgs,
  buildPiCommand,
  claudeCodeAgent,
  codexAgent,
  CODING_AGENTS,
  decideOutcome,
  finishedSignalId,
  getCodingAgent,
  mirrorEntryId,
  mirrorNextIndex,
  parseMirrorEntryId,
  piAgent,
  runnerLaunch,
  type CodingAgent,
  type ThreadEntry,
} from "../../src/sandbox/harness/index";

const FIX = join(__dirname, "..", "fixtures");

function parseFixture(agent: CodingAgent, name: string): ThreadEntry[] {
  const parser = agent.createParser();
  const out: ThreadEntry[] = [];
  for (const line of readFileSync(join(FIX, name), "utf8").split("\n")) out.push(...parser.push(line));
  out.push(...parser.end());
  return out;
}
const types = (es: ThreadEntry[]) => es.map((e) => e.payload.type);

describe("pi --mode json", () => {
  it("tool call run: user, assistant(toolUse), tool_call, tool_result, assistant(stop) -> completed", () => {
    const es = parseFixture(piAgent, "pi-json-toolcall.jsonl");
    expect(types(es)).toEqual(["pi.user", "pi.assistant", "pi.tool_call", "pi.tool_result", "pi.assistant"]);
    expect(es[0].payload.text).toBe("write the file");
    expect(es[1].payload).toMatchObject({ stopReason: "toolUse", text: "", model: "scripted-model" });
    expect((es[1].payload.raw as any).role).toBe("assistant");
    expect(es[2].payload).toMatchObject({ toolCallId: "call_1_0", name: "bash", args: { command: "echo hello > out.txt && echo written" } });
    expect(es[3].payload).toMatchObject({ toolCallId: "call_1_0", name: "bash", output: "written\n", isError: false });
    expect(es[4].payload).toMatchObject({ text: "All done.", stopReason: "stop" });
    const o = piAgent.decideOutcome(es, 0, { signalId: "t:finished:r" });
    expect(o).toMatchObject({ status: "completed", alreadyFinished: false });
    expect(o.entries).toEqual([{ id: "t:finished:r", payload: { type: "signal.thread.status_changed", status: "completed", reason: "stop" } }]);
  });

  it("error stop (pi exits 0): pi_failed with the provider's message", () => {
    const es = parseFixture(piAgent, "pi-json-error.jsonl");
    expect(types(es)).toEqual(["pi.user", "pi.assistant"]);
    expect(es[1].payload.stopReason).toBe("error");
    const o = piAgent.decideOutcome(es, 0);
    expect(o.status).toBe("pi_failed");
    // What the provider said, not its JSON body (pi's message is "500: {json}").
    expect(o.reason).toBe("the model API answered HTTP 500: upstream exploded");
  });

  it("length stop: pi_failed (the answer was cut off)", () => {
    const es = parseFixture(piAgent, "pi-json-length.jsonl");
    expect(es[1].payload).toMatchObject({ stopReason: "length", text: "This answer was cut" });
    const o = piAgent.decideOutcome(es, 0);
    expect(o.status).toBe("pi_failed");
    expect(o.reason).toMatch(/^length/);
  });

  it("command line: json mode, extensions, model, tools, session, prompt after --", () => {
    const c = buildPiCommand({
      prompt: "-starts with a dash",
      model: "local/m",
      systemPrompt: "be brief",
      allowedTools: ["read", "bash"],
      sessionFile: "/home/u/s.jsonl",
      extensions: ["/home/u/.threadbox/mirror.mjs"],
    });
    expect(c.argv).toEqual([
      "pi", "--mode", "json", "--extension", "/home/u/.threadbox/mirror.mjs", "--model", "local/m",
      "--system-prompt", "be brief", "--tools", "read,bash", "--session", "/home/u/s.jsonl", "--", "-starts with a dash",
    ]);
    expect(buildPiCommand({ prompt: "x", allowedTools: [] }).argv).toContain("--no-tools");
  });
});

describe("Claude Code stream-json", () => {
  it("success: text, tool calls (incl. an error result), final text -> completed", () => {
    const es = parseFixture(claudeCodeAgent, "claude-code-stream-json-success.jsonl");
    expect(types(es)).toEqual([
      "pi.assistant", "pi.tool_call", "pi.tool_result", "pi.tool_call", "pi.tool_result", "pi.assistant",
    ]);
    expect(es[0].payload).toMatchObject({ text: "I'll create the file with a bash command.", model: "claude-sonnet-4-5-20250929" });
    expect(es[1].payload).toMatchObject({ toolCallId: "toolu_01AbCdEfGhIjKlMnOpQrStUv", name: "Bash", args: { command: "echo hello > out.txt && cat out.txt" } });
    expect(es[2].payload).toMatchObject({ name: "Bash", output: "hello", isError: false });
    expect(es[4].payload).toMatchObject({ name: "Read", isError: true });
    expect(es[5].payload).toMatchObject({ stopReason: "stop" });
    expect((es[5].payload.raw as any).type).toBe("assistant");
    expect(claudeCodeAgent.decideOutcome(es, 0).status).toBe("completed");
  });

  it("error_max_turns -> pi.error -> pi_failed, even with exit 0", () => {
    const es = parseFixture(claudeCodeAgent, "claude-code-stream-json-max-turns.jsonl");
    expect(types(es)).toEqual(["pi.tool_call", "pi.tool_result", "pi.error"]);
    expect(es[1].payload.output).toBe("1 failing\n  expected 2 to equal 3");
    const o = claudeCodeAgent.decideOutcome(es, 0);
    expect(o.status).toBe("pi_failed");
    expect(o.reason).toContain("error_max_turns");
  });

  it("API error reported as a result with is_error -> pi_failed", () => {
    const es = parseFixture(claudeCodeAgent, "claude-code-stream-json-api-error.jsonl");
    expect(types(es)).toEqual(["pi.assistant", "pi.error"]);
    const o = claudeCodeAgent.decideOutcome(es, 1);
    expect(o.status).toBe("pi_failed");
    expect(o.reason).toContain("529");
  });

  it("max_tokens -> stopReason length -> pi_failed", () => {
    const es = parseFixture(claudeCodeAgent, "claude-code-stream-json-max-tokens.jsonl");
    expect(es[0].payload.stopReason).toBe("length");
    expect(claudeCodeAgent.decideOutcome(es, 0).status).toBe("pi_failed");
  });

  it("command line", () => {
    const c = buildClaudeCodeCommand({ prompt: "do it", model: "claude-sonnet-4-5", allowedTools: ["Bash", "Read"], appendSystemPrompt: "x" });
    expect(c.argv.slice(0, 5)).toEqual(["claude", "-p", "--output-format", "stream-json", "--verbose"]);
    expect(c.argv).toEqual(expect.arrayContaining(["--model", "claude-sonnet-4-5", "--allowedTools", "Bash,Read", "--append-system-prompt", "x"]));
    expect(c.argv.slice(-2)).toEqual(["--", "do it"]);
  });

  it("allowedTools limits the built-in tools that exist (--tools), not only which are spared a prompt", () => {
    const tools = (allowedTools?: string[]) => {
      const argv = buildClaudeCodeCommand({ prompt: "x", allowedTools }).argv;
      const i = argv.indexOf("--tools");
      return i < 0 ? null : argv[i + 1];
    };
    // Under bypassPermissions every prompt is spared: --allowedTools alone would leave Bash usable.
    expect(tools(["Read", "Grep"])).toBe("Read,Grep");
    expect(tools(["Bash(git *)", "Read", "mcp__github__create_issue"])).toBe("Bash,Read");
    expect(tools([])).toBe("");
    expect(tools(undefined)).toBeNull();
  });
});

describe("Codex exec --json", () => {
  it("success: commands, file change, messages -> completed; intermediate message is toolUse", () => {
    const es = parseFixture(codexAgent, "codex-exec-json-success.jsonl");
    expect(types(es)).toEqual([
      "pi.tool_call", "pi.tool_result", "pi.assistant", "pi.tool_call", "pi.tool_result",
      "pi.tool_call", "pi.tool_result", "pi.assistant",
    ]);
    expect(es[0].payload).toMatchObject({ toolCallId: "item_1", name: "bash", args: { command: "bash -lc 'echo hello > out.txt && cat out.txt'" } });
    expect(es[1].payload).toMatchObject({ output: "hello\n", isError: false });
    expect(es[2].payload).toMatchObject({ text: "Wrote out.txt; now adding a README.", stopReason: "toolUse" });
    expect(es[3].payload).toMatchObject({ name: "file_change", args: { changes: [{ path: "/home/daytona/repo/README.md", kind: "add" }] } });
    expect(es[4].payload).toMatchObject({ output: "add /home/daytona/repo/README.md", isError: false });
    expect(es[6].payload).toMatchObject({ isError: true });
    expect(es[7].payload).toMatchObject({ stopReason: "stop" });
    expect((es[7].payload.raw as any).item.type).toBe("agent_message");
    expect(codexAgent.decideOutcome(es, 0).status).toBe("completed");
  });

  it("turn.failed -> pi.error -> pi_failed; a reconnect notice is not fatal", () => {
    const es = parseFixture(codexAgent, "codex-exec-json-failed.jsonl");
    expect(types(es)).toEqual(["pi.warning", "pi.assistant", "pi.error"]);
    const o = codexAgent.decideOutcome(es, 1);
    expect(o.status).toBe("pi_failed");
    expect(o.reason).toContain("context window");
  });

  it("stream cut mid-command (process killed) -> pi_failed by signal", () => {
    const es = parseFixture(codexAgent, "codex-exec-json-truncated.jsonl");
    expect(types(es)).toEqual(["pi.tool_call"]);
    const o = codexAgent.decideOutcome(es, null, { signal: "SIGKILL" });
    expect(o.status).toBe("pi_failed");
    expect(o.reason).toContain("SIGKILL");
  });

  it("command line: system prompt folded into the prompt, resume", () => {
    const c = buildCodexCommand({ prompt: "fix it", systemPrompt: "be careful", sessionFile: "0199a213", model: "gpt-5-codex" });
    expect(c.argv.slice(0, 4)).toEqual(["codex", "exec", "resume", "0199a213"]);
    expect(c.argv).toEqual(expect.arrayContaining(["--json", "--model", "gpt-5-codex"]));
    expect(c.argv[c.argv.length - 1]).toBe("<instructions>\nbe careful\n</instructions>\n\nfix it");
  });
  it("permission modes map onto codex's sandbox flags; allowed tools can only be asked for in the prompt", () => {
    expect(codexSandboxArgs("plan")).toEqual(["--sandbox", "read-only"]);
    expect(codexSandboxArgs("default")).toEqual(["--sandbox", "workspace-write"]);
    expect(codexSandboxArgs("acceptEdits")).toEqual(["--sandbox", "workspace-write"]);
    expect(codexSandboxArgs("bypassPermissions")).toEqual(["--dangerously-bypass-approvals-and-sandbox"]);
    expect(codexSandboxArgs(undefined)).toEqual(["--dangerously-bypass-approvals-and-sandbox"]);
    const c = buildCodexCommand({ prompt: "look", permissionMode: "plan", allowedTools: ["read", "grep"] });
    expect(c.argv.slice(0, 6)).toEqual(["codex", "exec", "--json", "--skip-git-repo-check", "--sandbox", "read-only"]);
    expect(c.argv.at(-1)).toBe("Only use these tools: read, grep.\n\nlook");
  });

  it("MCP servers become codex's config.toml tables, strings quoted", () => {
    const toml = codexMcpToml({
      docs: { command: "docs-mcp", args: ["--stdio", 'a "quoted" arg'], env: { API_KEY: "k" } },
      remote: { type: "http", url: "https://mcp.example/x" },
    });
    expect(toml).toBe([
      "[mcp_servers.docs]",
      'command = "docs-mcp"',
      'args = ["--stdio", "a \\"quoted\\" arg"]',
      'env = { API_KEY = "k" }',
      "",
      "[mcp_servers.remote]",
      'url = "https://mcp.example/x"',
      "",
    ].join("\n"));
  });

  it("an MCP server fetched from a registry at start must name an exact version", () => {
    const ok = (command: string, args: string[]) => mcpServerSchema.safeParse({ command, args }).success;
    expect(ok("npx", ["-y", "@modelcontextprotocol/server-filesystem@2025.8.21", "/work"])).toBe(true);
    expect(ok("uvx", ["mcp-server-git==0.6.2"])).toBe(true);
    expect(ok("pipx", ["run", "mcp-server-fetch==2025.4.7"])).toBe(true);
    expect(ok("docs-mcp", ["--stdio"])).toBe(true);
    for (const [command, args] of [["npx", ["-y", "@modelcontextprotocol/server-filesystem"]], ["npx", ["some-mcp@latest"]], ["npx", ["some-mcp@^1.2.0"]], ["uvx", ["mcp-server-git"]], ["npx", []], ["/usr/bin/npx", ["x"]]] as const) {
      expect(ok(command, [...args]), `${command} ${args.join(" ")}`).toBe(false);
    }
    // The packages named in options are fetched too; with one, the positional is only the command to run.
    expect(ok("npx", ["-y", "--package=@scope/mcp@1.0.0", "mcp-server"])).toBe(true);
    expect(ok("uvx", ["--from", "mcp-server-git==0.6.2", "mcp-server-git"])).toBe(true);
    for (const args of [
      ["-y", "--package=evil", "pkg@1.0.0"],
      ["-p", "pinned@1.0.0", "-p", "evil", "bin"],
      ["--package", "evil", "bin"],
    ]) expect(ok("npx", args), `npx ${args.join(" ")}`).toBe(false);
    for (const args of [["--with", "requests==2.0", "--with", "evil", "mcp-server-git==0.6.2"], ["--with=evil", "mcp-server-git==0.6.2"], ["--from=evil", "mcp"]]) {
      expect(ok("uvx", args), `uvx ${args.join(" ")}`).toBe(false);
    }
    expect(ok("pipx", ["run", "--spec=evil", "mcp"])).toBe(false);
  });
});

describe("decideOutcome rules", () => {
  const a = (stopReason: string, extra: object = {}): ThreadEntry => ({ payload: { type: "pi.assistant", text: "x", stopReason, ...extra } });
  const status = (s: string, reason = "r"): ThreadEntry => ({ payload: { type: "signal.thread.status_changed", status: s, reason } });
  const hb: ThreadEntry = { payload: { type: "signal.heartbeat" } };

  it("a finished-signal already in the run -> nothing to post", () => {
    const o = decideOutcome([a("error", { errorMessage: "boom" }), hb, status("pi_failed", "boom")], 0);
    expect(o).toMatchObject({ status: "pi_failed", alreadyFinished: true, entries: [] });
  });
  it("only the current run counts: a previous run's signal before the running claim is ignored", () => {
    const o = decideOutcome([a("stop"), status("completed"), status("running"), a("stop"), hb], 0);
    expect(o).toMatchObject({ status: "completed", alreadyFinished: false });
    expect(o.entries).toHaveLength(1);
  });
  it("a stopped run's runner reporting late, after the next run's claim, neither ends the next run nor reads its work", () => {
    const claim = (runId: string): ThreadEntry => ({ payload: { type: "signal.thread.status_changed", status: "running", reason: "launching", runId } });
    const ended = (s: string, runId: string): ThreadEntry => ({ payload: { type: "signal.thread.status_changed", status: s, reason: s, runId } });
    // r1 stopped by request; r2 resumed at once; r1's runner's own "completed" lands during r2.
    const thread = [claim("r1"), a("toolUse"), ended("stopped", "r1"), claim("r2"), a("toolUse"), ended("completed", "r1"), a("stop"), hb];
    const next = decideOutcome(thread, 0, { runId: "r2" });
    expect(next).toMatchObject({ status: "completed", reason: "stop", alreadyFinished: false });
    expect(next.entries[0].payload).toMatchObject({ status: "completed", runId: "r2" });
    // The late runner sees its own run, already ended by the stop: it posts nothing.
    expect(decideOutcome(thread, 143, { runId: "r1", stopRequested: true })).toMatchObject({ status: "stopped", alreadyFinished: true, entries: [] });
    // A finished-signal naming no run still ends the run it is in.
    expect(decideOutcome([claim("r3"), a("toolUse"), status("pi_failed", "by hand")], 0, { runId: "r3" })).toMatchObject({ status: "pi_failed", alreadyFinished: true });
  });
  it("a clean stop with a non-zero exit is pi_failed; a SIGKILL is pi_failed", () => {
    expect(decideOutcome([a("stop")], 2).reason).toBe("harness exited with code 2");
    expect(decideOutcome([a("toolUse")], null, { signal: "SIGKILL" }).reason).toContain("SIGKILL");
  });
  it("stop requested -> stopped; but a run that already finished cleanly is completed", () => {
    expect(decideOutcome([a("aborted")], 143, { stopRequested: true }).status).toBe("stopped");
    expect(decideOutcome([a("stop")], 0, { stopRequested: true }).status).toBe("completed");
  });
  it("interrupted and left idle -> stopped, saying how long it waited and which setting says so", () => {
    const o = decideOutcome([a("aborted")], 0, { idleAfterInterruptMs: 1_800_000 });
    expect([o.status, o.reason]).toEqual(["stopped", "no message within 30 min of the interrupt (THREADBOX_IDLE_AFTER_INTERRUPT_MS)"]);
    expect(decideOutcome([a("aborted")], 0, { idleAfterInterruptMs: 1_500 }).reason).toContain("within 1500 ms");
    // Interrupted during a tool call: pi's view of the model call the abort cut short is an error stop.
    expect(decideOutcome([a("toolUse"), a("error", { errorMessage: "This operation was aborted" })], 0, { idleAfterInterruptMs: 1_500 }).status).toBe("stopped");
  });
  it("runaway guard -> pi_failed; no assistant -> pi_failed; aborted / toolUse at exit 0 -> pi_failed", () => {
    expect(decideOutcome([a("toolUse")], 143, { runaway: true }).reason).toContain("runaway");
    expect(decideOutcome([{ payload: { type: "pi.user", text: "hi" } }], 0).reason).toContain("without an assistant");
    expect(decideOutcome([a("aborted")], 0).status).toBe("pi_failed");
    expect(decideOutcome([a("toolUse")], 0).status).toBe("pi_failed");
  });
  it("carries boxId and authorId on the signal", () => {
    const o = decideOutcome([a("stop")], 0, { boxId: "b1", authorId: "bot", signalId: "id1" });
    expect(o.entries[0]).toEqual({ id: "id1", authorId: "bot", payload: { type: "signal.thread.status_changed", status: "completed", reason: "stop", boxId: "b1" } });
  });
});

describe("ids and launch", () => {
  it("mirror ids round-trip and give the next index per session", () => {
    const id = mirrorEntryId("th1", "0199-ab", 7, 2);
    expect(id).toBe("th1:m:0199-ab:7:2");
    expect(parseMirrorEntryId(id, "th1")).toEqual({ sessionId: "0199-ab", index: 7, k: 2 });
    expect(parseMirrorEntryId(mirrorEntryId("th1", "s", 3), "th1")).toEqual({ sessionId: "s", index: 3, k: 0 });
    expect(parseMirrorEntryId("other:m:s:1", "th1")).toBeUndefined();
    const es: ThreadEntry[] = [0, 1, 2].map((i) => ({ id: mirrorEntryId("th1", "s", i), payload: { type: "pi.user", text: "" } }));
    es.push({ id: mirrorEntryId("th1", "s", 2, 1), payload: { type: "pi.tool_call" } });
    es.push({ id: mirrorEntryId("th1", "other", 9), payload: { type: "pi.user" } });
    expect(mirrorNextIndex(es, "th1", "s")).toBe(3);
    expect(finishedSignalId("th1", "r1")).toBe("th1:finished:r1");
  });

  it("registry and install specs", () => {
    expect(Object.keys(CODING_AGENTS).sort()).toEqual(["claude-code", "codex", "pi"]);
    expect(getCodingAgent("pi").install.command).toContain("@earendil-works/pi-coding-agent@0.87.1");
    expect(getCodingAgent("pi").install.command).toContain('--prefix "$HOME/.threadbox/npm"');
    expect(() => getCodingAgent("nope")).toThrow();
  });

  it("runnerLaunch: uploads, HOME-relative paths, env, no secrets on the command line", () => {
    const plan = runnerLaunch({
      threadId: "th1",
      streamUrl: "https://x.supabase.co/functions/v1/stream-proxy",
      streamToken: "secret.jwt.token",
      runId: "r1",
      prompt: "it's a task; rm -rf / $(nope)",
      model: "anthropic/claude-sonnet-4-5",
      cwd: "repo",
      env: { ANTHROPIC_API_KEY: "sk-secret" },
    });
    expect(plan.uploads.map((u) => u.path)).toEqual([".threadbox/runner.mjs", ".threadbox/runs/r1/prompt.txt", plan.tokenPath, ".threadbox/mirror.mjs"]);
    expect(plan.uploads[0].source).toBe("dist/runner/runner.mjs");
    expect(plan.uploads[1].content).toBe("it's a task; rm -rf / $(nope)");
    // The stream token is a file in the run's directory, never in the environment or on the command line.
    expect(plan.tokenPath).toMatch(/^\.threadbox\/runs\/r1\/stream-token-[0-9a-f]{16}$/);
    expect(plan.uploads[2].content).toBe("secret.jwt.token");
    expect(plan.runDir).toBe(".threadbox/runs/r1");
    expect(JSON.stringify(plan.env)).not.toContain("secret.jwt.token");
    expect(runnerLaunch({ threadId: "th1", streamUrl: "u", streamToken: "k", runId: "r1", prompt: "p" }).tokenPath).not.toBe(plan.tokenPath);
    expect(plan.command).toContain('node "$HOME/.threadbox/runner.mjs" --harness pi --prompt-file $HOME/.threadbox/runs/r1/prompt.txt --mirror $HOME/.threadbox/mirror.mjs');
    expect(plan.command).not.toContain("secret");
    expect(plan.command).not.toContain("rm -rf");
    expect(plan.env).toMatchObject({
      THREADBOX_THREAD_ID: "th1",
      THREADBOX_STREAM_TOKEN_FILE: plan.tokenPath,
      THREADBOX_RUN_ID: "r1",
      ANTHROPIC_API_KEY: "sk-secret",
    });
  });
});
