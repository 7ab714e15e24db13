import { getCodingAgent, runnerLaunch, type HarnessName } from "./harness";
import type { ThreadEntry } from "./harness/types";
import type { SandboxProvider } from "./provider";
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
  /** Reuse this box; otherwise an ephemeral box is created for the run and deleted after it. */
  boxRef?: string;
  /** Env for the harness (model keys, PI_OFFLINE, ...). Never posted. */
  env?: Record<string, string>;
  /** Files to place in the box before the run, HOME-relative (e.g. pi's models.json). */
  files?: { path: string; content: string }[];
  /** The runner and mirror bundles, by their RUNNER_BUNDLE / MIRROR_BUNDLE keys. */
  bundles: Record<string, string>;
  timeoutSec?: number;
};

export type RunResult = { status: string; reason: string; exitCode: number; boxRef: string; finishedBy: "host" | "already-on-thread" };

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
 * finished-signal itself from the exit code and the thread.
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
  try {
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
  } finally {
    if (created) {
      await o.provider.delete(ref).catch((err) => logEvent("box_cleanup_failed", { ref, error: errorMessage(err) }, "warn"));
    }
  }
}
