// Prints a thread's entries as they arrive; with `untilDone`, ends when the thread's run ends and
// says how it ended.
import { paths } from "./api.mjs";
import { EXIT } from "./errors.mjs";
import { printableLine, renderEntry, safe } from "./render.mjs";
import { subscribe } from "./subscribe.mjs";
import { createSpinner } from "./term.mjs";

/** The finished-signals a run ends with (see the README's "Runs"). */
export const FINISHED_STATUSES = new Set(["completed", "pi_failed", "pi_session_orphaned", "stopped"]);

/** Whether an entry may end the run being watched: only then is the thread row worth asking. */
export const mayEndRun = (entry) =>
  entry?.payload?.type === "signal.thread.status_changed" && FINISHED_STATUSES.has(entry.payload.status);

/** A thread row whose run is over (the run status the CLI exits with), or null while it runs or never ran. */
export function finishedRow(row) {
  return row.status === "completed" || row.status === "failed" ? row : null;
}

/**
 * Whether a finished-signal ends the run a finished thread row reports (its `runId` is the last
 * run's). Replaying a thread that ran several times passes the earlier runs' signals first: ending
 * there would hide the later runs while exiting with the last one's status. A signal or row
 * without a run id (written before runs had one) still counts.
 */
export function endsLastRun(entry, row) {
  const named = entry?.payload?.runId;
  return typeof named !== "string" || typeof row.runId !== "string" || named === row.runId;
}

/**
 * The house's bots as `@handle` by id: what a bot writes (its chat, a task it delegated) carries
 * its id as author, which means nothing to a reader. Without bots (or the right to list them) ids stay.
 */
async function botNames(api) {
  try {
    const { agents } = await api.get("/api/agents");
    return new Map(agents.map((a) => [a.id, `@${a.handle}`]));
  } catch {
    return undefined;
  }
}

export const exitCodeFor = (row) => (row.status === "completed" ? EXIT.ok : EXIT.runFailed);

/**
 * @param {{ api: ReturnType<import("./api.mjs").createApi>, threadId: string, untilDone: boolean, offset?: string,
 *           json: boolean, c: ReturnType<import("./term.mjs").palette>, names?: Map<string, string> }} opts
 * @returns {Promise<number>} the exit code
 */
export async function followThread(opts) {
  const { api, threadId, untilDone, json, c } = opts;
  // A server away right then (a restart) is waited for, as the socket's reconnects wait for it (the
  // client asks every GET again): a plain tail started during a deploy, or a run just started by
  // `resume --watch` or `delegate --watch`, would otherwise be left unwatched.
  const first = await api.get(paths.thread(threadId)); // a missing thread is a clear not_found before any socket
  // A thread whose last run has ended: what follows `offset` up to the log's end may not hold that
  // run's finished-signal (`--from now`, or an offset past it), so the end of the log ends the wait.
  const ended = untilDone ? finishedRow(first) : null;
  const end = ended ? (await api.get(`${paths.threadAction(threadId, "entries")}?offset=now&limit=1`)).nextOffset : null;
  const offset = opts.offset ?? "-1";
  // Offsets are fixed-width digits, so they compare as strings.
  const atEnd = (o) => typeof end === "string" && (o === "now" || (typeof o === "string" && /^\d+_\d+$/.test(o) && o.length === end.length && o >= end));
  if (ended && atEnd(offset)) return report(ended, json, c);
  const names = opts.names ?? (json ? undefined : await botNames(api));
  const spinner = createSpinner();
  let finalRow = null;
  const chatTexts = new Set();
  const sub = subscribe(api.target, threadId, {
    offset,
    onReconnecting: (ms) => { if (!json) spinner.print(c.gray(`connection lost, reconnecting in ${ms} ms`), process.stderr); },
    async onEntry(entry) {
      if (json) process.stdout.write(`${JSON.stringify(entry)}\n`);
      else {
        const line = renderEntry(entry, c, { names, chatTexts });
        if (line) spinner.print(line);
      }
      if (untilDone && mayEndRun(entry)) {
        // Replayed signals of earlier runs end nothing: the row says whether a run is still going.
        // The run has ended: a server restarting right then is waited for, not reported as the outcome.
        const row = finishedRow(await api.get(paths.thread(threadId), {
          onRetry: (ms, err) => { if (!json) spinner.print(c.gray(`${printableLine(err.message)}: asking how the run ended again in ${ms} ms`), process.stderr); },
        }));
        if (row && endsLastRun(entry, row)) {
          finalRow = row;
          sub.close();
        }
      } else if (ended && atEnd(entry.offset)) {
        finalRow = ended;
        sub.close();
      }
    },
  });
  // Ctrl-C, or a SIGTERM (a process manager, `timeout`): the follow ends as it would, spinner cleared.
  let interruptedWith = null;
  const stopWith = (code) => () => { interruptedWith = code; sub.close(); };
  const onInt = stopWith(EXIT.interrupted);
  const onTerm = stopWith(EXIT.terminated);
  process.once("SIGINT", onInt);
  process.once("SIGTERM", onTerm);
  // Only now that the signals are handled: a signal sent by whoever saw this line (a supervisor, a
  // test) must not find the process still on the default action, which kills it without an exit code.
  // A thread that never ran has nothing to finish yet: say so, or the wait looks like a hang.
  if (!json && untilDone && first.status === "idle") process.stderr.write(c.gray(safe`thread ${threadId} has not run yet: waiting for a run to start and finish (Ctrl-C to stop)` + "\n"));
  if (!json) spinner.start(untilDone ? "waiting for the run to finish" : "waiting for entries (Ctrl-C to stop)");
  try {
    await sub.done;
  } finally {
    spinner.stop();
    process.off("SIGINT", onInt);
    process.off("SIGTERM", onTerm);
  }
  // Stopped before the run ended: a script waiting on the run must not read that as success.
  if (!finalRow) return untilDone && interruptedWith !== null ? interruptedWith : EXIT.ok;
  return report(finalRow, json, c);
}

/** Says how the run ended (human mode) and gives its exit code. */
function report(row, json, c) {
  if (!json) {
    const how = row.status === "completed" ? c.green("run completed") : c.red(`run failed${row.reason ? `: ${printableLine(row.reason)}` : ""}`);
    process.stderr.write(`${how}\n`);
  }
  return exitCodeFor(row);
}
