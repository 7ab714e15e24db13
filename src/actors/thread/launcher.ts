import type { Env } from "../../env";
import type { Entry } from "../../entries/schema";
import type { Environment } from "../../environments";
import { LABEL_RUN, type DetachedHandle } from "../../sandbox/provider";
import { ensureSharedBox, retireSharedBox } from "../../workspace/shared-box";
import { LaunchSuperseded, launchRun, type LaunchDeps, type LaunchSpec } from "../../threads/launch";
import type { ThreadRow } from "../../threads/thread-row";
import { isTerminal, readinessMilestone } from "../../threads/run-rules";
import { launchBoxId, type LaunchProgressStore, type LaunchStep } from "../../threads/launch-progress";
import { ApiError } from "../../errors";
import { providerFor } from "../../sandbox/providers";
import { unwrapRpc } from "../rpc";
import { houseStub, sandboxStub } from "../stubs";
import { deleteUnregisteredBox } from "../sandbox/late-box";
import { errorMessage, logEvent } from "../../domain/log-event";
import { boxSecretForms, redactorFor } from "../../workspace/output-redaction";

export type LauncherPorts = {
  env: Env;
  row(): ThreadRow;
  now(): number;
  entries(): Entry[];
  entryById(id: string): Entry | null;
  /** Appends a control-plane entry in this turn (hooks included). */
  append(entry: Entry): void;
  /**
   * Runs what became owed and may run beside this launch (unordered items) before it goes on. Items
   * owed in order, such as the attach a box assignment owes, wait for the launch item ahead of them;
   * the launch attaches the thread itself when it records its runner.
   */
  settle(): Promise<void>;
  alive(): void;
  progress: LaunchProgressStore;
  /** Resolves once what was written is durable. */
  persist(): Promise<void>;
  /** A test seam between launch steps; production passes a no-op. */
  checkpoint(step: LaunchStep): void;
  /** Owes the release of a box the launch no longer uses (see LaunchBoxRelease), then tries it now. */
  releaseBox(release: LaunchBoxRelease): Promise<void>;
};

/** The launch outbox item: wires threads/launch.ts to the box and house actors and the thread log. */
export async function launch(spec: LaunchSpec, p: LauncherPorts): Promise<void> {
  // A stop (or a stop and a resume: another run) may come at any point of a launch.
  const current = () => {
    const r = p.row();
    return r.status === "running" && r.runId === spec.runId;
  };
  // A run over already (its runner posted its end): not a stopped one, whose box it keeps.
  const ended = () => {
    const r = p.row();
    return r.runId === spec.runId && isTerminal(r.status) && r.statusReason !== "stopped";
  };
  const row = p.row();
  if (!current()) return abandon(spec, p); // stopped or settled before the launch got its turn
  const environment = row.environmentId ? ((await unwrapRpc(houseStub(p.env, row.houseId).getEnvironment(row.environmentId))) as Environment | null) : null;
  try {
    // Deleted after the request that started the run found it: launched without it, the run would
    // go to the default provider with none of its egress rules, secrets, files or models.
    if (row.environmentId && !environment) throw new Error(`environment ${row.environmentId} of this thread no longer exists`);
    await launchRun(spec, launchDeps(spec, p, row, environment, current, ended));
  } catch (err) {
    if (!(err instanceof LaunchSuperseded)) {
      await releaseUnassignedBox(spec, p, environment?.provider ?? "daytona");
      throw withoutSecrets(err, environment);
    }
    logEvent("launch_superseded", { threadId: row.id, runId: spec.runId });
    await abandon(spec, p);
  }
}

/**
 * A launch that fails for good after making its box and before assigning it to the run: the run's
 * end releases only the box the thread names, so this one is deleted here. A box the run reuses (a
 * resume's, a shared one) is not the launch's to delete.
 */
async function releaseUnassignedBox(spec: LaunchSpec, p: LauncherPorts, fallbackProvider: string): Promise<void> {
  const progress = p.progress.get(spec.runId);
  // Neither a provider nor a box recorded: the launch made no box of its own.
  if ((!progress.provider && !progress.providerRef) || progress.sameBox === true) return;
  const boxId = progress.boxId ?? launchBoxId(spec.runId);
  if (assignedToRun(spec, p, boxId)) return;
  // The provider the launch recorded, not the environment's: that may be gone, or changed.
  await p.releaseBox({ runId: spec.runId, boxId, box: "delete", provider: progress.provider ?? fallbackProvider, ...(progress.providerRef ? { providerRef: progress.providerRef } : {}) });
}

/**
 * A failed step's words (an installer's or git's last lines among them) go into the run's failure
 * entry and the log: what they quote of the environment's secrets or sensitive files is redacted,
 * by the rule a run's own output is. The error keeps its kind (whether it is retried).
 */
function withoutSecrets(err: unknown, environment: Environment | null): unknown {
  if (!(err instanceof Error) || !environment) return err;
  err.message = redactorFor(boxSecretForms(environment))(err.message);
  return err;
}

/**
 * Whether the thread was told this run is on `boxId`: the box is then the run's, kept when it was
 * stopped. The row alone cannot tell once a resume claimed the thread (its claim names no box
 * until its own launch assigns one), and that resume means to go on on this very box.
 */
function assignedToRun(spec: LaunchSpec, p: LauncherPorts, boxId: string): boolean {
  if (p.row().boxId === boxId) return true;
  const assigned = p.entryById(`box:${spec.runId}`);
  return assigned !== null && (assigned.payload as { boxId?: unknown }).boxId === boxId;
}

/**
 * Undoes what a launch of a run that is no longer running made: its runner is stopped, and its
 * box released. A fresh box the thread never learned of (the stop came before the box was
 * assigned) is deleted at once; a box the thread knows, or one the run reused (a resume on the
 * same box, a shared box), is detached and kept, as a stopped run's box is.
 */
async function abandon(spec: LaunchSpec, p: LauncherPorts): Promise<void> {
  const progress = p.progress.get(spec.runId);
  if (!progress.boxId) return;
  const box = progress.sameBox !== true && !assignedToRun(spec, p, progress.boxId) ? "delete" : "keep";
  const where = box === "delete" && progress.provider ? { provider: progress.provider, ...(progress.providerRef ? { providerRef: progress.providerRef } : {}) } : {};
  await p.releaseBox({ runId: spec.runId, boxId: progress.boxId, box, ...where, ...(progress.handle ? { handle: progress.handle } : {}) });
}

/**
 * What a launch that ends without its run owes the box it took (see `abandon`,
 * `releaseUnassignedBox`). Owed in the thread's outbox before it is first tried, so a box actor
 * that cannot be reached then (evicted, overloaded) is asked again by the thread's alarm until it
 * confirms: nothing else knows of a launch's fresh box to reap it.
 */
export type LaunchBoxRelease = {
  runId: string;
  boxId: string;
  /** `delete`: a box the thread never learned of; `keep`: detached and kept, as a stopped run's box is. */
  box: "delete" | "keep";
  /** The launch's runner, ended first (the box may not know its handle yet). */
  handle?: DetachedHandle;
  /** Where a box that was never registered is deleted: its ref, or else the boxes with the run's label. */
  provider?: string;
  providerRef?: string;
};

/** The outbox key of a launch's release of its box: one per run. */
export function launchBoxReleaseKey(runId: string): string {
  return `release_box:${runId}`;
}

/**
 * Carries out a release; throws (to be tried again) while the box's actor or the provider cannot
 * be reached. Done again after a partial try, it does nothing twice: a box already detached or
 * deleted, or one never registered and already gone at the provider, counts as released.
 */
export async function releaseLaunchBox(env: Env, houseId: string, threadId: string, r: LaunchBoxRelease): Promise<void> {
  const box = sandboxStub(env, r.boxId);
  try {
    if (r.handle) {
      let attached = true;
      try {
        await unwrapRpc(box.attach(houseId, threadId, r.handle));
      } catch (err) {
        // A box going or gone has no runner left to stop.
        if (!(err instanceof ApiError) || err.code !== "conflict") throw err;
        attached = false;
      }
      if (attached) await unwrapRpc(box.stopRun(houseId, threadId, r.runId));
    }
    if (r.box === "delete") await unwrapRpc(box.destroy(houseId, true));
    else await unwrapRpc(box.detach(houseId, threadId, { keepBox: true }));
  } catch (err) {
    if (!(err instanceof ApiError) || err.code !== "not_found") throw err;
    if (r.box === "keep" || !r.provider) return;
    // Never registered: only the provider knows of it (a box already gone counts as deleted).
    // An attempt that died right after making it did not record it either: its run label tells.
    const refs = r.providerRef ? [r.providerRef] : (await providerFor(env, r.provider).list({ [LABEL_RUN]: r.runId })).map((b) => b.ref);
    // No box actor retries these deletes: a watch of the box does, when the provider fails one now;
    // when that watch cannot be started either, this throws and the outbox tries the release again.
    for (const ref of refs) await deleteUnregisteredBox(env, houseId, r.provider, ref);
  }
}

function launchDeps(spec: LaunchSpec, p: LauncherPorts, row: ThreadRow, environment: Environment | null, current: () => boolean, ended: () => boolean): LaunchDeps {
  return {
    env: p.env,
    current,
    ended,
    row,
    environment,
    entries: p.entries,
    progress: () => p.progress.get(spec.runId),
    saveProgress: async (patch) => {
      const saved = p.progress.save(spec.runId, patch);
      await p.persist();
      return saved;
    },
    checkpoint: p.checkpoint,
    registerBox: async (boxId, info) => {
      await unwrapRpc(sandboxStub(p.env, boxId).register({ boxId, houseId: row.houseId, ephemeral: true, ...info }));
    },
    boxIsLive: async (boxId) => {
      const stub = sandboxStub(p.env, boxId);
      try {
        const view = await unwrapRpc(stub.view(row.houseId));
        if (view.state !== "live") return null;
        const answer = await unwrapRpc(stub.probe(row.houseId));
        return answer.verdict === "live" ? { providerRef: view.providerRef } : null;
      } catch (err) {
        logEvent("resume_box_unusable", { threadId: row.id, boxId, error: errorMessage(err) }, "warn");
        return null;
      }
    },
    reserveBox: async (boxId) => {
      await unwrapRpc(sandboxStub(p.env, boxId).reserve(row.houseId, row.id, spec.runId));
    },
    assignBox: async (boxId) => {
      p.append({ id: `box:${spec.runId}`, ts: p.now(), authorId: "threadbox", payload: { type: "signal.thread.box_assigned", boxId, runId: spec.runId } });
      // The run's readiness milestone: a running status naming its box, before the harness writes
      // anything (launchRun checked the run is still current just before). Its claim went on the
      // thread before there was a box to name.
      p.append(readinessMilestone(spec.runId, boxId, p.now()));
      await p.settle();
    },
    rememberHandle: async (boxId, handle) => {
      await unwrapRpc(sandboxStub(p.env, boxId).attach(row.houseId, row.id, handle as DetachedHandle));
    },
    launched: async (info) => {
      p.append({ id: `launched:${spec.runId}`, ts: p.now(), authorId: "threadbox", payload: { type: "signal.run.launched", runId: spec.runId, harness: spec.harness, ...info } });
    },
    alive: p.alive,
    // The environment as stored now: a box picked again replaces one that a change to it retired.
    sharedBox: async () => ensureSharedBox(p.env, row.houseId, (await currentEnvironment(p, row)) ?? environment!),
    otherRunsOnBox: async (boxId) => (await unwrapRpc(sandboxStub(p.env, boxId).runsOfOtherThreads(row.houseId, row.id))) === true,
    currentEnvironment: () => currentEnvironment(p, row),
    letGoSharedBox: async (boxId) => {
      if (!row.environmentId) return;
      if (await unwrapRpc(houseStub(p.env, row.houseId).letGoSharedBox(row.environmentId, boxId))) await retireSharedBox(p.env, row.houseId, row.environmentId, boxId);
    },
  };
}

async function currentEnvironment(p: LauncherPorts, row: ThreadRow): Promise<Environment | null> {
  return row.environmentId ? ((await unwrapRpc(houseStub(p.env, row.houseId).getEnvironment(row.environmentId))) as Environment | null) : null;
}
