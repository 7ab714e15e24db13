// The one sandbox interface the actors use. Daytona (cloud or the local sandbox host) is the
// implementation; test-provider.ts is an in-memory double with the same contract.

export { ProviderError, type ProviderErrorCode } from "./errors";
export { classifySandboxState, type Liveness, type SandboxStateLike } from "./state";
import type { Liveness } from "./state";

/** Label keys stamped on every box so a listing shows which house/thread/environment owns it. */
export const LABEL_HOUSE = "threadbox.house";
export const LABEL_THREAD = "threadbox.thread";
export const LABEL_ENVIRONMENT = "threadbox.environment";
/** The run a box was created for: a retried launch finds its box by it instead of making another. */
export const LABEL_RUN = "threadbox.run";
/** Our "reapable when idle" flag. Deliberately NOT Daytona's `ephemeral`, which deletes on stop. */
export const LABEL_EPHEMERAL = "threadbox.ephemeral";
/** A digest of what a box was created with (image, egress, volumes): a shared box whose environment changed those is replaced. */
export const LABEL_SPEC = "threadbox.spec";

/** Runaway guard of a run (constants table: about 3 days); box auto-stop is set above it. */
export const DEFAULT_RUNAWAY_GUARD_MS = 3 * 24 * 60 * 60 * 1000;
export const DEFAULT_AUTO_STOP_BUFFER_MIN = 60;

export interface BoxLabels {
  house: string;
  thread?: string;
  environment?: string;
  run?: string;
  spec?: string;
}

export interface EgressSettings {
  /** Block all outbound traffic. */
  blockAll?: boolean;
  /** Domains the box may reach (Daytona matches egress by domain). */
  domainAllowList?: string[];
  /** CIDRs the box may reach (higher Daytona tiers only). */
  networkAllowList?: string[];
  /** HTTP(S) proxy the box's traffic is routed through. */
  outboundProxyUrl?: string;
}

export interface CreateBoxOptions {
  labels: BoxLabels;
  /** Reapable when no thread runs on it (delegate_task boxes). Stored as a label. */
  ephemeral: boolean;
  env?: Record<string, string>;
  /** Preferred: a snapshot with the harness pre-installed. Used only when it exists and is active. */
  snapshot?: string;
  /** Fallback when the snapshot is missing: a base image ... */
  image?: string;
  /** ... plus shell steps run once after creation (e.g. installing the harness). */
  installSteps?: string[];
  /** Auto-stop = runaway guard + buffer: a backstop for abandoned boxes, not the reaper. */
  runawayGuardMs?: number;
  autoStopBufferMinutes?: number;
  egress?: EgressSettings;
  /** Named persistent volumes (created when missing) mounted at absolute paths; they outlive the box. */
  volumes?: VolumeMountSpec[];
  name?: string;
  /** The provider's region/runner target (Daytona `target`); default the provider's configured one. */
  target?: string;
  /** Seconds to wait for the box to reach `started`. */
  timeoutSec?: number;
}

export interface VolumeMountSpec {
  name: string;
  /** Absolute path in the box, e.g. `/home/daytona/memory`. */
  mountPath: string;
}

export interface BoxInfo {
  /** Provider reference (the Daytona sandbox id). */
  ref: string;
  /** Raw provider state, e.g. `started`, `stopped`, `error`. */
  state: string;
  labels: Record<string, string>;
  recoverable?: boolean;
  errorReason?: string;
  /** How the box was made: from the snapshot, from the fallback image, or the provider default. */
  source?: { kind: "snapshot" | "image" | "default"; name?: string };
}

export interface ExecOptions {
  /** Working directory; relative paths are HOME-relative. */
  cwd?: string;
  env?: Record<string, string>;
  /** Server-side timeout in seconds (0 or absent = provider default). */
  timeoutSec?: number;
  /**
   * Each of stdout and stderr keeps only its first and last this many bytes, cut in the box
   * (bounded-output.ts); absent: the whole output.
   */
  keepOutputBytes?: number;
}

export type OutputStream = "stdout" | "stderr";

export interface StreamingExecOptions extends ExecOptions {
  /** Called with output as the command produces it (chunks, not lines). */
  onOutput: (stream: OutputStream, text: string) => void;
}

export interface ExecResult {
  exitCode: number;
  /** stdout and stderr combined, as the toolbox returns them. */
  output: string;
  /** Bytes `keepOutputBytes` cut out of the output (absent when nothing was). */
  omittedBytes?: number;
}

export interface FileUpload {
  /** Destination; use HOME-relative paths (boxes run as a non-root user). */
  path: string;
  content: Uint8Array | string;
}

export interface CloneOptions {
  url: string;
  /** Destination directory, HOME-relative. */
  path: string;
  branch?: string;
  /** A commit id, branch or tag to check out (detached) instead of the branch's tip. */
  commit?: string;
  depth?: number;
  username?: string;
  password?: string;
  /**
   * The caller's redaction, for git's words the provider quotes in a failed clone's error: it cuts
   * them to their end, and a cut through a secret leaves a piece no redaction after recognises.
   */
  redact?: (text: string) => string;
}

export interface DetachedOptions {
  cwd?: string;
  env?: Record<string, string>;
  /** Session id to use; default a fresh `tb-<random>` so the command has its own shell. */
  sessionId?: string;
}

/** Enough to find a detached command again, also from another request or after a DO restart. */
export interface DetachedHandle {
  ref: string;
  sessionId: string;
  commandId: string;
}

export interface DetachedStatus {
  running: boolean;
  exitCode?: number;
}

export interface DetachedLogs {
  output: string;
  stdout: string;
  stderr: string;
}

export interface FollowCallbacks {
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
}

/** A URL that reaches a port served inside a box, valid until `expiresAt` (while the box lives). */
export interface PreviewLink {
  url: string;
  /** The access token the URL carries (Daytona: part of the host name). */
  token: string;
  expiresAt: string;
}

export interface DeleteOptions {
  /** Wait until the provider reports the box gone (404), not just `destroying`. */
  wait?: boolean;
  timeoutSec?: number;
}

export interface SandboxProvider {
  readonly kind: string;
  create(opts: CreateBoxOptions): Promise<BoxInfo>;
  /** Throws ProviderError `not_found` when the box does not exist. */
  get(ref: string): Promise<BoxInfo>;
  /** Boxes whose labels match every given label (e.g. `{ "threadbox.house": id }`). */
  list(labels: Record<string, string>): Promise<BoxInfo[]>;
  exec(ref: string, command: string, opts?: ExecOptions): Promise<ExecResult>;
  /** `exec` that also hands over the output while the command runs; the result is the same. */
  execStreaming(ref: string, command: string, opts: StreamingExecOptions): Promise<ExecResult>;
  /** Uploads bytes and verifies each file's size afterwards. */
  upload(ref: string, files: FileUpload[]): Promise<void>;
  download(ref: string, path: string): Promise<Uint8Array>;
  clone(ref: string, opts: CloneOptions): Promise<void>;
  homeDir(ref: string): Promise<string>;
  /** Starts a command in its own session (runAsync) and returns at once. */
  /** `existing`: a named session already ran a command, which is returned instead of starting this one. */
  startDetached(ref: string, command: string, opts?: DetachedOptions): Promise<DetachedHandle & { existing?: true }>;
  detachedStatus(handle: DetachedHandle): Promise<DetachedStatus>;
  detachedLogs(handle: DetachedHandle): Promise<DetachedLogs>;
  /** Streams the command's output live (stdout/stderr separated); resolves when it ends. */
  followDetached(handle: DetachedHandle, cb: FollowCallbacks): Promise<void>;
  /** Kills the command by deleting its session (and with it the session's process group). */
  killDetached(handle: DetachedHandle): Promise<void>;
  /**
   * Starts a box the provider stopped or archived (Daytona does so by itself after its auto-stop
   * interval of idleness) and waits until it runs again; a running box is left alone.
   */
  ensureStarted(ref: string, timeoutSec?: number): Promise<void>;
  /** `dead` only on 404 or a terminal-fault state; network errors and odd states are `unknown`. */
  probe(ref: string): Promise<Liveness>;
  /** A signed link to `port` inside the box, valid for `expiresInSeconds`. */
  previewLink(ref: string, port: number, expiresInSeconds: number): Promise<PreviewLink>;
  /** Idempotent: a box that is already gone (or being destroyed) is success. */
  delete(ref: string, opts?: DeleteOptions): Promise<void>;
}

export function boxLabels(labels: BoxLabels, ephemeral: boolean): Record<string, string> {
  return {
    [LABEL_HOUSE]: labels.house,
    ...(labels.thread ? { [LABEL_THREAD]: labels.thread } : {}),
    ...(labels.environment ? { [LABEL_ENVIRONMENT]: labels.environment } : {}),
    ...(labels.run ? { [LABEL_RUN]: labels.run } : {}),
    ...(labels.spec ? { [LABEL_SPEC]: labels.spec } : {}),
    [LABEL_EPHEMERAL]: ephemeral ? "true" : "false",
  };
}

/** Minutes for Daytona's autoStopInterval: clears the runaway guard, never 0 by accident. */
export function autoStopMinutes(runawayGuardMs = DEFAULT_RUNAWAY_GUARD_MS, bufferMin = DEFAULT_AUTO_STOP_BUFFER_MIN): number {
  return Math.ceil(runawayGuardMs / 60_000) + Math.max(1, Math.ceil(bufferMin));
}

/** Single-quotes a string for bash. */
export { shq as shQuote } from "../domain/shell";
