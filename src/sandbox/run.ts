import { getCodingAgent, runnerLaunch, type HarnessName } from "./harness";
import type { ThreadEntry } from "./harness/types";
import type { SandboxProvider } from "./provider";
import { isProviderError } from "./errors";
import { errorMessage, logEvent } from "../domain/log-event";
import { STATUS_CHANGED } from "../domain/statuses";

export type RunOptions = {
  provider: SandboxProvider;
  /** Base of the stream API, reachable from the caller and from the box (e.g. http://127.0.0.1:8787/api/stream). */
  streamUrl: string;
  /** A `stream:write` token for the thread; only a run token naming `runId` may post the run's artifacts. */
  streamToken: string;
  /** The run's id (default: a new one). */
  runId?: string;
  houseId: string;
  threadId: string;
  task: string;
  harness?: HarnessName;
  model?: string;
  authorId?: string;
  /**
   * Reuse this box; otherwise an ephemeral box is created for the run and deleted after it (a box
   * that cannot be deleted is named by the result's `boxLeft`, or by a `BoxLeftError`).
   */
  boxRef?: string;
  /** Env for the harness (model keys, PI_OFFLINE, ...). Never posted. */
  env?: Record<string, string>;
  /** Files to place in the box before the run, HOME-relative (e.g. pi's models.json). */
  files?: { path: string; content: string }[];
  /** The runner and mirror bundles, by their RUNNER_BUNDLE / MIRROR_BUNDLE keys. */
  bundles: Record<string, string>;
  timeoutSec?: number;
};

/**
 * `boxLeft`: the box this run made could not be deleted (after `CLEANUP_ATTEMPTS` tries): it may
 * still be live, and billed, at the provider; the caller is to delete it (its `boxRef`).
 */
export type RunResult = { status: string; reason: string; exitCode: number; boxRef: string; finishedBy: "host" | "already-on-thread"; boxLeft?: BoxLeft };

/** A box run() made and could not delete: its provider ref, and the last delete's error. */
export type BoxLeft = { boxRef: string; error: string };

/**
 * run() failed, and the box it made for the run could not be deleted either: `boxRef` names that
 * box, which may still be live at the provider. `cause` is the run's own failure.
 */
export class BoxLeftError extends Error {
  readonly code = "box_left";
  readonly boxRef: string;
  readonly cleanupError: string;
  constructor(left: BoxLeft, cause: unknown) {
    super(`${errorMessage(cause)} (the box ${left.boxRef} made for the run could not be deleted, and may still be live: ${left.error})`, { cause });
    this.name = "BoxLeftError";
    this.boxRef = left.boxRef;
    this.cleanupError = left.error;
  }
}

/** How often run() tries to delete the box it made, and the wait before the second try (doubling). */
const CLEANUP_ATTEMPTS = 4;
const CLEANUP_RETRY_BASE_MS = 500;

const jsonHeaders = (token: string) => ({ authorization: `Bearer ${token}`, "content-type": "application/json" });

async function post(url: string, token: string, entries: unknown[]): Promise<void> {
  const r = await fetch(url, { method: "POST", headers: jsonHeaders(token), body: JSON.stringify(entries) });
  if (!r.ok) throw new Error(`posting to the thread failed: ${r.status} ${await r.text()}`);
}

async function readAll(url: string, token: string): Promise<ThreadEntry[]> {
  const out: ThreadEntry[] = [];
  let offset = "-1";
  for (let page = 0; page < 10_000; page++) {
    const r = await fetch(`${url}?offset=${encodeURIComponent(offset)}`, { headers: { authorization: `Bearer ${token}` } });
    if (!r.ok) throw new Error(`reading the thread failed: ${r.status}`);
    out.push(...((await r.json()) as ThreadEntry[]));
    offset = r.headers.get("Stream-Next-Offset") ?? offset;
    if (r.headers.get("Stream-Up-To-Date") === "true") return out;
  }
  return out;
}

/**
 * The synchronous driver, for CLIs and tests: the same handles as a detached launch, but the
 * caller waits. It posts the prompt and the claim, provisions the box, runs the harness through
 * the runner (which mirrors but does not finish), reads the thread back and posts the
 * finished-signal itself from the exit code and the thread. No actor knows of a box it makes, so
 * it deletes it itself, asking again with backoff; a box it still cannot delete is named to the
 * caller (`boxLeft`, or a `BoxLeftError` wrapping the run's own failure) rather than only logged.
 */
export async function run(o: RunOptions): Promise<RunResult> {
  const harness = o.harness ?? "pi";
  const url = `${o.streamUrl.replace(/\/$/, "")}/thread-${o.threadId}`;
  const runId = o.runId ?? crypto.randomUUID();
  await post(url, o.streamToken, [
    { id: `prompt:${runId}`, authorId: o.authorId, payload: { type: "chat", text: o.task, origin: "task", runId } },
    { id: `claim:${runId}`, payload: { type: STATUS_CHANGED, status: "running", reason: "run() on the host", runId } },
  ]);
  const created = !o.boxRef;
  const ref = o.boxRef ?? (await o.provider.create({ labels: { house: o.houseId, thread: o.threadId }, ephemeral: true })).ref;
  let result: RunResult;
  try {
    result = await drive(o, harness, url, runId, ref);
  } catch (err) {
    const left = created ? await deleteMadeBox(o.provider, ref) : null;
    throw left ? new BoxLeftError(left, err) : err;
  }
  const left = created ? await deleteMadeBox(o.provider, ref) : null;
  return left ? { ...result, boxLeft: left } : result;
}

/** Runs the harness on box `ref` and posts the run's end from what the thread then holds. */
async function drive(o: RunOptions, harness: HarnessName, url: string, runId: string, ref: string): Promise<RunResult> {
  const plan = runnerLaunch({
    harness, threadId: o.threadId, streamUrl: o.streamUrl, streamToken: o.streamToken, runId, prompt: o.task,
    model: o.model, authorId: o.authorId, env: o.env, noFinish: true,
  });
  const check = await o.provider.exec(ref, plan.install.check, { timeoutSec: 60 });
  if (check.exitCode !== 0) {
    const installed = await o.provider.exec(ref, plan.install.command, { timeoutSec: 900 });
    if (installed.exitCode !== 0) throw new Error(`installing ${harness} failed (exit ${installed.exitCode})`);
  }
  const uploads = [
    ...(o.files ?? []),
    ...plan.uploads.map((u) => ({ path: u.path, content: u.source ? o.bundles[u.source] : u.content ?? "" })),
  ];
  await o.provider.upload(ref, uploads);
  const exec = await o.provider.exec(ref, plan.command, { env: plan.env, timeoutSec: o.timeoutSec ?? 3 * 24 * 3600 });
  const entries = await readAll(url, o.streamToken);
  const outcome = getCodingAgent(harness).decideOutcome(entries, exec.exitCode, { authorId: o.authorId, runId });
  if (outcome.entries.length > 0) await post(url, o.streamToken, outcome.entries);
  return { status: outcome.status, reason: outcome.reason, exitCode: exec.exitCode, boxRef: ref, finishedBy: outcome.alreadyFinished ? "already-on-thread" : "host" };
}

/**
 * Deletes the box run() made, asking again with backoff when the provider fails (a box already gone
 * counts as deleted). Null once deleted; otherwise what is left, for the caller to see: nothing
 * else knows of this box to reap it.
 */
async function deleteMadeBox(provider: SandboxProvider, ref: string): Promise<BoxLeft | null> {
  let error = "";
  for (let attempt = 1; attempt <= CLEANUP_ATTEMPTS; attempt++) {
    try {
      await provider.delete(ref);
      return null;
    } catch (err) {
      if (isProviderError(err, "not_found")) return null;
      error = errorMessage(err);
      logEvent("box_cleanup_failed", { ref, attempt, of: CLEANUP_ATTEMPTS, error }, "warn");
    }
    if (attempt < CLEANUP_ATTEMPTS) await new Promise((r) => setTimeout(r, CLEANUP_RETRY_BASE_MS * 2 ** (attempt - 1)));
  }
  return { boxRef: ref, error };
}
