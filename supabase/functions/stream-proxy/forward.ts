/**
 * Pure request/response mapping for the stream-proxy edge function. No Deno (or Node) globals:
 * only WHATWG URL / Headers / Response, so Node tests import it directly and Deno runs it as is.
 *
 * The proxy is a dumb transport: the worker owns token verification and thread scoping. What this
 * module decides is only (1) which worker URL a request goes to and (2) which headers cross the hop.
 */

/** The function's name: on Supabase every request path starts with it; locally it is optional. */
export const FUNCTION_PREFIX = "/stream-proxy";

/** Env names (the only configuration the proxy reads). */
export const ENV = {
  workerUrl: "THREADBOX_WORKER_URL",
  upstreamTimeoutMs: "STREAM_PROXY_UPSTREAM_TIMEOUT_MS",
  port: "STREAM_PROXY_PORT",
  hostname: "STREAM_PROXY_HOSTNAME",
} as const;

export const DEFAULT_PORT = 54321;
/**
 * Time to response headers. Must exceed the worker's long-poll timeout (LONG_POLL_TIMEOUT_MS,
 * default 20 s): a long-poll answers only when data arrives or that timeout fires.
 */
export const DEFAULT_UPSTREAM_TIMEOUT_MS = 30_000;

/**
 * Connection-level headers (RFC 9110 7.6.1) plus the ones the runtime re-frames. They describe one
 * hop, never the end-to-end request. `Proxy` and every `Proxy-*` header (see isProxyHeader) are
 * hop-by-hop too.
 */
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
]);

/**
 * Request headers not forwarded: hop-by-hop, `host` (fetch sets the worker's), `content-length`
 * (fetch frames the body it sends), `accept-encoding` (replaced with identity so the
 * runtime never has to decode a compressed upstream body, which would stall live reads),
 * `expect` (a 100-continue is between the box and this hop). `cf-*` headers describe the
 * box -> Supabase hop as seen by Cloudflare; a Cloudflare-fronted worker must not receive them
 * from another zone.
 */
const DROP_REQUEST = new Set([...HOP_BY_HOP, "host", "content-length", "accept-encoding", "expect"]);

/**
 * Response headers not passed back: hop-by-hop, and `content-length` (the body is re-streamed by
 * this runtime, which frames it itself; a stale length would truncate or hang the client).
 */
const DROP_RESPONSE = new Set([...HOP_BY_HOP, "content-length"]);

export type Mapped = { ok: true; url: string } | { ok: false; status: number; code: string; message: string };

/**
 * Maps the incoming URL onto the worker. Everything up to and including the first `/stream-proxy`
 * path segment is dropped; the rest (raw, still percent-encoded) plus the query string is appended
 * to the configured base. `http://h/functions/v1/stream-proxy/thread-1?offset=-1` and
 * `http://h/thread-1?offset=-1` both go to `<base>/thread-1?offset=-1`.
 */
export function upstreamUrl(requestUrl: string, workerUrl: string | undefined | null): Mapped {
  const problem = workerUrlProblem(workerUrl);
  if (problem !== null) return { ok: false, status: 500, code: "proxy_misconfigured", message: problem };
  const parsedBase = new URL((workerUrl ?? "").trim());
  const incoming = new URL(requestUrl);
  const rest = stripFunctionPrefix(incoming.pathname);
  const joined = parsedBase.origin + parsedBase.pathname.replace(/\/+$/, "") + rest;
  return { ok: true, url: joined + incoming.search };
}

/** Why THREADBOX_WORKER_URL cannot be forwarded to (a sentence naming it), or null when it can. */
export function workerUrlProblem(workerUrl: string | undefined | null): string | null {
  const base = (workerUrl ?? "").trim();
  if (base === "") return `${ENV.workerUrl} is not set`;
  let parsedBase: URL;
  try {
    parsedBase = new URL(base);
  } catch {
    return `${ENV.workerUrl} is not a valid URL`;
  }
  if (parsedBase.protocol !== "http:" && parsedBase.protocol !== "https:") return `${ENV.workerUrl} must be an http(s) URL`;
  if (parsedBase.search !== "" || parsedBase.hash !== "") return `${ENV.workerUrl} must not carry a query or fragment`;
  return null;
}

/** `/a/stream-proxy/x/y` -> `/x/y`; `/stream-proxy` -> ``; `/x` (no prefix) -> `/x`. */
export function stripFunctionPrefix(pathname: string): string {
  const segment = /(^|\/)stream-proxy(?=\/|$)/.exec(pathname);
  if (!segment) return pathname === "/" ? "" : pathname;
  return pathname.slice(segment.index + segment[0].length);
}

/**
 * `Proxy-Connection`, `Proxy-Authorization` and the like address this hop, and a `Proxy:` request
 * header is the "httpoxy" vector (a CGI-style upstream reads it as HTTP_PROXY). None may reach the
 * worker or come back from it.
 */
function isProxyHeader(lowerName: string): boolean {
  return lowerName === "proxy" || lowerName.startsWith("proxy-");
}

/** Tokens named by the `Connection` header are hop-by-hop too (RFC 9110 7.6.1). */
function connectionTokens(h: Headers): Set<string> {
  const out = new Set<string>();
  for (const t of (h.get("connection") ?? "").split(",")) {
    const name = t.trim().toLowerCase();
    if (name) out.add(name);
  }
  return out;
}

/** Headers sent to the worker: everything end-to-end, Authorization / Stream-* / Producer-* verbatim. */
export function upstreamRequestHeaders(incoming: Headers): Headers {
  const named = connectionTokens(incoming);
  const out = new Headers();
  incoming.forEach((value, key) => {
    const k = key.toLowerCase();
    if (DROP_REQUEST.has(k) || named.has(k) || isProxyHeader(k) || k.startsWith("cf-")) return;
    out.append(key, value);
  });
  out.set("accept-encoding", "identity");
  return out;
}

/** Headers returned to the box: the worker's, minus hop-by-hop and content-length. */
export function downstreamResponseHeaders(upstream: Headers): Headers {
  const named = connectionTokens(upstream);
  const out = new Headers();
  upstream.forEach((value, key) => {
    const k = key.toLowerCase();
    if (DROP_RESPONSE.has(k) || named.has(k) || isProxyHeader(k)) return;
    out.append(key, value);
  });
  // Headers.forEach joins multiple Set-Cookie values; keep them separate where the runtime can.
  const cookies = (upstream as Headers & { getSetCookie?: () => string[] }).getSetCookie?.() ?? [];
  if (cookies.length > 0) {
    out.delete("set-cookie");
    for (const c of cookies) out.append("set-cookie", c);
  }
  return out;
}

/**
 * Parses STREAM_PROXY_UPSTREAM_TIMEOUT_MS; absent/blank -> default; `0` disables the timeout. A value
 * that is not a whole number of milliseconds also gets the default here (a deployed function keeps
 * answering); run locally, upstreamTimeoutProblem stops the proxy at start instead.
 */
export function upstreamTimeoutMs(raw: string | undefined | null): number {
  if (upstreamTimeoutProblem(raw) !== null || raw === undefined || raw === null || raw.trim() === "") return DEFAULT_UPSTREAM_TIMEOUT_MS;
  return Number(raw.trim());
}

/** Why STREAM_PROXY_UPSTREAM_TIMEOUT_MS cannot be used (a sentence naming it), or null when it is unset or usable. */
export function upstreamTimeoutProblem(raw: string | undefined | null): string | null {
  if (raw === undefined || raw === null || raw.trim() === "") return null;
  const n = Number(raw.trim());
  if (!Number.isFinite(n) || n < 0 || !Number.isInteger(n)) {
    return `${ENV.upstreamTimeoutMs} must be a whole number of milliseconds (0 turns the timeout off), got ${JSON.stringify(raw)}`;
  }
  return null;
}

/** The proxy's own errors use the worker's error shape: `{ error: { code, message } }`. */
export function proxyError(status: number, code: string, message: string): Response {
  return new Response(JSON.stringify({ error: { code, message } }), {
    status,
    headers: {
      "content-type": "application/json",
      "x-content-type-options": "nosniff",
      "access-control-allow-origin": "*",
      "x-stream-proxy-error": code,
    },
  });
}

/**
 * Request bodies up to this size are read whole before the worker is asked: a box's slow upload
 * then never counts against the upstream timeout, and a body cut off by a client that went away
 * never reaches the worker. It is the worker's append limit (MAX_APPEND_BYTES), so every body the
 * worker accepts is buffered. A larger body, which the worker refuses with 413, is streamed on as
 * it arrives instead of being held in memory; the worker stays the only judge of the limit.
 */
export const BUFFERED_BODY_BYTES = 1024 * 1024;

/**
 * Methods the thread stream routes use; a 405 from the proxy names them in `Allow`. Any other
 * method the runtime can send is forwarded, and the worker answers it.
 */
export const STREAM_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS"] as const;

/**
 * Whether fetch() can send `method` at all. WHATWG fetch refuses CONNECT, TRACE and TRACK (and
 * malformed method tokens) with a TypeError before touching the network, so such a request is
 * the proxy's to refuse, not an unreachable worker.
 */
export function canForwardMethod(method: string): boolean {
  try {
    new Request("http://stream-proxy.invalid/", { method });
    return true;
  } catch {
    return false;
  }
}

/** The proxy's answer to a method it cannot forward. */
export function methodNotForwarded(method: string): Response {
  const res = proxyError(405, "method_not_allowed", `the stream-proxy cannot forward ${method} requests`);
  res.headers.set("allow", STREAM_METHODS.join(", "));
  return res;
}

/** Methods that carry no request body (fetch refuses a body on GET/HEAD). */
export function hasBody(method: string): boolean {
  const m = method.toUpperCase();
  return m !== "GET" && m !== "HEAD";
}
