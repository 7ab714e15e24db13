// In-memory SandboxProvider for tests only (registered as "test" by test configurations; the
// deployed worker never imports it): no processes, no network, fully scriptable.
// Scripting knobs: kill a box out-of-band, make deletes fail N times, queue probe answers,
// answer exec through a handler, finish detached commands by hand.
import { ProviderError, type ProviderErrorCode } from "./errors";
import { classifySandboxState, type Liveness } from "./state";
import {
  LABEL_HOUSE,
  boxLabels,
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
  type SandboxProvider,
} from "./provider";

interface FakeDetached {
  handle: DetachedHandle;
  command: string;
  opts: DetachedOptions;
  stdout: string;
  stderr: string;
  exitCode?: number;
  followers: Set<{ cb: FollowCallbacks; done: () => void }>;
}

interface FakeBox {
  ref: string;
  state: string;
  recoverable?: boolean;
  labels: Record<string, string>;
  env: Record<string, string>;
  files: Map<string, Uint8Array>;
  create: CreateBoxOptions;
}

/** Scripts `exec`; under `execStreaming` the handler may hand over output as it goes through `opts.onOutput`. */
export type ExecHandler = (box: { ref: string; env: Record<string, string> }, command: string, opts: ExecOptions & Partial<Pick<StreamingExecOptions, "onOutput">>) => ExecResult | Promise<ExecResult>;

export interface TestProviderCall {
  op: string;
  ref?: string;
  args?: unknown;
}

export class TestSandboxProvider implements SandboxProvider {
  readonly kind = "test";
  readonly boxes = new Map<string, FakeBox>();
  readonly calls: TestProviderCall[] = [];
  readonly detached = new Map<string, FakeDetached>();
  /** Snapshots that "exist"; create() prefers them like the Daytona provider does. */
  readonly snapshots = new Set<string>();
  execHandler: ExecHandler = () => ({ exitCode: 0, output: "" });
  private seq = 0;
  private deleteFailures: { remaining: number; code: ProviderErrorCode; ref?: string }[] = [];
  private probeScript = new Map<string, Liveness[]>();
  private unreachable = false;
  private failingOps: { op: string; house: string; message: string; code: ProviderErrorCode }[] = [];

  // ---- scripting -------------------------------------------------------------------------

  /** The box vanishes as if deleted out-of-band: get -> not_found, probe -> dead. */
  kill(ref: string): void {
    this.boxes.delete(ref);
    for (const d of this.detached.values()) if (d.handle.ref === ref && d.exitCode === undefined) this.finishDetached(d.handle, 137);
  }

  /** Puts a box in a raw provider state (e.g. `error`, `stopped`). */
  setState(ref: string, state: string, recoverable?: boolean): void {
    const b = this.mustBox(ref);
    b.state = state;
    b.recoverable = recoverable;
  }

  /** The next `times` deletes (of `ref`, or of any box) fail with `code` before the box is touched. */
  failDeletes(times: number, code: ProviderErrorCode = "unavailable", ref?: string): void {
    this.deleteFailures.push({ remaining: times, code, ref });
  }

  /** Queues probe answers for a box; once used up, probe falls back to the real rule. */
  scriptProbe(ref: string, ...answers: Liveness[]): void {
    this.probeScript.set(ref, [...(this.probeScript.get(ref) ?? []), ...answers]);
  }

  /** Every `op` (e.g. `clone`, `upload`) on a box of `house` fails with `message` (a provider error of `code`). */
  failOn(op: string, house: string, message: string, code: ProviderErrorCode = "bad_request"): void {
    this.failingOps.push({ op, house, message, code });
  }

  private hangingCreates = new Set<string>();
  /** Boxes whose create timed out, by name: the provider has not made them yet. */
  readonly lateBoxes = new Map<string, FakeBox>();

  /**
   * Every create of a box of `house` times out before the provider has made it (a create it never
   * answered); the box is made later, when `appearLate` says so.
   */
  hangCreates(house: string, hang = true): void {
    if (hang) this.hangingCreates.add(house);
    else this.hangingCreates.delete(house);
  }

  /** The provider carries out a create it never answered: the box of `name` now exists (its ref is its name). */
  appearLate(name: string): void {
    const b = this.lateBoxes.get(name);
    if (!b) throw new Error(`no late box ${name}`);
    this.lateBoxes.delete(name);
    this.boxes.set(name, b);
  }

  /** Simulates the provider being down: every call throws `unavailable`, probe says `unknown`. */
  setUnreachable(down: boolean): void {
    this.unreachable = down;
  }

  /** Writes output to a detached command and, with `exitCode`, ends it. */
  emitDetached(handle: DetachedHandle, out: { stdout?: string; stderr?: string }): void {
    const d = this.mustDetached(handle);
    if (out.stdout) d.stdout += out.stdout;
    if (out.stderr) d.stderr += out.stderr;
    for (const f of d.followers) {
      if (out.stdout) f.cb.onStdout?.(out.stdout);
      if (out.stderr) f.cb.onStderr?.(out.stderr);
    }
  }

  finishDetached(handle: DetachedHandle, exitCode: number): void {
    const d = this.mustDetached(handle);
    d.exitCode = exitCode;
    for (const f of d.followers) f.done();
    d.followers.clear();
  }

  detachedCommands(ref?: string): FakeDetached[] {
    return [...this.detached.values()].filter((d) => !ref || d.handle.ref === ref);
  }

  // ---- SandboxProvider ---------------------------------------------------------------------

  async create(opts: CreateBoxOptions): Promise<BoxInfo> {
    this.enter("create", undefined, opts);
    const ref = `test-box-${++this.seq}`;
    if (opts.labels.house && this.hangingCreates.has(opts.labels.house)) {
      const name = opts.name ?? `tb-${crypto.randomUUID()}`;
      this.lateBoxes.set(name, { ref: name, state: "started", labels: boxLabels(opts.labels, opts.ephemeral), env: { ...(opts.env ?? {}) }, files: new Map(), create: opts });
      throw new ProviderError("timeout", "create sandbox: the provider did not answer (test)", { lateBoxName: name });
    }
    const source: BoxInfo["source"] =
      opts.snapshot && this.snapshots.has(opts.snapshot)
        ? { kind: "snapshot", name: opts.snapshot }
        : opts.image
          ? { kind: "image", name: opts.image }
          : { kind: "default" };
    const box: FakeBox = {
      ref,
      state: "started",
      labels: boxLabels(opts.labels, opts.ephemeral),
      env: { ...(opts.env ?? {}) },
      files: new Map(),
      create: opts,
    };
    this.boxes.set(ref, box);
    if (source.kind !== "snapshot") for (const step of opts.installSteps ?? []) await this.exec(ref, step);
    return { ...this.info(box), source };
  }

  async get(ref: string): Promise<BoxInfo> {
    this.enter("get", ref);
    return this.info(this.mustBox(ref));
  }

  async list(labels: Record<string, string>): Promise<BoxInfo[]> {
    this.enter("list", undefined, labels);
    return [...this.boxes.values()].filter((b) => Object.entries(labels).every(([k, v]) => b.labels[k] === v)).map((b) => this.info(b));
  }

  async exec(ref: string, command: string, opts: ExecOptions = {}): Promise<ExecResult> {
    this.enter("exec", ref, { command, opts });
    const b = this.mustRunning(ref);
    return this.execHandler({ ref, env: { ...b.env, ...(opts.env ?? {}) } }, command, opts);
  }

  async execStreaming(ref: string, command: string, opts: StreamingExecOptions): Promise<ExecResult> {
    this.enter("execStreaming", ref, { command, opts: { cwd: opts.cwd, env: opts.env, timeoutSec: opts.timeoutSec } });
    const b = this.mustRunning(ref);
    let streamed = false;
    const onOutput: StreamingExecOptions["onOutput"] = (stream, text) => { streamed = true; opts.onOutput(stream, text); };
    const r = await this.execHandler({ ref, env: { ...b.env, ...(opts.env ?? {}) } }, command, { ...opts, onOutput });
    // A handler that only returns a result still streams it, as one chunk.
    if (!streamed && r.output) opts.onOutput("stdout", r.output);
    return r;
  }

  /** Runs before an upload lands (a test doing something while a launch uploads). */
  beforeUpload: ((ref: string, paths: string[]) => Promise<void>) | null = null;

  async upload(ref: string, files: FileUpload[]): Promise<void> {
    this.enter("upload", ref, files.map((f) => f.path));
    await this.beforeUpload?.(ref, files.map((f) => f.path));
    const b = this.mustRunning(ref);
    for (const f of files) b.files.set(f.path, typeof f.content === "string" ? new TextEncoder().encode(f.content) : f.content.slice());
  }

  async download(ref: string, path: string): Promise<Uint8Array> {
    this.enter("download", ref, path);
    const data = this.mustRunning(ref).files.get(path);
    if (!data) throw new ProviderError("not_found", `file ${path} not found`, { status: 404 });
    return data.slice();
  }

  async clone(ref: string, opts: CloneOptions): Promise<void> {
    this.enter("clone", ref, opts);
    this.mustRunning(ref).files.set(`${opts.path}/.git/HEAD`, new TextEncoder().encode("ref: refs/heads/main\n"));
  }

  async homeDir(ref: string): Promise<string> {
    this.enter("homeDir", ref);
    this.mustRunning(ref);
    return "/home/daytona";
  }

  /** Runs once a detached command is started, before the caller learns of it (a runner that ends at once). */
  afterStartDetached: ((handle: DetachedHandle, opts: DetachedOptions) => Promise<void>) | null = null;

  async startDetached(ref: string, command: string, opts: DetachedOptions = {}): Promise<DetachedHandle & { existing?: true }> {
    this.enter("startDetached", ref, { command, opts });
    this.mustRunning(ref);
    // Like a named Daytona session: starting it again finds the command it already runs.
    const existing = opts.sessionId ? [...this.detached.values()].find((d) => d.handle.ref === ref && d.handle.sessionId === opts.sessionId) : undefined;
    if (existing) return { ...existing.handle, existing: true };
    const handle = { ref, sessionId: opts.sessionId ?? `tb-session-${++this.seq}`, commandId: `cmd-${++this.seq}` };
    this.detached.set(key(handle), { handle, command, opts, stdout: "", stderr: "", followers: new Set() });
    await this.afterStartDetached?.(handle, opts);
    return handle;
  }

  async detachedStatus(h: DetachedHandle): Promise<DetachedStatus> {
    this.enter("detachedStatus", h.ref, h);
    this.mustBox(h.ref);
    const d = this.mustDetached(h);
    return d.exitCode === undefined ? { running: true } : { running: false, exitCode: d.exitCode };
  }

  async detachedLogs(h: DetachedHandle): Promise<DetachedLogs> {
    this.enter("detachedLogs", h.ref, h);
    this.mustBox(h.ref);
    const d = this.mustDetached(h);
    return { output: d.stdout + d.stderr, stdout: d.stdout, stderr: d.stderr };
  }

  async followDetached(h: DetachedHandle, cb: FollowCallbacks): Promise<void> {
    this.enter("followDetached", h.ref, h);
    this.mustBox(h.ref);
    const d = this.mustDetached(h);
    if (d.stdout) cb.onStdout?.(d.stdout);
    if (d.stderr) cb.onStderr?.(d.stderr);
    if (d.exitCode !== undefined) return;
    await new Promise<void>((done) => d.followers.add({ cb, done }));
  }

  async killDetached(h: DetachedHandle): Promise<void> {
    this.enter("killDetached", h.ref, h);
    const d = this.detached.get(key(h));
    if (d && d.exitCode === undefined) this.finishDetached(h, 137);
  }

  async previewLink(ref: string, port: number, expiresInSeconds: number): Promise<PreviewLink> {
    const b = this.boxes.get(ref);
    this.enter("previewLink", ref);
    if (!b) throw new ProviderError("not_found", `box ${ref} not found`);
    const token = `tok${ref}${port}`;
    return { url: `https://${port}-${token}.preview.test/`, token, expiresAt: new Date(Date.now() + expiresInSeconds * 1000).toISOString() };
  }

  async ensureStarted(ref: string): Promise<void> {
    this.enter("ensureStarted", ref);
    const b = this.mustBox(ref);
    if (b.state === "stopped" || b.state === "archived") b.state = "started";
  }

  async probe(ref: string): Promise<Liveness> {
    this.calls.push({ op: "probe", ref });
    const scripted = this.probeScript.get(ref);
    if (scripted?.length) return scripted.shift()!;
    if (this.unreachable) return "unknown";
    const b = this.boxes.get(ref);
    return b ? classifySandboxState(b) : "dead";
  }

  /** When set, a delete waits for it (a provider that takes its time). */
  deleteGate: Promise<void> | null = null;

  async delete(ref: string, _opts: DeleteOptions = {}): Promise<void> {
    this.enter("delete", ref);
    if (this.deleteGate) await this.deleteGate;
    const i = this.deleteFailures.findIndex((f) => f.remaining > 0 && (!f.ref || f.ref === ref));
    if (i >= 0) {
      const f = this.deleteFailures[i];
      f.remaining--;
      if (f.remaining === 0) this.deleteFailures.splice(i, 1);
      throw new ProviderError(f.code, `scripted delete failure for ${ref}`);
    }
    this.kill(ref); // idempotent: deleting a missing box is success
  }

  // ---- helpers -----------------------------------------------------------------------------

  private enter(op: string, ref?: string, args?: unknown): void {
    this.calls.push({ op, ref, args });
    if (this.unreachable) throw new ProviderError("unavailable", `provider unreachable (${op})`);
    // A create has no box yet: its house is the one it labels the new box with.
    const house = ref ? this.boxes.get(ref)?.labels[LABEL_HOUSE] : op === "create" ? (args as CreateBoxOptions | undefined)?.labels.house : undefined;
    const failing = this.failingOps.find((f) => f.op === op && f.house === house);
    if (failing) throw new ProviderError(failing.code, failing.message);
  }

  private info(b: FakeBox): BoxInfo {
    return { ref: b.ref, state: b.state, labels: { ...b.labels }, ...(b.recoverable !== undefined ? { recoverable: b.recoverable } : {}) };
  }

  private mustBox(ref: string): FakeBox {
    const b = this.boxes.get(ref);
    if (!b) throw new ProviderError("not_found", `sandbox ${ref} not found`, { status: 404 });
    return b;
  }

  private mustRunning(ref: string): FakeBox {
    const b = this.mustBox(ref);
    if (b.state !== "started") throw new ProviderError("conflict", `sandbox ${ref} is ${b.state}`, { status: 409 });
    return b;
  }

  private mustDetached(h: DetachedHandle): FakeDetached {
    const d = this.detached.get(key(h));
    if (!d) throw new ProviderError("not_found", `command ${h.commandId} not found`, { status: 404 });
    return d;
  }
}

function key(h: DetachedHandle): string {
  return `${h.ref}/${h.sessionId}/${h.commandId}`;
}
