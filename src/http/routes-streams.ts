import { ApiError } from "../errors";
import type { Env } from "../env";
import { authenticateUntil, canWrite } from "../auth/authenticate";
import { STREAM_TOKEN_RENEWAL_SPAN_SECONDS, mintRunToken, mintStreamToken, streamTokenTtlSeconds, type TokenClaims } from "../auth/tokens";
import { json } from "../errors";
import { unwrapRpc } from "../actors/rpc";
import { MAX_APPEND_BYTES } from "../streams/protocol";
import { FORK_HEADERS, type ForkSource } from "../streams/fork";
import { plainStreamKey, plainStreamStub, threadStub } from "./actors";
import { forwardToActor } from "./routes-threads";
import { writerFor } from "../threads/entries";
import { subscriptionsRoute } from "./routes-subscriptions";

const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._~:@!$&'()*+,;=/-]{0,255}$/;
const THREAD_STREAM = /^thread-([A-Za-z0-9][A-Za-z0-9._:-]{0,127})$/;
const TOKEN_RENEWAL = /^thread-([A-Za-z0-9][A-Za-z0-9._:-]{0,127})\/token$/;
/**
 * Plain streams only the control plane writes: environments' folder archives (folder-store.ts).
 * Runs unpack them into their workspace, so a client that could rewrite one could plant files in
 * every later run; they are written through POST /api/environments/:id/folders only.
 */
const CONTROL_PLANE_STREAMS = /^folders\//;
/**
 * Plain streams a run's box writes: its artifacts (e.g. a diff too large for an entry), under
 * `thread-<id>/artifacts/<runId>/`. Only that run's token writes there; the house reads them.
 */
const RUN_ARTIFACTS = /^thread-([A-Za-z0-9][A-Za-z0-9._:-]{0,127})\/artifacts\/([^/]+)\//;

const isWrite = (request: Request) => request.method !== "GET" && request.method !== "HEAD";

/**
 * `/api/stream/<name>` and `/v1/stream/<name>`: the Durable Streams protocol. `thread-<id>` is a
 * thread's log; any other name is a plain stream of the caller's house.
 */
export async function streamRoute(request: Request, env: Env, prefix: string, url = new URL(request.url)): Promise<Response> {
  let name: string | null;
  try {
    name = decodeURIComponent(url.pathname.slice(prefix.length));
  } catch {
    name = null;
  }
  // The protocol's own routes check their tokens themselves (a wake's callback takes its own).
  if (name !== null && (name === "__ds" || name.startsWith("__ds/"))) return subscriptionsRoute(request, env, name, `${url.origin}${prefix.replace(/\/$/, "")}`);

  // The token first, as on every route: a client without a valid one learns that, not what is wrong with the name.
  const { claims, expiresAtMs } = await authenticateUntil(request, env.THREADBOX_TOKEN_SECRET);
  if (name === null) throw new ApiError("bad_request", "stream name is not valid percent-encoding");
  if (!NAME_PATTERN.test(name) || name.includes("..")) throw new ApiError("bad_request", "invalid stream name");
  // Refuse a declared oversize body here: streaming megabytes into the actor only to reject
  // them wastes the transfer and can break the connection mid-body.
  if (Number(request.headers.get("content-length") ?? "0") > MAX_APPEND_BYTES) {
    throw new ApiError("payload_too_large", `body is larger than ${MAX_APPEND_BYTES} bytes`);
  }
  const renewal = TOKEN_RENEWAL.exec(name);
  if (renewal) return renewStreamToken(request, env, claims, renewal[1]);
  const auth = { houseId: claims.houseId, canWrite: canWrite(claims), tokenExpiresAtMs: expiresAtMs, ...writerFor(claims) };
  const threadMatch = THREAD_STREAM.exec(name);
  const forkedFrom = request.method === "PUT" ? request.headers.get(FORK_HEADERS.from) : null;
  if (threadMatch && forkedFrom !== null) throw new ApiError("bad_request", "a thread's stream cannot be created as a fork");
  if (threadMatch) {
    const threadId = threadMatch[1];
    if (claims.kind === "stream" && claims.threadId !== threadId) throw new ApiError("forbidden", "token is scoped to another thread");
    return forwardToActor(request, threadStub(env, threadId), auth, { kind: "thread", threadId }, "/stream", url.search);
  }
  if (CONTROL_PLANE_STREAMS.test(name) && isWrite(request)) {
    throw new ApiError("forbidden", "folder archives are written through POST /api/environments/:id/folders only");
  }
  const artifacts = RUN_ARTIFACTS.exec(name);
  if (claims.kind === "stream" && (forkedFrom !== null || artifacts?.[1] !== claims.threadId)) {
    throw new ApiError("forbidden", "a stream token reaches only its own thread and its run's artifact streams");
  }
  // A run's token names a thread of its house; one that names no thread there writes nothing.
  if (claims.kind === "stream") await unwrapRpc(threadStub(env, claims.threadId).getThread(claims.houseId));
  if (artifacts && isWrite(request) && (claims.kind !== "stream" || artifacts[2] !== claims.runId)) {
    throw new ApiError("forbidden", "a run's artifact streams are written by that run's box only");
  }
  const forkSource = forkedFrom === null ? undefined : resolveForkSource(forkedFrom, claims.houseId);
  return forwardToActor(request, plainStreamStub(env, claims.houseId, name), auth, { kind: "plain", name, forkSource }, "/stream", url.search);
}

const STREAM_PATH = /^\/(?:v1|api)\/stream\/(.+)$/;

/**
 * `Stream-Forked-From` names the source by its path (`/v1/stream/<name>`, `/api/stream/<name>`,
 * or a full URL to one). It is resolved in the caller's house only, so another house's stream of
 * the same name is simply not there (404), and a thread's log is never a source.
 */
function resolveForkSource(raw: string, houseId: string): ForkSource {
  let path = raw.trim();
  if (/^https?:\/\//i.test(path)) {
    try {
      path = new URL(path).pathname;
    } catch {
      throw new ApiError("bad_request", `${FORK_HEADERS.from} is not a valid URL`);
    }
  }
  const m = STREAM_PATH.exec(path);
  if (!m) throw new ApiError("bad_request", `${FORK_HEADERS.from} must be a stream path such as /v1/stream/<name>`);
  let name: string;
  try {
    name = decodeURIComponent(m[1]);
  } catch {
    throw new ApiError("bad_request", `${FORK_HEADERS.from} is not valid percent-encoding`);
  }
  if (!NAME_PATTERN.test(name) || name.includes("..")) throw new ApiError("bad_request", `${FORK_HEADERS.from} names an invalid stream`);
  if (THREAD_STREAM.test(name) || TOKEN_RENEWAL.test(name)) throw new ApiError("bad_request", "a thread's stream cannot be forked");
  return { name, key: plainStreamKey(houseId, name) };
}

/**
 * `POST <stream base>/thread-<id>/token`: a box exchanges its still-valid stream token for a
 * fresh one (same thread, scope and subject). It lives under the stream path because that is
 * all a box can reach through the stream-proxy; it works only while the thread is running. A run's
 * token is not kept alive past its run; one minted by a user (which may claim the thread itself)
 * not past a day from its first minting, nor past the expiry of the house token that minted it.
 */
async function renewStreamToken(request: Request, env: Env, claims: TokenClaims, threadId: string): Promise<Response> {
  if (request.method !== "POST") throw new ApiError("method_not_allowed", "POST to renew a stream token", undefined, { allow: "POST, OPTIONS" });
  if (claims.kind !== "stream") throw new ApiError("forbidden", "only a stream token can be renewed");
  if (claims.threadId !== threadId) throw new ApiError("forbidden", "token is scoped to another thread");
  if (claims.runId === undefined && Math.floor(Date.now() / 1000) - claims.firstMintedAt > STREAM_TOKEN_RENEWAL_SPAN_SECONDS) {
    throw new ApiError("forbidden", `this stream token was first minted over ${STREAM_TOKEN_RENEWAL_SPAN_SECONDS / 3600} h ago and is not renewed again: mint a new one with POST /api/threads/:id/tokens`);
  }
  const row = await unwrapRpc(threadStub(env, threadId).getThread(claims.houseId));
  if (row.status !== "running") throw new ApiError("conflict", `thread is ${row.status}: stream tokens are renewed only while it runs`);
  // A run's token lives as long as its run: a later run of the thread does not keep it alive.
  if (claims.runId !== undefined && row.runId !== claims.runId) throw new ApiError("conflict", "the run this token was made for is over");
  const minted = claims.runId !== undefined
    ? await mintRunToken(env.THREADBOX_TOKEN_SECRET, claims.houseId, threadId, claims.runId, claims.subject, streamTokenTtlSeconds(env))
    : await mintStreamToken(env.THREADBOX_TOKEN_SECRET, claims.houseId, threadId, claims.scope, claims.subject, streamTokenTtlSeconds(env), undefined, { firstMintedAt: claims.firstMintedAt, notAfter: claims.notAfter });
  return json({ ...minted, scope: claims.scope, threadId }, 201);
}

/** The actor sees an internal URL: a stream created by PUT gets its public Location back. */
export function withPublicLocation(res: Response, request: Request): Response {
  if (request.method !== "PUT" || res.status !== 201) return res;
  const out = new Response(res.body, res);
  out.headers.set("location", request.url);
  return out;
}

