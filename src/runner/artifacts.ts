/**
 * What a run left in its working directory, collected by the runner before its finished-signal
 * so the thread keeps the work after the box is gone. Node-only (runs in the box).
 *
 * A git checkout yields `git status` and the diff against the commit the run started from
 * (untracked files included); any other directory yields the files created or changed since the
 * run started. Small UTF-8 files are inlined; binary, oversize and secret-looking files are listed
 * only; secret values are redacted from everything that is inlined.
 */
import { execFileSync } from "node:child_process";
import { closeSync, constants as fsConstants, existsSync, fstatSync, lstatSync, openSync, readdirSync, readSync } from "node:fs";
import { join, relative, sep } from "node:path";
import { isSensitivePath, redactionList, redactText } from "./redact";

export type WorkspaceStart =
  | { kind: "git"; root: string; head: string | null; untracked?: Map<string, { size: number; mtimeMs: number }> }
  | { kind: "files"; root: string; files: Map<string, { size: number; mtimeMs: number }> };

export type ArtifactFile = {
  path: string;
  status: "added" | "modified" | "deleted";
  size: number;
  binary: boolean;
  content?: string;
  /** Why the content is not inlined. */
  omitted?: "binary" | "too_large" | "secret" | "budget" | "symlink";
};

export type Artifacts = {
  files: ArtifactFile[];
  /** More changed files than `maxFiles`: the list is cut. */
  filesTruncated: boolean;
  git?: { base: string | null; status: string; diff: string; diffBytes: number };
};

export type ArtifactLimits = {
  /** Largest file whose content is inlined. */
  maxTextBytes: number;
  /** Total inlined file content per run. */
  maxInlineTotalBytes: number;
  maxFiles: number;
  /** Walking a non-git directory stops after this many entries. */
  maxScanEntries: number;
};

export const DEFAULT_ARTIFACT_LIMITS: ArtifactLimits = { maxTextBytes: 16 * 1024, maxInlineTotalBytes: 256 * 1024, maxFiles: 200, maxScanEntries: 20_000 };

/** Never walked: dependency trees, VCS internals and the runner's own files. */
const SKIP_DIRS = new Set([".git", "node_modules", ".threadbox", ".venv", "__pycache__", ".cache"]);
/** Listed, never inlined: files that commonly hold credentials. */
const SECRET_FILE = /(^|\/)(\.env(\..*)?|\.npmrc|\.netrc|\.pypirc|id_(rsa|ed25519|ecdsa)(\.pub)?|.*\.(pem|key|p12|pfx)|credentials(\.json)?|\.git-credentials)$/i;

/**
 * When the collection under way must be done (epoch ms): each git command gets what is left of
 * it. A collection runs synchronously from start to end, so one deadline at a time is enough.
 */
let gitDeadlineMs = Infinity;

function git(root: string, args: string[], maxBuffer = 32 * 1024 * 1024): string {
  const leftMs = gitDeadlineMs - Date.now();
  if (leftMs <= 0) throw new Error("out of time collecting the run's artifacts");
  // Paths as they are (UTF-8), not octal-escaped and quoted: they are shown and read back as paths.
  return execFileSync("git", ["-c", "core.quotePath=false", ...args], {
    cwd: root, encoding: "utf8", maxBuffer, stdio: ["ignore", "pipe", "ignore"],
    ...(Number.isFinite(leftMs) ? { timeout: Math.ceil(leftMs), killSignal: "SIGKILL" as const } : {}),
  });
}

/** Records where the run starts from. Never throws: an unreadable directory starts empty. */
export function snapshotWorkspace(dir: string): WorkspaceStart {
  try {
    const top = git(dir, ["rev-parse", "--show-toplevel"]).trim();
    if (top) {
      let head: string | null = null;
      try {
        head = git(dir, ["rev-parse", "--verify", "HEAD"]).trim() || null;
      } catch {
        head = null; // a fresh repository without commits
      }
      return { kind: "git", root: dir, head, untracked: untrackedNow(dir, DEFAULT_ARTIFACT_LIMITS.maxScanEntries) };
    }
  } catch {
    // not a git checkout (or no git): compare file lists instead
  }
  return { kind: "files", root: dir, files: scan(dir, DEFAULT_ARTIFACT_LIMITS.maxScanEntries) };
}

function scan(root: string, maxEntries: number): Map<string, { size: number; mtimeMs: number }> {
  const out = new Map<string, { size: number; mtimeMs: number }>();
  const stack = [root];
  let seen = 0;
  while (stack.length && seen < maxEntries) {
    const dir = stack.pop()!;
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      continue;
    }
    for (const name of names) {
      if (++seen > maxEntries) break;
      const full = join(dir, name);
      let st;
      try {
        st = lstatSync(full);
      } catch {
        continue;
      }
      if (st.isDirectory()) {
        if (!SKIP_DIRS.has(name)) stack.push(full);
      } else if (st.isFile()) {
        out.set(relative(root, full).split(sep).join("/"), { size: st.size, mtimeMs: st.mtimeMs });
      }
    }
  }
  return out;
}

/** Artifacts are files a person reads back: shorter secrets than in entries are worth hiding there. */
const MIN_ARTIFACT_SECRET_LENGTH = 4;

function isBinary(buf: Buffer): boolean {
  const head = buf.subarray(0, 8192);
  if (head.includes(0)) return true;
  try {
    new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(buf);
    return false;
  } catch {
    return true;
  }
}

/**
 * A regular file's bytes, at most `max` of them (null past that): a process the run left behind
 * may still swap the file for a link or grow it after it was looked at.
 */
function readRegularFile(path: string, max: number): Buffer | null {
  const fd = openSync(path, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW | fsConstants.O_NONBLOCK);
  try {
    if (!fstatSync(fd).isFile()) throw new Error("not a regular file");
    const buf = Buffer.alloc(max + 1);
    let n = 0;
    for (let r; n < buf.length && (r = readSync(fd, buf, n, buf.length - n, null)) > 0;) n += r;
    return n > max ? null : buf.subarray(0, n);
  } finally {
    closeSync(fd);
  }
}

/**
 * What changed since `start`. Never throws for an unreadable file: it is listed without content.
 * Throws when git is not done by `deadlineMs` (a huge repository, a hung filesystem): the run's end
 * must not wait on it.
 */
export function collectArtifacts(
  start: WorkspaceStart, secrets: string[], limits: ArtifactLimits = DEFAULT_ARTIFACT_LIMITS, sensitive: string[] = [], deadlineMs = Infinity,
): Artifacts {
  gitDeadlineMs = deadlineMs;
  try {
    return collectChanges(start, secrets, limits, sensitive);
  } finally {
    gitDeadlineMs = Infinity;
  }
}

function collectChanges(start: WorkspaceStart, secrets: string[], limits: ArtifactLimits, sensitive: string[]): Artifacts {
  const changed = start.kind === "git" ? gitChanges(start) : fileChanges(start, limits);
  const redactions = redactionList(secrets, MIN_ARTIFACT_SECRET_LENGTH);
  const redact = (text: string) => redactText(text, redactions);
  // Files the environment marked sensitive are listed like credential files: by path only.
  const hidden = (path: string) => SECRET_FILE.test(path) || isSensitivePath(path, sensitive);
  const filesTruncated = changed.length > limits.maxFiles;
  let budget = limits.maxInlineTotalBytes;
  const files = changed.slice(0, limits.maxFiles).map(({ path, status }): ArtifactFile => {
    if (status === "deleted") return { path, status, size: 0, binary: false };
    const full = join(start.root, path);
    let st;
    try {
      st = lstatSync(full);
    } catch {
      return { path, status, size: 0, binary: false };
    }
    const size = st.size;
    if (hidden(path)) return { path, status, size, binary: false, omitted: "secret" };
    // Reading through a link would inline a file from outside the working directory, of a size the
    // bound above never saw (or a device that never ends, which would hang the run's end).
    if (st.isSymbolicLink()) return { path, status, size, binary: false, omitted: "symlink" };
    if (!st.isFile()) return { path, status, size, binary: false };
    if (size > limits.maxTextBytes) return { path, status, size, binary: false, omitted: "too_large" };
    let buf: Buffer | null;
    try {
      buf = readRegularFile(full, limits.maxTextBytes);
    } catch {
      return { path, status, size, binary: false };
    }
    if (buf === null) return { path, status, size, binary: false, omitted: "too_large" };
    if (isBinary(buf)) return { path, status, size, binary: true, omitted: "binary" };
    if (buf.length > budget) return { path, status, size, binary: false, omitted: "budget" };
    budget -= buf.length;
    return { path, status, size, binary: false, content: redact(buf.toString("utf8")) };
  });
  const out: Artifacts = { files, filesTruncated };
  if (start.kind === "git") {
    const status = git(start.root, ["status", "--porcelain=v1", "--untracked-files=all"]);
    // The untracked files diffed are the ones listed: one git process each, and a run can leave
    // tens of thousands (a venv, a build directory nobody ignored) that would take minutes.
    const diff = redact(gitDiff(start, changed.slice(0, limits.maxFiles), hidden, sensitive));
    out.git = { base: start.head, status: redact(status), diff, diffBytes: Buffer.byteLength(diff) };
  }
  return out;
}

type Change = { path: string; status: ArtifactFile["status"] };

function gitChanges(start: Extract<WorkspaceStart, { kind: "git" }>): Change[] {
  const out = new Map<string, ArtifactFile["status"]>();
  if (start.head) {
    // Committed during the run, staged or not: all against the starting commit.
    // NUL-separated: a path may hold a space, a quote or a newline.
    const fields = git(start.root, ["diff", "-z", "--name-status", "--no-renames", start.head]).split("\0");
    for (let i = 0; i + 1 < fields.length; i += 2) {
      const [status, path] = [fields[i], fields[i + 1]];
      if (/^[ADMT]$/.test(status) && path) out.set(path, status === "A" ? "added" : status === "D" ? "deleted" : "modified");
    }
  } else {
    for (const p of lsFiles(start.root, ["--cached"])) out.set(p, "added");
  }
  // Untracked files the run found there and left as they were (an earlier run's on a shared box,
  // the environment's files, a folder copied in) are not its work.
  for (const p of lsFiles(start.root, ["--others", "--exclude-standard"])) {
    const before = start.untracked?.get(p);
    if (before && sameStat(join(start.root, p), before)) continue;
    out.set(p, "added");
  }
  for (const p of start.untracked?.keys() ?? []) {
    if (!out.has(p) && !existsSync(join(start.root, p))) out.set(p, "deleted");
  }
  return [...out].filter(([p]) => !p.split("/").some((seg) => SKIP_DIRS.has(seg))).map(([path, status]) => ({ path, status }));
}

/** Untracked files and their stat, at most `max` of them (those past it count as the run's). */
function untrackedNow(root: string, max: number): Map<string, { size: number; mtimeMs: number }> {
  const out = new Map<string, { size: number; mtimeMs: number }>();
  try {
    for (const p of lsFiles(root, ["--others", "--exclude-standard"]).slice(0, max)) {
      try {
        const st = lstatSync(join(root, p));
        out.set(p, { size: st.size, mtimeMs: st.mtimeMs });
      } catch {
        // gone already: nothing to compare with
      }
    }
  } catch {
    // git could not list them: every untracked file counts as the run's
  }
  return out;
}

function sameStat(path: string, before: { size: number; mtimeMs: number }): boolean {
  try {
    const st = lstatSync(path);
    return st.size === before.size && st.mtimeMs === before.mtimeMs;
  } catch {
    return false;
  }
}

function lsFiles(root: string, args: string[]): string[] {
  return git(root, ["ls-files", "-z", ...args]).split("\0").filter(Boolean);
}

function gitDiff(start: Extract<WorkspaceStart, { kind: "git" }>, changed: Change[], hidden: (path: string) => boolean, sensitive: string[]): string {
  const parts: string[] = [];
  const excluded = sensitive.map((p) => `:(exclude,literal)${p}`);
  if (start.head) {
    const args = ["diff", "--no-renames", "--no-color", start.head, ...(excluded.length ? ["--", ".", ...excluded] : [])];
    try {
      parts.push(git(start.root, args));
    } catch (err) {
      // Past git's output buffer (a big file rewritten): what it printed so far is the diff's head;
      // the entry and the stream hold only a head of it anyway.
      const stdout = (err as { stdout?: unknown }).stdout;
      if ((err as { code?: string }).code !== "ENOBUFS" || typeof stdout !== "string") throw err;
      parts.push(stdout);
    }
  }
  const tracked = new Set(start.head ? lsFiles(start.root, ["--cached"]) : []);
  for (const c of changed) {
    if (c.status !== "added" || tracked.has(c.path) || hidden(c.path)) continue;
    try {
      // `--no-index` exits 1 when the files differ, which is always here.
      parts.push(git(start.root, ["diff", "--no-color", "--no-index", "--", "/dev/null", c.path]));
    } catch (err) {
      const stdout = (err as { stdout?: string }).stdout;
      if (typeof stdout === "string") parts.push(stdout);
    }
  }
  return parts.join("");
}

function fileChanges(start: Extract<WorkspaceStart, { kind: "files" }>, limits: ArtifactLimits): Change[] {
  const now = scan(start.root, limits.maxScanEntries);
  const out: Change[] = [];
  for (const [path, st] of now) {
    const before = start.files.get(path);
    if (!before) out.push({ path, status: "added" });
    else if (before.size !== st.size || before.mtimeMs !== st.mtimeMs) out.push({ path, status: "modified" });
  }
  for (const path of start.files.keys()) if (!now.has(path)) out.push({ path, status: "deleted" });
  return out.sort((a, b) => a.path.localeCompare(b.path));
}
