import { describe, expect, it } from "vitest";
import { execSync } from "node:child_process";
import { mkdirSync, rmSync, symlinkSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { collectArtifacts, DEFAULT_ARTIFACT_LIMITS, snapshotWorkspace } from "../../src/runner/artifacts";
import { namedSecretValues, redactDeep, redactionList, sensitiveFilePaths, sensitiveValues } from "../../src/runner/redact";
import { redactSecrets } from "../../src/dispatch/model-call";
import { artifactEntries, cutUtf8, MAX_INLINE_DIFF_BYTES } from "../../src/runner/post-artifacts";
import { tempDirs } from "../support/temp-dirs";

const tempDir = tempDirs();

const tmp = () => tempDir("tb-art-");

describe("a run's artifacts: a plain working directory", () => {
  it("lists what was added, modified and deleted; inlines small text; lists binary, oversize and secret files", () => {
    const dir = tmp();
    writeFileSync(join(dir, "keep.txt"), "same\n");
    writeFileSync(join(dir, "edit.txt"), "before\n");
    writeFileSync(join(dir, "gone.txt"), "bye\n");
    mkdirSync(join(dir, "node_modules"));
    const start = snapshotWorkspace(dir);
    expect(start.kind).toBe("files");

    writeFileSync(join(dir, "hello.txt"), "hi\n");
    writeFileSync(join(dir, "edit.txt"), "after, longer\n");
    rmSync(join(dir, "gone.txt"));
    writeFileSync(join(dir, "pic.bin"), Buffer.from([0x89, 0x50, 0x00, 0x01]));
    writeFileSync(join(dir, "big.txt"), "x".repeat(DEFAULT_ARTIFACT_LIMITS.maxTextBytes + 1));
    writeFileSync(join(dir, ".env"), "TOKEN=abc\n");
    writeFileSync(join(dir, "node_modules", "dep.js"), "ignored\n");
    mkdirSync(join(dir, "sub"));
    writeFileSync(join(dir, "sub", "note.md"), "the key is sk-live-123456 ok\n");

    const a = collectArtifacts(start, ["sk-live-123456"]);
    const byPath = Object.fromEntries(a.files.map((f) => [f.path, f]));
    expect(Object.keys(byPath).sort()).toEqual([".env", "big.txt", "edit.txt", "gone.txt", "hello.txt", "pic.bin", "sub/note.md"]);
    expect(byPath["hello.txt"]).toEqual({ path: "hello.txt", status: "added", size: 3, binary: false, content: "hi\n" });
    expect(byPath["edit.txt"]).toMatchObject({ status: "modified", content: "after, longer\n" });
    expect(byPath["gone.txt"]).toMatchObject({ status: "deleted" });
    expect(byPath["pic.bin"]).toMatchObject({ binary: true, omitted: "binary" });
    expect(byPath["pic.bin"].content).toBeUndefined();
    expect(byPath["big.txt"]).toMatchObject({ omitted: "too_large" });
    expect(byPath[".env"]).toMatchObject({ omitted: "secret" });
    expect(byPath[".env"].content).toBeUndefined();
    expect(byPath["sub/note.md"].content).toBe("the key is [redacted] ok\n");
    expect(a.git).toBeUndefined();
  });

  it("cuts the list at maxFiles and the inlined content at its budget", () => {
    const dir = tmp();
    const start = snapshotWorkspace(dir);
    for (let i = 0; i < 5; i++) writeFileSync(join(dir, `f${i}.txt`), "0123456789");
    const a = collectArtifacts(start, [], { ...DEFAULT_ARTIFACT_LIMITS, maxFiles: 3, maxInlineTotalBytes: 25 });
    expect(a.files).toHaveLength(3);
    expect(a.filesTruncated).toBe(true);
    expect(a.files.filter((f) => f.content !== undefined)).toHaveLength(2);
    expect(a.files[2].omitted).toBe("budget");
  });
});

describe("a run's artifacts: a git checkout", () => {
  const git = (dir: string, cmd: string) => execSync(`git -c user.email=t@t -c user.name=t ${cmd}`, { cwd: dir, stdio: "pipe" }).toString();
  /** A checkout whose one commit holds `a.txt` ("one"). */
  const checkoutWithOneCommit = () => {
    const dir = tmp();
    git(dir, "init -q -b main");
    writeFileSync(join(dir, "a.txt"), "one\n");
    git(dir, "add a.txt");
    git(dir, "commit -q -m init");
    return dir;
  };

  it("status and the diff against the starting commit, including commits and untracked files made during the run", () => {
    const dir = checkoutWithOneCommit();
    const start = snapshotWorkspace(dir);
    expect(start).toMatchObject({ kind: "git" });

    writeFileSync(join(dir, "a.txt"), "one\ntwo\n");
    git(dir, "commit -q -am more"); // committed by the run: still part of its diff
    writeFileSync(join(dir, "new.txt"), "fresh\n");
    writeFileSync(join(dir, "a.txt"), "one\ntwo\nthree\n");
    const a = collectArtifacts(start, []);
    expect(a.git!.status).toContain(" M a.txt");
    expect(a.git!.status).toContain("?? new.txt");
    expect(a.git!.diff).toContain("+two");
    expect(a.git!.diff).toContain("+three");
    expect(a.git!.diff).toContain("+fresh");
    expect(a.files.map((f) => [f.path, f.status]).sort()).toEqual([["a.txt", "modified"], ["new.txt", "added"]]);
  });

  it("paths with spaces, quotes and non-ASCII letters come out as the paths they are, with their content and in the diff", () => {
    const dir = tmp();
    git(dir, "init -q -b main");
    mkdirSync(join(dir, "sp ace"));
    writeFileSync(join(dir, "sp ace", "ünï.txt"), "old ü\n");
    git(dir, "add -A");
    git(dir, "commit -q -m init");
    const start = snapshotWorkspace(dir);
    writeFileSync(join(dir, "sp ace", "ünï.txt"), "new ü\n");
    writeFileSync(join(dir, 'say "hi".txt'), "quoted\n");
    const a = collectArtifacts(start, []);
    expect(a.files.map((f) => [f.path, f.status]).sort()).toEqual([['say "hi".txt', "added"], ["sp ace/ünï.txt", "modified"]]);
    expect(a.files.find((f) => f.path === "sp ace/ünï.txt")!.content).toBe("new ü\n");
    expect(a.git!.diff).toContain("+new ü");
    expect(a.git!.diff).toContain("+quoted");
  });

  it("a symlink the run made is listed as one, its target never read (a file outside the checkout, a huge one)", () => {
    const dir = checkoutWithOneCommit();
    const outside = tmp();
    const start = snapshotWorkspace(dir);
    writeFileSync(join(outside, "notes.txt"), "outside the working directory\n");
    symlinkSync(join(outside, "notes.txt"), join(dir, "notes-link.txt"));
    // Its size is that of the link: the collector's size bound never saw the 64 MiB it pointed at.
    const big = join(outside, "big.txt");
    writeFileSync(big, "");
    truncateSync(big, 64 * 1024 * 1024);
    symlinkSync(big, join(dir, "big-link.txt"));
    const a = collectArtifacts(start, []);
    const byPath = Object.fromEntries(a.files.map((f) => [f.path, f]));
    expect(byPath["notes-link.txt"]).toEqual({ path: "notes-link.txt", status: "added", size: join(outside, "notes.txt").length, binary: false, omitted: "symlink" });
    expect(byPath["big-link.txt"]).toMatchObject({ status: "added", omitted: "symlink" });
    expect(byPath["big-link.txt"].content).toBeUndefined();
    expect(JSON.stringify(a.files)).not.toContain("outside the working directory");
  });

  it("untracked files that were there before the run and that it left alone are not its work (a shared box's earlier runs, the environment's files)", () => {
    const dir = checkoutWithOneCommit();
    writeFileSync(join(dir, "earlier-run.txt"), "left by the run before\n");
    writeFileSync(join(dir, "touched.txt"), "before\n");
    writeFileSync(join(dir, "removed.txt"), "the run deletes this\n");
    const start = snapshotWorkspace(dir);
    rmSync(join(dir, "removed.txt"));
    writeFileSync(join(dir, "mine.txt"), "this run's\n");
    writeFileSync(join(dir, "touched.txt"), "changed by this run\n");
    const a = collectArtifacts(start, []);
    expect(a.files.map((f) => [f.path, f.status]).sort()).toEqual([["mine.txt", "added"], ["removed.txt", "deleted"], ["touched.txt", "added"]]);
    expect(a.git!.diff).toContain("+this run's");
    expect(a.git!.diff).toContain("+changed by this run");
    expect(a.git!.diff).not.toContain("left by the run before");
  });

  it("many untracked files (a venv without a .gitignore): the diff covers the files listed, not one git process per file past them", () => {
    const dir = checkoutWithOneCommit();
    const start = snapshotWorkspace(dir);
    mkdirSync(join(dir, "venv"));
    for (let i = 0; i < 60; i++) writeFileSync(join(dir, "venv", `m${String(i).padStart(3, "0")}.py`), `x = ${i}\n`);
    const a = collectArtifacts(start, [], { ...DEFAULT_ARTIFACT_LIMITS, maxFiles: 10 });
    expect(a.files).toHaveLength(10);
    expect(a.filesTruncated).toBe(true);
    expect(a.git!.diff.match(/^new file mode/gm)).toHaveLength(10);
    expect(a.git!.diff).toContain("+x = 0");
    expect(a.git!.diff).not.toContain("+x = 59");
    // git status still names every one of them.
    expect(a.git!.status.split("\n").filter(Boolean)).toHaveLength(60);
  });

  it("a diff larger than git's output buffer (a big tracked file rewritten) still gives the run's artifacts, its diff cut", () => {
    const dir = tmp();
    git(dir, "init -q -b main");
    const line = (c: string) => `${c.repeat(99)}\n`;
    writeFileSync(join(dir, "data.csv"), line("a").repeat(200_000));
    writeFileSync(join(dir, "small.txt"), "one\n");
    git(dir, "add -A");
    git(dir, "commit -q -m init");
    const start = snapshotWorkspace(dir);
    writeFileSync(join(dir, "data.csv"), line("b").repeat(200_000));
    writeFileSync(join(dir, "small.txt"), "two\n");
    const a = collectArtifacts(start, []);
    expect(a.files.map((f) => [f.path, f.status]).sort()).toEqual([["data.csv", "modified"], ["small.txt", "modified"]]);
    expect(a.git!.diff).toContain("-aaaa");
    expect(a.git!.diffBytes).toBeGreaterThan(8 * 1024 * 1024);
  });

  it("a git that does not answer (a huge repository, a hung filesystem) ends the collection at its deadline instead of holding the run's end", () => {
    const dir = checkoutWithOneCommit();
    const start = snapshotWorkspace(dir);
    writeFileSync(join(dir, "a.txt"), "two\n");
    // A git that answers nothing for seconds, first on PATH for the collection only.
    const slowBin = tmp();
    writeFileSync(join(slowBin, "git"), "#!/bin/sh\nsleep 3\n", { mode: 0o755 });
    const path = process.env.PATH;
    process.env.PATH = `${slowBin}:${path}`;
    try {
      expect(() => collectArtifacts(start, [], undefined, [], Date.now() + 200)).toThrow(/ETIMEDOUT|out of time/);
    } finally {
      process.env.PATH = path;
    }
  }, 30_000);

  it("a repository without commits yet: everything is added", () => {
    const dir = tmp();
    git(dir, "init -q -b main");
    const start = snapshotWorkspace(dir);
    expect(start).toMatchObject({ kind: "git", head: null });
    writeFileSync(join(dir, "first.txt"), "1\n");
    const a = collectArtifacts(start, []);
    expect(a.files.map((f) => f.path)).toEqual(["first.txt"]);
    expect(a.git!.diff).toContain("+1");
  });
});

describe("artifact entries", () => {
  it("a diff over the inline bound is cut (at a character boundary) and names its stream", () => {
    const big = "é".repeat(MAX_INLINE_DIFF_BYTES); // 2 bytes each
    const es = artifactEntries({ files: [], filesTruncated: false, git: { base: "abc", status: "", diff: big, diffBytes: Buffer.byteLength(big) } },
      { threadId: "t1", runId: "r1", authorId: "bot", diffStream: "thread-t1/artifacts/r1/diff" });
    const diff = es.find((e) => e.payload.type === "artifact.diff")!;
    expect(diff.id).toBe("t1:artifacts:r1:diff");
    expect(diff.authorId).toBe("bot");
    expect(diff.payload).toMatchObject({ truncated: true, bytes: 2 * MAX_INLINE_DIFF_BYTES, stream: "thread-t1/artifacts/r1/diff" });
    expect(Buffer.byteLength(String(diff.payload.diff))).toBeLessThanOrEqual(MAX_INLINE_DIFF_BYTES);
    expect(String(diff.payload.diff)).not.toContain("\uFFFD");
    expect(es.map((e) => e.payload.type)).toEqual(["artifact.diff", "artifact.files"]);
  });

  it("a git status too long for an entry is cut at a line and says how many lines it left out", () => {
    const status = Array.from({ length: 5000 }, (_, i) => `?? build/generated/output-file-${i}.txt`).join("\n") + "\n";
    const [diff] = artifactEntries({ files: [], filesTruncated: false, git: { base: "abc", status, diff: "", diffBytes: 0 } }, { threadId: "t", runId: "r" });
    const shown = diff.payload.status as string;
    expect(Buffer.byteLength(shown)).toBeLessThanOrEqual(MAX_INLINE_DIFF_BYTES + 100);
    const lines = shown.split("\n").filter(Boolean);
    expect(lines[0]).toBe("?? build/generated/output-file-0.txt");
    expect(lines.at(-1)).toMatch(/^… \d+ more line\(s\)$/);
    expect(lines.length - 1 + Number(/(\d+) more/.exec(lines.at(-1)!)![1])).toBe(5000);
  });

  it("cutUtf8 never splits a character", () => {
    expect(cutUtf8("aé", 2)).toBe("a");
    expect(cutUtf8("aé", 3)).toBe("aé");
  });
});

describe("what a box must not post", () => {
  it("redacts secret values and a sensitive file's content (whole, and its longer lines) in every string of an entry", () => {
    const dir = tempDir("tb-redact-");
    writeFileSync(join(dir, "priv.txt"), "PRIVATE-sensitive-123\nsecond line here\nshort\n");
    const env = { THREADBOX_SECRET_NAMES: "MY_TOKEN,EMPTY", MY_TOKEN: "tok-abcdef-999", EMPTY: "", THREADBOX_SENSITIVE_FILES: '["priv.txt","missing.txt"]' };
    const list = redactionList([...namedSecretValues(env), ...sensitiveValues(dir, sensitiveFilePaths(env))]);
    const entry = { id: "e", payload: { type: "pi.tool_result", output: "cat: PRIVATE-sensitive-123\nsecond line here\nshort\n and tok-abcdef-999", args: ["+second line here"] } };
    const out = redactDeep(entry, list);
    expect(out.payload.output).toBe("cat: [redacted] and [redacted]");
    expect(out.payload.args).toEqual(["+[redacted]"]);
    expect(out.id).toBe("e");
    expect(JSON.stringify(out)).not.toMatch(/PRIVATE|tok-abcdef|second line here/);
    expect(sensitiveFilePaths({ THREADBOX_SENSITIVE_FILES: "not json" })).toEqual([]);
  });

  it("redacts a secret quoted inside JSON (escaped once or twice) or a URL, not only as written", () => {
    const quoted = 'sk-"quoted"-SECRET-8888';
    const slashed = "hdr\\back\\SECRET-9999";
    const list = redactionList([quoted, slashed]);
    const echoed = JSON.stringify({ error: `bad header authorization=Bearer ${quoted} x-key=${slashed}` });
    const twice = JSON.stringify({ message: echoed });
    const url = `https://x.test/?key=${encodeURIComponent(quoted)}`;
    for (const text of [echoed, twice, url, `${quoted} ${slashed}`]) {
      const out = redactDeep({ payload: { text } }, list).payload.text;
      expect(out).toContain("[redacted]");
      expect(out, text).not.toMatch(/SECRET-8888|SECRET-9999/);
    }
    expect(redactSecrets(echoed, { apiKey: quoted, secretValues: [slashed] } as never)).not.toMatch(/SECRET-8888|SECRET-9999/);
    expect(redactSecrets(twice, { apiKey: quoted, secretValues: [slashed] } as never)).not.toMatch(/SECRET-8888|SECRET-9999/);
  });

  it("lists a sensitive file, and only its path, in the artifacts; its content copied elsewhere is redacted", () => {
    const dir = tempDir("tb-art-sens-");
    writeFileSync(join(dir, "priv.txt"), "PRIVATE-sensitive-123\n");
    const start = snapshotWorkspace(dir);
    writeFileSync(join(dir, "priv.txt"), "PRIVATE-sensitive-123\nextra\n");
    writeFileSync(join(dir, "copy.txt"), "PRIVATE-sensitive-123\n");
    const secrets = sensitiveValues(dir, ["priv.txt"]);
    const a = collectArtifacts(start, ["PRIVATE-sensitive-123"], undefined, ["priv.txt"]);
    const byPath = Object.fromEntries(a.files.map((f) => [f.path, f]));
    expect(byPath["priv.txt"]).toMatchObject({ status: "modified", omitted: "secret" });
    expect(byPath["priv.txt"].content).toBeUndefined();
    expect(byPath["copy.txt"].content).toBe("[redacted]\n");
    expect(secrets).toContain("PRIVATE-sensitive-123");
  });
});
