import type { Env } from "../../env";
import type { Entry } from "../../entries/schema";
import type { Environment } from "../../environments";
import type { DetachedHandle } from "../../sandbox/provider";
import { ensureSharedBox } from "../../workspace/shared-box";
import { launchRun, type LaunchSpec } from "../../threads/launch";
import type { ThreadRow } from "../../threads/thread-row";
import type { LaunchProgressStore, LaunchStep } from "../../threads/launch-progress";
import { unwrapRpc } from "../rpc";
import { houseStub, sandboxStub } from "../stubs";
import { errorMessage, logEvent } from "../../domain/log-event";

export type LauncherPorts = {
  env: Env;
  row(): ThreadRow;
  now(): number;
  entries(): Entry[];
  /** Appends a control-plane entry in this turn (hooks included). */
  append(entry: Entry): void;
  /** Runs what became owed (e.g. the attach a box assignment owes) before the launch goes on. */
  settle(): Promise<void>;
  alive(): void;
  progress: LaunchProgressStore;
  /** Resolves once what was written is durable. */
  persist(): Promise<void>;
  /** A test seam between launch steps; production passes a no-op. */
  checkpoint(step: LaunchStep): void;
};

/** The launch outbox item: wires threads/launch.ts to the box and house actors and the thread log. */
export async function launch(spec: LaunchSpec, p: LauncherPorts): Promise<void> {
  const row = p.row();
  if (row.status !== "running") return; // stopped or settled before the launch got its turn
  const environment = row.environmentId ? ((await unwrapRpc(houseStub(p.env, row.houseId).getEnvironment(row.environmentId))) as Environment | null) : null;
  await launchRun(spec, {
    env: p.env,
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
    assignBox: async (boxId) => {
      p.append({ id: `box:${spec.runId}`, ts: p.now(), authorId: "threadbox", payload: { type: "signal.thread.box_assigned", boxId, runId: spec.runId } });
      await p.settle();
    },
    rememberHandle: async (boxId, handle) => {
      await unwrapRpc(sandboxStub(p.env, boxId).attach(row.houseId, row.id, handle as DetachedHandle));
    },
    launched: async (info) => {
      p.append({ id: `launched:${spec.runId}`, ts: p.now(), authorId: "threadbox", payload: { type: "signal.run.launched", runId: spec.runId, harness: spec.harness, ...info } });
    },
    alive: p.alive,
    sharedBox: () => ensureSharedBox(p.env, row.houseId, environment!),
  });
}
