/**
 * A scripted OpenAI-compatible chat completions server on loopback, for tests.
 *
 * A test gives a script: one step per expected request to `POST /v1/chat/completions`.
 * Each step answers with a streamed (SSE) or plain JSON completion made of text and/or
 * tool calls, or with an HTTP error status. Every request body is recorded so a test can
 * assert on the messages a harness sent.
 *
 *   const model = await startModelServer([
 *     { toolCalls: [{ name: "bash", arguments: { command: "echo hi > f.txt" } }] },
 *     { text: "done" },
 *   ]);
 *   // ... point a harness at model.baseUrl (".../v1")
 *   model.requests[1].messages // what the harness sent on its second call
 *   await model.close();
 *
 * When the script runs out, `fallback` (default: a text reply "ok") answers.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface ScriptedToolCall {
  id?: string;
  name: string;
  arguments: Record<string, unknown> | string;
}

export type ScriptStep =
  | {
      text?: string;
      toolCalls?: ScriptedToolCall[];
      /** default: "tool_calls" when toolCalls are present, else "stop" */
      finishReason?: "stop" | "length" | "tool_calls" | "content_filter";
      /** delay before the first chunk, ms */
      delayMs?: number;
      /** delay between chunks, ms */
      chunkDelayMs?: number;
      /** answer only once this settles: a test holds the model until it has seen what it waits for */
      until?: Promise<unknown>;
      usage?: { prompt_tokens: number; completion_tokens: number };
    }
  | { error: number; message?: string; delayMs?: number }
  /** hang: accept the request and never answer (until the server closes) */
  | { hang: true };

export interface RecordedRequest {
  path: string;
  headers: Record<string, string | string[] | undefined>;
  body: any;
  /** shortcut to body.messages */
  messages: any[];
}

export interface ModelServer {
  /** e.g. http://127.0.0.1:41234/v1 */
  baseUrl: string;
  port: number;
  requests: RecordedRequest[];
  /** append more steps to the script */
  push(...steps: ScriptStep[]): void;
  close(): Promise<void>;
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

export async function startModelServer(
  script: ScriptStep[] = [],
  opts: { model?: string; fallback?: ScriptStep; port?: number } = {},
): Promise<ModelServer> {
  const steps = [...script];
  const requests: RecordedRequest[] = [];
  const modelName = opts.model ?? "scripted-model";
  const fallback: ScriptStep = opts.fallback ?? { text: "ok" };
  const open = new Set<ServerResponse>();
  let callNo = 0;

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? "/", "http://x");
    if (req.method === "GET" && url.pathname.endsWith("/models")) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ object: "list", data: [{ id: modelName, object: "model" }] }));
      return;
    }
    if (req.method !== "POST" || !url.pathname.endsWith("/chat/completions")) {
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: "not found" } }));
      return;
    }
    const raw = await readBody(req);
    let body: any = {};
    try {
      body = JSON.parse(raw);
    } catch {
      body = { raw };
    }
    requests.push({ path: url.pathname, headers: req.headers, body, messages: body.messages ?? [] });
    const step = steps.shift() ?? fallback;
    const n = ++callNo;

    if ("hang" in step) {
      open.add(res);
      return;
    }
    if ("error" in step) {
      if (step.delayMs) await sleep(step.delayMs);
      res.writeHead(step.error, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          error: { message: step.message ?? `scripted error ${step.error}`, type: "server_error", code: step.error },
        }),
      );
      return;
    }

    if (step.until) await step.until.catch(() => {});
    if (step.delayMs) await sleep(step.delayMs);
    const id = `chatcmpl-scripted-${n}`;
    const created = Math.floor(Date.now() / 1000);
    const toolCalls = (step.toolCalls ?? []).map((tc, i) => ({
      id: tc.id ?? `call_${n}_${i}`,
      name: tc.name,
      args: typeof tc.arguments === "string" ? tc.arguments : JSON.stringify(tc.arguments),
    }));
    const finish = step.finishReason ?? (toolCalls.length ? "tool_calls" : "stop");
    const usage = {
      prompt_tokens: step.usage?.prompt_tokens ?? 10,
      completion_tokens: step.usage?.completion_tokens ?? 5,
      total_tokens: (step.usage?.prompt_tokens ?? 10) + (step.usage?.completion_tokens ?? 5),
    };

    if (body.stream === false) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
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
                  ? {
                      tool_calls: toolCalls.map((tc) => ({
                        id: tc.id,
                        type: "function",
                        function: { name: tc.name, arguments: tc.args },
                      })),
                    }
                  : {}),
              },
              finish_reason: finish,
            },
          ],
          usage,
        }),
      );
      return;
    }

    res.writeHead(200, {
      "content-type": "text/event-stream",
      "cache-control": "no-cache",
      connection: "keep-alive",
    });
    const send = async (obj: unknown) => {
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
    for (const p of pieces(step.text ?? "", 3)) await send(chunk({ content: p }));
    for (let i = 0; i < toolCalls.length; i++) {
      const tc = toolCalls[i];
      await send(
        chunk({
          tool_calls: [{ index: i, id: tc.id, type: "function", function: { name: tc.name, arguments: "" } }],
        }),
      );
      for (const p of pieces(tc.args, 2)) await send(chunk({ tool_calls: [{ index: i, function: { arguments: p } }] }));
    }
    await send(chunk({}, finish));
    await send({ id, object: "chat.completion.chunk", created, model: modelName, choices: [], usage });
    res.write("data: [DONE]\n\n");
    res.end();
  };

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((err) => {
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
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    port,
    requests,
    push: (...more) => steps.push(...more),
    close: () =>
      new Promise<void>((resolve) => {
        for (const r of open) r.destroy();
        server.closeAllConnections?.();
        server.close(() => resolve());
      }),
  };
}
