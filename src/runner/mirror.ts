/**
 * The mirror: a pi extension that posts pi's work to the thread as it happens.
 *
 *   pi --extension mirror.mjs ...   (config from THREADBOX_* env, see docs/CONTRACTS.md; the
 *                                    stream token from the file THREADBOX_STREAM_TOKEN_FILE names)
 *
 * - Every finished user / assistant / tool-result message -> `pi.*` entries, with ids
 *   `${threadId}:m:${sessionId}:${index}[:k]`, where index is the message's position among the
 *   user/assistant/toolResult messages of pi's session. Deterministic: a restarted producer
 *   re-posting a message cannot create a second entry on a thread that dedups by id.
 * - Resume: messages already in the loaded session are not re-posted, except those at
 *   positions >= THREADBOX_MIRROR_NEXT_INDEX (a tail the previous mirror did not get out).
 * - A heartbeat every THREADBOX_HEARTBEAT_MS (default 5000), without producer headers.
 * - Nothing it posts carries the environment's secret values or its sensitive files' content.
 * - When pi settles after an assistant stop reason `error`, it posts the `pi_failed`
 *   finished-signal with id `${threadId}:finished:${runId}` (the runner uses the same id).
 *   An error that ends a turn someone aborted (an interrupt during a tool call) is mirrored as the
 *   `aborted` stop it is, and is not a failure: the run goes on.
 * - Posting never blocks pi: entries queue in order and retry with backoff
 *   (see StreamWriter); on session_shutdown the heartbeat is cleared and the queue is
 *   flushed for at most THREADBOX_FLUSH_TIMEOUT_MS (default 60 s).
 */
import { randomUUID } from "node:crypto";
import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";
import { finishedSignal } from "../sandbox/harness/outcome";
import { finishedSignalId, isMirroredRole, mirrorEntryId, piMessageToEntries } from "../sandbox/harness/pi";
import { readBoxConfig, type BoxConfig } from "./config";
import { TokenKeeper, renewUrlFor } from "./token-keeper";
import { takeStreamToken } from "./token-file";
import { postHeartbeat, StreamWriter, threadStreamUrl, type WireEntry } from "./stream-writer";
import { namedSecretValues, redactBoxText, redactDeep, redactionList, sensitiveFilePaths, sensitiveValues } from "./redact";
import { DEFAULT_LIVE_TOOL_OUTPUT, LiveToolOutputs, partialSecretAtEnd, toolResultText } from "./live-tool-output";
import { redactText } from "../domain/secret-forms";
import { shownEndpoint } from "../domain/endpoint-url";
import { modelErrorReason } from "../dispatch/provider-error";

const log = (m: string) => process.stderr.write(`[threadbox mirror] ${m}\n`);

function randomId(): string {
  return randomUUID().replace(/-/g, "").slice(0, 12);
}

/**
 * The token is taken once per process: the file is gone after the first read, and pi may build its
 * runtime (and so call this extension) again within the same process.
 */
const TAKEN_TOKEN = Symbol.for("threadbox.mirror.streamToken");

function streamToken(): string | undefined {
  const g = globalThis as { [TAKEN_TOKEN]?: string };
  // Read at load, before pi runs any tool; the file is removed right away, so no command the
  // model runs can read the token (its environment never held it: see token-file.ts).
  g[TAKEN_TOKEN] ??= takeStreamToken(process.env);
  return g[TAKEN_TOKEN];
}

export default function threadboxMirror(pi: ExtensionAPI): void {
  const cfgOrMissing = readBoxConfig(process.env, streamToken());
  if ("missing" in cfgOrMissing) {
    log(`disabled: missing ${cfgOrMissing.missing.join(", ")}`);
    return;
  }
  const cfg: BoxConfig = cfgOrMissing;
  // A command may print a secret or a sensitive file (pi runs in the working directory, where
  // they were written): what is posted has them replaced. Read now, before any tool ran.
  const redactions = redactionList([...namedSecretValues(process.env), ...sensitiveValues(process.cwd(), sensitiveFilePaths(process.env))]);
  const url = threadStreamUrl(cfg.streamUrl, cfg.threadId);
  const tokens = new TokenKeeper(cfg.token, renewUrlFor(url), log);
  const stopTokenRefresh = tokens.keepFresh();

  let writer: StreamWriter | undefined;
  let heartbeat: ReturnType<typeof setInterval> | undefined;
  let sessionId = "nosession";
  let counter = 0;
  let lastAssistant: { stopReason?: string; errorMessage?: string; model?: string } | undefined;
  /** Where the current model is served: a failure to reach it names the URL. */
  let modelUrl: string | undefined;
  let failurePosted = false;
  let runId = cfg.runId;

  const stamp = (entries: WireEntry[], index: number): WireEntry[] =>
    entries.map((e, k) => redactDeep({
      ...e,
      id: mirrorEntryId(cfg.threadId, sessionId, index, k),
      ts: e.ts ?? Date.now(),
      ...(cfg.authorId ? { authorId: cfg.authorId } : {}),
    }, redactions));

  const mirrorMessage = (message: any, index: number) => {
    const entries = piMessageToEntries(message) as WireEntry[];
    if (entries.length) writer?.append(...stamp(entries, index));
  };

  const postFailureIfNeeded = () => {
    if (failurePosted || !writer || lastAssistant?.stopReason !== "error") return;
    failurePosted = true;
    // Redacted before finishedSignal cuts it to a reason's bound: pi-ai passes an error event's
    // message on whole, and a cut through a secret leaves a piece no redaction after recognises.
    const reason = redactBoxText(withModelUrl(modelErrorReason(lastAssistant.errorMessage || "model error"), lastAssistant.model, modelUrl), redactions);
    const entry = finishedSignal("pi_failed", reason, {
      signalId: finishedSignalId(cfg.threadId, runId ?? sessionId),
      runId: cfg.runId,
      authorId: cfg.authorId,
    }) as WireEntry;
    entry.ts = Date.now();
    writer.append(redactDeep(entry, redactions));
  };

  // A long command's output reaches the thread while it runs, not only in its result.
  // Ids unique to this process: a resumed session runs in a new one, with the same session id.
  const liveIdPrefix = `${cfg.threadId}:live:${randomId()}`;
  let liveEntries = 0;
  // Its text comes redacted (over the call's whole output, see LiveToolOutputs).
  const liveOutput = new LiveToolOutputs((payloads) => {
    writer?.append(...payloads.map((payload) => ({
      id: `${liveIdPrefix}:${liveEntries++}`,
      ts: Date.now(),
      ...(cfg.authorId ? { authorId: cfg.authorId } : {}),
      payload,
    } as WireEntry)));
  }, (err) => log(`live output: ${(err as Error)?.message ?? err}`), {
    ...DEFAULT_LIVE_TOOL_OUTPUT,
    redact: (text) => redactText(text, redactions),
    heldBack: (text) => partialSecretAtEnd(text, redactions),
  });

  const stopHeartbeat = () => {
    if (heartbeat) clearInterval(heartbeat);
    heartbeat = undefined;
  };

  pi.on("session_start", (_event, ctx) => {
    stopHeartbeat();
    sessionId = ctx.sessionManager.getSessionId();
    runId = cfg.runId ?? `${sessionId}`;
    if (!writer) {
      writer = new StreamWriter({
        url,
        token: () => tokens.current(),
        producerId: `mirror-${sessionId}-${randomId()}`,
        log: (m) => log(m),
      });
    }
    // messages already in the session (resume): count them, re-post only the unmirrored tail
    const loaded = ctx.sessionManager
      .getBranch()
      .filter((e: any) => e.type === "message" && isMirroredRole(e.message?.role))
      .map((e: any) => e.message);
    const next = Math.min(cfg.mirrorNextIndex ?? loaded.length, loaded.length);
    for (let i = next; i < loaded.length; i++) mirrorMessage(loaded[i], i);
    counter = loaded.length;

    if (cfg.heartbeatMs > 0) {
      const beat = () => void postHeartbeat(url, tokens.current(), Math.min(cfg.heartbeatMs, 5_000));
      beat();
      heartbeat = setInterval(beat, cfg.heartbeatMs);
      heartbeat.unref?.();
    }
  });

  pi.on("message_end", (event, ctx) => {
    let message: any = event.message;
    if (!isMirroredRole(message?.role)) return;
    // An interrupt during a tool call aborts the model call that follows it, which pi reports as an
    // `error` stop; the turn's aborted signal says it was asked for, as an interrupted model call's
    // own `aborted` stop does.
    if (message.role === "assistant" && message.stopReason === "error" && (ctx as { signal?: AbortSignal } | undefined)?.signal?.aborted === true) {
      message = { ...message, stopReason: "aborted" };
    }
    const index = counter++;
    mirrorMessage(message, index);
    if (message.role === "assistant") {
      const model = message.provider && message.model ? `${message.provider}/${message.model}` : undefined;
      lastAssistant = { stopReason: message.stopReason, errorMessage: message.errorMessage, model };
      modelUrl = (ctx?.model as { baseUrl?: string } | undefined)?.baseUrl ?? modelUrl;
    }
  });

  pi.on("tool_execution_update", (event) => {
    if (event.toolName === "bash") liveOutput.update(event.toolCallId, toolResultText(event.partialResult));
  });

  pi.on("tool_execution_end", async (event) => {
    await liveOutput.end(event.toolCallId);
  });

  // pi will not retry or continue on its own any more: an error stop is final now
  pi.on("agent_settled", () => {
    postFailureIfNeeded();
  });

  pi.on("session_shutdown", async () => {
    stopHeartbeat();
    stopTokenRefresh();
    await liveOutput.endAll();
    postFailureIfNeeded();
    if (writer) {
      const drained = await writer.flush(cfg.flushTimeoutMs);
      if (!drained) log(`shutdown flush timed out with ${writer.pending} entries unposted`);
    }
  });
}

const UNREACHABLE = /connection|connect|ECONNREFUSED|ECONNRESET|ENOTFOUND|EAI_AGAIN|fetch failed|network|socket|timed? ?out/i;

/** A model that could not be reached: say which URL, without credentials or query. */
export function withModelUrl(reason: string, model: string | undefined, baseUrl: string | undefined): string {
  if (!baseUrl || !UNREACHABLE.test(reason)) return reason;
  return `${reason} (model ${model ?? "?"} at ${shownEndpoint(baseUrl)})`;
}
