// The demo model's HTTP face: an OpenAI-compatible `POST /v1/chat/completions` (streamed as SSE
// or plain JSON) and `GET /v1/models`, on loopback. A development tool only: `npm run dev` starts
// it so a fresh clone can watch an agent work without an API key. Replies come from rules.mjs.
import { createServer } from "node:http";
import { DEMO_MODEL_ID, decideReply } from "./rules.mjs";

const MAX_BODY_BYTES = 8 * 1024 * 1024;

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on("data", (c) => {
      size += c.length;
      if (size > MAX_BODY_BYTES) {
        reject(Object.assign(new Error("request body too large"), { status: 413 }));
        req.destroy();
      } else chunks.push(c);
    });
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

function sendJson(res, status, obj) {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(obj));
}

const errorBody = (message, type = "invalid_request_error") => ({ error: { message, type } });

/** Text in a few pieces, so a streaming client shows it arriving. */
function pieces(s) {
  const words = s.split(/(?<=\s)/);
  const out = [];
  for (let i = 0; i < words.length; i += 4) out.push(words.slice(i, i + 4).join(""));
  return out;
}

function completion(reply, id, created, model) {
  const toolCalls = (reply.toolCalls ?? []).map((tc, i) => ({
    id: `call_${id}_${i}`,
    type: "function",
    function: { name: tc.name, arguments: JSON.stringify(tc.arguments) },
  }));
  return {
    toolCalls,
    finish: toolCalls.length ? "tool_calls" : "stop",
    usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
    base: { id: `chatcmpl-demo-${id}`, created, model },
  };
}

/**
 * @param {{ port?: number, host?: string }} [opts]
 * @returns {Promise<{ baseUrl: string, port: number, close(): Promise<void> }>}
 */
export async function startDemoModel(opts = {}) {
  let counter = 0;
  const server = createServer(async (req, res) => {
    try {
      const url = new URL(req.url ?? "/", "http://demo");
      if (req.method === "GET" && /\/models\/?$/.test(url.pathname)) {
        return sendJson(res, 200, { object: "list", data: [{ id: DEMO_MODEL_ID, object: "model", owned_by: "threadbox-demo" }] });
      }
      if (!/\/chat\/completions\/?$/.test(url.pathname)) return sendJson(res, 404, errorBody(`no route ${req.method} ${url.pathname}`));
      if (req.method !== "POST") return sendJson(res, 405, errorBody("use POST"));
      let body;
      try {
        body = JSON.parse(await readBody(req));
      } catch (err) {
        return sendJson(res, err.status ?? 400, errorBody(err.status ? err.message : "body is not JSON"));
      }
      if (!body || !Array.isArray(body.messages)) return sendJson(res, 400, errorBody("messages must be an array"));

      const reply = decideReply(body);
      if ("error" in reply) return sendJson(res, reply.error, errorBody(reply.message, "server_error"));
      const n = ++counter;
      const { toolCalls, finish, usage, base } = completion(reply, n, Math.floor(Date.now() / 1000), body.model ?? DEMO_MODEL_ID);

      if (body.stream !== true) {
        return sendJson(res, 200, {
          ...base,
          object: "chat.completion",
          choices: [{
            index: 0,
            message: { role: "assistant", content: reply.text ?? null, ...(toolCalls.length ? { tool_calls: toolCalls } : {}) },
            finish_reason: finish,
          }],
          usage,
        });
      }
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
      const chunk = (delta, finish_reason = null) =>
        res.write(`data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason }] })}\n\n`);
      chunk({ role: "assistant", content: "" });
      for (const p of pieces(reply.text ?? "")) chunk({ content: p });
      toolCalls.forEach((tc, index) => {
        chunk({ tool_calls: [{ index, id: tc.id, type: "function", function: { name: tc.function.name, arguments: "" } }] });
        chunk({ tool_calls: [{ index, function: { arguments: tc.function.arguments } }] });
      });
      chunk({}, finish);
      res.write(`data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [], usage })}\n\n`);
      res.end("data: [DONE]\n\n");
    } catch (err) {
      if (!res.headersSent) sendJson(res, 500, errorBody(String(err?.message ?? err), "server_error"));
      else res.end();
    }
  });
  const host = opts.host ?? "127.0.0.1";
  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port ?? 0, host, () => resolve(undefined));
  });
  const port = server.address().port;
  return {
    baseUrl: `http://${host}:${port}/v1`,
    port,
    close: () => new Promise((resolve) => {
      server.closeAllConnections?.();
      server.close(() => resolve(undefined));
    }),
  };
}
