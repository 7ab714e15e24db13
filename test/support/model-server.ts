/**
 * A scripted model server on loopback, for tests. It speaks two provider APIs:
 * - OpenAI chat completions: `POST …/chat/completions` (SSE chunks or plain JSON)
 * - Anthropic Messages: `POST …/v1/messages` (SSE events with text and tool_use blocks, or JSON)
 *
 * A test gives a script: one step per expected request, whatever the API. Each step answers
 * with text and/or tool calls, an HTTP error (optionally with headers, e.g. retry-after), hangs,
 * or cuts the connection (before answering, or mid-stream with `dropAfterChunks`). Every request
 * is recorded so a test can assert what the model received.
 *
 *   const model = await startModelServer([
 *     { toolCalls: [{ name: "bash", arguments: { command: "echo hi > f.txt" } }] },
 *     { text: "done" },
 *   ]);
 *   // ... point a harness at model.baseUrl (".../v1", OpenAI) or model.anthropicBaseUrl
 *   model.requests[1].messages // what the harness sent on its second call
 *   await model.close();
 *
 * When the script runs out, `fallback` (default: a text reply "ok") answers.
 *
 * Sessions let callers that cannot share memory with the server (tests inside workerd) script
 * it over HTTP, each with its own script and record, so tests do not see each other's calls:
 *   POST /__sessions {script?, fallback?}   -> {id, openaiBaseUrl, anthropicBaseUrl}
 *   POST /__sessions/:id/steps {steps}      -> append steps
 *   GET  /__sessions/:id/requests           -> {requests: RecordedRequest[]}
 *   POST /__sessions/:id/release            -> steps marked `held` answer from now on
 * A session's APIs live under /s/:id/ (e.g. /s/:id/v1/chat/completions, /s/:id/v1/messages).
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface ScriptedToolCall {
  id?: string;
  name: string;
  /** an object is sent as JSON; a string is sent verbatim (so a test can send malformed JSON) */
  arguments: Record<string, unknown> | string;
}

export type ScriptStep =
  | {
      text?: string;
      toolCalls?: ScriptedToolCall[];
      /** default: "tool_calls" when toolCalls are present, else "stop" (mapped to Anthropic's stop reasons) */
      finishReason?: "stop" | "length" | "tool_calls" | "content_filter";
      /** delay before the first chunk, ms */
      delayMs?: number;
      /** delay between chunks, ms */
      chunkDelayMs?: number;
      /** streamed answers only: how many chunks the text, and each tool call's arguments, are sent in (default 3 and 2) */
      chunks?: number;
      /** answer only once this settles: a test holds the model until it has seen what it waits for */
      until?: Promise<unknown>;
      /** answer only once the session is released (POST /__sessions/:id/release): `until` for tests that script over HTTP */
      held?: true;
      usage?: { prompt_tokens: number; completion_tokens: number };
      /** streamed answers only: cut the connection after this many SSE events (a network failure mid-stream) */
      dropAfterChunks?: number;
      /** streamed answers only: end the response cleanly after this many SSE events, before the finish reason (a stream cut short without a network error) */
      endAfterChunks?: number;
      /** streamed answers only: after this many SSE events send nothing more, keeping the connection open (a model that hangs mid-answer; 0: after the headers) */
      stallAfterChunks?: number;
    }
  | { error: number; message?: string; delayMs?: number; headers?: Record<string, string> }
  /** hang: accept the request and never answer (until the client goes away or the server closes) */
  | { hang: true }
  /** drop: cut the connection without answering (a network failure) */
  | { drop: true }
  /** raw: answer with this body verbatim (a provider or proxy sending what no client expects) */
  | { raw: string; status?: number; contentType?: string };

export type ModelApiKind = "openai-completions" | "anthropic-messages";

export interface RecordedRequest {
  api: ModelApiKind;
  path: string;
  headers: Record<string, string | string[] | undefined>;
  body: any;
  /** shortcut to body.messages */
  messages: any[];
}

export interface ModelServer {
  /** OpenAI-compatible base URL, e.g. http://127.0.0.1:41234/v1 */
  baseUrl: string;
  /** Anthropic base URL (the SDK appends /v1/messages), e.g. http://127.0.0.1:41234 */
  anthropicBaseUrl: string;
  /** the server's origin, for the /__sessions control API */
  origin: string;
  port: number;
  requests: RecordedRequest[];
  /** append more steps to the script */
  push(...steps: ScriptStep[]): void;
  close(): Promise<void>;
}

interface Session {
  steps: ScriptStep[];
  fallback: ScriptStep;
  requests: RecordedRequest[];
  callNo: number;
  released: Promise<void>;
  release: () => void;
}

function newSession(steps: ScriptStep[], fallback: ScriptStep): Session {
  let release!: () => void;
  const released = new Promise<void>((r) => { release = r; });
  return { steps: [...steps], fallback, requests: [], callNo: 0, released, release };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

/** split a string into n roughly equal pieces (at least one) */
function pieces(s: string, n: number): string[] {
  if (s.length === 0) return [];
  const size = Math.max(1, Math.ceil(s.length / n));
  const out: string[] = [];
  for (let i = 0; i < s.length; i += size) out.push(s.slice(i, i + size));
  return out;
}

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}

type TextStep = Extract<ScriptStep, { toolCalls?: ScriptedToolCall[] }>;

class Dropped extends Error {}

/** counts SSE events and cuts the connection once the step's budget is spent */
function eventBudget(res: ServerResponse, step: TextStep) {
  let sent = 0;
  return async () => {
    const n = sent++;
    if (step.dropAfterChunks !== undefined && n >= step.dropAfterChunks) {
      // let the head and the events already written reach the client, so the cut is mid-answer
      await new Promise<void>((resolve) => res.write("", () => resolve()));
      res.socket?.destroy();
      throw new Dropped();
    }
    if (step.endAfterChunks !== undefined && n >= step.endAfterChunks) {
      await new Promise<void>((resolve) => res.end(() => resolve()));
      throw new Dropped();
    }
    if (step.stallAfterChunks !== undefined && n >= step.stallAfterChunks) {
      res.flushHeaders();
      await new Promise<void>((resolve) => res.write("", () => resolve()));
      // held until the client goes away or the server closes
      await new Promise<void>((resolve) => {
        if (res.destroyed) return resolve();
        res.on("close", () => resolve());
      });
      throw new Dropped();
    }
  };
}

function normalizedToolCalls(step: TextStep, n: number, api: ModelApiKind) {
  return (step.toolCalls ?? []).map((tc, i) => ({
    id: tc.id ?? (api === "anthropic-messages" ? `toolu_${n}_${i}` : `call_${n}_${i}`),
    name: tc.name,
    args: typeof tc.arguments === "string" ? tc.arguments : JSON.stringify(tc.arguments),
  }));
}

async function answerOpenAI(res: ServerResponse, body: any, step: TextStep, n: number, modelName: string) {
  const id = `chatcmpl-scripted-${n}`;
  const created = Math.floor(Date.now() / 1000);
  const toolCalls = normalizedToolCalls(step, n, "openai-completions");
  const finish = step.finishReason ?? (toolCalls.length ? "tool_calls" : "stop");
  const usage = {
    prompt_tokens: step.usage?.prompt_tokens ?? 10,
    completion_tokens: step.usage?.completion_tokens ?? 5,
    total_tokens: (step.usage?.prompt_tokens ?? 10) + (step.usage?.completion_tokens ?? 5),
  };

  if (body.stream === false) {
    json(res, 200, {
      id,
      object: "chat.completion",
      created,
      model: modelName,
      choices: [
        {
          index: 0,
          message: {
            role: "assistant",
            content: step.text ?? null,
            ...(toolCalls.length
              ? { tool_calls: toolCalls.map((tc) => ({ id: tc.id, type: "function", function: { name: tc.name, arguments: tc.args } })) }
              : {}),
          },
          finish_reason: finish,
        },
      ],
      usage,
    });
    return;
  }

  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  const spend = eventBudget(res, step);
  const send = async (obj: unknown) => {
    await spend();
    res.write(`data: ${JSON.stringify(obj)}\n\n`);
    if (step.chunkDelayMs) await sleep(step.chunkDelayMs);
  };
  const chunk = (delta: Record<string, unknown>, finish_reason: string | null = null) => ({
    id,
    object: "chat.completion.chunk",
    created,
    model: modelName,
    choices: [{ index: 0, delta, finish_reason }],
  });

  await send(chunk({ role: "assistant", content: "" }));
  for (const p of pieces(step.text ?? "", step.chunks ?? 3)) await send(chunk({ content: p }));
  for (let i = 0; i < toolCalls.length; i++) {
    const tc = toolCalls[i];
    await send(chunk({ tool_calls: [{ index: i, id: tc.id, type: "function", function: { name: tc.name, arguments: "" } }] }));
    for (const p of pieces(tc.args, step.chunks ?? 2)) await send(chunk({ tool_calls: [{ index: i, function: { arguments: p } }] }));
  }
  await send(chunk({}, finish));
  await send({ id, object: "chat.completion.chunk", created, model: modelName, choices: [], usage });
  res.write("data: [DONE]\n\n");
  res.end();
}

const ANTHROPIC_STOP: Record<string, string> = {
  stop: "end_turn",
  tool_calls: "tool_use",
  length: "max_tokens",
  content_filter: "refusal",
};

async function answerAnthropic(res: ServerResponse, body: any, step: TextStep, n: number, modelName: string) {
  const id = `msg_scripted_${n}`;
  const toolCalls = normalizedToolCalls(step, n, "anthropic-messages");
  const stopReason = ANTHROPIC_STOP[step.finishReason ?? (toolCalls.length ? "tool_calls" : "stop")];
  const inputTokens = step.usage?.prompt_tokens ?? 10;
  const outputTokens = step.usage?.completion_tokens ?? 5;

  if (!body.stream) {
    const content: unknown[] = [];
    if (step.text) content.push({ type: "text", text: step.text });
    for (const tc of toolCalls) {
      let input: unknown = {};
      try {
        input = JSON.parse(tc.args);
      } catch {
        input = tc.args;
      }
      content.push({ type: "tool_use", id: tc.id, name: tc.name, input });
    }
    json(res, 200, {
      id,
      type: "message",
      role: "assistant",
      model: modelName,
      content,
      stop_reason: stopReason,
      stop_sequence: null,
      usage: { input_tokens: inputTokens, output_tokens: outputTokens },
    });
    return;
  }

  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  const spend = eventBudget(res, step);
  const send = async (event: string, data: Record<string, unknown>) => {
    await spend();
    res.write(`event: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`);
    if (step.chunkDelayMs) await sleep(step.chunkDelayMs);
  };
  await send("message_start", {
    message: {
      id,
      type: "message",
      role: "assistant",
      model: modelName,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: inputTokens, output_tokens: 1 },
    },
  });
  await send("ping", {});
  let index = 0;
  if (step.text) {
    await send("content_block_start", { index, content_block: { type: "text", text: "" } });
    for (const p of pieces(step.text, step.chunks ?? 3)) await send("content_block_delta", { index, delta: { type: "text_delta", text: p } });
    await send("content_block_stop", { index });
    index++;
  }
  for (const tc of toolCalls) {
    await send("content_block_start", { index, content_block: { type: "tool_use", id: tc.id, name: tc.name, input: {} } });
    for (const p of pieces(tc.args, step.chunks ?? 2)) await send("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: p } });
    await send("content_block_stop", { index });
    index++;
  }
  await send("message_delta", { delta: { stop_reason: stopReason, stop_sequence: null }, usage: { output_tokens: outputTokens } });
  await send("message_stop", {});
  res.end();
}

function errorBody(api: ModelApiKind, status: number, message: string) {
  if (api === "anthropic-messages") {
    const type = status === 429 ? "rate_limit_error" : status === 529 ? "overloaded_error" : status >= 500 ? "api_error" : "invalid_request_error";
    return { type: "error", error: { type, message } };
  }
  return { error: { message, type: status >= 500 ? "server_error" : "invalid_request_error", code: status } };
}

export async function startModelServer(
  script: ScriptStep[] = [],
  opts: { model?: string; fallback?: ScriptStep; port?: number } = {},
): Promise<ModelServer> {
  const modelName = opts.model ?? "scripted-model";
  const main = newSession(script, opts.fallback ?? { text: "ok" });
  const sessions = new Map<string, Session>();
  const open = new Set<ServerResponse>();
  let origin = "";

  const sessionUrls = (id: string) => ({ id, openaiBaseUrl: `${origin}/s/${id}/v1`, anthropicBaseUrl: `${origin}/s/${id}` });

  const control = async (req: IncomingMessage, res: ServerResponse, path: string): Promise<boolean> => {
    if (!path.startsWith("/__sessions")) return false;
    const parts = path.split("/").filter(Boolean); // ["__sessions", id?, action?]
    if (req.method === "POST" && parts.length === 1) {
      const body = JSON.parse((await readBody(req)) || "{}");
      const id = randomUUID();
      sessions.set(id, newSession(body.script ?? [], body.fallback ?? { text: "ok" }));
      json(res, 201, sessionUrls(id));
      return true;
    }
    const s = parts[1] ? sessions.get(parts[1]) : undefined;
    if (!s) {
      json(res, 404, { error: { message: "no such session" } });
      return true;
    }
    if (req.method === "POST" && parts[2] === "steps") {
      const body = JSON.parse((await readBody(req)) || "{}");
      s.steps.push(...(body.steps ?? []));
      json(res, 200, { pending: s.steps.length });
    } else if (req.method === "POST" && parts[2] === "release") {
      s.release();
      json(res, 200, {});
    } else if (req.method === "GET" && parts[2] === "requests") {
      json(res, 200, { requests: s.requests });
    } else {
      json(res, 404, { error: { message: "not found" } });
    }
    return true;
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? "/", "http://x");
    if (await control(req, res, url.pathname)) return;

    let session = main;
    let path = url.pathname;
    const m = /^\/s\/([^/]+)(\/.*)$/.exec(path);
    if (m) {
      const s = sessions.get(m[1]);
      if (!s) return json(res, 404, { error: { message: "no such session" } });
      session = s;
      path = m[2];
    }

    if (req.method === "GET" && path.endsWith("/models")) {
      return json(res, 200, { object: "list", data: [{ id: modelName, object: "model" }] });
    }
    const api: ModelApiKind | undefined =
      req.method !== "POST" ? undefined
      : path.endsWith("/chat/completions") ? "openai-completions"
      : path.endsWith("/v1/messages") ? "anthropic-messages"
      : undefined;
    if (!api) return json(res, 404, { error: { message: "not found" } });

    const raw = await readBody(req);
    let body: any = {};
    try {
      body = JSON.parse(raw);
    } catch {
      body = { raw };
    }
    session.requests.push({ api, path, headers: req.headers, body, messages: body.messages ?? [] });
    const step = session.steps.shift() ?? session.fallback;
    const n = ++session.callNo;

    if ("drop" in step) {
      req.socket.destroy();
      return;
    }
    if ("hang" in step) {
      open.add(res);
      res.on("close", () => open.delete(res));
      return;
    }
    if ("raw" in step) {
      res.writeHead(step.status ?? 200, { "content-type": step.contentType ?? "text/event-stream" });
      res.end(step.raw);
      return;
    }
    if ("error" in step) {
      if (step.delayMs) await sleep(step.delayMs);
      return json(res, step.error, errorBody(api, step.error, step.message ?? `scripted error ${step.error}`), step.headers);
    }

    if (step.until) await step.until.catch(() => {});
    if (step.held) await session.released;
    if (step.delayMs) await sleep(step.delayMs);
    if (api === "anthropic-messages") await answerAnthropic(res, body, step, n, modelName);
    else await answerOpenAI(res, body, step, n, modelName);
  };

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((err) => {
      if (err instanceof Dropped) return;
      try {
        res.writeHead(500);
        res.end(String(err));
      } catch {
        /* already answered */
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(opts.port ?? 0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  origin = `http://127.0.0.1:${port}`;
  return {
    baseUrl: `${origin}/v1`,
    anthropicBaseUrl: origin,
    origin,
    port,
    requests: main.requests,
    push: (...more) => main.steps.push(...more),
    close: () =>
      new Promise<void>((resolve) => {
        for (const r of open) r.destroy();
        server.closeAllConnections?.();
        server.close(() => resolve());
      }),
  };
}
