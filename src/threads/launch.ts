import { ApiError } from "../errors";
import { errorMessage, logEvent } from "../domain/log-event";
import type { Env } from "../env";
import type { Entry } from "../entries/schema";
import { apiUrlProblem, type Environment } from "../environments";
import { mintRunToken, streamTokenTtlSeconds } from "../auth/tokens";
import { CODEX_CONFIG_DIR, codexMcpToml, delegateRepoPath, egressSettings, piTools, providerVolumes, repoPath, skillFile, type PermissionMode, type Plugins, type RepositorySpec } from "../workspace/box-config";
import { LABEL_RUN, type DetachedHandle, type SandboxProvider } from "../sandbox/provider";
import { classifySandboxState } from "../sandbox/state";
import { packageInstallCommands, packageList, parseInstalled } from "../workspace/packages";
import { launchBoxId, type LaunchProgress, type LaunchStep } from "./launch-progress";
import { providerFor } from "../sandbox/providers";
import { createBox } from "../actors/sandbox/late-box";
import { harnessBoxSource } from "../sandbox/snapshot";
import { mirrorNextIndex, parseMirrorEntryId, rebuildPiSession, runnerLaunch, type HarnessName } from "../sandbox/harness";
import { BUNDLES } from "../runner/bundles.generated";
import type { ThreadRow } from "./thread-row";
import { fetchRefSteps, shq } from "../domain/shell";
import { gitCredentialEnv } from "../domain/git-credentials.mjs";
import { folderMaxBytes, type CopiedFolder } from "../workspace/folders";
import { copyFoldersIn } from "../workspace/folder-sync";
import { MANAGED_FILES, managedFileContent, managedKey, managedKeys, readManagedFiles, updateManagedFiles, type ManagedFile } from "../workspace/managed-files";
import { BOX_DIR, BOX_ENV, PI_AGENT_DIR, WORK_DIR, runDir } from "../domain/box-layout";
import { STATUS_CHANGED } from "../domain/statuses";
import { boxSecretForms, lastWords, redactorFor, retiresBoxSecret } from "../workspace/output-redaction";
import { shownRepositoryUrl } from "../workspace/repository-url";

export type LaunchSpec = {
  runId: string;
  task: string;
  harness: HarnessName;
  model?: string;
  repo?: string;
  branch?: string;
  /** A shallow clone of `repo`. */
  depth?: number;
  resume: boolean;
  /** A resume's: the box the thread's previous run was on, which it continues on while that box is live. */
  resumeBoxId?: string;
  /** Overrides the environment's for this run. */
  permissionMode?: PermissionMode;
  allowedTools?: string[];
};

/** What a launch put in place, recorded on its `signal.run.launched` entry. */
export type LaunchInfo = {
  boxId: string;
  boxReused: boolean;
  session: "new" | "continued" | "rebuilt";
  permissionMode?: PermissionMode;
  allowedTools?: string[];
  files?: string[];
  repositories?: { url: string; path: string; branch?: string; ref?: string }[];
  plugins?: { skills: string[]; extensions: string[]; mcpServers: string[] };
  /** The environment's folders as copied in (the version of each uploaded one). */
  folders?: CopiedFolder[];
  /** Packages of the environment this box lacked and the launch installed (`manager:spec`). */
  packagesInstalled?: string[];
};

/** The run stopped (or another run took the thread) while its launch was under way. */
export class LaunchSuperseded extends Error {
  constructor(runId: string) {
    super(`run ${runId} is no longer the thread's running run`);
  }
}

/**
 * Checked after every step of a launch that waits: a run stopped meanwhile gets no further, and
 * what the launch made so far is left for the caller to undo.
 */
function stillCurrent(spec: LaunchSpec, deps: Pick<LaunchDeps, "current">): void {
  if (!deps.current()) throw new LaunchSuperseded(spec.runId);
}

/**
 * Checked once the runner is started: a run that ended by itself meanwhile (a fast run's runner
 * posted its end before the launch heard back) is still this launch's to record, as any ended
 * run's; only a stop or another run takes it from the launch.
 */
function stillOwn(spec: LaunchSpec, deps: Pick<LaunchDeps, "current" | "ended">): void {
  if (!deps.current() && !deps.ended()) throw new LaunchSuperseded(spec.runId);
}

export type LaunchDeps = {
  env: Env;
  /** Whether this run is still the thread's running run: a stop during the launch ends it. */
  current(): boolean;
  /** Whether this run is still the thread's run but ended by its own finished-signal (not a stop). */
  ended(): boolean;
  row: ThreadRow;
  environment: Environment | null;
  entries: () => Entry[];
  /** This run's launch progress, persisted by the caller after every step. */
  progress(): LaunchProgress;
  /** Records progress durably (committed before it resolves). */
  saveProgress(patch: LaunchProgress): Promise<LaunchProgress>;
  /** Called after a step's effect is made and before it is recorded (a test may crash the actor there). */
  checkpoint(step: LaunchStep): void;
  /** Registers the box's actor under `boxId` (idempotent: registering again changes nothing). */
  registerBox(boxId: string, info: { provider: string; providerRef: string; labels: Record<string, string> }): Promise<void>;
  /** Whether an existing box can take this run (resume on the same box). */
  boxIsLive(boxId: string): Promise<{ providerRef: string } | null>;
  /** This launch picked the box: it is held for the run until the thread is attached. */
  reserveBox(boxId: string): Promise<void>;
  /** Records the box on the thread (readiness milestone) before anything runs in it. */
  assignBox(boxId: string): Promise<void>;
  rememberHandle(boxId: string, handle: unknown): Promise<void>;
  /** The runner is started: records how (fresh box or reused; new, continued or rebuilt session). */
  launched(info: LaunchInfo): Promise<void>;
  alive(): void;
  /** The environment's shared box (`boxMode: "shared"`), created on first use. */
  sharedBox(): Promise<{ id: string; providerRef: string; created: boolean }>;
  /** Whether a run of another thread is on the box or launching onto it. */
  otherRunsOnBox(boxId: string): Promise<boolean>;
  /** The run's environment as stored now (`environment` is what it was when the launch began); null without one. */
  currentEnvironment(): Promise<Environment | null>;
  /** The environment keeps `boxId` as its shared box no longer (if it still does); the box is reaped once its runs end. */
  letGoSharedBox(boxId: string): Promise<void>;
};


/**
 * Puts a run in motion: a box (reused on resume when it is still alive, else a fresh ephemeral
 * one), the harness, the repository, the runner and mirror, then starts the runner DETACHED.
 * Returns as soon as the runner is started; the runner and the thread's alarms settle the run.
 *
 * Every step is idempotent or recorded in the run's launch progress, so a launch retried after
 * a crash converges on one box and one runner: the box carries the run's label and is found by
 * it before one is created, its actor id derives from the run id, and a started runner is
 * recorded before anything else happens.
 */
export async function launchRun(spec: LaunchSpec, deps: LaunchDeps): Promise<void> {
  const { env, row, environment } = deps;
  // Checked before any box exists: a runner without a reachable stream URL could never report.
  if (!env.THREADBOX_STREAM_URL) throw new Error("THREADBOX_STREAM_URL is not configured (the stream-proxy URL boxes write to)");
  // The worker's Daytona API may have changed since the environment named it.
  const apiUrlRefused = apiUrlProblem(env.DAYTONA_API_URL, environment?.apiUrl);
  if (apiUrlRefused) throw new Error(`environment ${environment!.id}: ${apiUrlRefused}`);
  let progress = deps.progress();
  const providerName = progress.provider ?? environment?.provider ?? "daytona";
  const provider: SandboxProvider = providerFor(env, providerName);

  // A shared environment's runs all go to its one long-lived box; a resume, too: a box that was
  // the environment's before (its settings changed since) is not taken up again.
  const shared = !progress.boxId && environment?.boxMode === "shared" ? await deps.sharedBox() : null;
  // (A launch owed before claims stopped keeping the previous run's box on the row finds it there.)
  const previousBox = spec.resumeBoxId ?? row.boxId;
  if (!progress.boxId && spec.resume && previousBox && (!shared || shared.id === previousBox)) {
    const live = await deps.boxIsLive(previousBox);
    // Held from now on: neither an idle reap nor a plain delete takes it from under this launch.
    // One that went away meanwhile is not reused: a fresh box follows.
    if (live && (await reserveUnlessGoing(deps, previousBox))) {
      progress = await deps.saveProgress({ boxId: previousBox, providerRef: live.providerRef, sameBox: true });
    }
  }
  if (!progress.boxId && shared) {
    // The box picked may have been replaced since (a change to the environment, a delete) and be
    // going: the environment's box as it is now takes the run.
    let box = shared;
    for (let tries = 1; !(await reserveUnlessGoing(deps, box.id)); tries++) {
      if (tries >= SHARED_BOX_PICKS) throw new Error(`the environment's shared box was replaced ${tries} times while this run launched`);
      box = await deps.sharedBox();
    }
    progress = await deps.saveProgress({ boxId: box.id, providerRef: box.providerRef, sameBox: true, shared: true, sharedCreated: box.created });
  }
  if (!progress.boxId) {
    if (!progress.provider) progress = await deps.saveProgress({ provider: providerName });
    // A box an earlier attempt of this launch made (it may have died before recording it).
    const earlier = (await provider.list({ [LABEL_RUN]: spec.runId })).find((b) => classifySandboxState(b) !== "dead");
    const defaults = harnessBoxSource(env);
    const info = earlier ?? await createBox(env, row.houseId, providerName, {
      labels: { house: row.houseId, thread: row.id, environment: row.environmentId ?? undefined, run: spec.runId },
      ephemeral: true,
      env: { ...(environment?.env ?? {}) },
      // Snapshot-first: the harness is pre-installed there (`npm run snapshot`); else the image,
      // and the harness check below installs what is missing.
      snapshot: environment?.snapshot ?? defaults.snapshot,
      image: environment?.image ?? defaults.image,
      egress: egressSettings(environment?.egress, env.THREADBOX_STREAM_URL),
      volumes: providerVolumes(row.houseId, environment?.volumes),
      ...(environment?.target ? { target: environment.target } : {}),
    });
    deps.checkpoint("box_created");
    // Before its actor exists: a launch that fails from here on still knows which box it made.
    progress = await deps.saveProgress({ providerRef: info.ref });
    const boxId = launchBoxId(spec.runId);
    await deps.registerBox(boxId, { provider: providerName, providerRef: info.ref, labels: info.labels });
    progress = await deps.saveProgress({ boxId, sameBox: false });
    deps.checkpoint("box_registered");
  }
  const boxId = progress.boxId!;
  const ref = progress.providerRef!;
  const sameBox = progress.sameBox === true;
  if (progress.shared && environment) {
    // The run gets the secrets and sensitive files the launch read. One changed or removed since
    // let go the box the environment had then, but this box may have been made after that change,
    // and the environment would keep it: what the run leaves there of the old value would be shown
    // by commands, which redact only the values the environment has now. It is let go too (read
    // after it was claimed: a change from now on lets it go itself); the run keeps it until it ends.
    const now = await deps.currentEnvironment();
    if (now && retiresBoxSecret(environment, now)) await deps.letGoSharedBox(boxId);
  }
  deps.checkpoint("box_chosen");
  stillCurrent(spec, deps);
  await deps.assignBox(boxId);
  deps.alive();

  if (!progress.handle) {
    stillCurrent(spec, deps);
    const started = await startRunner(spec, deps, provider, ref, sameBox, progress);
    progress = await deps.saveProgress({ handle: started.handle, session: started.session });
    deps.checkpoint("runner_started");
  }
  stillOwn(spec, deps);
  await deps.rememberHandle(boxId, progress.handle);
  stillOwn(spec, deps);
  const workspace = workspaceOf(spec, deps.environment);
  await deps.launched({
    // A shared box counts as the same box for what its runs leave there, but the run that made it did not reuse it.
    boxId, boxReused: sameBox && progress.sharedCreated !== true, session: progress.session ?? "new",
    ...(workspace.permissionMode ? { permissionMode: workspace.permissionMode } : {}),
    // What the harness was given: for pi, `plan` narrows a list to its read-only tools.
    ...(workspace.allowedTools ? { allowedTools: spec.harness === "pi" ? piTools(workspace.permissionMode, workspace.allowedTools) : workspace.allowedTools } : {}),
    ...(workspace.files.length ? { files: workspace.files.map((f) => f.path) } : {}),
    // Which packages this launch installed and which the box already had (a snapshot, or an earlier run on a shared box).
    ...(progress.packagesInstalled
      ? { packagesInstalled: progress.packagesInstalled, packagesPresent: packageList(deps.environment?.packages).filter((p) => !progress.packagesInstalled!.includes(p)) }
      : {}),
    ...(progress.folders?.length ? { folders: progress.folders } : {}),
    ...(!spec.repo && deps.environment?.repositories?.length
      ? { repositories: deps.environment.repositories.map((r) => ({ url: shownRepositoryUrl(r.url), path: repoPath(r), ...(r.branch ? { branch: r.branch } : {}), ...(r.ref ? { ref: r.ref } : {}) })) }
      : {}),
    ...(deps.environment?.plugins
      ? { plugins: { skills: deps.environment.plugins.skills.map((x) => x.name), extensions: deps.environment.plugins.extensions.map((x) => x.name), mcpServers: Object.keys(deps.environment.plugins.mcpServers) } }
      : {}),
  });
}

/** Picks of an environment's shared box a launch makes before giving up, each one found going. */
const SHARED_BOX_PICKS = 3;

/** Holds `boxId` for the launch; false when the box is going (being deleted, or gone). */
async function reserveUnlessGoing(deps: Pick<LaunchDeps, "reserveBox">, boxId: string): Promise<boolean> {
  return deps.reserveBox(boxId).then(() => true, (err) => {
    if (err instanceof ApiError && err.code === "conflict") return false;
    throw err;
  });
}

/** Harness, repository, files and the detached runner on a box that is this run's. */
async function startRunner(
  spec: LaunchSpec, deps: LaunchDeps, provider: SandboxProvider, ref: string, sameBox: boolean, progress: LaunchProgress,
): Promise<{ handle: DetachedHandle; session: "new" | "continued" | "rebuilt" }> {
  const { env, row, environment } = deps;
  const plan0 = runnerLaunch({ harness: spec.harness, threadId: row.id, streamUrl: "", streamToken: "", runId: spec.runId, prompt: "" });
  const check = await provider.exec(ref, plan0.install.check, { timeoutSec: 60 });
  if (check.exitCode !== 0) {
    const installed = await provider.exec(ref, plan0.install.command, { timeoutSec: 900 });
    // The installer's last words say why (no network, a registry refusing, a full disk); without
    // them the run's reason names only an exit code. No secret is in this command's environment;
    // what the box holds of them (a shared box keeps what runs left) is redacted before the cut.
    if (installed.exitCode !== 0) throw new Error(`installing ${spec.harness} failed (exit ${installed.exitCode}): ${lastWords(installed.output, 500, environment)}`);
  }
  deps.alive();
  if (environment?.packages && !progress.packagesInstalled) {
    // A snapshot built with them installs nothing here.
    const installed: string[] = [];
    for (const step of packageInstallCommands(environment.packages)) {
      const out = await provider.exec(ref, step.command, { timeoutSec: 900 });
      if (out.exitCode !== 0) throw new Error(`installing the environment's ${step.manager} packages failed (exit ${out.exitCode}): ${lastWords(out.output, 500, environment)}`);
      installed.push(...parseInstalled(out.output));
      deps.alive();
    }
    progress = await deps.saveProgress({ packagesInstalled: installed });
  }

  const home = await provider.homeDir(ref);
  // The delegate's own repository replaces the environment's list for this run.
  const repos: RepositorySpec[] = spec.repo
    ? [{ url: spec.repo, branch: spec.branch, ...(spec.depth ? { depth: spec.depth } : {}), path: delegateRepoPath(spec.repo, spec.branch, progress.shared === true) }]
    : (environment?.repositories ?? []);
  // The run's directory will hold its stream token until the runner takes it: the box user's alone.
  await provider.exec(ref, `mkdir -p ${shq(WORK_DIR)} ${shq(runDir(spec.runId))} && chmod 700 ${shq(runDir(spec.runId))}`, { cwd: home });
  if (repos.length > 0 && !progress.cloned) {
    if (progress.shared) {
      // A long-lived checkout is brought to the wanted ref in place; untracked work stays.
      for (const r of repos) await reconcileCheckout(provider, ref, home, r, environment);
      await deps.saveProgress({ cloned: true });
    } else if (!sameBox) {
      for (const r of repos) {
        const dest = `${WORK_DIR}/${repoPath(r)}`;
        // What an interrupted attempt left would make the clone fail.
        await provider.exec(ref, `rm -rf ${shq(dest)}`, { cwd: home });
        await provider.clone(ref, cloneOptions(r, dest, environment));
        deps.alive();
      }
      await deps.saveProgress({ cloned: true });
    }
  }
  // One repository is the working directory itself; several sit side by side in it.
  const cwd = repos.length === 1 ? `${WORK_DIR}/${repoPath(repos[0])}` : WORK_DIR;
  deps.alive();
  if (environment?.folders?.length && !progress.folders) {
    // A resume on the box the last run left (not a shared one) goes on with the work in its
    // folders, as pi goes on with its session: nothing is copied over it, and sync-back compares
    // with what that run copied in.
    const kept = sameBox && spec.resume && !progress.shared ? previousFolders(deps.entries(), environment.folders) : null;
    const folders = kept ?? await copyFoldersIn(env, { provider, ref, home }, row.houseId, environment, cwd, spec.runId, folderMaxBytes(env));
    progress = await deps.saveProgress({ folders });
    deps.alive();
  }

  const uploads: { path: string; content: Uint8Array | string }[] = [];
  /** What of the uploads is the environment's (recorded in the box, see managed-files.ts). */
  const managed: ManagedFile[] = [];
  const put = (key: string, path: string, content: string) => {
    uploads.push({ path, content });
    managed.push({ key, path });
  };
  const workspace = workspaceOf(spec, environment);
  // The environment's files, in the working directory, before the harness starts.
  for (const f of workspace.files) put(managedKey.file(f.path), `${cwd}/${f.path}`, f.content);
  const harnessEnv: Record<string, string> = { ...(environment?.env ?? {}), ...(environment?.secrets ?? {}) };
  // The runner and the mirror scrub these values from what they post (entries, stderr, artifacts)...
  if (environment?.secrets) harnessEnv[BOX_ENV.secretNames] = Object.keys(environment.secrets).join(",");
  // ...and the content of the files marked sensitive (what it posts: entries, artifacts).
  const sensitive = workspace.files.filter((f) => f.sensitive).map((f) => f.path);
  if (sensitive.length) harnessEnv[BOX_ENV.sensitiveFiles] = JSON.stringify(sensitive);
  const plugins = environment?.plugins;
  if (plugins && spec.harness === "pi") {
    // pi discovers skills and extensions in its agent directory.
    for (const sk of plugins.skills) put(managedKey.skill(sk.name), `${PI_AGENT_DIR}/skills/${sk.name}/SKILL.md`, skillFile(sk));
    for (const ext of plugins.extensions) put(managedKey.extension(ext.name), `${PI_AGENT_DIR}/extensions/${ext.name}.ts`, ext.source);
  }
  if (plugins && Object.keys(plugins.mcpServers).length > 0) {
    const servers = withSecrets(plugins.mcpServers, environment?.secrets ?? {});
    // Claude Code reads project-scoped servers from the working directory's .mcp.json; Codex from its config.
    if (spec.harness === "claude-code") put(managedKey.mcp("claude-code"), `${cwd}/.mcp.json`, JSON.stringify({ mcpServers: servers }, null, 2));
    if (spec.harness === "codex") put(managedKey.mcp("codex"), `${CODEX_CONFIG_DIR}/config.toml`, codexMcpToml(servers));
  }
  if (spec.harness === "pi") {
    harnessEnv.PI_CODING_AGENT_DIR = `${home}/${PI_AGENT_DIR}`;
    if (environment?.piModels) put(managedKey.piModels, `${PI_AGENT_DIR}/models.json`, JSON.stringify(environment.piModels, null, 2));
    if (environment?.piSettings) put(managedKey.piSettings, `${PI_AGENT_DIR}/settings.json`, JSON.stringify(environment.piSettings, null, 2));
  }

  let sessionFile: string | undefined;
  let nextIndex: number | undefined;
  let session: "new" | "continued" | "rebuilt" = "new";
  if (spec.resume && spec.harness === "pi") {
    const entries = deps.entries();
    const existing = sameBox ? await findPiSession(provider, ref, home, lastMirroredSession(entries, row.id)) : null;
    if (existing) {
      sessionFile = existing.file;
      nextIndex = mirrorNextIndex(entries as never, row.id, existing.sessionId);
      session = "continued";
    } else {
      // A fresh box: rebuild a loadable session from the thread (the prompt of this run is not part of it).
      const history = entries.slice(0, lastIndexOf(entries, (e) => e.payload.type === STATUS_CHANGED && e.payload.status === "running"));
      const rebuilt = rebuildPiSession(history as never, { cwd: `${home}/${cwd}` });
      sessionFile = `${runDir(spec.runId)}/session.jsonl`;
      uploads.push({ path: sessionFile, content: rebuilt.jsonl });
      nextIndex = rebuilt.messageCount;
      session = "rebuilt";
    }
  }

  // The box writes as the run's author (the authorship rule): the token's subject is that author.
  const token = await mintRunToken(env.THREADBOX_TOKEN_SECRET, row.houseId, row.id, spec.runId, row.brainId ?? `runner:${spec.runId}`, streamTokenTtlSeconds(env));
  const plan = runnerLaunch({
    harness: spec.harness,
    threadId: row.id,
    streamUrl: env.THREADBOX_STREAM_URL!,
    streamToken: token.token,
    runId: spec.runId,
    authorId: row.brainId ?? undefined,
    prompt: spec.task,
    model: spec.model ?? environment?.model,
    sessionFile,
    cwd,
    mirrorNextIndex: nextIndex,
    env: harnessEnv,
    permissionMode: workspace.permissionMode,
    allowedTools: spec.harness === "pi" ? piTools(workspace.permissionMode, workspace.allowedTools) : workspace.allowedTools,
  });
  let tokenFile: { path: string; content: string } | undefined;
  for (const u of plan.uploads) {
    const content = u.source ? BUNDLES[u.source] : u.content;
    if (content === undefined) throw new Error(`runner bundle ${u.source} is missing: run npm run build:runner`);
    if (u.path === plan.tokenPath) tokenFile = { path: u.path, content: content as string };
    else uploads.push({ path: u.path, content });
  }
  if (sameBox) {
    // A box earlier runs used holds what the environment put there then: what it no longer has
    // goes (a removed sensitive file, a removed extension pi would still load). What another
    // harness's run on a shared box wrote and the environment still has stays: that run may be
    // using it. What this launch now writes elsewhere (its working directory moved) goes too,
    // unless another thread's run is on the box: its working directory may be that other place
    // (a delegate's own repository, an older version of the environment's repositories).
    // What the environment has now, not when this launch began: a run launched since on a newer
    // version may have written a file this launch's version lacks.
    const now = (await deps.currentEnvironment()) ?? environment;
    const keys = now ? managedKeys(now) : new Set<string>();
    const own = new Set(managed.map((m) => m.key));
    const alone = !(await deps.otherRunsOnBox(progress.boxId!));
    const before = await readManagedFiles(provider, ref, home);
    const stale = before.filter((b) => !managed.some((m) => m.path === b.path) && (!keys.has(b.key) || (alone && own.has(b.key))));
    // A box that outlives the run keeps what is written now: a run stopped meanwhile leaves the
    // environment's files and their record as they were.
    stillCurrent(spec, deps);
    await updateManagedFiles(provider, ref, home, stale, managed);
  } else {
    uploads.push({ path: MANAGED_FILES, content: managedFileContent(managed) });
  }
  stillCurrent(spec, deps);
  await provider.upload(ref, uploads);
  deps.alive();
  if (progress.shared) {
    // A change to the environment while this launch wrote it out has pruned the box before the
    // upload put back what it took out (a removed sensitive file, readable there in clear since):
    // what the environment has now decides. A change after this read prunes what was uploaded.
    const now = await deps.currentEnvironment();
    const keys = now ? managedKeys(now) : null;
    const gone = keys ? managed.filter((m) => !keys.has(m.key)) : [];
    await updateManagedFiles(provider, ref, home, gone);
    deps.alive();
  }
  // The installs, clone and uploads take long: a run stopped meanwhile gets no runner, and so
  // must get no token file either (only a runner removes it; a kept box would hold it for the
  // next run's commands). It goes up last, right before the runner that takes it.
  stillCurrent(spec, deps);
  const removeToken = () => provider.exec(ref, `rm -f ${shq(plan.tokenPath)}`, { cwd: home }).then(() => {}, (err) => {
    logEvent("launch_token_cleanup_failed", { threadId: row.id, runId: spec.runId, error: errorMessage(err) }, "warn");
  });
  let started: Awaited<ReturnType<SandboxProvider["startDetached"]>>;
  try {
    if (tokenFile) await provider.upload(ref, [tokenFile]);
    // A session named after the run: a launch retried after the runner started (but before that
    // was recorded) finds the running command instead of starting a second runner.
    started = await provider.startDetached(ref, plan.command, { env: plan.env, cwd: home, sessionId: runnerSessionId(spec.runId) });
  } catch (err) {
    await removeToken();
    throw err;
  }
  const { existing, ...handle } = started;
  // The runner an earlier attempt started took that attempt's token; this one's would stay behind.
  if (existing) await removeToken();
  deps.checkpoint("runner_spawned");
  return { handle, session };
}

/**
 * The folders the thread's last launched run copied in (from its launch entry), when they are the
 * environment's folders still (same sources, paths and access), else null.
 */
function previousFolders(entries: Entry[], wanted: Environment["folders"]): CopiedFolder[] | null {
  for (let i = entries.length - 1; i >= 0; i--) {
    const p = entries[i].payload;
    if (p.type !== "signal.run.launched") continue;
    const had = Array.isArray(p.folders) ? (p.folders as CopiedFolder[]) : [];
    const same = had.length === wanted.length && wanted.every((w, k) => had[k].source === w.source && had[k].path.endsWith(`/${w.path}`) && had[k].access === w.access);
    if (!same) return null;
    // What that run changed was stored when it ended: the folder in the box is that version now,
    // and only what this run changes on top of it is a new one (not the same work stored twice).
    return had.map((f) => {
      const synced = entries.find((e) => e.payload.type === "artifact.folder" && e.payload.runId === p.runId && e.payload.status === "synced" && e.payload.folder === f.source);
      const { version, digest } = (synced?.payload ?? {}) as { version?: unknown; digest?: unknown };
      return typeof version === "number" && typeof digest === "string" ? { ...f, version, digest } : f;
    });
  }
  return null;
}

/** MCP server env values written `$NAME` take the environment's secret of that name, in the box only. */
function withSecrets(servers: Plugins["mcpServers"], secrets: Record<string, string>): Plugins["mcpServers"] {
  return Object.fromEntries(Object.entries(servers).map(([name, srv]) => {
    if (!("command" in srv) || !srv.env) return [name, srv];
    const env = Object.fromEntries(Object.entries(srv.env).map(([k, v]) => [k, v.startsWith("$") && v.slice(1) in secrets ? secrets[v.slice(1)] : v]));
    return [name, { ...srv, env }];
  }));
}

function cloneOptions(r: RepositorySpec, dest: string, environment: Environment | null) {
  const password = r.credentialsSecret ? environment?.secrets?.[r.credentialsSecret] : undefined;
  return {
    url: r.url, path: dest, branch: r.branch, commit: r.ref, depth: r.depth,
    ...(password ? { username: r.credentialsUsername ?? "x-access-token", password } : {}),
    ...(environment ? { redact: redactorFor(boxSecretForms(environment)) } : {}),
  };
}

/**
 * On a shared box: clone a repository the first time; afterwards fetch and check out the wanted
 * branch or commit in place (fast-forward only), keeping untracked files — or, with `reset`,
 * discarding every local change.
 */
async function reconcileCheckout(provider: SandboxProvider, ref: string, home: string, r: RepositorySpec, environment: Environment | null): Promise<void> {
  const dest = `${WORK_DIR}/${repoPath(r)}`;
  const exists = (await provider.exec(ref, `test -d ${shq(dest)}/.git`, { cwd: home })).exitCode === 0;
  if (!exists) {
    await provider.exec(ref, `rm -rf ${shq(dest)}`, { cwd: home });
    await provider.clone(ref, cloneOptions(r, dest, environment));
    return;
  }
  // The checkout's origin is where the environment says the repository is now: a URL changed
  // since the clone is fetched from, not the old one.
  const origin = `(git remote set-url origin ${shq(r.url)} 2>/dev/null || git remote add origin ${shq(r.url)})`;
  const update = r.reset ? resetSteps(r) : r.ref
    ? [fetchRefSteps(r.ref, r.url, r.depth), `git checkout --quiet --detach "$c"`]
    : r.branch
      ? [`git fetch --quiet origin ${shq(r.branch)}`, `(git checkout --quiet ${shq(r.branch)} 2>/dev/null || git checkout --quiet -b ${shq(r.branch)} FETCH_HEAD)`, `git merge --ff-only --quiet FETCH_HEAD`]
      : [...defaultBranchSteps(), `(git checkout --quiet "$b" 2>/dev/null || git checkout --quiet -b "$b" "origin/$b")`, `git merge --ff-only --quiet "origin/$b"`];
  // The clone did not keep the credentials; a fetch needs them again.
  const creds = cloneOptions(r, dest, environment);
  const env = creds.password ? gitCredentialEnv(creds.username ?? "x-access-token", creds.password) : { GIT_TERMINAL_PROMPT: "0" };
  const out = await provider.exec(ref, [origin, ...update].join(" && "), { cwd: `${home}/${dest}`, timeoutSec: 600, env });
  if (out.exitCode !== 0) throw new Error(`updating ${repoPath(r)} in place failed (exit ${out.exitCode}): ${lastWords(out.output, 500, environment)}`);
}

/** `reset: true`: the checkout becomes exactly the wanted commit; local changes and untracked files go. */
function resetSteps(r: RepositorySpec): string[] {
  const checkout = r.ref
    ? [fetchRefSteps(r.ref, r.url, r.depth), `git checkout --quiet --force --detach "$c"`]
    : r.branch
      ? [`git fetch --quiet origin ${shq(r.branch)}`, `git checkout --quiet --force -B ${shq(r.branch)} FETCH_HEAD`]
      : [...defaultBranchSteps(), `git checkout --quiet --force -B "$b" "origin/$b"`];
  return [...checkout, `git clean -fdq`];
}

/**
 * Neither branch nor commit given: the remote's default branch is wanted, whatever the checkout
 * is on now (a commit an earlier setting checked out, detached). Leaves its name in `$b`.
 */
function defaultBranchSteps(): string[] {
  return [`git fetch --quiet origin`, `git remote set-head origin --auto >/dev/null`, `b=$(git symbolic-ref --short refs/remotes/origin/HEAD)`, `b=\${b#origin/}`];
}

/** The run's workspace settings: the delegate's override, else the environment's. */
function workspaceOf(spec: LaunchSpec, environment: Environment | null) {
  return {
    permissionMode: spec.permissionMode ?? environment?.permissionMode,
    allowedTools: spec.allowedTools ?? environment?.allowedTools,
    files: environment?.files ?? [],
  };
}

/** The box session a run's runner lives in: the same on every retry of its launch. */
export function runnerSessionId(runId: string): string {
  return `tb-run-${runId.replace(/[^A-Za-z0-9_.-]/g, "")}`;
}

function lastIndexOf<T>(list: T[], pred: (t: T) => boolean): number {
  for (let i = list.length - 1; i >= 0; i--) if (pred(list[i])) return i;
  return list.length;
}

/** The pi session this thread's runs last mirrored from (its id is in the mirror's entry ids). */
function lastMirroredSession(entries: readonly { id?: string }[], threadId: string): string | undefined {
  let sessionId: string | undefined;
  for (const e of entries) sessionId = parseMirrorEntryId(e.id, threadId)?.sessionId ?? sessionId;
  return sessionId;
}

/**
 * The file of pi session `sessionId` on the box, if it is still there: pi's own sessions, or one
 * a resume rebuilt into a run's directory. Matched by id, never by age: a shared box holds the
 * sessions of every thread that ran on it, and the newest may be another thread's.
 */
async function findPiSession(provider: SandboxProvider, ref: string, home: string, sessionId: string | undefined): Promise<{ file: string; sessionId: string } | null> {
  if (!sessionId) return null;
  const globs = [`${shq(`${home}/${PI_AGENT_DIR}`)}/sessions/*/*.jsonl`, `${shq(`${home}/${BOX_DIR}`)}/runs/*/session.jsonl`];
  const r = await provider.exec(ref, `for f in ${globs.join(" ")}; do [ -f "$f" ] && printf '%s\\t' "$f" && head -1 "$f" && echo; done; true`);
  if (r.exitCode !== 0) return null;
  for (const line of r.output.split("\n")) {
    const tab = line.indexOf("\t");
    if (tab < 0) continue;
    try {
      if ((JSON.parse(line.slice(tab + 1)) as { id?: unknown }).id === sessionId) return { file: line.slice(0, tab), sessionId };
    } catch {
      // not a session header: some other file
    }
  }
  return null;
}
