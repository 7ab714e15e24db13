// artifacts <thread>: what the thread's runs left behind — changed files (small text inlined) and,
// for a git checkout, status and diff — read from the thread, so it works after the box is gone.
import { idArg, intArg, paths, threadIdArg } from "../lib/api.mjs";
import { printable, printableLine, safe } from "../lib/render.mjs";
import { colourEnabled, palette } from "../lib/term.mjs";

const isRecord = (v) => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * Human-readable text of artifact entries, newest run first (pure). Artifact payloads are not
 * checked by the server (any writer of the thread may write one): a malformed one is named, not fatal.
 */
export function renderArtifacts(artifacts, { full = false, runId = undefined, before = undefined, c = { gray: (s) => s, bold: (s) => s } } = {}) {
  if (!Array.isArray(artifacts) || artifacts.length === 0) {
    const none = runId === undefined ? "no artifacts on this thread" : safe`no artifacts from run ${runId}`;
    return before === undefined ? none : `${none} before offset ${printableLine(before)}`;
  }
  const out = [];
  for (const a of artifacts) {
    const p = isRecord(a?.payload) ? a.payload : {};
    const malformed = (what) => out.push(c.gray(safe`run ${p.runId ?? "?"}: ${p.type ?? "an artifact"} entry ${what}, skipped`));
    if (p.type === "artifact.files") {
      if (!Array.isArray(p.files)) {
        malformed("without a file list");
        continue;
      }
      const files = p.files.filter((f) => isRecord(f) && typeof f.path === "string");
      const odd = p.files.length - files.length;
      out.push(c.bold(safe`run ${p.runId}: ${files.length} file(s)` + (p.truncated ? " (list cut)" : "")));
      for (const f of files) {
        const note = f.status === "deleted" ? "" : f.omitted ? safe` [${f.omitted}]` : "";
        out.push(`  ${printableLine(f.status).padEnd(8)} ${printableLine(f.path)}  ${c.gray(safe`${f.size} B` + note)}`);
        if (full && f.content !== undefined) out.push(printable(f.content).replace(/^/gm, "    | ").replace(/\n {4}\| $/, ""));
      }
      if (odd) out.push(c.gray(`  ${odd} malformed file item(s) skipped`));
    } else if (p.type === "artifact.diff") {
      out.push(c.bold(safe`run ${p.runId}: diff against ${p.base ? String(p.base).slice(0, 12) : "an empty repository"} (${p.bytes} B` + (p.truncated ? ", head shown)" : ")")));
      if (p.stream) out.push(c.gray(safe`  full diff: plain stream ${p.stream}`));
      if (full && typeof p.diff === "string") out.push(printable(p.diff));
      else if (p.status) out.push(printable(p.status).trimEnd().replace(/^/gm, "  "));
    } else if (p.type === "artifact.folder") {
      if (p.status === "synced") out.push(c.bold(safe`run ${p.runId}: folder ${p.folder} is now version ${p.version}`) + c.gray(safe` (${p.bytes} B, from version ${p.baseVersion ?? "?"}; ${p.download})`));
      else if (p.status === "unchanged") out.push(safe`run ${p.runId}: folder ${p.folder} unchanged`);
      else out.push(safe`run ${p.runId}: folder sync failed for ${(Array.isArray(p.folders) ? p.folders : [p.folders ?? p.folder ?? "?"]).join(", ")}: ${p.error}`);
    } else {
      malformed("of no kind this CLI knows");
    }
  }
  return out.join("\n");
}

/** The `before` of the next page when this page of `limit` is full (a shorter page is the last), else null (pure). */
export function olderPage(artifacts, limit) {
  if (!Array.isArray(artifacts) || artifacts.length < limit) return null;
  const offset = artifacts.at(-1)?.offset;
  return typeof offset === "string" && offset ? offset : null;
}

/** A word the shell reads back as itself: a run id or offset from the server is quoted unless plain. */
const shellWord = (w) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(w) ? w : `'${printableLine(w).replace(/'/g, "'\\''")}'`);

export function registerArtifacts(program, ctxOf) {
  program
    .command("artifacts")
    .description("what a thread's runs produced (files, git status and diff), kept on the thread after the box is gone")
    .argument("<thread>", "thread id", threadIdArg)
    .option("--run <runId>", "only this run", idArg("--run id"))
    .option("--full", "print file contents and the whole inline diff")
    .option("--limit <n>", "at most this many artifact entries (1–200)", intArg("--limit", 1, 200), 50)
    .option("--before <offset>", "only artifacts older than this offset (the next page: the offset the previous page named)", idArg("--before offset"))
    .action(async (threadId, opts, cmd) => {
      const ctx = ctxOf(cmd);
      const q = new URLSearchParams({ limit: String(opts.limit) });
      if (opts.run) q.set("runId", opts.run);
      if (opts.before) q.set("before", opts.before);
      const r = await ctx.api().get(`${paths.threadAction(threadId, "artifacts")}?${q}`);
      ctx.print(r, () => renderArtifacts(r.artifacts, { full: Boolean(opts.full), runId: opts.run, before: opts.before, c: ctx.c }));
      // A full page may not be the last: without this the older artifacts are silently not there.
      const next = olderPage(r.artifacts, opts.limit);
      if (next && !ctx.json) {
        const args = [threadId, ...(opts.run ? ["--run", opts.run] : []), ...(opts.limit !== 50 ? ["--limit", String(opts.limit)] : []), "--before", next];
        process.stderr.write(`${palette(colourEnabled(process.stderr)).gray(`older artifacts may follow: threadbox artifacts ${args.map(shellWord).join(" ")}`)}\n`);
      }
    });
}
