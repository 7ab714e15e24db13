/**
 * Shared types of the coding-agent (harness) layer. Pure: importable from the worker and
 * from box code alike (no node: imports anywhere under src/sandbox/harness).
 *
 * Payload shapes follow docs/CONTRACTS.md.
 */

export type StopReason = "stop" | "length" | "toolUse" | "error" | "aborted";

import type { FinishedStatus } from "../../domain/statuses";
export type { FinishedStatus };

export interface Payload {
  type: string;
  [key: string]: unknown;
}

/** A thread entry. On a write `id` and `ts` may be omitted. */
export interface ThreadEntry {
  id?: string;
  ts?: number;
  authorId?: string;
  payload: Payload;
}

export interface PiUserPayload extends Payload {
  type: "pi.user";
  text: string;
}
export interface PiAssistantPayload extends Payload {
  type: "pi.assistant";
  text: string;
  stopReason: StopReason;
  model?: string;
  errorMessage?: string;
  raw?: unknown;
}
export interface PiToolCallPayload extends Payload {
  type: "pi.tool_call";
  toolCallId: string;
  name: string;
  args: unknown;
  raw?: unknown;
}
export interface PiToolResultPayload extends Payload {
  type: "pi.tool_result";
  toolCallId: string;
  name?: string;
  output: string;
  isError: boolean;
  raw?: unknown;
}
export interface PiErrorPayload extends Payload {
  type: "pi.error";
  message: string;
  raw?: unknown;
}
export interface StatusChangedPayload extends Payload {
  type: "signal.thread.status_changed";
  status: "running" | FinishedStatus;
  reason?: string;
  boxId?: string;
}

export { STATUS_CHANGED, HEARTBEAT, FINISHED_STATUSES as TERMINAL_STATUSES } from "../../domain/statuses";

/** Options the control plane gives to start one run of a harness. */
export interface StartOptions {
  /** the task / prompt text (canonical on the thread as a chat entry) */
  prompt: string;
  /** model id, e.g. "anthropic/claude-sonnet-4-5" for pi, "claude-sonnet-4-5" for claude-code */
  model?: string;
  /** pi only: provider name to restrict --model lookup */
  provider?: string;
  /** replaces the harness's default system prompt where supported */
  systemPrompt?: string;
  /** appended to the default system prompt */
  appendSystemPrompt?: string;
  /** allow-list of tools (harness-native names) */
  allowedTools?: string[];
  /** pi: session file to continue (`--session <file>`); claude-code/codex: session id to resume */
  sessionFile?: string;
  /** pi: extension files to load (the mirror) */
  extensions?: string[];
  /** extra raw arguments appended verbatim */
  extraArgs?: string[];
  /** how much the harness may do without asking: default | acceptEdits | plan | bypassPermissions */
  permissionMode?: string;
  /** the runner drives the harness interactively (pi: RPC mode, task on stdin) to pass it messages mid-run */
  interactive?: boolean;
}

/** A harness command: argv[0] is the binary; never passed through a shell. */
export interface HarnessCommand {
  argv: string[];
  env: Record<string, string>;
}

/** Incremental line parser of a harness's machine output (one JSON record per line). */
export interface HarnessParser {
  /** feed one stdout line; returns the normalized entries it completes */
  push(line: string): ThreadEntry[];
  /** end of stream; returns whatever was still buffered */
  end(): ThreadEntry[];
}

export interface OutcomeContext {
  /** signal name when the harness was killed by a signal (exitCode null) */
  signal?: string | null;
  /** the runner was asked to stop (SIGTERM from outside) */
  stopRequested?: boolean;
  /** the runaway guard fired */
  runaway?: boolean;
  /** the harness wrote nothing (its mirror never loaded) this long after its start and was stopped (ms) */
  startTimeoutMs?: number;
  /** the harness, interrupted, got no message for this long and the run was ended (ms) */
  idleAfterInterruptMs?: number;
  /** id for the finished-signal entry (deterministic per run, so the mirror and runner share it) */
  signalId?: string;
  /** The run the signal finishes: the control plane ignores a finished-signal of another run. */
  runId?: string;
  authorId?: string;
  boxId?: string;
}

export interface Outcome {
  status: FinishedStatus;
  reason: string;
  /** the finished-signal entries to post; empty when the run already has one on the thread */
  entries: ThreadEntry[];
  /** true when a finished-signal for this run was already on the thread */
  alreadyFinished: boolean;
}

export interface InstallSpec {
  /** shell snippet that exits 0 when the harness is already installed at the right version */
  check: string;
  /** shell snippet that installs it as the (non-root) box user */
  command: string;
  /** directory to prepend to PATH so the binary is found after install */
  binDir: string;
}

export type HarnessName = "pi" | "claude-code" | "codex";

export interface CodingAgent {
  name: HarnessName;
  /** the binary name on PATH after install */
  bin: string;
  install: InstallSpec;
  /** true when the harness mirrors its own work into the thread (pi + the mirror extension) */
  mirrorsItself: boolean;
  /** true when the harness can take a new message while it runs (pi's RPC mode); others cannot */
  takesMessages?: boolean;
  /** the session id one of its stdout events reports, to resume that session with queued messages */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  sessionIdOf?(event: any): string | undefined;
  buildCommand(opts: StartOptions): HarnessCommand;
  createParser(): HarnessParser;
  decideOutcome(threadEntries: ThreadEntry[], exitCode: number | null, ctx?: OutcomeContext): Outcome;
}

/** One line of a harness's JSON-lines output as an event, or null for anything else (banners, noise). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function parseJsonLine(line: string): any | null {
  const t = line.trim();
  if (!t.startsWith("{")) return null;
  try {
    return JSON.parse(t);
  } catch {
    return null;
  }
}
