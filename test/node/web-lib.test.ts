// The web UI's pure parts: how entries become a timeline, diffs, @mentions, the token link.
import { describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { appendEntries, buildTimeline, sameItem } from "../../web/src/lib/timeline";
import { diffOfToolCall, looksLikeDiff, parseUnifiedDiff } from "../../web/src/lib/diff";
import { insertMention, mentionQuery } from "../../web/src/lib/mentions";
import { isAfter } from "../../web/src/lib/subscription";
import { chatPreview } from "../../web/src/lib/fold";
import { matchRoute } from "../../web/src/lib/router";
import { READ_ONLY_ROLES, isReadOnly, readClaims, takeTokenFromLocation } from "../../web/src/lib/auth";
import { environmentLabel } from "../../web/src/lib/labels";
import { terminalText } from "../../web/src/lib/terminal";
import { entryTime } from "../../web/src/lib/time";
import { ApiError, errorText, type Entry, type ThreadSummary } from "../../web/src/lib/api";
import { ActionKey } from "../../web/src/lib/retry";

const off = (n: number) => `0000000000000000_${String(n).padStart(16, "0")}`;
let seq = 0;
const entry = (payload: Entry["payload"], extra: Partial<Entry> = {}): Entry => {
  seq++;
  return { offset: off(seq), id: `e${seq}`, ts: 1_000 * seq, payload, ...extra };
};
const who = { me: "ana", bots: new Map([["ag_1", "demo"]]) };

describe("timeline", () => {
  it("puts a command's live output on its tool call's card until the result arrives; an API exec gets a card of its own", () => {
    const es = [
      entry({ type: "pi.tool_call", toolCallId: "t1", name: "run_command", args: { command: "make" } }),
      entry({ type: "signal.exec.output", execId: "t1", stream: "stdout", text: "cc a.c\n" }),
      entry({ type: "signal.exec.output", execId: "t1", stream: "stderr", text: "warn\n" }),
      entry({ type: "signal.exec.output", execId: "exec_9", stream: "stdout", text: "x\n" }),
      entry({ type: "signal.exec.output", execId: "exec_9", stream: "stdout", text: "", truncated: true }),
    ];
    const items = buildTimeline(es, [], who);
    expect(items.map((i) => i.kind === "tool" && [i.toolCallId, i.name, i.live, Boolean(i.liveOnly)])).toEqual([
      ["t1", "run_command", "cc a.c\nwarn\n", false],
      ["exec_9", "command", "x\n\n[more output not shown live]\n", true],
    ]);
  });

  it("an output entry whose execId is not a string lands on no card (an array would read as the id it holds)", () => {
    const es = [
      entry({ type: "signal.exec.output", execId: "exec_1", stream: "stdout", text: "real\n" }),
      entry({ type: "signal.exec.output", execId: ["exec_1"], stream: "stdout", text: "forged\n" }),
    ];
    const items = buildTimeline(es, [], who);
    expect(items.map((i) => (i.kind === "tool" ? ["tool", i.toolCallId, i.live] : [i.kind]))).toEqual([["tool", "exec_1", "real\n"], ["signal"]]);
  });

  it("shows on a tool call's card only what its call's author wrote: anyone else's output, call or result under that id gets a card of its own", () => {
    const bot = { authorId: "ag_1" };
    const mallory = { authorId: "mallory" };
    const es = [
      entry({ type: "pi.assistant", text: "", toolCalls: [{ id: "c1", name: "run_command", args: { command: "make test" } }], stopReason: "toolUse", turnId: "t" }, bot),
      entry({ type: "signal.exec.output", execId: "c1", stream: "stdout", text: "FAIL 3 tests\n" }, bot),
      entry({ type: "signal.exec.output", execId: "c1", stream: "stdout", text: "all tests passed\n" }, mallory),
      entry({ type: "pi.tool_call", toolCallId: "b1", name: "bash", args: { command: "deploy" } }, { authorId: "runner:r1" }),
      entry({ type: "signal.exec.output", execId: "b1", stream: "stdout", text: "deploying\n" }, { authorId: "runner:r1" }),
      entry({ type: "pi.tool_call", toolCallId: "b1", name: "bash", args: { command: "echo harmless" } }, mallory),
      entry({ type: "signal.exec.output", execId: "b1", stream: "stdout", text: "deployed OK\n" }, mallory),
      entry({ type: "pi.tool_result", toolCallId: "b1", name: "bash", output: "deployed OK\n", isError: false }, mallory),
    ];
    const items = buildTimeline(es, [], who);
    expect(items.map((i) => i.kind === "tool" && [i.toolCallId, i.name, i.args, i.live, Boolean(i.liveOnly), i.call?.authorId, i.result?.payload.output])).toEqual([
      ["c1", "run_command", { command: "make test" }, "FAIL 3 tests\n", false, "ag_1", undefined],
      ["c1", "command", undefined, "all tests passed\n", true, undefined, undefined],
      ["b1", "bash", { command: "deploy" }, "deploying\n", false, "runner:r1", undefined],
      ["b1", "bash", { command: "echo harmless" }, "deployed OK\n", false, "mallory", "deployed OK\n"],
    ]);
  });

  it("folds a run's artifact entries into one card per run", () => {
    const es = [
      entry({ type: "artifact.diff", runId: "r1", status: " M a.txt\n", diff: "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-x\n+y\n", truncated: false, bytes: 40 }),
      entry({ type: "artifact.files", runId: "r1", files: [{ path: "a.txt", status: "modified", size: 2, binary: false, content: "y\n" }], truncated: false }),
      entry({ type: "artifact.files", runId: "r2", files: [], truncated: false }),
    ];
    const items = buildTimeline(es, [], who);
    expect(items.map((i) => i.kind === "artifact" && [i.runId, i.files?.length, Boolean(i.diff)])).toEqual([["r1", 1, true], ["r2", 0, false]]);
  });

  it("says what became of a run's readwrite folders", () => {
    const es = [
      entry({ type: "artifact.folder", runId: "r1", folder: "notes", status: "synced", version: 4 }),
      entry({ type: "artifact.folder", runId: "r2", folder: "notes", status: "unchanged" }),
      entry({ type: "artifact.folder", runId: "r3", status: "failed", folders: ["notes"], error: "box gone" }),
    ];
    const items = buildTimeline(es, [], who);
    expect(items.map((i) => i.kind === "signal" && [i.label, i.tone])).toEqual([
      ["folder notes saved as version 4", "good"], ["folder notes unchanged", "info"], ["folder sync failed (notes): box gone", "bad"],
    ]);
  });

  it("shows a bot's turn as the bot: its tool calls with names and arguments, its answer once, a failed turn with its reason", () => {
    const bot = { authorId: "ag_1" };
    const es = [
      entry({ type: "chat", text: "@demo write a.txt" }, { authorId: "ana" }),
      entry({ type: "pi.assistant", text: "On it.", toolCalls: [{ id: "c1", name: "delegate_task", args: { task: "write a.txt" } }, { id: "c2", name: "run_command", args: { command: "ls" } }], stopReason: "toolUse", turnId: "turn_1" }, bot),
      entry({ type: "pi.tool_result", toolCallId: "c1", toolName: "delegate_task", output: '{"childThreadId":"th_c"}', isError: false, turnId: "turn_1" }, bot),
      entry({ type: "signal.exec.output", execId: "c2", stream: "stdout", text: "a.txt\n" }, bot),
      entry({ type: "pi.tool_result", toolCallId: "c2", toolName: "run_command", output: "a.txt\n", isError: false, turnId: "turn_1" }, bot),
      entry({ type: "pi.assistant", text: "Done.", toolCalls: [], stopReason: "stop", turnId: "turn_1" }, bot),
      entry({ type: "chat", text: "Done." }, bot),
      entry({ type: "signal.dispatch.error", agentId: "ag_1", reason: "the model API answered HTTP 500" }, bot),
    ];
    const items = buildTimeline(es, [], who);
    expect(items.map((i) => (i.kind === "chat" ? ["chat", i.author, i.text] : i.kind === "tool" ? ["tool", i.name, i.args, i.result?.payload.output, i.live, Boolean(i.liveOnly)] : [i.kind, i.kind === "signal" ? [i.label, i.tone] : null]))).toEqual([
      ["chat", "ana (you)", "@demo write a.txt"],
      ["chat", "@demo", "On it."],
      ["tool", "delegate_task", { task: "write a.txt" }, '{"childThreadId":"th_c"}', undefined, false],
      ["tool", "run_command", { command: "ls" }, "a.txt\n", "a.txt\n", false],
      ["chat", "@demo", "Done."],
      ["signal", ["@demo's turn failed (the model API answered HTTP 500)", "bad"]],
    ]);
    // A bot the page does not know (deleted since) is still a bot whose turn failed.
    expect(buildTimeline(es.slice(-1), [], { bots: new Map() }).map((i) => i.kind === "signal" && i.label)).toEqual(["bot turn failed (the model API answered HTTP 500)"]);
  });

  it("puts a delegated child right after the call that started it, and marks calls a run's end cut short", () => {
    const child: ThreadSummary = { id: "th_kid", parent: { kind: "thread", id: "th_p" }, status: "running", reason: null, title: "kid", environmentId: null, boxId: null, createdAt: new Date(500).toISOString(), updatedAt: new Date(500).toISOString() } as ThreadSummary;
    const bot = { authorId: "ag_1" };
    const es = [
      // a bot's round is appended after its tools ran: later than the child it created
      entry({ type: "pi.assistant", text: "", toolCalls: [{ id: "d1", name: "delegate_task", args: { task: "x" } }], stopReason: "toolUse", turnId: "t" }, bot),
      entry({ type: "pi.tool_result", toolCallId: "d1", toolName: "delegate_task", output: '{"childThreadId":"th_kid"}', isError: false, turnId: "t" }, bot),
      entry({ type: "pi.tool_call", toolCallId: "b1", name: "bash", args: { command: "sleep 60" } }),
      entry({ type: "signal.thread.status_changed", status: "failed", reason: "stopped" }),
    ];
    const items = buildTimeline(es, [child], who);
    expect(items.map((i) => (i.kind === "tool" ? `tool:${i.name}:${i.cutShort ? "cut" : i.result ? "done" : "open"}` : i.kind))).toEqual([
      "tool:delegate_task:done", "child", "tool:bash:cut", "signal",
    ]);
  });

  it("a bot's turn that failed leaves none of its calls running", () => {
    const bot = { authorId: "ag_1" };
    const es = [
      entry({ type: "pi.assistant", text: "", toolCalls: [{ id: "k1", name: "run_command", args: { command: "make" } }], stopReason: "toolUse", turnId: "turn_9" }, bot),
      entry({ type: "pi.assistant", text: "", toolCalls: [{ id: "k2", name: "run_command", args: { command: "ls" } }], stopReason: "toolUse", turnId: "turn_8" }, { authorId: "ag_2" }),
      entry({ type: "signal.dispatch.error", agentId: "ag_1", turnId: "turn_9", reason: "the turn was interrupted 3 times and was given up" }, bot),
    ];
    const items = buildTimeline(es, [], who);
    expect(items.map((i) => (i.kind === "tool" ? `${i.toolCallId}:${i.cutShort ? "cut" : "open"}` : i.kind))).toEqual(["k1:cut", "k2:open", "signal"]);
  });

  it("pairs each tool result with its call by toolCallId, in call order", () => {
    const es = [
      entry({ type: "pi.tool_call", toolCallId: "a", name: "bash", args: { command: "ls" } }),
      entry({ type: "pi.tool_call", toolCallId: "b", name: "read", args: { path: "x" } }),
      entry({ type: "pi.tool_result", toolCallId: "b", output: "B", isError: false }),
      entry({ type: "pi.tool_result", toolCallId: "a", output: "A", isError: true }),
    ];
    const items = buildTimeline(es, [], who);
    expect(items.map((i) => i.kind)).toEqual(["tool", "tool"]);
    expect(items.map((i) => i.kind === "tool" && [i.name, i.result?.payload.output])).toEqual([["bash", "A"], ["read", "B"]]);
  });

  it("tells people, bots and the agent apart, and hides the prompt echo and empty assistant turns", () => {
    const es = [
      entry({ type: "chat", text: "do it" }, { authorId: "ana" }),
      entry({ type: "pi.user", text: "do it" }),
      entry({ type: "pi.assistant", text: "", stopReason: "toolUse" }),
      entry({ type: "pi.assistant", text: "done", stopReason: "stop", model: "m1" }),
      entry({ type: "chat", text: "result" }, { authorId: "ag_1" }),
      entry({ type: "pi.assistant", text: "", stopReason: "error", errorMessage: "quota" }),
      entry({ type: "pi.assistant", text: "", stopReason: "error", errorMessage: '401: {"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}' }),
    ];
    const chats = buildTimeline(es, [], who).flatMap((i) => (i.kind === "chat" ? [[i.role, i.author, i.text]] : []));
    expect(chats).toEqual([
      ["person", "ana (you)", "do it"],
      ["agent", "agent · m1", "done"],
      ["bot", "@demo", "result"],
      ["agent", "agent", "error: quota"],
      // what the provider said, not its JSON body
      ["agent", "agent", "error: the model API answered HTTP 401: Incorrect API key provided"],
    ]);
  });

  it("shows a delegated child's answer on the parent as the child's result, not as its delegator's words", () => {
    const es = [entry({ type: "chat", text: "wrote it", origin: "child_finished", childThreadId: "th_c", dispatch: false }, { authorId: "ana" })];
    expect(buildTimeline(es, [], who)[0]).toMatchObject({ kind: "chat", role: "agent", author: "result of child thread", childThreadId: "th_c" });
  });

  it("a child's result says whether that run of the child failed: a stopped run's result is a failure, its resumed run's a success", () => {
    const result = (run: number, text: string) => entry({ type: "chat", text, origin: "child_finished", childThreadId: "th_c", dispatch: false }, { id: `child_result:th_c:${run}`, authorId: "ana" });
    const finished = (run: number, status: string, reason?: string) => entry({ type: "signal.thread.child_finished", childThreadId: "th_c", status, reason }, { id: `child_finished:th_c:${run}`, authorId: "threadbox" });
    const es = [finished(1, "stopped"), result(1, "Task th_c ended: stopped"), finished(2, "completed"), result(2, "all done"), finished(3, "pi_failed", "exit 1"), result(3, "Task th_c ended: pi_failed (exit 1)")];
    const chats = buildTimeline(es, [], who).filter((i) => i.kind === "chat");
    expect(chats.map((i) => i.kind === "chat" && [i.text, i.childOutcome])).toEqual([
      ["Task th_c ended: stopped", { status: "stopped", failed: true }],
      ["all done", { status: "completed", failed: false }],
      ["Task th_c ended: pi_failed (exit 1)", { status: "pi_failed", reason: "exit 1", failed: true }],
    ]);
  });

  it("shows signals as marks and places child threads where they were created", () => {
    const es = [
      entry({ type: "chat", text: "first" }),
      entry({ type: "signal.thread.child_finished", childThreadId: "th_c", status: "completed" }),
      entry({ type: "signal.thread.status_changed", status: "pi_failed", reason: "exit 1" }),
    ];
    const child = { id: "th_c", createdAt: new Date(es[0].ts + 1).toISOString(), status: "completed" } as ThreadSummary;
    const items = buildTimeline(es, [child], who);
    expect(items.map((i) => i.kind)).toEqual(["chat", "child", "signal", "signal"]);
    expect(items[2]).toMatchObject({ label: "child thread completed", tone: "good", childThreadId: "th_c" });
    expect(items[3]).toMatchObject({ label: "status: pi_failed (exit 1)", tone: "bad" });
  });

  it("an item built again from the same entries draws the same; one a later entry changed (a result, live output, a run's end, a child's outcome) does not", () => {
    const es = [
      entry({ type: "chat", text: "hi" }, { authorId: "ana" }),
      entry({ type: "pi.tool_call", toolCallId: "r1", name: "bash", args: { command: "make" } }),
      entry({ type: "signal.exec.output", execId: "r1", stream: "stdout", text: "cc\n" }),
      entry({ type: "pi.tool_call", toolCallId: "r2", name: "bash", args: { command: "sleep 9" } }),
      entry({ type: "signal.thread.child_finished", childThreadId: "th_c", status: "completed" }, { id: "child_finished:th_c:1" }),
      entry({ type: "chat", text: "done", origin: "child_finished", childThreadId: "th_c" }, { id: "child_result:th_c:1", authorId: "ana" }),
    ];
    const child = { id: "th_k", parent: { kind: "thread", id: "th_p" }, createdAt: new Date(0).toISOString(), status: "running" } as ThreadSummary;
    const before = buildTimeline(es, [child], who);
    const byKey = (items: ReturnType<typeof buildTimeline>) => new Map(items.map((i) => [i.key, i]));
    // Another batch, nothing new for these items: each is a new object that draws the same.
    const again = buildTimeline([...es, entry({ type: "chat", text: "more" })], [{ ...child, parent: { ...child.parent } }], who);
    for (const item of before) expect([item.key, sameItem(item, byKey(again).get(item.key)!)]).toEqual([item.key, true]);
    // A result, more output, the run's end, and the child's new status each change the item they land on.
    const later = [
      entry({ type: "signal.exec.output", execId: "r1", stream: "stdout", text: "ld\n" }),
      entry({ type: "pi.tool_result", toolCallId: "r1", name: "bash", output: "ok", isError: false }),
      entry({ type: "signal.thread.status_changed", status: "failed", reason: "stopped" }),
    ];
    const after = byKey(buildTimeline([...es, ...later], [{ ...child, status: "completed" }], who));
    const changed = before.filter((i) => !sameItem(i, after.get(i.key)!)).map((i) => (i.kind === "tool" ? `tool ${i.toolCallId}` : i.kind));
    expect(changed).toEqual(["child", "tool r1", "tool r2"]);
    // A child's result whose outcome changed (a later child_finished of its run) is drawn again.
    const outcome = (status: string) => buildTimeline([entry({ type: "signal.thread.child_finished", childThreadId: "th_c", status }, { id: "child_finished:th_c:1" }), es[5]], [], who)[1];
    expect(sameItem(outcome("completed"), outcome("completed"))).toBe(true);
    expect(sameItem(outcome("completed"), outcome("failed"))).toBe(false);
  });

  it("appendEntries keeps one copy of each offset, in offset order", () => {
    const [a, b, c, d] = ["a", "b", "c", "d"].map((text) => entry({ type: "chat", text }));
    let list: Entry[] = [];
    for (const batch of [[a], [c, b], [c, a], [], [d]]) list = appendEntries(list, batch);
    expect(list.map((e) => e.payload.text)).toEqual(["a", "b", "c", "d"]);
    expect(appendEntries(list, [])).toBe(list);
  });

  it("isAfter orders fixed-width offsets, with -1 before all", () => {
    expect(isAfter(off(1), "-1")).toBe(true);
    expect(isAfter(off(10), off(9))).toBe(true);
    expect(isAfter(off(9), off(9))).toBe(false);
    expect(isAfter(off(8), off(9))).toBe(false);
  });
});

describe("diffs", () => {
  it("recognizes and colours unified diff text", () => {
    const text = "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n keep\n-old\n+new\n";
    expect(looksLikeDiff(text)).toBe(true);
    expect(looksLikeDiff("total 4\n-rw-r--r-- 1 root root 3 f\n")).toBe(false);
    expect(parseUnifiedDiff(text).map((l) => l.kind)).toEqual(["file", "file", "file", "hunk", "ctx", "del", "add"]);
  });

  it("turns write and edit tool calls into diffs", () => {
    expect(diffOfToolCall("write", { path: "h.txt", content: "hi\nthere\n" })).toEqual([
      { kind: "file", text: "+++ h.txt" }, { kind: "add", text: "+hi" }, { kind: "add", text: "+there" },
    ]);
    const edit = diffOfToolCall("edit", { path: "h.txt", edits: [{ oldText: "hi", newText: "hello" }] })!;
    expect(edit.filter((l) => l.kind === "del" || l.kind === "add").map((l) => l.text)).toEqual(["-hi", "+hello"]);
    expect(diffOfToolCall("bash", { command: "ls" })).toBeNull();
  });
});

describe("@mentions", () => {
  it("finds the handle being typed and completes it", () => {
    expect(mentionQuery("hey @de", 7)).toBe("de");
    expect(mentionQuery("mail a@de", 9)).toBeNull();
    expect(mentionQuery("@demo done", 10)).toBeNull();
    expect(insertMention("hey @de please", 7, "demo")).toEqual({ text: "hey @demo please", caret: 10 });
  });
});

describe("token link", () => {
  it("keeps a #token= and strips it from the address, leaving other fragment parts", () => {
    const stored = new Map<string, string>();
    const store = { setItem: (k: string, v: string) => stored.set(k, v), getItem: (k: string) => stored.get(k) ?? null } as unknown as Storage;
    let replaced = "";
    const hist = { replaceState: (_s: unknown, _t: string, url: string) => { replaced = url; } } as unknown as History;
    expect(takeTokenFromLocation({ hash: "#token=abc.def.ghi&x=1", pathname: "/threads/t1", search: "?q=2" } as Location, hist, store)).toBeNull();
    expect(stored.get("threadbox.token")).toBe("abc.def.ghi");
    expect(replaced).toBe("/threads/t1?q=2#x=1");
    // The same token again is simply kept.
    expect(takeTokenFromLocation({ hash: "#token=abc.def.ghi", pathname: "/", search: "" } as Location, hist, store)).toBeNull();
    expect([stored.get("threadbox.token"), replaced]).toEqual(["abc.def.ghi", "/"]);
  });

  it("does not replace another stored token: it hands the link's token back to be confirmed, and still strips it", () => {
    const stored = new Map<string, string>([["threadbox.token", "mine.a.b"]]);
    const store = { setItem: (k: string, v: string) => stored.set(k, v), getItem: (k: string) => stored.get(k) ?? null } as unknown as Storage;
    let replaced = "";
    const hist = { replaceState: (_s: unknown, _t: string, url: string) => { replaced = url; } } as unknown as History;
    expect(takeTokenFromLocation({ hash: "#token=theirs.c.d", pathname: "/bots", search: "" } as Location, hist, store)).toBe("theirs.c.d");
    expect([stored.get("threadbox.token"), replaced]).toEqual(["mine.a.b", "/bots"]);
  });

  it("reads the house and subject of a token for display", () => {
    const payload = Buffer.from(JSON.stringify({ kind: "house", house: "dev", sub: "ana", role: "owner" })).toString("base64url");
    expect(readClaims(`x.${payload}.y`)).toMatchObject({ houseId: "dev", subject: "ana", role: "owner" });
    expect(readClaims("garbage")).toEqual({});
  });

  it("knows a read-only token by its role, as the server does", () => {
    // The server's list, read from its source: this file is typechecked with the web's types, not the worker's.
    const server = /READ_ONLY_ROLES: readonly string\[\] = (\[[^\]]*\])/.exec(readFileSync(new URL("../../src/auth/tokens.ts", import.meta.url), "utf8"))?.[1];
    expect(READ_ONLY_ROLES).toEqual(JSON.parse(server ?? "null"));
    const claims = (role: string) => readClaims(`x.${Buffer.from(JSON.stringify({ kind: "house", house: "dev", sub: "ana", role })).toString("base64url")}.y`);
    expect(["viewer", "reader", "member", "owner", "bot", "admin"].map((r) => isReadOnly(claims(r)))).toEqual([true, true, false, false, false, false]);
    expect(isReadOnly(readClaims("garbage"))).toBe(false);
  });
});

describe("errors", () => {
  it("names the fields a validation error is about", () => {
    expect(errorText(new ApiError(400, "validation_failed", "invalid request body", [{ path: "handle", message: "handle is 1-40 chars of [a-z0-9_-]" }, { path: "", message: "top" }])))
      .toBe("validation_failed: invalid request body (handle: handle is 1-40 chars of [a-z0-9_-]; top)");
    expect(errorText(new ApiError(409, "conflict", "handle @demo is taken in this house"))).toBe("conflict: handle @demo is taken in this house");
    expect(errorText(new ApiError(400, "validation_failed", "invalid", { issues: [] }))).toBe("validation_failed: invalid");
  });
});

describe("a press's Idempotency-Key", () => {
  it("stays with the press while the server has not answered it, and is new once it has (done or refused) or for another body", async () => {
    const keys = new ActionKey(0); // no time to ask again: each press ends at its first failure
    const sent: string[] = [];
    const press = (body: unknown, outcome: "lost" | "done" | "refused") => keys.send(body, async (key) => {
      sent.push(key);
      if (outcome === "lost") throw new ApiError(0, "network_error", "the server cannot be reached");
      if (outcome === "refused") throw new ApiError(409, "conflict", "already running");
      return key;
    }).catch((err: ApiError) => err.code);
    const outcomes = [
      await press({ message: "a" }, "lost"), await press({ message: "a" }, "lost"), await press({ message: "a" }, "done"),
      await press({ message: "a" }, "lost"), await press({ message: "b" }, "refused"), await press({ message: "b" }, "done"),
    ];
    expect(outcomes.map((o) => (o.startsWith("ui-") ? "done" : o))).toEqual(["network_error", "network_error", "done", "network_error", "conflict", "done"]);
    // the same key for the lost presses of "a" and the one that went through; new ones after it was done, for "b", and after the refusal
    expect([sent[1] === sent[0], sent[2] === sent[0], sent[3] === sent[0], sent[4] === sent[3], sent[5] === sent[4], new Set(sent).size])
      .toEqual([true, true, false, false, false, 4]);
  });
});

describe("routes", () => {
  it("a trailing slash names the same page", () => {
    expect(matchRoute("/threads/")).toEqual({ page: "threads" });
    expect(matchRoute("/bots/")).toEqual({ page: "bots" });
    expect(matchRoute("/threads/th_1/")).toEqual({ page: "thread", id: "th_1" });
    expect(matchRoute("/")).toEqual({ page: "threads" });
    expect(matchRoute("/nope")).toEqual({ page: "missing" });
  });
});

describe("folding long messages", () => {
  it("keeps a short one whole; cuts a long one at 4,000 characters or 40 lines, whichever comes first", () => {
    expect(chatPreview("short\ntext")).toBeNull();
    expect(chatPreview("x".repeat(4000))).toBeNull();
    expect(chatPreview("x".repeat(4001))).toBe("x".repeat(4000));
    const lines = Array.from({ length: 100 }, (_, i) => `l${i}`).join("\n");
    expect(chatPreview(lines)!.split("\n")).toHaveLength(40);
    expect(chatPreview(Array.from({ length: 40 }, () => "a").join("\n"))).toBeNull(); // 40 lines: whole
  });
});

describe("environment labels", () => {
  it("names an environment by its name, and adds its id only where two share the name", () => {
    const envs = [{ id: "env_a", name: "prod" }, { id: "env_b", name: "prod" }, { id: "env_c", name: "demo" }];
    expect(envs.map((e) => environmentLabel(e, envs))).toEqual(["prod (env_a)", "prod (env_b)", "demo"]);
  });
});

describe("terminal output", () => {
  it("drops colour codes and other escape sequences, and draws carriage returns over the line", () => {
    expect(terminalText("\x1b[31mred\x1b[0m plain")).toBe("red plain");
    expect(terminalText("\x1b[1;32m+ added\x1b[m\n\x1b]8;;http://x\x07link\x1b]8;;\x07\x1b(B")).toBe("+ added\nlink");
    expect(terminalText("progress 10%\rprogress 100%\nnext\r\n")).toBe("progress 100%\nnext\n");
    expect(terminalText("abcdef\rXY")).toBe("XYcdef");
    expect(terminalText("bell\x07 and tab\tkept")).toBe("bell and tab\tkept");
    expect(terminalText("plain, עברית")).toBe("plain, עברית");
  });
});

describe("entry times", () => {
  it("today's entries show the time of day only; another day's show their date too (and year, when not this year's)", () => {
    const now = new Date(2026, 10, 26, 18, 0, 0).getTime();
    const at = (y: number, m: number, d: number) => new Date(y, m, d, 9, 5, 3).getTime();
    expect(entryTime(at(2026, 10, 26), now, "en-US")).toBe("09:05:03 AM");
    expect(entryTime(at(2026, 10, 25), now, "en-US")).toBe("Nov 25, 09:05:03 AM");
    expect(entryTime(at(2025, 10, 26), now, "en-US")).toBe("Nov 26, 2025, 09:05:03 AM");
    // Just past midnight, a few minutes ago is yesterday.
    expect(entryTime(new Date(2026, 10, 25, 23, 58, 0).getTime(), new Date(2026, 10, 26, 0, 2, 0).getTime(), "en-GB")).toBe("25 Nov, 23:58:00");
  });
});
