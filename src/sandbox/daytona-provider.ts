// SandboxProvider on the real @daytonaio/sdk. Works in Node and inside workerd (Durable Objects):
// - polling mode: the SDK's socket.io channel would hold an outbound socket in the DO and block
//   hibernation, and the local sandbox host does not serve it;
// - a bounded requestTimeoutMs (the SDK default is 24 h);
// - bytes, never local paths, for uploads, and uploads verified afterwards (in workerd the SDK
//   does not check the upload's HTTP status).
import { Daytona, type Sandbox } from "@daytonaio/sdk";
import { ProviderError, toProviderError } from "./errors";
import { errorMessage, logEvent } from "../domain/log-event";
import { gitCredentialEnv } from "../domain/git-credentials.mjs";
import { fetchRefSteps } from "../domain/shell";
import { classifySandboxState, type Liveness } from "./state";
import { boundedCommand, cutNonce, readBoundedOutput } from "./bounded-output";
import { backoffDelayMs } from "../domain/backoff";
import {
  autoStopMinutes,
  boxLabels,
  shQuote,
  type BoxInfo,
  type CloneOptions,
  type CreateBoxOptions,
  type DeleteOptions,
  type DetachedHandle,
  type DetachedLogs,
  type DetachedOptions,
  type DetachedStatus,
  type ExecOptions,
  type ExecResult,
  type FileUpload,
  type FollowCallbacks,
  type PreviewLink,
  type StreamingExecOptions,
  type VolumeMountSpec,
  type SandboxProvider,
} from "./provider";

export interface DaytonaProviderConfig {
  apiUrl: string;
  apiKey: string;
  target?: string;
  /** Per-request HTTP timeout. Default 60 s. */
  requestTimeoutMs?: number;
  /** How many times a 409 ("state change in progress") is retried. Default 5. */
  conflictRetries?: number;
}

const DEFAULT_REQUEST_TIMEOUT_MS = 60_000;

type SdkSandboxDto = { id: string; state?: string; labels?: Record<string, string>; recoverable?: boolean; errorReason?: string };

export class DaytonaProvider implements SandboxProvider {
  readonly kind = "daytona";
  private readonly client: Daytona;
  /** Clients for the targets environments name other than the configured one (a box is made where its client's target says). */
  private readonly targetClients = new Map<string, Daytona>();
  private readonly conflictRetries: number;
  /** Sandbox handles cached per ref: every SDK call needs one and fetching it costs a GET. */
  private readonly handles = new Map<string, Sandbox>();

  constructor(private readonly config: DaytonaProviderConfig) {
    if (!config.apiUrl || !config.apiKey) {
      throw new ProviderError("bad_request", "Daytona provider needs apiUrl and apiKey (DAYTONA_API_URL, DAYTONA_API_KEY)");
    }
    this.conflictRetries = config.conflictRetries ?? 5;
    this.client = this.newClient(config.target || undefined);
  }

  private newClient(target: string | undefined): Daytona {
    return new Daytona({
      apiUrl: this.config.apiUrl,
      apiKey: this.config.apiKey,
      target,
      useDeprecatedPolling: true,
      requestTimeoutMs: this.config.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS,
    });
  }

  /** The SDK sends a create's target from its client's configuration only. */
  private clientFor(target: string | undefined): Daytona {
    if (!target || target === this.config.target) return this.client;
    let client = this.targetClients.get(target);
    if (!client) this.targetClients.set(target, (client = this.newClient(target)));
    return client;
  }

  async create(opts: CreateBoxOptions): Promise<BoxInfo> {
    const labels = boxLabels(opts.labels, opts.ephemeral);
    const source = await this.resolveSource(opts);
    const egress = opts.egress ?? {};
    // Known before the create is sent, so a box the create made and then failed on (it ended in
    // `error`, or was still starting when the wait ran out) can be found and deleted by it.
    const name = opts.name ?? `tb-${crypto.randomUUID()}`;
    const base = {
      name,
      labels,
      envVars: opts.env ?? {},
      autoStopInterval: autoStopMinutes(opts.runawayGuardMs, opts.autoStopBufferMinutes),
      // -1 = never auto-delete. 0 would delete the box the moment it stops.
      autoDeleteInterval: -1,
      // A domain allow-list is already default-deny on Daytona, and `networkBlockAll` beside an
      // allow-list takes precedence over it there: sent together, the box could not even reach its
      // thread's stream.
      networkBlockAll: egress.domainAllowList?.length || egress.networkAllowList?.length ? undefined : egress.blockAll,
      domainAllowList: egress.domainAllowList?.join(","),
      networkAllowList: egress.networkAllowList?.join(","),
      outboundProxyUrl: egress.outboundProxyUrl,
    };
    const timeout = opts.timeoutSec ?? 120;
    const volumes = opts.volumes?.length ? await this.volumeMounts(opts.volumes, timeout) : undefined;
    if (volumes) Object.assign(base, { volumes });
    let sb: Sandbox;
    try {
      const client = this.clientFor(opts.target);
      if (source.kind === "snapshot") sb = await client.create({ ...base, snapshot: source.name }, { timeout });
      else if (source.kind === "image") sb = await client.create({ ...base, image: source.name! }, { timeout });
      else sb = await client.create(base, { timeout });
    } catch (err) {
      const e = toProviderError(err, "create sandbox");
      // Refused outright (bad request, bad key, a name already taken): nothing was made, and a
      // box of that name is someone else's.
      if (e.code !== "bad_request" && e.code !== "unauthorized" && e.code !== "conflict") {
        // One that never connected reached nothing that could make the box later.
        const neverSent = /ECONNREFUSED|ENOTFOUND|EAI_AGAIN/.test(e.message);
        if (!(await this.deleteIfMade(name)) && !neverSent) e.lateBoxName = name;
      }
      throw e;
    }
    this.handles.set(sb.id, sb);
    if (source.kind !== "snapshot" && opts.installSteps?.length) {
      for (const step of opts.installSteps) {
        const r = await this.exec(sb.id, step, { timeoutSec: 900 });
        if (r.exitCode !== 0) {
          // A half-provisioned box is useless and would leak: remove it before failing.
          await this.delete(sb.id).catch((err) => logEvent("box_cleanup_failed", { ref: sb.id, error: errorMessage(err) }, "warn"));
          throw new ProviderError("bad_request", `install step failed (exit ${r.exitCode}): ${step}\n${r.output.slice(-2000)}`);
        }
      }
    }
    return { ...infoOf(sb as unknown as SdkSandboxDto), source };
  }

  /**
   * After a failed create: deletes the box of `name` if the provider made it. False when there was
   * none yet (a create the provider never answered may still be carried out) or it could not be
   * deleted now.
   */
  private async deleteIfMade(name: string): Promise<boolean> {
    try {
      await this.fetch(name);
    } catch (err) {
      if (!(err instanceof ProviderError && err.code === "not_found")) logEvent("box_cleanup_failed", { name, error: errorMessage(err) }, "warn");
      return false;
    }
    try {
      await this.delete(name);
      return true;
    } catch (err) {
      logEvent("box_cleanup_failed", { name, error: errorMessage(err) }, "warn");
      return false;
    }
  }

  /** Finds (or creates) each named volume and waits until it is ready to mount. */
  private async volumeMounts(specs: VolumeMountSpec[], timeoutSec: number): Promise<{ volumeId: string; mountPath: string }[]> {
    const out: { volumeId: string; mountPath: string }[] = [];
    for (const v of specs) {
      try {
        let vol = await this.client.volume.get(v.name, true);
        const deadline = Date.now() + timeoutSec * 1000;
        while (vol.state !== "ready" && Date.now() < deadline) {
          if (vol.state === "error") throw new ProviderError("unavailable", `volume ${v.name} failed: ${vol.errorReason ?? "error"}`);
          await new Promise((r) => setTimeout(r, 1_000));
          vol = await this.client.volume.get(v.name);
        }
        if (vol.state !== "ready") throw new ProviderError("timeout", `volume ${v.name} is not ready after ${timeoutSec}s (${vol.state})`);
        out.push({ volumeId: vol.id, mountPath: v.mountPath });
      } catch (err) {
        throw err instanceof ProviderError ? err : toProviderError(err, `volume ${v.name}`);
      }
    }
    return out;
  }

  /** Snapshot first (only if it exists and is active), else the fallback image, else the provider default. */
  private async resolveSource(opts: CreateBoxOptions): Promise<NonNullable<BoxInfo["source"]>> {
    if (opts.snapshot) {
      try {
        const snap = await this.client.snapshot.get(opts.snapshot);
        if (snap.state === "active") return { kind: "snapshot", name: opts.snapshot };
      } catch (err) {
        const e = toProviderError(err, "get snapshot");
        // Missing snapshot -> fall back; a broken provider must surface, not silently build an image.
        if (e.code !== "not_found") throw e;
      }
    }
    if (opts.image) return { kind: "image", name: opts.image };
    return { kind: "default" };
  }

  async previewLink(ref: string, port: number, expiresInSeconds: number): Promise<PreviewLink> {
    const sb = await this.handle(ref);
    try {
      const signed = await sb.getSignedPreviewUrl(port, expiresInSeconds);
      return { url: signed.url, token: signed.token, expiresAt: new Date(Date.now() + expiresInSeconds * 1000).toISOString() };
    } catch (err) {
      throw toProviderError(err, "get preview link");
    }
  }

  async get(ref: string): Promise<BoxInfo> {
    return infoOf(await this.fetch(ref));
  }

  async list(labels: Record<string, string>): Promise<BoxInfo[]> {
    const out: BoxInfo[] = [];
    try {
      for await (const sb of this.client.list({ labels })) out.push(infoOf(sb as unknown as SdkSandboxDto));
    } catch (err) {
      throw toProviderError(err, "list sandboxes");
    }
    return out;
  }

  async exec(ref: string, command: string, opts: ExecOptions = {}): Promise<ExecResult> {
    const sb = await this.handle(ref);
    const nonce = opts.keepOutputBytes ? cutNonce() : undefined;
    const run = nonce ? boundedCommand(command, nonce, opts.keepOutputBytes) : command;
    try {
      // bash -c: the Daytona daemon does not run /process/execute through a shell.
      const r = await sb.process.executeCommand(`bash -c ${shQuote(run)}`, opts.cwd, opts.env, opts.timeoutSec);
      const output = r.result ?? "";
      return { exitCode: r.exitCode ?? -1, ...(nonce ? readBoundedOutput(output, nonce) : { output }) };
    } catch (err) {
      throw toProviderError(err, "exec");
    }
  }

  async upload(ref: string, files: FileUpload[]): Promise<void> {
    if (files.length === 0) return;
    const sb = await this.handle(ref);
    const enc = new TextEncoder();
    const items = files.map((f) => {
      const bytes = typeof f.content === "string" ? enc.encode(f.content) : f.content;
      // The SDK's own typing wants a Node Buffer; in workerd nodejs_compat provides one.
      return { source: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength), destination: f.path, size: bytes.byteLength };
    });
    try {
      await sb.fs.uploadFiles(items.map(({ source, destination }) => ({ source, destination })));
    } catch (err) {
      throw toProviderError(err, "upload");
    }
    // Verify: sizes as seen inside the box, one round trip for all files.
    // Grouped: the shell's own complaint about a path it cannot open (a file where a directory
    // should be) comes before a redirection on the command itself applies.
    const check = items.map((i) => `{ wc -c < ${shQuote(i.destination)}; } 2>/dev/null || echo -1`).join("; ");
    const r = await this.exec(ref, check);
    const sizes = r.output.trim().split(/\s+/).map(Number);
    for (const [n, i] of items.entries()) {
      if (sizes[n] === i.size) continue;
      // The SDK in workerd does not read the upload's answer: a path the box cannot hold (a file
      // where the path needs a directory) shows only here, and no retry would change it.
      const clash = await this.pathClash(ref, i.destination);
      if (clash) throw new ProviderError("conflict", `upload of ${i.destination} failed: ${clash}`);
      const has = sizes[n] === -1 ? "no file there" : `${sizes[n]} bytes`;
      throw new ProviderError("unavailable", `upload of ${i.destination} not confirmed (expected ${i.size} bytes, the box has ${has})`);
    }
  }

  /** Why the box cannot hold a file at `path`, if its own files are in the way. */
  private async pathClash(ref: string, path: string): Promise<string | null> {
    const parts = path.split("/");
    const parents = parts.slice(0, -1).map((_, k) => parts.slice(0, k + 1).join("/")).filter((p) => p !== "");
    const probe = [
      ...parents.map((p) => `if [ -e ${shQuote(p)} ] && [ ! -d ${shQuote(p)} ]; then echo ${shQuote(`F ${p}`)}; exit 0; fi`),
      `if [ -d ${shQuote(path)} ]; then echo D; fi`,
    ].join("; ");
    const out = (await this.exec(ref, probe).catch(() => ({ output: "" }))).output.trim();
    if (out.startsWith("F ")) return `${out.slice(2)} is a file in the box, not a directory`;
    if (out === "D") return `${path} is a directory in the box, not a file`;
    return null;
  }

  async download(ref: string, path: string): Promise<Uint8Array> {
    const sb = await this.handle(ref);
    try {
      const buf = await sb.fs.downloadFile(path);
      return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
    } catch (err) {
      throw toProviderError(err, `download ${path}`);
    }
  }

  async clone(ref: string, opts: CloneOptions): Promise<void> {
    // The toolbox clones a branch tip and then checks a commit out of what it cloned: a tag or a
    // branch name is no commit id to it, and a commit below a shallow clone's depth is not there.
    if (opts.commit) return this.cloneAt(ref, opts, opts.commit);
    const sb = await this.handle(ref);
    try {
      await sb.git.clone(opts.url, opts.path, opts.branch, opts.commit, opts.username, opts.password, undefined, opts.depth);
    } catch (err) {
      throw toProviderError(err, `clone ${opts.url}`);
    }
  }

  /** A checkout of one commit, branch or tag, fetched by name (as deep as `depth` asks), detached. */
  private async cloneAt(ref: string, opts: CloneOptions, at: string): Promise<void> {
    const command = [
      `git init --quiet ${shQuote(opts.path)} >/dev/null`,
      `cd ${shQuote(opts.path)}`,
      `git remote add origin ${shQuote(opts.url)}`,
      fetchRefSteps(at, opts.url, opts.depth),
      `git checkout --quiet --detach "$c"`,
    ].join(" && ");
    // As with the toolbox's clone, the credentials serve this command only and stay out of the checkout.
    const env = opts.password ? gitCredentialEnv(opts.username || "x-access-token", opts.password) : { GIT_TERMINAL_PROMPT: "0" };
    const r = await this.exec(ref, command, { env, timeoutSec: 600 });
    if (r.exitCode !== 0) {
      const missing = /does not appear to be a git repository|not found|does not exist|couldn't find remote ref/i.test(r.output);
      throw new ProviderError(missing ? "not_found" : "bad_request", `clone ${opts.url} at ${at} failed (exit ${r.exitCode}): ${(opts.redact ?? ((t: string) => t))(r.output.trim()).slice(-1000)}`);
    }
  }

  async homeDir(ref: string): Promise<string> {
    const sb = await this.handle(ref);
    try {
      return (await sb.getUserHomeDir()) ?? "";
    } catch (err) {
      throw toProviderError(err, "home dir");
    }
  }

  /**
   * A session command followed live: its output arrives through the log stream while it runs;
   * its exit code and full output are read once the stream ends. The session is removed after.
   */
  async execStreaming(ref: string, command: string, opts: StreamingExecOptions): Promise<ExecResult> {
    const timeoutSec = opts.timeoutSec && opts.timeoutSec > 0 ? opts.timeoutSec : 120;
    // A session command's `cd` does not check a cwd as the box's exec does (a missing one is just
    // the command failing with exit 1; on the local host one outside the box is entered): the box
    // is asked first, so a cwd it refuses is refused here as `exec` refuses it.
    if (opts.cwd) await this.exec(ref, "true", { cwd: opts.cwd, timeoutSec });
    // The live stream's chunks carry a cut's raw marker, but only past the first 2 × keep bytes of
    // a stream, far beyond what the live output posts of one command (live-output.ts).
    const nonce = opts.keepOutputBytes ? cutNonce() : undefined;
    const run = nonce ? boundedCommand(command, nonce, opts.keepOutputBytes) : command;
    const h = await this.startDetached(ref, run, { cwd: opts.cwd, env: opts.env });
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      const followed = this.followDetached(h, { onStdout: (t) => opts.onOutput("stdout", t), onStderr: (t) => opts.onOutput("stderr", t) });
      const timedOut = new Promise<"timeout">((resolve) => { timer = setTimeout(() => resolve("timeout"), timeoutSec * 1000); });
      if ((await Promise.race([followed.then(() => "done" as const), timedOut])) === "timeout") {
        throw new ProviderError("timeout", `exec: command timed out after ${timeoutSec}s`);
      }
      // The log stream can close a moment before the command's exit code is recorded.
      let status = await this.detachedStatus(h);
      for (let i = 0; status.running && i < 50; i++) {
        await new Promise((r) => setTimeout(r, 100));
        status = await this.detachedStatus(h);
      }
      const logs = await this.detachedLogs(h);
      return { exitCode: status.exitCode ?? -1, ...(nonce ? readBoundedOutput(logs.output, nonce) : { output: logs.output }) };
    } finally {
      clearTimeout(timer);
      await this.killDetached(h).catch((err) => logEvent("exec_session_cleanup_failed", { ref, error: errorMessage(err) }, "warn"));
    }
  }

  async startDetached(ref: string, command: string, opts: DetachedOptions = {}): Promise<DetachedHandle & { existing?: true }> {
    const sb = await this.handle(ref);
    const sessionId = opts.sessionId ?? `tb-${crypto.randomUUID()}`;
    // Own shell (bash -c): a bare `exit N` in the command must not end the session shell,
    // and cwd/env apply to this command only.
    const envPart = Object.entries(opts.env ?? {})
      .map(([k, v]) => {
        if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) throw new ProviderError("bad_request", `invalid env name ${k}`);
        return shQuote(`${k}=${v}`);
      })
      .join(" ");
    const wrapped =
      (opts.cwd ? `cd ${shQuote(opts.cwd)} && ` : "") + (envPart ? `env ${envPart} ` : "") + `bash -c ${shQuote(command)}`;
    try {
      if (!(await this.openSession(sb, sessionId, opts.sessionId !== undefined))) {
        // A named session that already runs a command: a retried start finds that command again.
        const s = await sb.process.getSession(sessionId);
        const first = s.commands?.[0];
        if (first?.id) return { ref, sessionId, commandId: first.id, existing: true };
      }
      const r = await sb.process.executeSessionCommand(sessionId, { command: wrapped, runAsync: true });
      if (!r.cmdId) throw new ProviderError("unavailable", "session exec returned no command id");
      return { ref, sessionId, commandId: r.cmdId };
    } catch (err) {
      throw toProviderError(err, "start detached");
    }
  }

  /** Creates the session; false when a session of that (caller-chosen) name is already there. */
  private async openSession(sb: Sandbox, sessionId: string, named: boolean): Promise<boolean> {
    try {
      await sb.process.createSession(sessionId);
      return true;
    } catch (err) {
      if (named && toProviderError(err, "create session").code === "conflict") return false;
      throw err;
    }
  }

  async detachedStatus(h: DetachedHandle): Promise<DetachedStatus> {
    const sb = await this.handle(h.ref);
    try {
      const c = await sb.process.getSessionCommand(h.sessionId, h.commandId);
      return c.exitCode === undefined || c.exitCode === null ? { running: true } : { running: false, exitCode: c.exitCode };
    } catch (err) {
      throw toProviderError(err, "detached status");
    }
  }

  async detachedLogs(h: DetachedHandle): Promise<DetachedLogs> {
    const sb = await this.handle(h.ref);
    try {
      const l = await sb.process.getSessionCommandLogs(h.sessionId, h.commandId);
      return { output: l.output ?? "", stdout: l.stdout ?? "", stderr: l.stderr ?? "" };
    } catch (err) {
      throw toProviderError(err, "detached logs");
    }
  }

  async followDetached(h: DetachedHandle, cb: FollowCallbacks): Promise<void> {
    const sb = await this.handle(h.ref);
    try {
      await sb.process.getSessionCommandLogs(h.sessionId, h.commandId, cb.onStdout ?? (() => {}), cb.onStderr ?? (() => {}));
    } catch (err) {
      throw toProviderError(err, "follow detached");
    }
  }

  async killDetached(h: DetachedHandle): Promise<void> {
    const sb = await this.handle(h.ref);
    try {
      await sb.process.deleteSession(h.sessionId);
    } catch (err) {
      const e = toProviderError(err, "kill detached");
      if (e.code !== "not_found") throw e; // already gone is what we wanted
    }
  }

  async ensureStarted(ref: string, timeoutSec = 120): Promise<void> {
    const state = (await this.fetch(ref)).state;
    if (state !== "stopped" && state !== "archived") return;
    const sb = await this.handle(ref);
    try {
      await sb.start(timeoutSec);
    } catch (err) {
      throw toProviderError(err, "start sandbox");
    }
  }

  async probe(ref: string): Promise<Liveness> {
    try {
      return classifySandboxState(await this.fetch(ref));
    } catch (err) {
      if (err instanceof ProviderError && err.code === "not_found") return "dead";
      return "unknown";
    }
  }

  async delete(ref: string, opts: DeleteOptions = {}): Promise<void> {
    const sb = this.handles.get(ref);
    this.handles.delete(ref);
    for (let attempt = 0; ; attempt++) {
      try {
        // Through the SDK's sandbox API so no handle (and no GET) is needed for a box that may be gone.
        if (sb) await sb.delete(opts.timeoutSec ?? 60);
        else await (this.client as unknown as { sandboxApi: { deleteSandbox(id: string): Promise<unknown> } }).sandboxApi.deleteSandbox(ref);
        break;
      } catch (err) {
        const e = toProviderError(err, "delete");
        if (e.code === "not_found") return;
        if (e.code !== "conflict") throw e;
        // 409: a state change is in progress. If it is our own destroy, that is success.
        const state = await this.fetch(ref).then((d) => d.state, (x) => (x instanceof ProviderError && x.code === "not_found" ? "destroyed" : undefined));
        if (state === "destroying" || state === "destroyed") break;
        if (attempt >= this.conflictRetries) throw e;
        await sleep(backoffDelayMs(attempt + 1, 200, 2000));
      }
    }
    if (opts.wait) await this.waitGone(ref, opts.timeoutSec ?? 60);
  }

  private async waitGone(ref: string, timeoutSec: number): Promise<void> {
    const deadline = Date.now() + timeoutSec * 1000;
    for (let delay = 100; ; delay = Math.min(1000, delay * 2)) {
      try {
        const d = await this.fetch(ref);
        if (d.state === "destroyed") return;
      } catch (err) {
        if (err instanceof ProviderError && err.code === "not_found") return;
        throw err;
      }
      if (Date.now() > deadline) throw new ProviderError("timeout", `sandbox ${ref} still present after ${timeoutSec}s`);
      await sleep(delay);
    }
  }

  /** Fresh DTO for a box (refreshes the cached handle too). */
  private async fetch(ref: string): Promise<SdkSandboxDto> {
    try {
      const sb = await this.client.get(ref);
      this.handles.set(ref, sb);
      return sb as unknown as SdkSandboxDto;
    } catch (err) {
      const e = toProviderError(err, `get sandbox ${ref}`);
      if (e.code === "not_found") this.handles.delete(ref);
      throw e;
    }
  }

  private async handle(ref: string): Promise<Sandbox> {
    const cached = this.handles.get(ref);
    if (cached) return cached;
    await this.fetch(ref);
    return this.handles.get(ref)!;
  }
}

function infoOf(d: SdkSandboxDto): BoxInfo {
  return {
    ref: d.id,
    state: String(d.state ?? "unknown"),
    labels: { ...(d.labels ?? {}) },
    ...(d.recoverable !== undefined ? { recoverable: d.recoverable } : {}),
    ...(d.errorReason ? { errorReason: d.errorReason } : {}),
  };
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** The factory the actors call with the worker's DAYTONA_API_URL / DAYTONA_API_KEY / DAYTONA_TARGET. */
export function createDaytonaProvider(config: { apiUrl: string; apiKey: string; target?: string; requestTimeoutMs?: number }): DaytonaProvider {
  return new DaytonaProvider(config);
}
