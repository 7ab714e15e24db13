/**
 * Coding-agent descriptors and what the control plane needs to launch a run in a box. Pure.
 *
 *   const plan = runnerLaunch({ harness: "pi", threadId, streamUrl, streamToken, runId, ... });
 *   await provider.exec(box, plan.install.command)            // once per box (skip if plan.install.check passes)
 *   await provider.exec(box, `mkdir -p -m 700 ${plan.runDir}`) // the token file's directory: the box user's only
 *   await provider.upload(box, plan.uploads)                  // runner.mjs + mirror.mjs (from dist/runner) + prompt + token
 *   await provider.startDetached(box, plan.command, { env: plan.env, cwd: plan.cwd })
 */
import { claudeCodeAgent } from "./claude-code";
import { codexAgent } from "./codex";
import { piAgent } from "./pi";
import { PI_PREFIX } from "../../domain/pi-install";
import { shq } from "../../domain/shell";
import { BOX_DIR, BOX_ENV, MIRROR_PATH, RUNNER_PATH, runDir as runDirOf, streamTokenPath } from "../../domain/box-layout";
import type { CodingAgent, HarnessName } from "./types";

export * from "./types";
export { decideOutcome, currentRunSlice, findFinishedSignal, finishedSignal } from "./outcome";
export {
  piAgent,
  piMessageToEntries,
  mirrorEntryId,
  parseMirrorEntryId,
  mirrorNextIndex,
  finishedSignalId,
  createPiJsonParser,
  buildPiCommand,
  PI_PACKAGE,
  PI_VERSION,
  PI_PREFIX,
} from "./pi";
export { claudeCodeAgent, createClaudeCodeParser, buildClaudeCodeCommand } from "./claude-code";
export { codexAgent, createCodexParser, buildCodexCommand, codexSandboxArgs } from "./codex";
export { rebuildPiSession, type RebuildOptions, type RebuiltSession } from "./pi-session";

export const CODING_AGENTS: Record<HarnessName, CodingAgent> = {
  pi: piAgent,
  "claude-code": claudeCodeAgent,
  codex: codexAgent,
};

export function getCodingAgent(name: string): CodingAgent {
  const a = (CODING_AGENTS as Record<string, CodingAgent>)[name];
  if (!a) throw new Error(`unknown coding agent: ${name}`);
  return a;
}

/** Box-side layout, relative to the box user's HOME (Daytona uploads are HOME-relative). */
export { BOX_DIR, RUNNER_PATH, MIRROR_PATH };
/** local build outputs of scripts/build-runner.mjs that get uploaded to the paths above */
export const RUNNER_BUNDLE = "dist/runner/runner.mjs";
export const MIRROR_BUNDLE = "dist/runner/mirror.mjs";

export interface RunnerLaunchOptions {
  harness?: HarnessName;
  threadId: string;
  /** the stream base URL the box can reach (the stream-proxy from a Daytona box) */
  streamUrl: string;
  /** uploaded as a file (`tokenPath`) the runner removes once read; never put in `env` */
  streamToken: string;
  /** names this launch attempt's token file (default random): a retried launch uploads its own */
  tokenAttempt?: string;
  /** unique per run; shared by the mirror and runner in the finished-signal id */
  runId: string;
  authorId?: string;
  /** prompt text; uploaded as a file (no shell quoting of user text) */
  prompt: string;
  model?: string;
  provider?: string;
  systemPrompt?: string;
  appendSystemPrompt?: string;
  allowedTools?: string[];
  /** how much the harness may do without asking (mapped per harness) */
  permissionMode?: string;
  /** HOME-relative or absolute session file (pi) / session id (claude-code, codex) to resume */
  sessionFile?: string;
  /** working directory of the harness, HOME-relative or absolute (default: HOME) */
  cwd?: string;
  mirrorNextIndex?: number;
  heartbeatMs?: number;
  runawayMs?: number;
  /** extra env for the harness (model keys etc.; never logged by the runner) */
  env?: Record<string, string>;
  /** the caller posts the finished-signal (the synchronous run() driver), not the runner */
  noFinish?: boolean;
}

export interface RunnerLaunch {
  install: { check: string; command: string };
  /** files to place in the box, HOME-relative. `source` ones are local build outputs. */
  uploads: Array<{ path: string; source?: string; content?: string }>;
  /** the runner's command line (run with `sh -c`, cwd = HOME); detach it (nohup / provider session) */
  command: string;
  env: Record<string, string>;
  /** where the runner's own log goes, HOME-relative */
  logPath: string;
  /** the stream token's file among `uploads`, HOME-relative; the runner removes it at start */
  tokenPath: string;
  /** the run's directory, HOME-relative; create it mode 0700 before the uploads (it holds the token file) */
  runDir: string;
}


export function runnerLaunch(o: RunnerLaunchOptions): RunnerLaunch {
  const agent = getCodingAgent(o.harness ?? "pi");
  const runDir = runDirOf(o.runId);
  const promptPath = `${runDir}/prompt.txt`;
  const logPath = `${runDir}/runner.log`;
  const args: string[] = ["--harness", agent.name, "--prompt-file", `$HOME/${promptPath}`];
  if (agent.name === "pi") args.push("--mirror", `$HOME/${MIRROR_PATH}`);
  if (o.model) args.push("--model", shq(o.model));
  if (o.provider) args.push("--provider", shq(o.provider));
  if (o.allowedTools) args.push("--tools", shq(o.allowedTools.join(",")));
  if (o.permissionMode) args.push("--permission-mode", shq(o.permissionMode));
  if (o.sessionFile) args.push("--session", o.sessionFile.startsWith("/") ? shq(o.sessionFile) : `"$HOME"/${shq(o.sessionFile)}`);
  if (o.cwd) args.push("--cwd", o.cwd.startsWith("/") ? shq(o.cwd) : `"$HOME"/${shq(o.cwd)}`);
  if (o.noFinish) args.push("--no-finish");
  // The token goes as a file the runner removes once read, never in the environment or on the
  // command line (both stay readable to the box's commands, the model's included: token-file.ts).
  const tokenPath = streamTokenPath(o.runId, o.tokenAttempt ?? crypto.randomUUID().replace(/-/g, "").slice(0, 16));
  const uploads: RunnerLaunch["uploads"] = [
    { path: RUNNER_PATH, source: RUNNER_BUNDLE },
    { path: promptPath, content: o.prompt },
    { path: tokenPath, content: o.streamToken },
  ];
  if (agent.name === "pi") uploads.push({ path: MIRROR_PATH, source: MIRROR_BUNDLE });
  if (o.systemPrompt !== undefined) {
    uploads.push({ path: `${runDir}/system-prompt.txt`, content: o.systemPrompt });
    args.push("--system-prompt-file", `$HOME/${runDir}/system-prompt.txt`);
  }
  if (o.appendSystemPrompt !== undefined) {
    uploads.push({ path: `${runDir}/append-system-prompt.txt`, content: o.appendSystemPrompt });
    args.push("--append-system-prompt-file", `$HOME/${runDir}/append-system-prompt.txt`);
  }
  const env: Record<string, string> = {
    ...(o.env ?? {}),
    [BOX_ENV.threadId]: o.threadId,
    [BOX_ENV.streamUrl]: o.streamUrl,
    [BOX_ENV.streamTokenFile]: tokenPath,
    [BOX_ENV.runId]: o.runId,
  };
  if (o.authorId) env[BOX_ENV.authorId] = o.authorId;
  if (o.mirrorNextIndex !== undefined) env[BOX_ENV.mirrorNextIndex] = String(o.mirrorNextIndex);
  if (o.heartbeatMs !== undefined) env[BOX_ENV.heartbeatMs] = String(o.heartbeatMs);
  if (o.runawayMs !== undefined) env[BOX_ENV.runawayMs] = String(o.runawayMs);
  const command =
    `mkdir -p "$HOME/${runDir}" && cd "$HOME" && PATH="${PI_PREFIX}/bin:$PATH" ` +
    `node "$HOME/${RUNNER_PATH}" ${args.join(" ")} >> "$HOME/${logPath}" 2>&1`;
  return { install: { check: agent.install.check, command: agent.install.command }, uploads, command, env, logPath, tokenPath, runDir };
}
