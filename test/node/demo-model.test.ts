// The development demo model: its pure rules, its HTTP face, and the real pi CLI driven by it to
// a finished run (tool call, tool result, closing answer) without any API key.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { startDemoModel } from "../../dev/demo-model/server.mjs";
import { decideReply, HELP_TEXT, parseRequest } from "../../dev/demo-model/rules.mjs";
import { ROOT } from "../../scripts/lib/wrangler-dev.mjs";
import { askGate } from "../../src/dispatch/gate";
import { resolveModel } from "../../src/dispatch/models";
import { tempDirs } from "../support/temp-dirs";

const tempDir = tempDirs();

const PI = join(ROOT, "node_modules", "@earendil-works", "pi-coding-agent", "dist", "bundle", "cli.js");
const fn = (name: string, required: string[] = []) => ({
  type: "function",
  function: { name, parameters: { type: "object", properties: Object.fromEntries(required.map((r) => [r, { type: "string" }])), required } },
});

let model: Awaited<ReturnType<typeof startDemoModel>>;
beforeAll(async () => { model = await startDemoModel(); });
afterAll(async () => { await model?.close(); });

describe("demo model rules", () => {
  it("reads the fixed phrasings, with or without a leading @handle", () => {
    expect(parseRequest("write hello.txt containing hi there")).toEqual({ kind: "write", path: "hello.txt", content: "hi there" });
    expect(parseRequest("@demo run echo 1 && echo 2")).toEqual({ kind: "run", command: "echo 1 && echo 2" });
    expect(parseRequest("[dev-user] @demo delegate: write a.txt containing b")).toEqual({ kind: "delegate", task: "write a.txt containing b" });
    expect(parseRequest("list files")).toEqual({ kind: "list", path: "." });
    expect(parseRequest("delegate: write a.txt containing b")).toEqual({ kind: "delegate", task: "write a.txt containing b" });
    expect(parseRequest("what is the weather").kind).toBe("help");
  });

  it("uses the tools on offer: pi's write, else a bot's delegate_task with the task under the tool's own parameter", () => {
    const msg = [{ role: "user", content: "@demo write hello.txt containing hi" }];
    expect(decideReply({ messages: msg, tools: [fn("read"), fn("write")] })).toEqual({ toolCalls: [{ name: "write", arguments: { path: "hello.txt", content: "hi\n" } }] });
    expect(decideReply({ messages: msg, tools: [fn("delegate_task", ["instructions"])] }))
      .toEqual({ toolCalls: [{ name: "delegate_task", arguments: { instructions: "write hello.txt containing hi" } }] });
    expect(decideReply({ messages: [{ role: "user", content: "run ls" }], tools: [fn("run_command", ["command"])] }))
      .toEqual({ toolCalls: [{ name: "run_command", arguments: { command: "ls" } }] });
  });

  it("explains how to configure a real model when it cannot help, and summarises after a tool result", () => {
    expect(decideReply({ messages: [{ role: "user", content: "hello?" }] })).toEqual({ text: HELP_TEXT });
    expect(HELP_TEXT).toContain("OPENAI_API_KEY");
    const after = decideReply({
      messages: [
        { role: "user", content: "run echo hi" },
        { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "bash", arguments: "{}" } }] },
        { role: "tool", tool_call_id: "c1", content: "hi\n" },
      ],
    });
    expect(after).toEqual({ text: "Done. bash finished:\nhi" });
    // A delegation's result is said in words, not quoted as the tool's JSON.
    const delegated = decideReply({
      messages: [
        { role: "user", content: "delegate: write a.txt" },
        { role: "assistant", content: null, tool_calls: [{ id: "d1", type: "function", function: { name: "delegate_task", arguments: "{}" } }] },
        { role: "tool", tool_call_id: "d1", content: JSON.stringify({ childThreadId: "th_child", status: "running", note: "the result will be posted on this thread when the job ends" }) },
      ],
    });
    expect(delegated).toEqual({ text: "Done. I handed it to a coding agent in thread th_child: the result will be posted on this thread when the job ends" });
    expect(decideReply({ messages: [{ role: "user", content: "fail: on purpose" }] })).toEqual({ error: 500, message: "demo model failure: on purpose" });
  });
});

describe("demo model server", () => {
  const post = (body: unknown) => fetch(`${model.baseUrl}/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: typeof body === "string" ? body : JSON.stringify(body) });

  it("answers plain JSON completions and lists its model", async () => {
    const r = await post({ model: "demo", messages: [{ role: "user", content: "run pwd" }], tools: [fn("bash")] });
    expect(r.status).toBe(200);
    const j: any = await r.json();
    expect(j.choices[0].finish_reason).toBe("tool_calls");
    expect(j.choices[0].message.tool_calls[0].function).toEqual({ name: "bash", arguments: JSON.stringify({ command: "pwd" }) });
    const models: any = await (await fetch(`${model.baseUrl}/models`)).json();
    expect(models.data.map((m: any) => m.id)).toEqual(["demo"]);
  });

  it("answers an ambient bot's gate YES for a phrasing it acts on and NO for other chat, through the real gate", async () => {
    const resolved = resolveModel("demo/demo", { providers: { demo: { baseUrl: model.baseUrl, api: "openai-completions", apiKey: "demo-no-key", models: [{ id: "demo" }] } } }, {});
    if (!resolved.ok) throw new Error(resolved.reason);
    const ask = (recent: { role: "user" | "assistant"; text: string; authorId?: string }[]) =>
      askGate({ model: resolved.model, botName: "helper", botInstructions: "You help.", recent, requestTimeoutMs: 5_000 });
    expect(await ask([{ role: "user", authorId: "dev-user", text: "write hello.txt containing hi" }])).toMatchObject({ reply: true });
    expect(await ask([
      { role: "user", authorId: "dev-user", text: "hello, anyone\nthere?" },
      { role: "assistant", text: "yes" },
      { role: "user", authorId: "dev-user", text: "@helper run echo 1\nand more" },
    ])).toMatchObject({ reply: true });
    expect(await ask([{ role: "user", authorId: "dev-user", text: "run ls" }, { role: "user", authorId: "ann", text: "what a nice day" }])).toMatchObject({ reply: false });
  });

  it("refuses bad requests with OpenAI-style errors, not a crash", async () => {
    const bad = await post("{not json");
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as any).error.message).toBe("body is not JSON");
    const noMessages = await post({ model: "demo" });
    expect(noMessages.status).toBe(400);
    expect((await fetch(`${model.baseUrl}/nope`)).status).toBe(404);
  });
});

/** Runs the real pi CLI against the demo model in a fresh directory; returns its JSON events. */
function runPi(prompt: string): Promise<{ cwd: string; events: any[]; code: number | null }> {
  const cwd = tempDir("demo-pi-cwd-");
  const agentDir = tempDir("demo-pi-agent-");
  writeFileSync(join(agentDir, "models.json"), JSON.stringify({
    providers: { demo: { baseUrl: model.baseUrl, api: "openai-completions", apiKey: "demo-no-key", models: [{ id: "demo" }] } },
  }));
  writeFileSync(join(agentDir, "settings.json"), JSON.stringify({ retry: { enabled: false } }));
  const child = spawn(process.execPath, [PI, "--mode", "json", "--model", "demo/demo", "--", prompt], {
    cwd,
    env: { ...process.env, PI_CODING_AGENT_DIR: agentDir, PI_OFFLINE: "1", PI_SKIP_VERSION_CHECK: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  return new Promise((resolve) => child.on("exit", (code) => resolve({
    cwd,
    code,
    events: out.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l)),
  })));
}

const assistantEnds = (events: any[]) => events.filter((e) => e.type === "message_end" && e.message?.role === "assistant").map((e) => e.message);

describe("real pi driven by the demo model", () => {
  it("write FILE containing TEXT: pi calls its write tool, the file exists, the run ends with a summary", async () => {
    const { cwd, events } = await runPi("write hello.txt containing hi");
    expect(readFileSync(join(cwd, "hello.txt"), "utf8")).toBe("hi\n");
    const ends = assistantEnds(events);
    expect(ends.map((m) => m.stopReason)).toEqual(["toolUse", "stop"]);
    expect(ends[1].content.map((c: any) => c.text).join("")).toMatch(/^Done\. write finished/);
  });

  it("run COMMAND: pi runs it in bash and the summary carries its output", async () => {
    const { events } = await runPi("run echo demo-$((6*7))");
    const ends = assistantEnds(events);
    expect(ends.at(-1).stopReason).toBe("stop");
    expect(ends.at(-1).content.map((c: any) => c.text).join("")).toContain("demo-42");
  });

  it("fail: REASON ends pi's run with an error stop", async () => {
    const { cwd, events } = await runPi("fail: on purpose");
    expect(existsSync(join(cwd, "hello.txt"))).toBe(false);
    const ends = assistantEnds(events);
    expect(ends.at(-1).stopReason).toBe("error");
    expect(ends.at(-1).errorMessage).toContain("demo model failure: on purpose");
  });
});
