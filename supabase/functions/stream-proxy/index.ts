/**
 * stream-proxy: a Supabase Edge Function (Deno) between sandboxes and the threadbox worker.
 *
 * Boxes may only reach allow-listed hosts (`*.supabase.co` among them), never the worker's host,
 * so box -> thread traffic goes through here. It is a dumb transport: method, path (after the
 * `/stream-proxy` prefix), query, body and the original `Authorization: Bearer <scoped
 * token>` go to `THREADBOX_WORKER_URL`; the worker's status, headers and (streamed) body come back.
 * No token checks here: the worker verifies tokens and enforces thread scope.
 *
 * Configuration (env): THREADBOX_WORKER_URL (required, e.g. https://<worker>/api/stream),
 * STREAM_PROXY_UPSTREAM_TIMEOUT_MS (time to response headers once the request body is in,
 * default 30000, 0 = none),
 * STREAM_PROXY_PORT / STREAM_PROXY_HOSTNAME (local runs only; default 54321 on 127.0.0.1).
 *
 * Only Deno built-ins: it must start offline (no jsr:/npm:/https: imports).
 */
import {
  BUFFERED_BODY_BYTES,
  canForwardMethod,
  DEFAULT_PORT,
  ENV,
  downstreamResponseHeaders,
  hasBody,
  methodNotForwarded,
  proxyError,
  upstreamRequestHeaders,
  upstreamTimeoutMs,
  upstreamTimeoutProblem,
  upstreamUrl,
  workerUrlProblem,
} from "./forward.ts";

/** The client went away while the proxy was still reading its request body. */
class ClientGone extends Error {}

/**
 * Reads the request body. Up to BUFFERED_BODY_BYTES it is read whole and returned as bytes. A
 * larger one comes back as a stream: what was read, then the rest as fetch() pulls it, calling
 * `onUploadEnd` once the client has sent all of it and `onClientError` if reading from the
 * client fails (fetch's own error would then look like the worker's fault).
 * Throws ClientGone when the client fails while the body is being buffered.
 */
async function readRequestBody(
  body: ReadableStream<Uint8Array>,
  onClientError: () => void,
  onUploadEnd: () => void,
): Promise<Uint8Array<ArrayBuffer> | ReadableStream<Uint8Array>> {
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  while (size <= BUFFERED_BODY_BYTES) {
    let chunk: ReadableStreamReadResult<Uint8Array>;
    try {
      chunk = await reader.read();
    } catch (err) {
      throw new ClientGone(String(err));
    }
    if (chunk.done) {
      const bytes = new Uint8Array(size);
      let at = 0;
      for (const c of chunks) {
        bytes.set(c, at);
        at += c.byteLength;
      }
      return bytes;
    }
    chunks.push(chunk.value);
    size += chunk.value.byteLength;
  }
  return new ReadableStream<Uint8Array>({
    start(controller) {
      for (const c of chunks) controller.enqueue(c);
    },
    async pull(controller) {
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await reader.read();
      } catch (err) {
        onClientError();
        controller.error(err);
        return;
      }
      if (chunk.done) {
        controller.close();
        onUploadEnd();
      } else {
        controller.enqueue(chunk.value);
      }
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
}

function clientClosed(method: string, when: string): Response {
  // Not the worker's fault, and nobody reads this answer.
  console.error(`stream-proxy: the client closed the request (${method}) ${when}; nothing more is forwarded`);
  return proxyError(499, "client_closed", "the client closed the request");
}

async function handle(req: Request): Promise<Response> {
  const mapped = upstreamUrl(req.url, Deno.env.get(ENV.workerUrl));
  if (!mapped.ok) {
    console.error(`stream-proxy: ${mapped.message}`);
    return proxyError(mapped.status, mapped.code, mapped.message);
  }
  if (!canForwardMethod(req.method)) return methodNotForwarded(req.method);
  const timeoutMs = upstreamTimeoutMs(Deno.env.get(ENV.upstreamTimeoutMs));

  // One controller: the client going away cancels the upstream request (and its streaming body);
  // the timer bounds only the wait for response headers and is cleared once they arrive.
  const ac = new AbortController();
  const onClientAbort = () => ac.abort(req.signal.reason);
  if (req.signal.aborted) onClientAbort();
  else req.signal.addEventListener("abort", onClientAbort, { once: true });
  let timedOut = false;
  let answered = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  // Armed once the client has sent its whole body: a box uploading slowly is not the worker
  // being slow, so the upload never counts against the timeout.
  const armTimer = () => {
    if (timeoutMs <= 0 || timer !== undefined || answered) return;
    timer = setTimeout(() => {
      timedOut = true;
      ac.abort(new DOMException(`no response headers within ${timeoutMs} ms`, "TimeoutError"));
    }, timeoutMs);
  };

  let clientBodyFailed = false;
  let body: Uint8Array<ArrayBuffer> | ReadableStream<Uint8Array> | undefined;
  if (hasBody(req.method) && req.body) {
    try {
      body = await readRequestBody(req.body, () => (clientBodyFailed = true), armTimer);
    } catch (err) {
      if (err instanceof ClientGone) return clientClosed(req.method, "during its upload");
      throw err;
    }
  }
  if (!(body instanceof ReadableStream)) armTimer();

  let upstream: Response;
  try {
    upstream = await fetch(mapped.url, {
      method: req.method,
      headers: upstreamRequestHeaders(req.headers),
      body,
      redirect: "manual",
      signal: ac.signal,
    });
  } catch (err) {
    const detail = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    if (timedOut) {
      console.error(`stream-proxy: upstream timeout after ${timeoutMs} ms (${req.method})`);
      return proxyError(504, "upstream_timeout", `the worker sent no response headers within ${timeoutMs} ms`);
    }
    if (clientBodyFailed || req.signal.aborted) return clientClosed(req.method, "before the worker answered");
    console.error(`stream-proxy: upstream unreachable (${req.method}): ${detail}`);
    return proxyError(502, "upstream_unreachable", "the worker is unreachable from the stream-proxy");
  } finally {
    answered = true;
    if (timer !== undefined) clearTimeout(timer);
  }

  return new Response(upstream.body, {
    status: upstream.status,
    statusText: upstream.statusText,
    headers: downstreamResponseHeaders(upstream.headers),
  });
}

// On Supabase the edge runtime owns the listener (it defines `EdgeRuntime`); anywhere else listen
// on STREAM_PROXY_PORT (default 54321), loopback unless STREAM_PROXY_HOSTNAME says otherwise.
const onSupabase = typeof (globalThis as { EdgeRuntime?: unknown }).EdgeRuntime !== "undefined";
if (onSupabase) {
  Deno.serve(handle);
} else {
  const rawPort = Deno.env.get(ENV.port);
  const port = rawPort && rawPort.trim() !== "" ? Number(rawPort) : DEFAULT_PORT;
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    console.error(`stream-proxy: ${ENV.port} must be a port number, got ${JSON.stringify(rawPort)}`);
    Deno.exit(2);
  }
  // Unset, it starts and answers 500 (the script warns); set but unusable is a typo to fix now, as
  // a bad port is, not a 500 on every request found later.
  const workerUrl = Deno.env.get(ENV.workerUrl);
  const workerUrlIssue = workerUrl && workerUrl.trim() !== "" ? workerUrlProblem(workerUrl) : null;
  if (workerUrlIssue !== null) {
    console.error(`stream-proxy: ${workerUrlIssue} (the worker's stream URL, e.g. http://127.0.0.1:8787/api/stream)`);
    Deno.exit(2);
  }
  const timeoutIssue = upstreamTimeoutProblem(Deno.env.get(ENV.upstreamTimeoutMs));
  if (timeoutIssue !== null) {
    console.error(`stream-proxy: ${timeoutIssue}`);
    Deno.exit(2);
  }
  const hostname = Deno.env.get(ENV.hostname) || "127.0.0.1";
  Deno.serve({
    port,
    hostname,
    onListen: (addr) => {
      const upstream = Deno.env.get(ENV.workerUrl) || `(${ENV.workerUrl} not set: every request answers 500)`;
      console.log(`stream-proxy listening on http://${addr.hostname}:${addr.port} -> ${upstream}`);
    },
  }, handle);
}
