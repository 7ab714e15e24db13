// A thin client of the threadbox HTTP API: JSON in, JSON out, the API's error code kept.
import { CliError } from "./errors.mjs";

export const DEFAULT_TIMEOUT_SECONDS = 30;

/**
 * How long one request may take, its whole answer included (`THREADBOX_TIMEOUT`, in seconds).
 * Without a bound, a server that accepts the connection and never answers (a process stopped in a
 * debugger, a proxy holding the request) leaves the command waiting for ever.
 */
export function requestTimeoutMs(env = process.env) {
  const raw = env.THREADBOX_TIMEOUT;
  if (raw === undefined || raw === "") return DEFAULT_TIMEOUT_SECONDS * 1000;
  const n = Number(raw);
  if (!/^\s*\d+(\.\d+)?\s*$/.test(raw) || !(n > 0)) throw new CliError("usage", `THREADBOX_TIMEOUT ${raw} is not a number of seconds above 0`);
  return n * 1000;
}

/**
 * The error for a request that got no answer in time; `what` names the request, `repeatable` says
 * whether it may be sent again as it was (`safeToRepeat`).
 */
export const timedOut = (url, what, ms, repeatable = false) =>
  new CliError("timeout", `no answer from ${url} within ${ms / 1000} s (${what}): the server took the connection but did not reply; THREADBOX_TIMEOUT=SECONDS waits longer`, { repeatable });

/**
 * Whether a request that got no answer may be sent again as it was: the server may have done it
 * already. A GET changes nothing; a POST carrying an Idempotency-Key, or writing entries that each
 * carry their id, is answered with what the first one did. Anything else (a stop, a PATCH) is not.
 */
export function safeToRepeat(method, path, body, headers = {}) {
  if (method === "GET") return true;
  if (method !== "POST") return false;
  if (Object.keys(headers).some((h) => h.toLowerCase() === "idempotency-key")) return true;
  if (!/^\/api\/threads\/[^/?]+\/entries$/.test(path)) return false;
  const envelopes = Array.isArray(body) ? body : [body];
  return envelopes.length > 0 && envelopes.every((e) => typeof e?.id === "string" && e.id !== "");
}

const isTimeout = (err) => err?.name === "TimeoutError" || err?.cause?.name === "TimeoutError";

/**
 * @param {{ url: string, token: string }} target
 * @param {{ timeoutMs?: number, onRetry?: (ms: number, err: CliError) => void }} [opts] `onRetry`:
 *   told before a GET is asked again (see `get`)
 */
export function createApi(target, opts = {}) {
  const timeoutMs = opts.timeoutMs ?? requestTimeoutMs();
  const retryMs = retryForMs(); // a bad THREADBOX_RETRY is a usage error before anything is sent, not at the first retry
  async function request(method, path, body, extraHeaders = {}) {
    const asked = `${method} ${path.replace(/\?.*$/, "")}`;
    // One deadline for the request and the reading of its answer: a server can stall in either.
    const signal = AbortSignal.timeout(timeoutMs);
    const late = () => timedOut(target.url, asked, timeoutMs, safeToRepeat(method, path, body, extraHeaders));
    let res;
    try {
      res = await fetch(`${target.url}${path}`, {
        method,
        signal,
        headers: {
          authorization: `Bearer ${target.token}`,
          accept: "application/json",
          ...(body !== undefined ? { "content-type": "application/json" } : {}),
          ...extraHeaders,
        },
        body: body !== undefined ? JSON.stringify(body) : undefined,
      });
    } catch (err) {
      if (isTimeout(err)) throw late();
      throw new CliError("unreachable", `cannot reach ${target.url}: ${err?.cause?.code ?? err?.message ?? err}`);
    }
    let text;
    try {
      text = await res.text();
    } catch (err) {
      if (isTimeout(err)) throw late();
      throw new CliError("unreachable", `${asked}: the connection to ${target.url} broke during the answer (${err?.cause?.code ?? err?.message ?? err})`);
    }
    let parsed = null;
    let isJson = true;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      isJson = false;
    }
    if (!res.ok) {
      const e = parsed?.error;
      if (res.status === 401 && e?.code === "unauthorized") throw refusedToken(target, e.message ?? "");
      if (typeof e?.code === "string") throw new CliError(e.code, e.message ?? "", { status: res.status, details: e.details });
      // Threadbox answers every refusal with {"error":{code,message}}: a 4xx of another shape comes
      // from something else at that URL (another port of `npm run dev`, another API); a 5xx of another
      // shape from a proxy in front of it. Either way its body (an HTML page) is not the message.
      const what = `${asked} answered ${res.status} ${isJson ? "JSON without an error code" : res.headers.get("content-type") ?? "without a content type"}`;
      if (res.status < 500) throw notThreadbox(target.url, what);
      throw new CliError(`http_${res.status}`, `${res.statusText || "server error"} from ${target.url} (${what}, not the API's JSON error)`, { status: res.status });
    }
    // A success that is not JSON comes from something else at that URL (a web page, a proxy's
    // login form): using it as an answer would fail later, somewhere less clear.
    if (!isJson) throw notThreadbox(target.url, `${asked} answered ${res.status} ${res.headers.get("content-type") ?? "without a content type"}, not JSON`);
    const missing = missingField(method, path, parsed);
    if (missing) throw notThreadbox(target.url, `${asked} answered JSON without ${missing}`);
    return parsed;
  }
  return {
    target,
    /**
     * A GET changes nothing, so every one is asked again while the server is away (a restart, a
     * proxy's 502): a command that only reads waits out a deploy like one that writes. `opts.onRetry`
     * says so in this request's own words instead of the client's.
     */
    get: (path, { onRetry = opts.onRetry } = {}) => retrying(() => request("GET", path), { forMs: retryMs, onRetry }),
    /** `opts.headers`: more request headers (an `Idempotency-Key`). */
    post: (path, body = {}, opts = {}) => request("POST", path, body, opts.headers),
    patch: (path, body) => request("PATCH", path, body),
    del: (path) => request("DELETE", path),
  };
}

/**
 * What each answer the commands read must hold: JSON of another shape (another API at that URL)
 * would otherwise end in a TypeError and its stack, or print "no threads" as if it were true.
 */
const ANSWERS = [
  ["GET", /^\/api\/threads(\?|$)/, { threads: "array" }],
  ["POST", /^\/api\/threads$/, { id: "string" }],
  ["GET", /^\/api\/threads\/[^/?]+$/, { id: "string", status: "string" }],
  ["GET", /^\/api\/threads\/[^/?]+\/entries(\?|$)/, { entries: "array", nextOffset: "string" }],
  ["POST", /^\/api\/threads\/[^/?]+\/entries$/, { entries: "array" }],
  ["POST", /^\/api\/threads\/[^/?]+\/delegate$/, { childThreadId: "string" }],
  ["POST", /^\/api\/threads\/[^/?]+\/resume$/, { threadId: "string", status: "string" }],
  ["POST", /^\/api\/threads\/[^/?]+\/interrupt$/, { threadId: "string" }],
  ["POST", /^\/api\/threads\/[^/?]+\/stop$/, { id: "string", status: "string" }],
  ["GET", /^\/api\/threads\/[^/?]+\/artifacts(\?|$)/, { artifacts: "array" }],
  ["GET", /^\/api\/sandboxes(\?|$)/, { sandboxes: "array" }],
  ["GET", /^\/api\/sandboxes\/[^/?]+\/ports\/[^/?]+\/preview(\?|$)/, { url: "string" }],
  ["GET", /^\/api\/agents$/, { agents: "array" }],
  ["POST", /^\/api\/agents$/, { id: "string", handle: "string" }],
  ["GET", /^\/api\/environments$/, { environments: "array" }],
  ["POST", /^\/api\/environments$/, { id: "string" }],
];

/** The first field `answer` lacks (or has of another type) for this route, or null. */
export function missingField(method, path, answer) {
  const known = ANSWERS.find(([m, re]) => m === method && re.test(path));
  if (!known) return null;
  if (typeof answer !== "object" || answer === null || Array.isArray(answer)) return "an object";
  for (const [key, type] of Object.entries(known[2])) {
    const v = answer[key];
    if (type === "array" ? !Array.isArray(v) : typeof v !== type) return `${type === "array" ? "an array" : "a string"} ${key}`;
  }
  return null;
}

/**
 * The server no longer takes the token (expired, signed with a rotated secret, malformed): the
 * API's message alone ("token expired") does not say what to do, and no retry will help.
 * @param {{ url: string, tokenFrom?: "THREADBOX_TOKEN" | "login" }} target
 */
export function refusedToken(target, message) {
  const how = target.tokenFrom === "THREADBOX_TOKEN"
    ? "set THREADBOX_TOKEN to a fresh token (or unset it and run `threadbox login`)"
    : target.tokenFrom === "login"
      ? "run `threadbox login` with a fresh sign-in link (under npm run dev: cat .wrangler/sign-in-link)"
      : "get a fresh token or sign-in link (under npm run dev: cat .wrangler/sign-in-link)";
  return new CliError("unauthorized", `${message || "the server refused the token"}: sign in again: ${how}`, { status: 401 });
}

/** How long a request that is safe to repeat is asked again while the server is away (a restart, a network drop). */
export const RETRY_FOR_MS = 60_000;

/**
 * `THREADBOX_RETRY` (seconds, default 60): a script that would rather fail at once than wait out a
 * restart sets 0; an operator behind a slow deploy sets more.
 */
export function retryForMs(env = process.env) {
  const raw = env.THREADBOX_RETRY;
  if (raw === undefined || raw === "") return RETRY_FOR_MS;
  const n = Number(raw);
  if (!/^\s*\d+(\.\d+)?\s*$/.test(raw) || !(n >= 0)) throw new CliError("usage", `THREADBOX_RETRY ${raw} is not a number of seconds (0 or more)`);
  return n * 1000;
}

/**
 * An error a moment later may not repeat: the server could not be reached or broke off (a restart,
 * a network drop), a proxy in front of it answered 502, 503 or 504 while it was away (not
 * threadbox's own JSON error: that one is the server's answer, said as it is), or a request safe to
 * send again got no answer within THREADBOX_TIMEOUT (a server restarting under it).
 */
export const isTransient = (err) => err instanceof CliError
  && (err.code === "unreachable" || ([502, 503, 504].includes(err.status) && err.code === `http_${err.status}`)
    || (err.code === "timeout" && err.repeatable));

/**
 * Runs `fn` (a request that is safe to repeat: a GET, a write carrying its entry's id, which the
 * server keeps once, or one carrying an Idempotency-Key) again after a transient error, with backoff, for up to `forMs`; `onRetry(ms,
 * err)` is told before each wait. Any other error, or one past the window, is thrown.
 */
export async function retrying(fn, { forMs = retryForMs(), onRetry } = {}) {
  const deadline = Date.now() + forMs;
  for (let attempt = 0; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      const delay = Math.min(5_000, 250 * 2 ** attempt);
      if (!isTransient(err) || Date.now() + delay > deadline) throw err;
      onRetry?.(delay, err);
      await new Promise((r) => setTimeout(r, delay));
    }
  }
}

/** The error for a URL whose server answers, but not as a threadbox server does. */
export const notThreadbox = (url, what) => new CliError("not_threadbox", `${url} is not a threadbox API (${what}): check the URL`);

/**
 * Commander's parser for an argument or option naming a thread (or box): an empty id (a
 * `$(threadbox new)` that failed) would otherwise reach the server as a different route and come
 * back as a misleading error.
 */
export const idArg = (what) => (value) => {
  if (!value.trim()) throw new CliError("usage", `the ${what} is empty (did the command that gave it fail?)`);
  return value;
};
export const threadIdArg = idArg("thread id");
/** `--env ""` (a `$(…)` that failed) would otherwise quietly mean "no environment". */
export const envArg = idArg("environment");

/**
 * Commander's parser for a whole-number option or argument in [min, max] (the API's range for it):
 * `--limit abc` or `--limit -3` is the user's typo, said as such before anything is sent, not a
 * `validation_failed` about a query parameter the user never wrote.
 * @param {string} name as the user wrote it: `--limit`, `port`
 */
export const intArg = (name, min, max) => (value) => {
  const n = Number(value);
  if (!/^\s*\d+\s*$/.test(value) || n < min || n > max) throw new CliError("usage", `${name} ${value || '""'} is not a whole number from ${min} to ${max}`);
  return n;
};

const enc = encodeURIComponent;

/** Resolves an environment given by id or by name. */
export async function resolveEnvironment(api, ref) {
  if (!ref) return undefined;
  const { environments } = await api.get("/api/environments");
  const byId = environments.find((e) => e.id === ref);
  if (byId) return byId.id;
  const byName = environments.filter((e) => e.name === ref);
  if (byName.length === 1) return byName[0].id;
  if (byName.length > 1) throw new CliError("ambiguous", `${byName.length} environments are named ${ref}: use an id (${byName.map((e) => e.id).join(", ")})`);
  throw new CliError("not_found", `no environment with id or name ${ref}`);
}

/** Resolves a bot given by @handle, handle, id or name. */
export async function resolveAgent(api, ref) {
  const want = ref.replace(/^@/, "");
  const { agents } = await api.get("/api/agents");
  const found = agents.find((a) => a.handle === want) ?? agents.find((a) => a.id === want) ?? agents.find((a) => a.name === want);
  if (!found) throw new CliError("not_found", `no bot @${want} in this house (see \`threadbox agents\`)`);
  return found;
}

export const paths = {
  thread: (id) => `/api/threads/${enc(id)}`,
  threadAction: (id, action) => `/api/threads/${enc(id)}/${action}`,
};
