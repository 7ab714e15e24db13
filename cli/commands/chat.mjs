// chat <bot>: a direct-message thread with a bot. Each stdin line is posted as a chat message;
// everything others write to the thread (the bot's replies, its tool calls, child runs) is printed
// as it arrives. At the end of stdin it waits for the answer to every message it posted (and for
// the child runs those answers started), then exits.
import { randomUUID } from "node:crypto";
import { createInterface } from "node:readline";
import { paths, resolveAgent, retrying, threadIdArg } from "../lib/api.mjs";
import { postOnce } from "../lib/ask-again.mjs";
import { tokenClaims } from "../lib/config.mjs";
import { CliError, EXIT } from "../lib/errors.mjs";
import { printableLine, renderEntry, safe } from "../lib/render.mjs";
import { subscribe } from "../lib/subscribe.mjs";
import { createSpinner } from "../lib/term.mjs";

/**
 * Where a conversation stands, updated entry by entry (pure). Each message we posted waits for its
 * answer: the bot's chat naming it (`triggerEntryId`), or its failed turn (`signal.dispatch.error`,
 * also naming it; `failures` keeps why, for every failed turn: a later answer to another message does
 * not make up for it). Child runs the bot delegated meanwhile are waited for too, until each has
 * finished and its result has come back as a chat.
 * @typedef {{ waiting: string[], answeredIds: string[], posted: string[], lastPosted: string | null, since: string | null,
 *   pendingChildren: number, childAnswers: number, failures: { id: string | null, reason: string }[] }} ChatProgress
 */
export const initialProgress = () => ({ waiting: [], answeredIds: [], posted: [], lastPosted: null, since: null, pendingChildren: 0, childAnswers: 0, failures: [] });

/** @returns {ChatProgress} */
export function advance(progress, entry, me) {
  const p = { ...progress, waiting: [...progress.waiting], answeredIds: [...progress.answeredIds], failures: [...progress.failures] };
  const type = entry.payload?.type;
  const trigger = entry.payload?.triggerEntryId;
  const ours = entry.authorId === me;
  const sinceOurs = p.since !== null && entry.offset > p.since;
  const answers = (id) => {
    p.waiting = p.waiting.filter((w) => w !== id);
    if (!p.answeredIds.includes(id)) p.answeredIds.push(id);
  };
  if (!ours && type === "chat") {
    if (entry.payload.origin === "child_finished") p.childAnswers = Math.max(0, p.childAnswers - 1);
    else if (typeof trigger === "string") answers(trigger);
    else if (p.lastPosted !== null && entry.offset > p.lastPosted) p.waiting = []; // an answer that names nothing: the last one
  }
  if (!ours && type === "signal.dispatch.error" && (typeof trigger === "string" ? true : p.lastPosted !== null && entry.offset > p.lastPosted)) {
    if (typeof trigger === "string") answers(trigger);
    else p.waiting = [];
    p.pendingChildren = 0;
    p.failures.push({ id: typeof trigger === "string" ? trigger : null, reason: String(entry.payload.reason ?? "the bot's turn failed") });
  }
  if (sinceOurs && type === "pi.tool_result" && (entry.payload.toolName ?? entry.payload.name) === "delegate_task" && !entry.payload.isError
      && /\bth_[A-Za-z0-9]+/.test(String(entry.payload.output ?? ""))) {
    p.pendingChildren += 1;
  }
  if (sinceOurs && type === "signal.thread.child_finished" && p.pendingChildren > 0) {
    p.pendingChildren -= 1;
    p.childAnswers += 1; // the bot's chat with the child's answer comes with it
  }
  return p;
}

/** After posting message `id` at `offset`: its answer may already have come over the socket. */
export function onPosted(progress, offset, id) {
  const answeredAlready = progress.answeredIds.includes(id);
  return {
    ...progress,
    waiting: answeredAlready ? progress.waiting : [...progress.waiting, id],
    posted: [...progress.posted, id],
    lastPosted: offset,
    since: progress.since ?? offset,
  };
}

export const answered = (progress) => progress.waiting.length === 0 && progress.pendingChildren === 0 && progress.childAnswers === 0;

/**
 * Why the conversation failed, once it is over: every failed turn of the bot on a message posted
 * here (another writer's message failing is not ours to report), or null when none failed.
 */
export function failureOf(progress) {
  const f = progress.failures.filter((x) => x.id === null || progress.posted.includes(x.id)).map((x) => x.reason);
  if (f.length === 0) return null;
  return f.length === 1 ? f[0] : `${f.length} turns failed: ${f.join("; ")}`;
}

/** `--thread`: a DM thread with this bot, else nothing there would answer every message. */
async function dmThread(api, threadId, bot) {
  const thread = await api.get(paths.thread(threadId));
  if (thread.parent?.kind !== "agent" || thread.parent.id !== bot.id) {
    throw new CliError("usage", `thread ${threadId} is not a direct-message thread with @${bot.handle}: leave out --thread to open one`);
  }
  return thread;
}

function positiveSeconds(value) {
  const n = Number(value);
  if (!value.trim() || !Number.isFinite(n) || n <= 0) throw new CliError("usage", `--reply-timeout ${value} is not a number of seconds above 0`);
  return n;
}

export function registerChat(program, ctxOf, setExit) {
  program
    .command("chat")
    .description("talk to a bot in a direct-message thread: one line of stdin per message")
    .argument("<bot>", "the bot's @handle (or id)")
    .option("--thread <thread>", "continue this DM thread instead of opening a new one", threadIdArg)
    .option("--reply-timeout <seconds>", "at the end of stdin, how long to wait for the last answer", positiveSeconds, 300)
    .action(async (botRef, opts, cmd) => {
      const ctx = ctxOf(cmd);
      const api = ctx.api();
      const { c, json } = ctx;
      // Ctrl-C (or a SIGTERM) ends the conversation as it ends a watched run: exit 130 (143) with
      // the spinner cleared, not a death by signal, which a script sees as no exit code at all.
      // The process exits once the command returns, so the handlers stay.
      let interrupted = false;
      let finish;
      const finished = new Promise((resolve) => { finish = resolve; });
      let rl;
      const stop = (code) => () => {
        interrupted = true;
        setExit(code);
        rl?.close(); // ends the read of stdin, wherever it waits
        finish();
      };
      process.once("SIGINT", stop(EXIT.interrupted));
      process.once("SIGTERM", stop(EXIT.terminated));
      const bot = await ctx.wait(`finding @${botRef.replace(/^@/, "")}`, () => resolveAgent(api, botRef));
      const me = tokenClaims(api.target.token).sub;
      const names = new Map([[bot.id, `@${bot.handle}`]]);
      if (interrupted) return;
      const interactive = Boolean(process.stdin.isTTY);
      rl = createInterface({ input: process.stdin, terminal: false });
      const input = rl[Symbol.asyncIterator]();
      // Piped input is read up to its first message before a new DM thread is opened: empty input
      // (a `</dev/null`, an empty file) would leave an empty thread behind and still exit 0.
      let first;
      if (!interactive && !opts.thread) {
        for (let n = await input.next(); !n.done; n = await input.next()) {
          if (n.value.trim()) {
            first = n.value;
            break;
          }
        }
        if (interrupted) return;
        if (first === undefined) throw new CliError("usage", `nothing to send: no message on stdin (type one, or pipe it in: echo "hi" | threadbox chat @${bot.handle})`);
      }
      // A restart just then is waited for: under one Idempotency-Key, so a lost answer opens one thread.
      const thread = opts.thread
        ? await dmThread(api, opts.thread, bot)
        : await ctx.wait("opening a DM thread", () => postOnce(ctx, api, "/api/threads", {
          title: `chat with @${bot.handle}`,
          parent: { kind: "agent", id: bot.id },
          // the bot's tools (run_command, delegate_task) work in the thread's environment
          ...(bot.environmentId ? { environmentId: bot.environmentId } : {}),
        }, "thread"));
      if (interrupted) return; // nothing posted to it
      setExit(EXIT.interrupted); // until every answer is in (see threadbox.mjs)
      if (json) process.stdout.write(`${JSON.stringify({ threadId: thread.id, bot: { id: bot.id, handle: bot.handle } })}\n`);
      else process.stderr.write(c.gray(safe`thread ${thread.id} with @${bot.handle}` + `${interactive ? " — type a message, Ctrl-D to end" : ""}\n`));

      const spinner = createSpinner();
      const start = opts.thread ? (await api.get(`${paths.threadAction(thread.id, "entries")}?offset=now&limit=1`)).nextOffset : "-1";
      let progress = initialProgress();
      let inputDone = false;
      const maybeFinish = () => { if (inputDone && answered(progress)) finish(); };

      const sub = subscribe(api.target, thread.id, {
        offset: start,
        // With --json, stderr holds JSON errors only (as for tail): the notice is for people.
        onReconnecting: (ms) => { if (!json) spinner.print(c.gray(`connection lost, reconnecting in ${ms} ms`), process.stderr); },
        onEntry(entry) {
          progress = advance(progress, entry, me);
          if (answered(progress)) spinner.stop();
          if (entry.authorId === me && entry.payload?.type === "chat") return; // our own words, already on screen
          if (json) process.stdout.write(`${JSON.stringify(entry)}\n`);
          else {
            const line = renderEntry(entry, c, { names });
            if (line) spinner.print(line);
          }
          maybeFinish();
        },
      });
      sub.done.catch((err) => {
        finish(err);
        // The conversation cannot go on (a token expired, the thread gone): said now, not once
        // the person at the prompt types again or the input ends.
        rl.close();
      });

      const lines = async function* () {
        if (first !== undefined) yield first;
        for (let n = await input.next(); !n.done; n = await input.next()) yield n.value;
      };
      for await (const line of lines()) {
        if (interrupted) break;
        const text = line.trim();
        if (!text) continue;
        const id = `cli-${randomUUID()}`;
        // Typed while the server restarts or the network is down: sent again, under the same id (the
        // server keeps it once), instead of ending the conversation.
        const r = await retrying(() => api.post(paths.threadAction(thread.id, "entries"), { id, payload: { type: "chat", text } }), {
          onRetry: (ms, err) => { if (!json) spinner.print(c.gray(`${printableLine(err.message)}: sending the message again in ${ms} ms`), process.stderr); },
        });
        progress = onPosted(progress, r.entries[0].offset, id);
        if (!json && !answered(progress)) spinner.start(safe`@${bot.handle} is thinking`);
      }
      inputDone = true;
      const timeoutMs = opts.replyTimeout * 1000;
      const timer = setTimeout(() => finish(new CliError("timeout", `no answer from @${bot.handle} within ${opts.replyTimeout} s (thread ${thread.id})`)), timeoutMs);
      maybeFinish();
      const outcome = await finished;
      clearTimeout(timer);
      spinner.stop();
      sub.close();
      if (interrupted) return;
      if (outcome instanceof Error) throw outcome;
      const failure = failureOf(progress);
      if (failure) throw new CliError("bot_failed", `@${bot.handle} could not answer: ${failure} (thread ${thread.id})`);
      setExit(EXIT.ok);
    });
}
