import type { Env } from "../env";
import type { Entry } from "../entries/schema";
import type { Environment } from "../environments";
import { mintStreamToken, streamTokenTtlSeconds } from "../auth/tokens";
import type { SandboxProvider } from "../sandbox/provider";
import { providerFor } from "../sandbox/providers";
import { DEFAULT_FALLBACK_IMAGE, DEFAULT_HARNESS_SNAPSHOT } from "../sandbox/snapshot";
import { mirrorNextIndex, rebuildPiSession, runnerLaunch, type HarnessName } from "../sandbox/harness";
import { BUNDLES } from "../runner/bundles.generated";
import type { ThreadRow } from "./thread-row";
import { shq } from "../domain/shell";
import { PI_AGENT_DIR, WORK_DIR, runDir } from "../domain/box-layout";

export type LaunchSpec = {
  runId: string;
  task: string;
  harness: HarnessName;
  model?: string;
  repo?: string;
  branch?: string;
  resume: boolean;
};

export type LaunchDeps = {
  env: Env;
  row: ThreadRow;
  environment: Environment | null;
  entries: () => Entry[];
  /** Registers a new box's actor and returns its id. */
  registerBox(info: { provider: string; providerRef: string; labels: Record<string, string> }): Promise<string>;
  /** Whether an existing box can take this run (resume on the same box). */
  boxIsLive(boxId: string): Promise<{ providerRef: string } | null>;
  /** Records the box on the thread (readiness milestone) before anything runs in it. */
  assignBox(boxId: string): Promise<void>;
  rememberHandle(boxId: string, handle: unknown): Promise<void>;
  /** The runner is started: records how (fresh box or reused; new, continued or rebuilt session). */
  launched(info: { boxId: string; boxReused: boolean; session: "new" | "continued" | "rebuilt" }): Promise<void>;
  alive(): void;
};


/**
 * Puts a run in motion: a box (reused on resume when it is still alive, else a fresh ephemeral
 * one), the harness, the repository, the runner and mirror, then starts the runner DETACHED.
 * Returns as soon as the runner is started; the runner and the thread's alarms settle the run.
 */
export async function launchRun(spec: LaunchSpec, deps: LaunchDeps): Promise<void> {
  const { env, row, environment } = deps;
  // Checked before any box exists: a runner without a reachable stream URL could never report.
  if (!env.THREADBOX_STREAM_URL) throw new Error("THREADBOX_STREAM_URL is not configured (the stream-proxy URL boxes write to)");
  const providerName = environment?.provider ?? "daytona";
  const provider: SandboxProvider = providerFor(env, providerName);

  let boxId: string | null = null;
  let ref: string | null = null;
  let sameBox = false;
  if (spec.resume && row.boxId) {
    const live = await deps.boxIsLive(row.boxId);
    if (live) {
      boxId = row.boxId;
      ref = live.providerRef;
      sameBox = true;
    }
  }
  if (!boxId || !ref) {
    const info = await provider.create({
      labels: { house: row.houseId, thread: row.id, environment: row.environmentId ?? undefined },
      ephemeral: true,
      env: { ...(environment?.env ?? {}) },
      // Snapshot-first: the harness is pre-installed there (`npm run snapshot`); else the image,
      // and the harness check below installs what is missing.
      snapshot: environment?.snapshot ?? DEFAULT_HARNESS_SNAPSHOT,
      image: environment?.image ?? DEFAULT_FALLBACK_IMAGE,
      egress: environment?.egress,
    });
    ref = info.ref;
    boxId = await deps.registerBox({ provider: providerName, providerRef: ref, labels: info.labels });
  }
  await deps.assignBox(boxId);
  deps.alive();

  const plan0 = runnerLaunch({ harness: spec.harness, threadId: row.id, streamUrl: "", streamToken: "", runId: spec.runId, prompt: "" });
  const check = await provider.exec(ref, plan0.install.check, { timeoutSec: 60 });
  if (check.exitCode !== 0) {
    const installed = await provider.exec(ref, plan0.install.command, { timeoutSec: 900 });
    if (installed.exitCode !== 0) throw new Error(`installing ${spec.harness} failed (exit ${installed.exitCode})`);
  }
  deps.alive();

  const home = await provider.homeDir(ref);
  let cwd = WORK_DIR;
  if (spec.repo && !sameBox) {
    await provider.clone(ref, { url: spec.repo, path: `${WORK_DIR}/repo`, branch: spec.branch });
    cwd = `${WORK_DIR}/repo`;
  } else if (spec.repo) {
    cwd = `${WORK_DIR}/repo`;
  } else {
    await provider.exec(ref, `mkdir -p ${shq(WORK_DIR)}`, { cwd: home });
  }
  deps.alive();

  const uploads: { path: string; content: Uint8Array | string }[] = [];
  const harnessEnv: Record<string, string> = { ...(environment?.env ?? {}), ...(environment?.secrets ?? {}) };
  if (spec.harness === "pi") {
    harnessEnv.PI_CODING_AGENT_DIR = `${home}/${PI_AGENT_DIR}`;
    if (environment?.piModels) uploads.push({ path: `${PI_AGENT_DIR}/models.json`, content: JSON.stringify(environment.piModels, null, 2) });
    if (environment?.piSettings) uploads.push({ path: `${PI_AGENT_DIR}/settings.json`, content: JSON.stringify(environment.piSettings, null, 2) });
  }

  let sessionFile: string | undefined;
  let nextIndex: number | undefined;
  let session: "new" | "continued" | "rebuilt" = "new";
  if (spec.resume && spec.harness === "pi") {
    const entries = deps.entries();
    const existing = sameBox ? await findPiSession(provider, ref, `${home}/${PI_AGENT_DIR}`) : null;
    if (existing) {
      sessionFile = existing.file;
      nextIndex = mirrorNextIndex(entries as never, row.id, existing.sessionId);
      session = "continued";
    } else {
      // A fresh box: rebuild a loadable session from the thread (the prompt of this run is not part of it).
      const history = entries.slice(0, lastIndexOf(entries, (e) => e.payload.type === "signal.thread.status_changed" && e.payload.status === "running"));
      const rebuilt = rebuildPiSession(history as never, { cwd: `${home}/${cwd}` });
      sessionFile = `${runDir(spec.runId)}/session.jsonl`;
      uploads.push({ path: sessionFile, content: rebuilt.jsonl });
      nextIndex = rebuilt.messageCount;
      session = "rebuilt";
    }
  }

  // The box writes as the run's author (the authorship rule): the token's subject is that author.
  const token = await mintStreamToken(env.THREADBOX_TOKEN_SECRET, row.houseId, row.id, "stream:write", row.brainId ?? `runner:${spec.runId}`, streamTokenTtlSeconds(env));
  const plan = runnerLaunch({
    harness: spec.harness,
    threadId: row.id,
    streamUrl: env.THREADBOX_STREAM_URL,
    streamToken: token.token,
    runId: spec.runId,
    authorId: row.brainId ?? undefined,
    prompt: spec.task,
    model: spec.model ?? environment?.model,
    sessionFile,
    cwd,
    mirrorNextIndex: nextIndex,
    env: harnessEnv,
  });
  for (const u of plan.uploads) {
    const content = u.source ? BUNDLES[u.source] : u.content;
    if (content === undefined) throw new Error(`runner bundle ${u.source} is missing: run npm run build:runner`);
    uploads.push({ path: u.path, content });
  }
  await provider.upload(ref, uploads);
  deps.alive();
  const handle = await provider.startDetached(ref, plan.command, { env: plan.env, cwd: home });
  await deps.rememberHandle(boxId, handle);
  await deps.launched({ boxId, boxReused: sameBox, session });
}

function lastIndexOf<T>(list: T[], pred: (t: T) => boolean): number {
  for (let i = list.length - 1; i >= 0; i--) if (pred(list[i])) return i;
  return list.length;
}

async function findPiSession(provider: SandboxProvider, ref: string, agentDir: string): Promise<{ file: string; sessionId: string } | null> {
  const r = await provider.exec(ref, `f=$(ls -t ${shq(agentDir)}/sessions/*/*.jsonl 2>/dev/null | head -1); [ -n "$f" ] && echo "$f" && head -1 "$f"`);
  if (r.exitCode !== 0) return null;
  const [file, header] = r.output.trim().split("\n");
  try {
    const id = (JSON.parse(header) as { id?: string }).id;
    return file && id ? { file, sessionId: id } : null;
  } catch {
    return null;
  }
}
