/**
 * One streamed model call through pi-ai's API modules, with a per-call timeout and bounded
 * retries. The non-lazy API modules are imported by subpath: the package root's lazy wrappers
 * bundle but fail at run time under esbuild.
 */
import { stream as streamAnthropic } from "@earendil-works/pi-ai/api/anthropic-messages";
import { stream as streamOpenAI } from "@earendil-works/pi-ai/api/openai-completions";
import type { AssistantMessage, Context, Message, Model, Tool } from "@earendil-works/pi-ai";
import { normalizeContext } from "@earendil-works/pi-ai/utils/transcript";
import { DEFAULT_IDLE_TIMEOUT_MS, type ModelApi, type ResolvedModel } from "./models";
import { redactValues } from "../domain/secret-forms";
import { shownEndpoint } from "../domain/endpoint-url";
import { providerErrorText, streamProblem } from "./provider-error";

export type ModelCallOptions = {
  model: ResolvedModel;
  systemPrompt: string;
  messages: Message[];
  tools?: Tool[];
  maxTokens?: number;
  requestTimeoutMs: number;
  retries: number;
  retryBaseDelayMs: number;
  signal?: AbortSignal;
};

export type ModelCallResult =
  | {
      ok: true;
      message: AssistantMessage;
      /** the raw argument text each tool call streamed, by content index ("" when none) */
      rawToolArgs: Map<number, string>;
    }
  | { ok: false; reason: string };

type Attempt =
  | { ok: true; message: AssistantMessage; rawToolArgs: Map<number, string> }
  | { ok: false; retryable: boolean; reason: string; retryAfterMs?: number };

const RETRY_DELAY_CAP_MS = 10_000;
/** How much of a stream's end is kept to tell what went wrong in it. */
const STREAM_TAIL_CHARS = 8_192;

export function toPiModel(m: ResolvedModel): Model<ModelApi> {
  return {
    id: m.modelId,
    name: m.name,
    api: m.api,
    provider: m.provider,
    baseUrl: m.baseUrl,
    reasoning: m.reasoning,
    input: m.input,
    cost: m.cost,
    contextWindow: m.contextWindow,
    maxTokens: m.maxTokens,
    ...(m.headers ? { headers: m.headers } : {}),
    ...(m.compat ? { compat: m.compat as never } : {}),
  };
}

/** Replaces every secret the model carries (its key, the secrets its headers used) in text shown to users. */
export function redactSecrets(text: string, m: ResolvedModel): string {
  return redactValues(text, [m.apiKey, ...m.secretValues]);
}

function oneLine(text: string, max = 500): string {
  const t = text.replace(/\s+/g, " ").trim();
  return t.length > max ? `${t.slice(0, max)}…` : t;
}

/** How long a provider asks to be left alone: `retry-after-ms`, or `retry-after` in seconds or as an HTTP date. */
export function retryAfterMs(headers: Headers | undefined, nowMs = Date.now()): number | undefined {
  const ms = headers?.get("retry-after-ms");
  if (ms && Number.isFinite(Number(ms))) return Number(ms);
  const s = headers?.get("retry-after")?.trim();
  if (!s) return undefined;
  if (Number.isFinite(Number(s))) return Number(s) * 1000;
  const at = Date.parse(s);
  return Number.isNaN(at) ? undefined : Math.max(0, at - nowMs);
}

function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

async function attempt(o: ModelCallOptions): Promise<Attempt> {
  const ctl = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    ctl.abort();
  }, o.requestTimeoutMs);
  const onOuterAbort = () => ctl.abort();
  o.signal?.addEventListener("abort", onOuterAbort, { once: true });
  // Timed only while a byte is awaited from the provider (the headers, then each read of the
  // body), not while the caller takes its time with what came.
  const idleMs = o.model.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
  let idle = false;
  let idleTimer: ReturnType<typeof setTimeout> | undefined;
  let bodyReader: ReadableStreamDefaultReader<Uint8Array> | undefined;
  const awaitBytes = () => {
    clearTimeout(idleTimer);
    idleTimer = setTimeout(() => {
      idle = true;
      ctl.abort();
      // An abort need not end a read the body already waits on.
      bodyReader?.cancel().catch(() => {});
    }, idleMs);
  };
  const gotBytes = () => clearTimeout(idleTimer);

  // The SDKs fold the HTTP status into a message; observing fetch (and the body it streams)
  // tells status and network failure apart without parsing provider prose.
  let status: number | undefined;
  let responseHeaders: Headers | undefined;
  let networkError = false;
  let bodyEnded = false;
  // The end of the stream's text: the client library's error names no event, this shows it.
  let tail = "";
  let tailCut = false;
  const decoder = new TextDecoder();
  const noteFailure = () => {
    if (!ctl.signal.aborted) networkError = true;
  };
  const observingFetch = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    let res: Response;
    awaitBytes();
    try {
      res = await fetch(input, init);
    } catch (err) {
      noteFailure();
      throw err;
    } finally {
      gotBytes();
    }
    status = res.status;
    responseHeaders = res.headers;
    if (!res.body) return res;
    const reader = res.body.getReader();
    bodyReader = reader;
    const body = new ReadableStream<Uint8Array>({
      async pull(c) {
        awaitBytes();
        try {
          const { done, value } = await reader.read();
          gotBytes();
          if (done) {
            bodyEnded = true;
            c.close();
          } else {
            tail += decoder.decode(value, { stream: true });
            if (tail.length > STREAM_TAIL_CHARS) {
              tail = tail.slice(-STREAM_TAIL_CHARS);
              tailCut = true;
            }
            c.enqueue(value);
          }
        } catch (err) {
          gotBytes();
          noteFailure();
          c.error(err);
        }
      },
      cancel: (reason) => reader.cancel(reason),
    });
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
  };

  try {
    const context: Context = { systemPrompt: o.systemPrompt, messages: o.messages, ...(o.tools?.length ? { tools: o.tools } : {}) };
    const options = {
      apiKey: o.model.apiKey,
      signal: ctl.signal,
      maxRetries: 0,
      fetch: observingFetch as typeof fetch,
      ...(o.maxTokens ? { maxTokens: o.maxTokens } : {}),
    };
    const piModel = toPiModel(o.model);
    const events =
      o.model.api === "anthropic-messages"
        ? streamAnthropic(piModel as Model<"anthropic-messages">, normalizeContext(context), options)
        : streamOpenAI(piModel as Model<"openai-completions">, normalizeContext(context), options);

    const rawToolArgs = new Map<number, string>();
    let final: AssistantMessage | undefined;
    let failure: AssistantMessage | undefined;
    for await (const ev of events) {
      if (ev.type === "toolcall_start") rawToolArgs.set(ev.contentIndex, "");
      else if (ev.type === "toolcall_delta") rawToolArgs.set(ev.contentIndex, (rawToolArgs.get(ev.contentIndex) ?? "") + ev.delta);
      else if (ev.type === "done") final = ev.message;
      else if (ev.type === "error") failure = ev.error;
    }
    if (final) return { ok: true, message: final, rawToolArgs };

    const detail = oneLine(redactSecrets(failure?.errorMessage ?? "no answer", o.model));
    if (o.signal?.aborted) return { ok: false, retryable: false, reason: "the turn was cancelled" };
    if (idle) return { ok: false, retryable: true, reason: `the model API sent nothing for ${idleMs} ms (idle timeout)` };
    if (timedOut) return { ok: false, retryable: false, reason: `the model did not finish its answer within ${o.requestTimeoutMs} ms (timeout)` };
    if (status !== undefined && status >= 400) {
      const retryable = status === 429 || status >= 500;
      return { ok: false, retryable, reason: `the model API answered HTTP ${status}: ${providerErrorText(detail, status)}`, retryAfterMs: retryAfterMs(responseHeaders) };
    }
    // A page or a whole JSON body where a stream was asked for (a baseUrl that is not the API's, a
    // proxy's error page): asking again gets the same.
    const contentType = responseHeaders?.get("content-type");
    if (contentType && !/event-stream/i.test(contentType)) {
      return { ok: false, retryable: false, reason: `the model API answered HTTP ${status} with ${oneLine(contentType, 100)}, not an event stream (is the provider's baseUrl its API's?)` };
    }
    // An error the provider sent as an event of the stream, after its 200 (Anthropic's
    // `overloaded_error` under load): a passing one is retried as its HTTP status would be.
    const problem = networkError ? null : streamProblem(failure?.errorMessage ?? "", tail, tailCut);
    // `finish_reason: "error"` is how a router (OpenRouter) says the provider behind it failed
    // mid-answer: as passing as a 5xx, unless the error it names is a 4xx (this request's fault).
    const upstreamFailed = failure?.rawStopReason === "error";
    if (problem?.kind === "error") {
      const said = oneLine(redactSecrets(problem.message, o.model));
      const retryable = problem.transient || (upstreamFailed && !/^code 4\d\d$/.test(problem.type));
      return { ok: false, retryable, reason: `the model API reported an error mid-answer (${oneLine(redactSecrets(problem.type, o.model), 100)}): ${said}` };
    }
    if (problem?.kind === "not_json") {
      return { ok: false, retryable: false, reason: `the model API sent a stream event that is not JSON: ${oneLine(redactSecrets(problem.line, o.model), 200)}` };
    }
    if (upstreamFailed) {
      return { ok: false, retryable: true, reason: 'the model API ended its answer with finish_reason "error" (its upstream provider failed mid-answer)' };
    }
    // A connection closed in order before the answer's finish reason (a proxy or the provider
    // ending the stream early) is as transient as one that broke: the part received is no answer.
    if (bodyEnded && failure?.rawStopReason === undefined) {
      return { ok: false, retryable: true, reason: "the model API's answer ended before it was finished (no finish reason)" };
    }
    if (networkError) {
      const where = status === undefined ? `could not reach the model API at ${shownEndpoint(o.model.baseUrl)}` : "the model API connection broke mid-answer";
      return { ok: false, retryable: true, reason: `${where}: ${detail}` };
    }
    return { ok: false, retryable: false, reason: `the model call failed: ${detail}` };
  } finally {
    clearTimeout(timer);
    gotBytes();
    o.signal?.removeEventListener("abort", onOuterAbort);
  }
}

/** Calls the model; retries 429/5xx/network failures, answers cut short or ended by `finish_reason: "error"`, and idle timeouts `retries` times with exponential backoff. */
export async function callModel(o: ModelCallOptions): Promise<ModelCallResult> {
  for (let n = 0; ; n++) {
    const r = await attempt(o);
    if (r.ok) return r;
    if (!r.retryable || n >= o.retries || o.signal?.aborted) {
      return { ok: false, reason: n > 0 ? `${r.reason} (after ${n + 1} attempts)` : r.reason };
    }
    const backoffMs = o.retryBaseDelayMs * 2 ** n * (1 - Math.random() * 0.25);
    await abortableSleep(Math.min(RETRY_DELAY_CAP_MS, Math.max(backoffMs, r.retryAfterMs ?? 0)), o.signal);
  }
}
