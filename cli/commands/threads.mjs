// threads, new, post, tail, delegate, stop, resume.
import { randomUUID } from "node:crypto";
import { Option } from "commander";
import { envArg, intArg, paths, resolveEnvironment, retrying, threadIdArg } from "../lib/api.mjs";
import { postOnce, retryNotice } from "../lib/ask-again.mjs";
import { CliError, EXIT } from "../lib/errors.mjs";
import { followThread } from "../lib/follow.mjs";
import { printableLine, safe, threadLine, threadTree } from "../lib/render.mjs";
import { readStdin } from "../lib/term.mjs";

const STATUSES = ["idle", "running", "completed", "failed"];

/**
 * `-` reads the text from stdin, so long or multi-line text needs no quoting. A blank text (an
 * unset `"$VAR"`, an empty pipe) is a usage mistake: the server would post an empty chat or start
 * a run on a blank task.
 */
const textArg = async (text, what) => {
  const value = text === "-" ? (await readStdin()).replace(/\n$/, "") : text;
  if (!value.trim()) throw new CliError("usage", `the ${what} is empty${text === "-" ? " (nothing on stdin)" : ""}`);
  return value;
};

export function registerThreads(program, ctxOf, setExit) {
  program
    .command("threads")
    .description("list the house's threads, newest first")
    .option("--tree", "show children under their parents")
    .addOption(new Option("--status <status>", "only threads in this status").choices(STATUSES))
    .option("--limit <n>", "at most this many (1–1000)", intArg("--limit", 1, 1000), 100)
    .action(async (opts, cmd) => {
      const ctx = ctxOf(cmd);
      const q = new URLSearchParams({ limit: String(opts.limit) });
      if (opts.status) q.set("status", opts.status);
      const { threads } = await ctx.wait("loading threads", () => ctx.api().get(`/api/threads?${q}`));
      ctx.print({ threads }, () => {
        if (!threads.length) return ctx.c.gray(opts.status ? `no ${opts.status} threads` : "no threads yet: threadbox new \"my first thread\"");
        return opts.tree ? threadTree(threads, ctx.c) : threads.map((t) => threadLine(t, ctx.c));
      });
    });

  program
    .command("new")
    .description("create a thread; prints its id")
    .argument("[title]", "title of the thread")
    .option("--env <environment>", "environment (id or name) its runs use", envArg)
    .option("--parent <thread>", "make it a child of this thread", threadIdArg)
    .action(async (title, opts, cmd) => {
      const ctx = ctxOf(cmd);
      const api = ctx.api();
      const environmentId = await resolveEnvironment(api, opts.env);
      const body = {
        ...(title ? { title } : {}),
        ...(environmentId ? { environmentId } : {}),
        ...(opts.parent ? { parent: { kind: "thread", id: opts.parent } } : {}),
      };
      const row = await ctx.wait("creating thread", () => postOnce(ctx, api, "/api/threads", body, "thread"));
      ctx.print(row, () => printableLine(row.id));
    });

  program
    .command("post")
    .description("post a chat message to a thread (text `-` reads stdin)")
    .argument("<thread>", "thread id", threadIdArg)
    .argument("<text>", "message text, or - for stdin")
    .option("--id <id>", "entry id: the same id twice posts once", undefined)
    .action(async (threadId, text, opts, cmd) => {
      const ctx = ctxOf(cmd);
      const envelope = { id: opts.id ?? `cli-${randomUUID()}`, payload: { type: "chat", text: await textArg(text, "message") } };
      // Sent again under the same entry id when the answer is lost: the thread keeps an id once.
      let retried = false;
      const r = await ctx.wait("posting", () => retrying(() => ctx.api().post(paths.threadAction(threadId, "entries"), envelope), {
        onRetry: (ms, err) => { retried = true; retryNotice(ctx, (d) => `sending again in ${d} ms (same entry id: posted once)`)(ms, err); },
      }));
      // A duplicate of an id this command made up can only be its own first try, whose answer was lost.
      const already = r.entries[0].duplicate && !(retried && opts.id === undefined);
      ctx.print(r, () => safe`posted ${r.entries[0].id} at offset ${r.entries[0].offset}` + (already ? " (already there)" : ""));
    });

  program
    .command("tail")
    .description("print a thread's entries as they arrive (WebSocket)")
    .argument("<thread>", "thread id", threadIdArg)
    .option("--until-done", "exit when the thread's run ends: 0 completed, 1 failed")
    .option("--from <offset>", "start after this offset (-1: the beginning, now: only new entries)", "-1")
    .action(async (threadId, opts, cmd) => {
      const ctx = ctxOf(cmd);
      if (opts.untilDone) setExit(EXIT.interrupted); // until the run's end is known (see threadbox.mjs)
      setExit(await followThread({ api: ctx.api(), threadId, untilDone: Boolean(opts.untilDone), offset: opts.from, json: ctx.json, c: ctx.c }));
    });

  program
    .command("delegate")
    .description("hand a task to a coding agent in a fresh box, on a new child thread")
    .argument("<thread>", "parent thread id", threadIdArg)
    .argument("<task>", "what the agent should do, or - for stdin")
    .option("--watch", "follow the child thread until its run ends; exit 0 completed, 1 failed")
    .option("--env <environment>", "environment (id or name); default: the parent's", envArg)
    .option("--model <provider/model>", "model for pi, e.g. openai/gpt-4.1-mini")
    .addOption(new Option("--harness <harness>", "coding agent").choices(["pi", "claude-code", "codex"]))
    .option("--repo <url>", "git repository to clone into the box")
    .option("--branch <branch>", "branch of --repo")
    .option("--title <title>", "title of the child thread")
    .action(async (threadId, task, opts, cmd) => {
      const ctx = ctxOf(cmd);
      const api = ctx.api();
      const environmentId = await resolveEnvironment(api, opts.env);
      const body = { task: await textArg(task, "task") };
      for (const k of ["model", "harness", "repo", "branch", "title"]) if (opts[k]) body[k] = opts[k];
      if (environmentId) body.environmentId = environmentId;
      const r = await ctx.wait("delegating", () => postOnce(ctx, api, paths.threadAction(threadId, "delegate"), body, "child"));
      if (!opts.watch) return ctx.print(r, () => printableLine(r.childThreadId));
      // with --json the first line is the delegate answer, then one line per entry
      if (ctx.json) process.stdout.write(`${JSON.stringify(r)}\n`);
      else process.stderr.write(`${ctx.c.gray(safe`child thread ${r.childThreadId}, run ${r.runId}`)}\n`);
      setExit(EXIT.interrupted); // until the run's end is known
      setExit(await followThread({ api, threadId: r.childThreadId, untilDone: true, json: ctx.json, c: ctx.c }));
    });

  program
    .command("stop")
    .description("stop a thread's running run (status failed, reason stopped)")
    .argument("<thread>", "thread id", threadIdArg)
    .action(async (threadId, _opts, cmd) => {
      const ctx = ctxOf(cmd);
      const row = await ctx.wait("stopping", () => ctx.api().post(paths.threadAction(threadId, "stop"), {}));
      ctx.print(row, () => threadLine(row, ctx.c));
    });

  program
    .command("interrupt")
    .description("abort the running agent's current turn; the run goes on and waits for your next message (threadbox post)")
    .argument("<thread>", "thread id", threadIdArg)
    .action(async (threadId, _opts, cmd) => {
      const ctx = ctxOf(cmd);
      const r = await ctx.wait("interrupting", () => ctx.api().post(paths.threadAction(threadId, "interrupt"), {}));
      ctx.print(r, () => safe`interrupted run ${r.runId ?? "?"} of ${r.threadId}; post a message to say what to do instead`);
    });

  program
    .command("resume")
    .description("continue a finished thread with a new message")
    .argument("<thread>", "thread id", threadIdArg)
    .argument("<message>", "what to do next, or - for stdin")
    .option("--watch", "follow the run until it ends; exit 0 completed, 1 failed")
    .option("--model <provider/model>", "model for this run")
    .action(async (threadId, message, opts, cmd) => {
      const ctx = ctxOf(cmd);
      const api = ctx.api();
      const body = { message: await textArg(message, "message"), ...(opts.model ? { model: opts.model } : {}) };
      // Where the log ends before this run: watching from there shows the whole run, even a quick one.
      const before = opts.watch
        ? (await api.get(`${paths.threadAction(threadId, "entries")}?offset=now&limit=1`)).nextOffset
        : undefined;
      const r = await ctx.wait("resuming", () => postOnce(ctx, api, paths.threadAction(threadId, "resume"), body, "run"));
      if (!opts.watch) return ctx.print(r, () => safe`${r.threadId} ${r.status} (run ${r.runId})`);
      setExit(EXIT.interrupted); // until the run's end is known
      setExit(await followThread({ api, threadId, untilDone: true, offset: before, json: ctx.json, c: ctx.c }));
    });
}
