// chat <bot>: a direct-message thread with a bot. Each stdin line is posted as a chat message;
// everything others write to the thread (the bot's replies, its tool calls, child runs) is printed
// as it arrives. At the end of stdin it waits for the answer to the last message, then exits.
import { randomUUID } from "node:crypto";
import { createInterface } from "node:readline";
import { paths, resolveAgent } from "../lib/api.mjs";
import { tokenClaims } from "../lib/config.mjs";
import { CliError } from "../lib/errors.mjs";
import { renderEntry } from "../lib/render.mjs";
import { subscribe } from "../lib/subscribe.mjs";
import { createSpinner } from "../lib/term.mjs";

/**
 * Whether `entry` answers the messages posted so far: a chat by someone else, after the last of
 * ours. Pure; offsets are sortable strings.
 */
export function isReply(entry, me, lastPostedOffset) {
  return entry.payload?.type === "chat" && entry.authorId !== me && lastPostedOffset !== null && entry.offset > lastPostedOffset;
}

export function registerChat(program, ctxOf, setExit) {
  program
    .command("chat")
    .description("talk to a bot in a direct-message thread: one line of stdin per message")
    .argument("<bot>", "the bot's @handle (or id)")
    .option("--thread <thread>", "continue this DM thread instead of opening a new one")
    .option("--reply-timeout <seconds>", "at the end of stdin, how long to wait for the last answer", "300")
    .action(async (botRef, opts, cmd) => {
      const ctx = ctxOf(cmd);
      const api = ctx.api();
      const { c, json } = ctx;
      const bot = await ctx.wait(`finding @${botRef.replace(/^@/, "")}`, () => resolveAgent(api, botRef));
      const me = tokenClaims(api.target.token).sub;
      const names = new Map([[bot.id, `@${bot.handle}`]]);
      const thread = opts.thread
        ? await api.get(paths.thread(opts.thread))
        : await ctx.wait("opening a DM thread", () => api.post("/api/threads", { title: `chat with @${bot.handle}`, parent: { kind: "agent", id: bot.id } }));
      const interactive = Boolean(process.stdin.isTTY);
      if (json) process.stdout.write(`${JSON.stringify({ threadId: thread.id, bot: { id: bot.id, handle: bot.handle } })}\n`);
      else process.stderr.write(c.gray(`thread ${thread.id} with @${bot.handle}${interactive ? " — type a message, Ctrl-D to end" : ""}\n`));

      const spinner = createSpinner();
      const start = opts.thread ? (await api.get(`${paths.threadAction(thread.id, "entries")}?offset=now&limit=1`)).nextOffset : "-1";
      let lastPosted = null;
      let lastOtherChat = "";
      let answered = true;
      let inputDone = false;
      let finish;
      const finished = new Promise((resolve) => { finish = resolve; });
      const maybeFinish = () => { if (inputDone && answered) finish(); };

      const sub = subscribe(api.target, thread.id, {
        offset: start,
        onReconnecting: (ms) => spinner.print(c.gray(`connection lost, reconnecting in ${ms} ms`), process.stderr),
        onEntry(entry) {
          if (entry.payload?.type === "chat" && entry.authorId !== me && entry.offset > lastOtherChat) lastOtherChat = entry.offset;
          if (isReply(entry, me, lastPosted)) {
            answered = true;
            spinner.stop();
          }
          if (entry.authorId === me && entry.payload?.type === "chat") return; // our own words, already on screen
          if (json) process.stdout.write(`${JSON.stringify(entry)}\n`);
          else {
            const line = renderEntry(entry, c, { names });
            if (line) spinner.print(line);
          }
          maybeFinish();
        },
      });
      sub.done.catch((err) => finish(err));

      const rl = createInterface({ input: process.stdin, terminal: false });
      for await (const line of rl) {
        const text = line.trim();
        if (!text) continue;
        const r = await api.post(paths.threadAction(thread.id, "entries"), { id: `cli-${randomUUID()}`, payload: { type: "chat", text } });
        lastPosted = r.entries[0].offset;
        // the answer may have come over the socket before the POST's response did
        answered = lastOtherChat > lastPosted;
        if (!json && !answered) spinner.start(`@${bot.handle} is thinking`);
      }
      inputDone = true;
      const timeoutMs = Number(opts.replyTimeout) * 1000;
      const timer = setTimeout(() => finish(new CliError("timeout", `no answer from @${bot.handle} within ${opts.replyTimeout} s (thread ${thread.id})`)), timeoutMs);
      maybeFinish();
      const outcome = await finished;
      clearTimeout(timer);
      spinner.stop();
      sub.close();
      if (outcome instanceof Error) throw outcome;
      setExit(0);
    });
}
