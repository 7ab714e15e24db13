// The CLI's pure pieces: sign-in links, config location, environment bodies, rendering, chat replies.
import { describe, expect, it } from "vitest";
// @ts-expect-error plain JS module without declarations
import { configPath, parseSignInLink, resolveTarget } from "../../cli/lib/config.mjs";
import { NO_SANDBOX } from "../../src/dispatch/tools/no-sandbox";
// @ts-expect-error plain JS module without declarations
import { environmentBody } from "../../cli/commands/house.mjs";
// @ts-expect-error plain JS module without declarations
import { agentLine, describeToolCall, environmentLine, renderEntry, sandboxLine, threadLine, threadTree } from "../../cli/lib/render.mjs";
// @ts-expect-error plain JS module without declarations
import { palette } from "../../cli/lib/term.mjs";
// @ts-expect-error plain JS module without declarations
import { advance, answered, failureOf, initialProgress, onPosted } from "../../cli/commands/chat.mjs";
// @ts-expect-error plain JS module without declarations
import { endsLastRun, finishedRow, mayEndRun } from "../../cli/lib/follow.mjs";
// @ts-expect-error plain JS module without declarations
import { renderArtifacts } from "../../cli/commands/artifacts.mjs";
// @ts-expect-error a plain ES module without types
import { isTransient, missingField, safeToRepeat, timedOut } from "../../cli/lib/api.mjs";

const c = palette(false);

describe("config", () => {
  it("reads the sign-in link format npm run dev prints (token in the fragment) and plain URLs", () => {
    expect(parseSignInLink("http://127.0.0.1:8787/#token=abc.def.ghi")).toEqual({ url: "http://127.0.0.1:8787", token: "abc.def.ghi" });
    expect(parseSignInLink("https://tb.example.com/")).toEqual({ url: "https://tb.example.com", token: undefined });
    expect(() => parseSignInLink("not a url")).toThrow(/is not a valid server URL or sign-in link/);
    expect(() => parseSignInLink("localhost:8787")).toThrow(/is not a valid server URL or sign-in link/);
  });

  it("keeps the config under the user's config dir, and prefers the environment to the stored login", () => {
    expect(configPath({ XDG_CONFIG_HOME: "/x" }, "linux")).toBe("/x/threadbox/config.json");
    expect(configPath({ APPDATA: "C:/Users/u/AppData/Roaming" }, "win32")).toMatch(/AppData\/Roaming\/threadbox\/config\.json$/);
    expect(configPath({ THREADBOX_CONFIG: "/etc/tb.json" }, "linux")).toBe("/etc/tb.json");
    const stored = { url: "http://stored:1", token: "stored-token" };
    expect(resolveTarget({}, {}, stored)).toEqual({ url: "http://stored:1", token: "stored-token", tokenFrom: "login" });
    expect(resolveTarget({}, { THREADBOX_URL: "http://env:2/", THREADBOX_TOKEN: "env-token" }, stored)).toEqual({ url: "http://env:2", token: "env-token", tokenFrom: "THREADBOX_TOKEN" });
    expect(resolveTarget({ url: "http://flag:3" }, { THREADBOX_URL: "http://env:2" }, stored).url).toBe("http://flag:3");
    expect(() => resolveTarget({}, {}, {})).toThrow(/threadbox login/);
  });
});

describe("env add body", () => {
  it("takes secret values from the reader (environment or prompt), never from options", async () => {
    const asked: string[] = [];
    const body = await environmentBody("prod", { model: "acme/m-1", baseUrl: "https://api.acme/v1", api: "openai-completions", secret: ["ACME_KEY"], var: ["A=1=2"] },
      async (name: string) => { asked.push(name); return `value-of-${name}`; });
    expect(asked).toEqual(["ACME_KEY"]);
    expect(body).toEqual({
      name: "prod", model: "acme/m-1", env: { A: "1=2" }, secrets: { ACME_KEY: "value-of-ACME_KEY" },
      piModels: { providers: { acme: { baseUrl: "https://api.acme/v1", api: "openai-completions", apiKey: "$ACME_KEY", models: [{ id: "m-1" }] } } },
    });
    await expect(environmentBody("x", { var: ["novalue"] }, async () => "")).rejects.toThrow(/KEY=VALUE/);
    await expect(environmentBody("x", { baseUrl: "http://h" }, async () => "")).rejects.toThrow(/--model provider\/model-id/);
  });
});

describe("answers the commands read", () => {
  it("a JSON answer of another shape (another API at that URL) is named, not used", () => {
    expect(missingField("GET", "/api/threads?limit=5", { threads: [] })).toBeNull();
    expect(missingField("GET", "/api/threads?limit=5", {})).toBe("an array threads");
    expect(missingField("GET", "/api/threads/th_1", { id: "th_1", status: "idle" })).toBeNull();
    expect(missingField("GET", "/api/threads/th_1", [])).toBe("an object");
    expect(missingField("POST", "/api/threads", { id: 5 })).toBe("a string id");
    expect(missingField("POST", "/api/threads/th_1/entries", { entries: "x" })).toBe("an array entries");
    expect(missingField("GET", "/api/threads/th_1/entries?offset=now&limit=1", { entries: [], nextOffset: "0_0" })).toBeNull();
    expect(missingField("DELETE", "/api/agents/ag_1", null)).toBeNull(); // routes no command reads are not checked
  });
});

describe("requests asked again after no answer in time", () => {
  it("a GET, a POST with an Idempotency-Key or entries that each carry an id may be sent again; anything else may not", () => {
    const cases: [string, string, unknown, Record<string, string>, boolean][] = [
      ["GET", "/api/threads/th_1", undefined, {}, true],
      ["POST", "/api/threads", { title: "t" }, { "idempotency-key": "k" }, true],
      ["POST", "/api/threads/th_1/resume", { message: "m" }, { "Idempotency-Key": "k" }, true],
      ["POST", "/api/threads", { title: "t" }, {}, false],
      ["POST", "/api/threads/th_1/entries", { id: "e_1", payload: { type: "chat", text: "x" } }, {}, true],
      ["POST", "/api/threads/th_1/entries", [{ id: "e_1", payload: {} }, { id: "e_2", payload: {} }], {}, true],
      ["POST", "/api/threads/th_1/entries", { payload: { type: "chat", text: "x" } }, {}, false],
      ["POST", "/api/threads/th_1/entries", [{ id: "e_1", payload: {} }, { payload: {} }], {}, false],
      ["POST", "/api/threads/th_1/entries", [], {}, false],
      ["POST", "/api/threads/th_1/stop", {}, {}, false],
      ["POST", "/api/threads/th_1/interrupt", {}, {}, false],
      ["PATCH", "/api/agents/ag_1", { name: "n" }, { "idempotency-key": "k" }, false],
      ["DELETE", "/api/environments/env_1", undefined, {}, false],
    ];
    expect(cases.map(([m, p, b, h]) => safeToRepeat(m, p, b, h))).toEqual(cases.map((x) => x[4]));
    expect([isTransient(timedOut("http://x", "GET /api/threads", 1000, true)), isTransient(timedOut("http://x", "POST /api/threads/th_1/stop", 1000, false))])
      .toEqual([true, false]);
  });
});

describe("rendering", () => {
  it("a bot's tool that had no sandbox to run in (no error, nothing ran) is marked not run, not with a success tick", () => {
    expect(renderEntry({ ts: 0, payload: { type: "pi.tool_result", name: "run_command", output: NO_SANDBOX, isError: false } }, c))
      .toBe(`00:00:00 – run_command (not run)\n           │ ${NO_SANDBOX}`);
  });

  it("shows tool calls by their command or path, and results indented under them", () => {
    expect(describeToolCall("bash", { command: "ls -la" })).toBe("bash $ ls -la");
    expect(describeToolCall("write", { path: "a.txt", content: "hi\n" })).toBe("write a.txt (3 bytes)");
    const lines = renderEntry({ ts: 0, payload: { type: "pi.tool_result", name: "bash", output: "one\ntwo\n", isError: false } }, c);
    expect(lines).toBe("00:00:00 ✓ bash\n           │ one\n           │ two");
    expect(renderEntry({ ts: 0, payload: { type: "signal.thread.status_changed", status: "stopped", reason: "stopped by u" } }, c)).toBe("00:00:00 ● stopped (stopped by u)");
  });

  it("shows a run's prompt once: as its chat entry, not again as pi's pi.user entry (a tail passes the texts it showed)", () => {
    const chatTexts = new Set<string>();
    expect(renderEntry({ ts: 0, authorId: "alice", payload: { type: "chat", text: "write a.txt" } }, c, { chatTexts })).toBe("00:00:00 alice: write a.txt");
    expect(renderEntry({ ts: 0, payload: { type: "pi.user", text: "write a.txt" } }, c, { chatTexts })).toBeNull();
    expect(renderEntry({ ts: 0, payload: { type: "pi.user", text: "something else" } }, c, { chatTexts })).toBe("00:00:00 task  something else");
    expect(renderEntry({ ts: 0, payload: { type: "pi.user", text: "write a.txt" } }, c)).toBe("00:00:00 task  write a.txt");
  });

  it("shows a command's live output under it, and a run's artifacts as a summary, not as key=value fields", () => {
    expect(renderEntry({ ts: 0, payload: { type: "signal.exec.output", execId: "x", stream: "stdout", text: "one\ntwo\n" } }, c)).toBe("00:00:00   │ one\n           │ two");
    expect(renderEntry({ ts: 0, payload: { type: "signal.exec.output", execId: "x", stream: "stdout", text: "" } }, c)).toBeNull();
    expect(renderEntry({ ts: 0, payload: { type: "signal.exec.output", execId: "x", stream: "stdout", text: "", truncated: true } }, c)).toBe("00:00:00   │ … the rest of this output is in its result");
    const files = { type: "artifact.files", runId: "r", files: [{ path: "hello.txt", status: "added", size: 2 }, { path: "old.txt", status: "deleted", size: 0 }], truncated: false };
    expect(renderEntry({ ts: 0, payload: files }, c)).toBe("00:00:00 ◆ 2 files changed: hello.txt, old.txt (deleted)");
    expect(renderEntry({ ts: 0, payload: { type: "artifact.diff", runId: "r", base: "0123456789abcdef", bytes: 120 } }, c)).toBe("00:00:00 ◆ diff against 0123456789ab (120 bytes); threadbox artifacts shows it");
  });

  it("shows a bot's failed turn and a run's stderr with their whole reason, not as key=value fields cut behind the ids", () => {
    const reason = 'no model: bot @coder has no environment to resolve "openai/gpt-4.1-mini" from (give the bot or the thread an environment with piModels)';
    const failed = { type: "signal.dispatch.error", agentId: "ag_0123456789abcdef01234567", turnId: "turn_0123456789abcdef0123", triggerEntryId: "cli-0123456789abcdef-0123456789abcdef", reason };
    expect(renderEntry({ ts: 0, authorId: "ag_0123456789abcdef01234567", payload: failed }, c, { names: new Map([["ag_0123456789abcdef01234567", "@coder"]]) }))
      .toBe(`00:00:00 ✗ @coder could not answer: ${reason}`);
    const stderr = { type: "signal.run.stderr", runId: "r", text: 'Error: Model "nomodel" not found. Use --list-models to see available models.\n', truncated: false };
    expect(renderEntry({ ts: 0, payload: stderr }, c)).toBe('00:00:00 stderr of the run:\n           │ Error: Model "nomodel" not found. Use --list-models to see available models.');
  });

  it("an entry whose ts no Date can hold (stored before the server refused them) is shown without a time, not a crash", () => {
    expect(renderEntry({ ts: 8_640_000_000_000_001, payload: { type: "signal.thread.status_changed", status: "stopped", reason: "r" } }, c)).toBe("         ● stopped (r)");
    // The last time a date holds is in year +275760: its time of day is still the time of day.
    expect(renderEntry({ ts: 8_640_000_000_000_000, payload: { type: "signal.thread.status_changed", status: "stopped", reason: "r" } }, c)).toBe("00:00:00 ● stopped (r)");
  });

  it("any entry renders without throwing: free-form payloads with missing, null or wrongly typed fields", () => {
    // the shapes the audit met in a tail: arguments null, a tool call that is null
    expect(renderEntry({ ts: 0, payload: { type: "pi.tool_call", name: "bash", args: null } }, c)).toBe("00:00:00 ▶ bash");
    expect(renderEntry({ ts: 0, payload: { type: "pi.assistant", toolCalls: [null] } }, c)).toBe("00:00:00 ▶ tool");
    expect(renderEntry({ ts: 0, payload: { type: "pi.tool_result", name: "bash", output: { lines: 2 } } }, c)).toBe('00:00:00 ✓ bash\n           │ {"lines":2}');
    const types = ["chat", "pi.user", "pi.assistant", "pi.tool_call", "pi.tool_result", "pi.error", "signal.thread.status_changed",
      "signal.thread.box_assigned", "signal.run.launched", "signal.thread.child_finished", "signal.dispatch.error", "artifact.files", "artifact.diff", "signal.exec.output"];
    const fields = ["text", "stopReason", "errorMessage", "toolCalls", "name", "args", "arguments", "output", "isError", "toolName",
      "message", "status", "reason", "boxId", "harness", "boxReused", "session", "childThreadId", "files", "truncated", "stream", "base", "bytes"];
    const odd = [undefined, null, 0, 7, true, "", "x", [], [null], [1, "a"], {}, { command: null }, { path: 3 }, [{ name: null, args: "s" }]];
    for (const type of types) {
      for (const field of fields) {
        for (const value of odd) {
          for (const stopReason of [undefined, "error"]) {
            const payload = { type, stopReason, [field]: value };
            const line = renderEntry({ ts: 0, authorId: "ag_1", payload }, c);
            expect(line === null || typeof line === "string", JSON.stringify(payload)).toBe(true);
          }
        }
      }
    }
    for (const entry of [null, 1, "x", [], {}, { payload: null }, { payload: "chat" }, { payload: [] }, { payload: { type: 5 } }, { authorId: 5, payload: { type: "chat", text: 1 } }]) {
      expect(typeof renderEntry(entry, c), JSON.stringify(entry)).toBe("string");
    }
  });

  it("what writers wrote cannot drive the terminal: control characters are written out visibly, newlines and tabs kept where text has lines", () => {
    const osc = "hello\u001b[2K\r\u001b[32mrun completed\u001b]0;pwned title\u0007";
    expect(renderEntry({ ts: 0, authorId: "u", payload: { type: "chat", text: osc } }, c)).toBe("00:00:00 u: hello\\x1b[2K\\r\\x1b[32mrun completed\\x1b]0;pwned title\\x07");
    expect(renderEntry({ ts: 0, payload: { type: "pi.tool_result", name: "bash", output: "a\tb\r\n\u009b2Jc\n" } }, c)).toBe("00:00:00 ✓ bash\n           │ a\tb\n           │ \\x9b2Jc");
    expect(threadLine({ id: "th_1", status: "idle", title: "esc\u001b[31mRED\nth_2  completed  fake" }, c)).toBe("th_1  idle  esc\\x1b[31mRED\\nth_2  completed  fake");
    expect(describeToolCall("bash", { command: "printf '\u001b]52;c;ZXZpbA==\u0007'" })).toBe("bash $ printf '\\x1b]52;c;ZXZpbA==\\x07'");
    const nasty = "a\u001b]0;t\u0007\u009b2J\r\nb\u0000\u007f\u0085";
    const controls = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/;
    const types = ["chat", "pi.user", "pi.assistant", "pi.tool_call", "pi.tool_result", "pi.error", "signal.thread.status_changed",
      "signal.thread.box_assigned", "signal.run.launched", "signal.thread.child_finished", "signal.dispatch.error", nasty];
    const fields = ["text", "errorMessage", "name", "output", "toolName", "message", "status", "reason", "boxId", "harness", "session", "childThreadId", nasty];
    for (const type of types) {
      for (const field of fields) {
        for (const value of [nasty, { command: nasty }, { path: nasty }, [{ name: nasty, args: { x: nasty } }]]) {
          for (const stopReason of [undefined, "error"]) {
            const payload = { type, stopReason, toolCalls: [{ name: nasty, args: { command: nasty } }], args: { path: nasty }, [field]: value };
            expect(renderEntry({ ts: 0, authorId: nasty, payload }, c) ?? "", JSON.stringify(payload)).not.toMatch(controls);
          }
        }
      }
    }
    const row = { id: nasty, status: nasty, reason: nasty, title: nasty, state: nasty, threads: [nasty], name: nasty, model: nasty, harness: nasty,
      secretNames: [nasty], handle: nasty, triggerMode: nasty, tools: [nasty] };
    for (const line of [threadLine(row, c), sandboxLine(row, c), environmentLine(row, c), agentLine(row, c), ...threadTree([row], c)]) expect(line).not.toMatch(/[\u0000-\u001f\u007f-\u009f]/);
    const art = renderArtifacts([
      { payload: { type: "artifact.files", runId: nasty, files: [{ status: nasty, path: nasty, size: nasty, omitted: nasty, content: nasty }] } },
      { payload: { type: "artifact.diff", runId: nasty, base: nasty, bytes: nasty, stream: nasty, diff: nasty, status: nasty } },
      { payload: { type: "artifact.folder", runId: nasty, status: "synced", folder: nasty, version: nasty, bytes: nasty, download: nasty } },
      { payload: { type: "artifact.folder", runId: nasty, status: "failed", folders: [nasty], error: nasty } },
    ], { full: true });
    expect(art).not.toMatch(controls);
    expect(renderArtifacts([{ payload: { type: "artifact.diff", runId: "r", bytes: 1, status: nasty } }])).not.toMatch(controls);
  });

  it("draws the thread tree; a child whose parent is not listed is a root", () => {
    const t = (id: string, parent: string | null, createdAt: string) => ({ id, status: "idle", title: id, createdAt, parent: parent ? { kind: "thread", id: parent } : { kind: "none", id: null } });
    const lines = threadTree([t("b", "a", "2"), t("a", null, "1"), t("c", "a", "3"), t("d", "b", "4"), t("e", "gone", "5")], c);
    expect(lines).toEqual(["a  idle  a", "├─ b  idle  b", "│  └─ d  idle  d", "└─ c  idle  c", "e  idle  e"]);
  });
});

describe("artifacts", () => {
  it("says what became of each readwrite folder: its new version and where to download it, unchanged, or why the sync failed", () => {
    const text = renderArtifacts([
      { payload: { type: "artifact.folder", runId: "r2", folder: "notes", status: "synced", version: 3, baseVersion: 2, bytes: 2048, download: "/api/environments/env_1/folders/notes?version=3" } },
      { payload: { type: "artifact.folder", runId: "r1", folder: "notes", status: "unchanged" } },
      { payload: { type: "artifact.folder", runId: "r0", status: "failed", folders: ["notes"], error: "box gone" } },
    ]);
    expect(text).toContain("run r2: folder notes is now version 3 (2048 B, from version 2; /api/environments/env_1/folders/notes?version=3)");
    expect(text).toContain("run r1: folder notes unchanged");
    expect(text).toContain("run r0: folder sync failed for notes: box gone");
  });
});

describe("artifacts written by any writer", () => {
  it("a malformed artifact entry is named and skipped; the others still print", () => {
    const text = renderArtifacts([
      { payload: { type: "artifact.files", runId: "r1" } },
      { payload: { type: "artifact.files", runId: "r2", files: [null, { path: "a.txt", status: "added", size: 3 }, { status: "added" }] } },
      { payload: { type: "artifact.folder", runId: "r3", status: "failed", folders: "notes", error: "gone" } },
      { payload: { type: "artifact.later", runId: "r4" } },
      { payload: null },
      null,
      { payload: { type: "artifact.diff", runId: "r5", bytes: 9, status: " M a.txt\n" } },
    ], { full: true });
    expect(text.split("\n")).toEqual([
      "run r1: artifact.files entry without a file list, skipped",
      "run r2: 1 file(s)",
      "  added    a.txt  3 B",
      "  2 malformed file item(s) skipped",
      "run r3: folder sync failed for notes: gone",
      "run r4: artifact.later entry of no kind this CLI knows, skipped",
      "run ?: an artifact entry of no kind this CLI knows, skipped",
      "run ?: an artifact entry of no kind this CLI knows, skipped",
      "run r5: diff against an empty repository (9 B)",
      "   M a.txt",
    ]);
  });
});

describe("watching", () => {
  it("only a finished-signal may end a run, and only a row that is no longer running does", () => {
    expect(mayEndRun({ payload: { type: "signal.thread.status_changed", status: "completed" } })).toBe(true);
    expect(mayEndRun({ payload: { type: "signal.thread.status_changed", status: "running" } })).toBe(false);
    expect(finishedRow({ status: "running" })).toBeNull();
    expect(finishedRow({ status: "idle" })).toBeNull();
    expect(finishedRow({ status: "failed" })).toEqual({ status: "failed" });
  });

  it("on a thread that ran more than once, only the last run's finished-signal ends the replay", () => {
    const done = (runId?: string) => ({ payload: { type: "signal.thread.status_changed", status: "completed", ...(runId ? { runId } : {}) } });
    const row = { status: "completed", runId: "run-2" };
    expect(endsLastRun(done("run-1"), row)).toBe(false);
    expect(endsLastRun(done("run-2"), row)).toBe(true);
    expect(endsLastRun(done(), row)).toBe(true); // written before signals named their run
    expect(endsLastRun(done("run-1"), { status: "completed" })).toBe(true);
  });

  it("chat waits for the bot's answer to each message it posted, and for the child runs it delegated to report back", () => {
    const e = (authorId: string, offset: string, payload: Record<string, unknown>) => ({ authorId, offset, payload });
    let p = onPosted(initialProgress(), "0002", "m1");
    expect(answered(p)).toBe(false);
    p = advance(p, e("me", "0002", { type: "chat", text: "write a.txt containing b" }), "me");
    p = advance(p, e("ag_1", "0003", { type: "pi.tool_result", toolName: "delegate_task", isError: false, output: '{"childThreadId":"th_abc"}' }), "me");
    p = advance(p, e("ag_1", "0004", { type: "chat", text: "delegated", triggerEntryId: "m1" }), "me");
    expect(answered(p)).toBe(false); // a child is still running
    p = advance(p, e("threadbox", "0005", { type: "signal.thread.child_finished", childThreadId: "th_abc", status: "completed" }), "me");
    expect(answered(p)).toBe(false); // its answer is still to come
    p = advance(p, e("ag_1", "0006", { type: "chat", text: "the child wrote a.txt", origin: "child_finished", dispatch: false }), "me");
    expect(answered(p)).toBe(true);

    // a failed delegate starts nothing to wait for; an answer seen before the POST returned counts
    let q = advance(initialProgress(), e("ag_1", "0009", { type: "chat", text: "fast", triggerEntryId: "m8" }), "me");
    q = onPosted(q, "0008", "m8");
    expect(answered(q)).toBe(true);
    const r = advance(onPosted(initialProgress(), "0001", "m0"), e("ag_1", "0002", { type: "pi.tool_result", toolName: "delegate_task", isError: false, output: "th_x failed" }), "me");
    expect(advance(r, e("ag_1", "0003", { type: "pi.tool_result", toolName: "delegate_task", isError: true, output: "th_y failed" }), "me").pendingChildren).toBe(1);
  });

  it("chat with several messages posted at once waits for the answer to each, not the first answer after the last", () => {
    const e = (authorId: string, offset: string, payload: Record<string, unknown>) => ({ authorId, offset, payload });
    let p = onPosted(initialProgress(), "0001", "m1");
    p = onPosted(p, "0002", "m2");
    p = advance(p, e("ag_1", "0003", { type: "chat", text: "answer one", triggerEntryId: "m1" }), "me");
    expect(answered(p)).toBe(false);
    p = advance(p, e("ag_1", "0004", { type: "chat", text: "answer two", triggerEntryId: "m2" }), "me");
    expect(answered(p)).toBe(true);
  });

  it("chat takes a failed turn of the bot as its answer, with the reason; a later answer to another message does not undo the failure", () => {
    const e = (authorId: string, offset: string, payload: Record<string, unknown>) => ({ authorId, offset, payload });
    let p = onPosted(initialProgress(), "0002", "m2");
    p = advance(p, e("ag_1", "0003", { type: "signal.dispatch.error", agentId: "ag_1", triggerEntryId: "m2", reason: "no model: bot @coder has no environment" }), "me");
    expect([answered(p), failureOf(p)]).toEqual([true, "no model: bot @coder has no environment"]);
    p = onPosted(p, "0004", "m4");
    expect(answered(p)).toBe(false);
    // an error about another message (someone else's in the thread) is not about ours
    p = advance(p, e("ag_1", "0005", { type: "signal.dispatch.error", triggerEntryId: "m0", reason: "old" }), "me");
    expect(p.waiting).toEqual(["m4"]);
    p = advance(p, e("ag_1", "0006", { type: "chat", text: "fine now", triggerEntryId: "m4" }), "me");
    expect([answered(p), failureOf(p)]).toEqual([true, "no model: bot @coder has no environment"]);
    p = onPosted(p, "0007", "m7");
    p = advance(p, e("ag_1", "0008", { type: "signal.dispatch.error", triggerEntryId: "m7", reason: "rate limited" }), "me");
    expect(failureOf(p)).toBe("2 turns failed: no model: bot @coder has no environment; rate limited");
    expect(failureOf(advance(onPosted(initialProgress(), "0001", "m1"), e("ag_1", "0002", { type: "chat", text: "ok", triggerEntryId: "m1" }), "me"))).toBeNull();
  });

  it("renders a bot's turn: its tool calls and results, not its words twice", () => {
    const bot = { authorId: "ag_1", ts: 0 };
    expect(renderEntry({ ...bot, payload: { type: "pi.assistant", text: "", toolCalls: [{ id: "c1", name: "delegate_task", args: { task: "x" } }], stopReason: "toolUse" } }, c))
      .toBe('00:00:00 ▶ delegate_task {"task":"x"}');
    expect(renderEntry({ ...bot, payload: { type: "pi.tool_result", toolCallId: "c1", toolName: "delegate_task", output: "ok", isError: false } }, c)).toBe("00:00:00 ✓ delegate_task\n           │ ok");
    expect(renderEntry({ ...bot, payload: { type: "pi.assistant", text: "Done.", toolCalls: [], stopReason: "stop" } }, c)).toBeNull();
    expect(renderEntry({ ...bot, payload: { type: "chat", text: "Done.\nTwo lines." } }, c, { names: new Map([["ag_1", "@demo"]]) })).toBe("00:00:00 @demo: Done.\n           Two lines.");
  });
});
