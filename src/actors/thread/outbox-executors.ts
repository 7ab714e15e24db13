import type { Env } from "../../env";
import type { Entry, EntryWithOffset } from "../../entries/schema";
import { errorMessage, logEvent } from "../../domain/log-event";
import { ApiError } from "../../errors";
import type { LaunchProgressStore, LaunchStep } from "../../threads/launch-progress";
import { publicThread, type ThreadRow } from "../../threads/thread-row";
import type { Candidate } from "../../dispatch/selection";
import { readwriteFolders, syncFoldersAfterRun } from "../../workspace/folder-sync";
import type { ThreadSummary } from "../house/house-actor";
import { unwrapRpc } from "../rpc";
import { houseStub, sandboxStub, threadStub } from "../stubs";
import { launch, launchBoxReleaseKey, releaseLaunchBox, type LaunchBoxRelease } from "./launcher";
import type { Outbox, OutboxExecutors } from "./outbox";

/** What the executors need from the thread that owes the items. */
export type ThreadOutboxPorts = {
  env: Env;
  row(): ThreadRow;
  now(): number;
  entryById(id: string): Entry | null;
  allEntries(): EntryWithOffset[];
  append(entry: Entry): void;
  appendFailure(id: string, reason: string, runId: string): void;
  /** Runs what is owed now (not the slow kinds): a launch step's attach, say. */
  settle(): Promise<void>;
  recordLiveness(): void;
  launchProgress: LaunchProgressStore;
  persist(): Promise<void>;
  checkpoint(step: LaunchStep): void;
  primeAgents(set: { version: number; candidates: Candidate[] }): void;
  outbox: Outbox;
};

/** One executor per kind of item a thread owes other actors (see outbox.ts). */
export function threadOutboxExecutors(p: ThreadOutboxPorts): OutboxExecutors {
  const { env, row } = p;
  /**
   * Whether the thread's running run is on `boxId`. What an ended run owes its box (a stop, a
   * release) is then moot, and carried out late (a retry) it would end that run: the stop finds
   * processes by thread, the box counts runs by thread. That run's own end owes both again.
   */
  const nextRunOn = (boxId: string, kind: string): boolean => {
    const r = row();
    if (r.status !== "running" || r.boxId !== boxId) return false;
    logEvent("box_call_skipped", { threadId: r.id, boxId, kind, reason: "the thread's next run is on this box" });
    return true;
  };
  /**
   * Owed before it is tried: a box actor that cannot be reached now is asked again by the alarm
   * (the launch item that decided it is done once this returns).
   */
  const releaseBoxNow = async (release: LaunchBoxRelease): Promise<void> => {
    const key = launchBoxReleaseKey(release.runId);
    p.outbox.enqueue(key, "release_launch_box", release, p.now());
    try {
      await releaseLaunchBox(env, row().houseId, row().id, release);
      p.outbox.done(key);
    } catch (err) {
      logEvent("launch_box_release_failed", { threadId: row().id, runId: release.runId, boxId: release.boxId, retriedBy: "thread alarm", error: errorMessage(err) }, "warn");
    }
  };
  return {
    attach: {
      run: async (x) => {
        try {
          await unwrapRpc(sandboxStub(env, x.boxId).attach(row().houseId, row().id));
        } catch (err) {
          // A box that is gone (deleted, dead, never registered) will not come back: retrying forever helps no one.
          if (!(err instanceof ApiError) || (err.code !== "conflict" && err.code !== "not_found")) throw err;
          logEvent("attach_skipped", { threadId: row().id, boxId: x.boxId, reason: err.publicMessage }, "warn");
        }
      },
    },
    detach: {
      run: async (x) => {
        if (nextRunOn(x.boxId, "detach")) return;
        await unlessBoxUnknown(row().id, x.boxId, "detach", () => sandboxStub(env, x.boxId).detach(row().houseId, row().id, { keepBox: x.keepBox === true }));
      },
    },
    // A grace period for the harness: only the alarm waits for it.
    stop_harness: {
      slow: true,
      run: async (x) => {
        if (nextRunOn(x.boxId, "stop_harness")) return;
        await unlessBoxUnknown(row().id, x.boxId, "stop_harness", () => sandboxStub(env, x.boxId).stopRun(row().houseId, row().id, x.runId));
      },
    },
    // Packing and downloading take long: only the alarm runs it; the `detach` after it waits.
    sync_folders: {
      slow: true,
      run: async (x) => {
        const r = row();
        if (!r.environmentId) return;
        const folders = readwriteFolders(p.entryById(`launched:${x.runId}`));
        // A launch that failed after copying folders in started nothing that could change them.
        if (folders.length === 0) return;
        const target = { houseId: r.houseId, threadId: r.id, environmentId: r.environmentId, boxId: x.boxId, runId: x.runId, folders };
        await syncFoldersAfterRun(env, target, p.append, p.now);
      },
    },
    launch: {
      // Box creation and installs take long: only the alarm runs them.
      slow: true,
      run: async (spec) => {
        await launch(spec, {
          env, row, now: p.now,
          entries: p.allEntries,
          entryById: p.entryById,
          append: p.append,
          settle: p.settle,
          alive: p.recordLiveness,
          progress: p.launchProgress,
          persist: p.persist,
          checkpoint: p.checkpoint,
          releaseBox: (release) => releaseBoxNow(release),
        });
        p.launchProgress.clear(spec.runId);
      },
      // A failed step is final (the run fails visibly); only an attempt that died mid-way (the
      // item is still owed) runs again, and it continues from the recorded progress.
      giveUp: (spec, message) => {
        logEvent("launch_failed", { threadId: row().id, runId: spec.runId, error: message }, "warn");
        // Before the progress goes: the run's end reads which box the launch took.
        if (row().status === "running") p.appendFailure(`launch_failed:${spec.runId}`, `launch failed: ${message}`, spec.runId);
        p.launchProgress.clear(spec.runId);
      },
    },
    // Stopping a runner takes its grace period: only the alarm retries it.
    release_launch_box: {
      slow: true,
      run: async (x) => {
        if (nextRunOn(x.boxId, "release_launch_box")) return;
        await releaseLaunchBox(env, row().houseId, row().id, x);
      },
    },
    notify_parent: {
      run: async (x) => void (await unwrapRpc(threadStub(env, x.parentId).childFinished(row().houseId, {
        childId: row().id, runKey: Number(x.runKey), status: x.status, reason: x.reason ?? null, resultText: x.resultText, brainId: x.brainId ?? null,
      }))),
    },
    sync_index: { unordered: true, run: () => syncIndex(p) },
  };
}

/**
 * A call to a box that was never registered in this house (a claim named a box id that does not
 * exist) can never succeed: it is logged and dropped, not retried for ever.
 */
async function unlessBoxUnknown(threadId: string, boxId: string, kind: string, call: () => Promise<unknown>): Promise<void> {
  try {
    await unwrapRpc(call() as Promise<never>);
  } catch (err) {
    if (!(err instanceof ApiError) || err.code !== "not_found") throw err;
    logEvent("box_call_skipped", { threadId, boxId, kind, reason: err.publicMessage }, "warn");
  }
}

/**
 * Tells the house index the row as it is now. If the row changes while the call is out, it is
 * sent again: the pending item is consumed when this returns, and the index keeps the newest.
 */
async function syncIndex(p: ThreadOutboxPorts): Promise<void> {
  for (let sent: string | null = null; ;) {
    const t = publicThread(p.row());
    const summary: ThreadSummary = {
      id: t.id, parent: t.parent, status: t.status, reason: t.reason, title: t.title, environmentId: t.environmentId,
      boxId: t.boxId, createdAt: t.createdAt, updatedAt: t.updatedAt,
    };
    const version = JSON.stringify(summary);
    if (version === sent) return;
    const reply = (await unwrapRpc(houseStub(p.env, t.houseId).upsertThread(summary))) as { agentSet?: { version: number; candidates: Candidate[] } } | undefined;
    if (reply?.agentSet) p.primeAgents(reply.agentSet);
    sent = version;
  }
}
