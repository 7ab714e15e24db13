import { describe, expect, it } from "vitest";
import { LiveOutput, type LiveOutputPayload } from "../../src/sandbox/live-output";
import { DEFAULT_LIVE_TOOL_OUTPUT, LiveToolOutputs, partialSecretAtEnd, toolResultText } from "../../src/runner/live-tool-output";
import { redactText } from "../../src/domain/secret-forms";
import { boxSecretForms, RedactedFeed } from "../../src/workspace/output-redaction";

function collector() {
  const posted: LiveOutputPayload[][] = [];
  const errors: unknown[] = [];
  return { posted, errors, post: async (p: LiveOutputPayload[]) => void posted.push(p), onError: (e: unknown) => void errors.push(e) };
}

describe("live command output", () => {
  it("posts whole lines per stream, in order; a partial line waits for its newline or the end", async () => {
    const c = collector();
    const out = new LiveOutput("x1", c.post, c.onError, { maxEntries: 100, maxBytes: 10_000, flushMs: 5, maxEntryBytes: 1000 });
    out.push("stdout", "one\ntw");
    out.push("stderr", "warn\n");
    out.push("stdout", "o\nthr");
    await new Promise((r) => setTimeout(r, 20));
    expect(c.posted.flat().map((p) => [p.stream, p.text])).toEqual([["stdout", "one\n"], ["stderr", "warn\n"], ["stdout", "two\n"]]);
    out.push("stdout", "ee");
    await out.end();
    expect(c.posted.flat().map((p) => p.text).join("")).toBe("one\nwarn\ntwo\nthree");
    expect(c.posted.flat().every((p) => p.type === "signal.exec.output" && p.execId === "x1")).toBe(true);
  });

  it("stops at its bounds with one truncation marker", async () => {
    const c = collector();
    const out = new LiveOutput("x2", c.post, c.onError, { maxEntries: 3, maxBytes: 10_000, flushMs: 1, maxEntryBytes: 4 });
    for (let i = 0; i < 10; i++) {
      out.push(i % 2 ? "stderr" : "stdout", `l${i}\n`);
      await new Promise((r) => setTimeout(r, 3));
    }
    await out.end();
    const all = c.posted.flat();
    expect(all.filter((p) => p.truncated)).toHaveLength(1);
    expect(all.at(-1)!.truncated).toBe(true);
    expect(all.length).toBe(3);

    const bytes = collector();
    const big = new LiveOutput("x3", bytes.post, bytes.onError, { maxEntries: 100, maxBytes: 10, flushMs: 1, maxEntryBytes: 100 });
    big.push("stdout", "0123456789abc\n");
    await big.end();
    expect(bytes.posted.flat()).toEqual([{ type: "signal.exec.output", execId: "x3", stream: "stdout", text: "", truncated: true }]);
  });

  it("a line that never ends is still posted in pieces, and a failing post does not stop later ones", async () => {
    const posted: string[] = [];
    const errors: unknown[] = [];
    let calls = 0;
    const out = new LiveOutput("x4", async (p) => {
      if (calls++ === 0) throw new Error("thread unavailable");
      posted.push(...p.map((x) => x.text));
    }, (e) => void errors.push(e), { maxEntries: 100, maxBytes: 10_000, flushMs: 1, maxEntryBytes: 8 });
    out.push("stdout", "aaaaaaaaaaaa"); // no newline, over maxEntryBytes
    await new Promise((r) => setTimeout(r, 5));
    out.push("stdout", "tail\n");
    await out.end();
    expect(errors).toHaveLength(1);
    expect(posted).toEqual(["tail\n"]);
  });
});

describe("an agent's tool calls followed live (pi's bash reports its whole output so far)", () => {
  const limits = { maxEntries: 100, maxBytes: 10_000, flushMs: 1, maxEntryBytes: 1000 };
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  it("posts only what each snapshot adds, once the call has run past afterMs; a quicker call posts nothing", async () => {
    const c = collector();
    const calls = new LiveToolOutputs(c.post, c.onError, { ...DEFAULT_LIVE_TOOL_OUTPUT, afterMs: 30, limits });
    calls.update("quick", "done\n");
    await calls.end("quick");
    calls.update("slow", "a\n");
    calls.update("slow", "a\nb\n");
    await sleep(50);
    calls.update("slow", "a\nb\nc");
    await calls.end("slow");
    const all = c.posted.flat();
    expect(all.map((p) => p.execId)).not.toContain("quick");
    expect(all.map((p) => p.text).join("")).toBe("a\nb\nc");
    expect(c.errors).toEqual([]);
  });

  it("a snapshot that no longer extends the last (the tool kept only its tail) ends the call's live output with the marker", async () => {
    const c = collector();
    const calls = new LiveToolOutputs(c.post, c.onError, { ...DEFAULT_LIVE_TOOL_OUTPUT, afterMs: 0, limits });
    calls.update("t", "first\n");
    await sleep(10);
    calls.update("t", "[truncated] later\n");
    calls.update("t", "[truncated] later\nmore\n");
    await calls.end("t");
    expect(c.posted.flat().map((p) => [p.text, p.truncated ?? false])).toEqual([["first\n", false], ["", true]]);
  });

  it("endAll finishes every call still followed; the text of a partial result is its text parts", async () => {
    const c = collector();
    const calls = new LiveToolOutputs(c.post, c.onError, { ...DEFAULT_LIVE_TOOL_OUTPUT, afterMs: 0, limits });
    calls.update("x", "partial line");
    calls.update("y", "other\n");
    await sleep(5);
    await calls.endAll();
    expect(c.posted.flat().map((p) => `${p.execId}:${p.text}`).sort()).toEqual(["x:partial line", "y:other\n"]);
    expect(toolResultText({ content: [{ type: "text", text: "a" }, { type: "image" }, { type: "text", text: "b" }] })).toBe("ab");
    expect(toolResultText(undefined)).toBe("");
  });

  it("a secret printed across updates (a multi-line key, a long line cut where an update ended) is never posted, even in part", async () => {
    const secrets = ["hunter2-supersecret-XYZ", "-----BEGIN KEY-----\nAAAAline1secretpart\n-----END KEY-----"];
    const list = [...secrets].sort((a, b) => b.length - a.length);
    const c = collector();
    const calls = new LiveToolOutputs(c.post, c.onError, {
      afterMs: 0, limits: { ...limits, maxEntryBytes: 16 }, redact: (t) => redactText(t, list), heldBack: (t) => partialSecretAtEnd(t, list),
    });
    let out = "";
    const print = async (more: string) => { out += more; calls.update("t", out); await sleep(5); };
    await print("start " + "a".repeat(20) + "hunter2-su"); // the secret cut where an update ended
    await print("persecret-XYZ\n");
    await print("-----BEGIN KEY-----\n"); // a key, a line at a time
    await print("AAAAline1secretpart\n");
    await print("-----END KEY-----\ndone\n");
    await calls.end("t");
    const posted = c.posted.flat().map((p) => p.text).join("");
    expect(posted).toBe(`start ${"a".repeat(20)}[redacted]\n[redacted]\ndone\n`);
    for (const piece of ["hunter2", "persecret", "AAAAline1", "BEGIN KEY"]) expect(posted).not.toContain(piece);
  });

  it("holds back only an end that could begin a secret: other output is posted as it comes", () => {
    expect(partialSecretAtEnd("line 79\nline 80\n", ["sk-ui-secret-value"])).toBe(0);
    expect(partialSecretAtEnd("key=sk-ui", ["sk-ui-secret-value"])).toBe(5);
    expect(partialSecretAtEnd("ends in s", ["sk-ui-secret-value", "s3cr3t"])).toBe(1);
    expect(partialSecretAtEnd("whole sk-ui-secret-value", ["sk-ui-secret-value"])).toBe(0); // whole: redacted already
  });
});

describe("a command's output redacted as it arrives", () => {
  it("holds back an end that could begin a secret until the rest comes, per stream, and lets it go at the end when it was not one", () => {
    const got: [string, string][] = [];
    const feed = new RedactedFeed(["sk-live-secret"], (stream, text) => void got.push([stream, text]));
    feed.write("stdout", "token=sk-li");
    feed.write("stderr", "warn sk-");
    feed.write("stdout", "ve-secret ok\n");
    feed.write("stderr", "not it\n");
    feed.write("stdout", "ends sk-l");
    feed.end();
    expect(got).toEqual([["stdout", "token="], ["stderr", "warn "], ["stdout", "[redacted] ok\n"], ["stderr", "sk-not it\n"], ["stdout", "ends "], ["stdout", "sk-l"]]);
  });

  it("a secret that begins with another is redacted whole: its beginning is not redacted alone and its rest let through", () => {
    // A sensitive file is redacted whole and by its longer lines; its short last line is only in the whole.
    const forms = boxSecretForms({
      secrets: { KEY: "sk-prefix-value", KEY_FULL: "sk-prefix-value-and-more" },
      files: [{ path: "creds", content: "user-token-1234\n9q7z\n", sensitive: true }],
    });
    const got: string[] = [];
    const feed = new RedactedFeed(forms, (_s, text) => void got.push(text));
    for (const chunk of ["key sk-prefix-value", "-and-more\n", "user-token-1234\n", "9q7z\n", "done\n"]) feed.write("stdout", chunk);
    feed.end();
    expect(got.join("")).toBe(redactText("key sk-prefix-value-and-more\nuser-token-1234\n9q7z\ndone\n", forms));
    expect(got.join("")).toBe("key [redacted]\n[redacted]done\n");
  });

  it("passes everything on at once when there is nothing to redact", () => {
    const got: string[] = [];
    const feed = new RedactedFeed([], (_s, text) => void got.push(text));
    feed.write("stdout", "sk-");
    expect(got).toEqual(["sk-"]);
  });
});
