import { z } from "zod";
import { ApiError, json } from "../errors";
import type { Env } from "../env";
import { authenticate, canWrite, requireHouse } from "../auth/authenticate";
import { houseStub } from "../actors/stubs";
import { unwrapRpc } from "../actors/rpc";
import type { SubscriptionOp } from "../actors/house/house-actor";
import type { SubResult } from "../subscriptions/service";
import { ackRequestSchema, streamPath, subscriptionInputSchema } from "../subscriptions/rules";
import { peekCallbackToken, verifyCallbackToken } from "../subscriptions/signing";
import { readBody } from "./body";
import { headOf } from "./head";

const SUBSCRIPTION_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
const ROUTE = /^__ds\/subscriptions\/([^/]+)(?:\/(streams|claim|callback|ack|release)(?:\/(.+))?)?$/;

const addStreamsSchema = z.object({ streams: z.array(streamPath).min(1).max(1000) });
const claimSchema = z.object({ worker: z.string().min(1).max(200) });

function toResponse(r: SubResult): Response {
  if (r.status === 204) return new Response(null, { status: 204 });
  return json(r.body ?? {}, r.status, r.headers ?? {});
}

const protocolError = (status: number, code: string, message: string) => json({ error: { code, message } }, status);

/**
 * The protocol's reserved `__ds/` paths under a stream base (`/v1/stream/`, `/api/stream/`):
 * subscriptions of the caller's house, its webhook signing keys, and the consumer calls that a
 * wake's callback token authorizes. `base` is the stream base URL the answers link to.
 */
export async function subscriptionsRoute(request: Request, env: Env, name: string, base: string): Promise<Response> {
  // HEAD is a GET without its body, as everywhere else under the stream base.
  const head = request.method === "HEAD";
  const method = head ? "GET" : request.method;
  const answer = await route(request, env, name, base, method).catch(asProtocolError);
  return head ? headOf(answer) : answer;
}

/** A body the protocol refuses (not JSON, or not the shape it takes) is its INVALID_REQUEST. */
function asProtocolError(err: unknown): Response {
  if (!(err instanceof ApiError) || (err.code !== "invalid_json" && err.code !== "validation_failed")) throw err;
  const error: Record<string, unknown> = { code: "INVALID_REQUEST", message: err.publicMessage };
  if (err.details !== undefined) error.details = err.details;
  return json({ error }, 400);
}

async function route(request: Request, env: Env, name: string, base: string, method: string): Promise<Response> {
  if (name === "__ds/jwks.json") {
    const claims = await houseCaller(request, env, false);
    allow(method, ["GET"], "GET the key set");
    return toResponse(await op(env, claims.houseId, { kind: "jwks" }));
  }
  if (name === "__ds/subscriptions") {
    const claims = await houseCaller(request, env, false);
    allow(method, ["GET"], "GET to list subscriptions");
    return toResponse(await op(env, claims.houseId, { kind: "list" }));
  }
  const m = ROUTE.exec(name);
  const [, id, action, rest] = m ?? [];

  if (m && isWakeAction(action)) {
    const caller = await wakeCaller(request, env, id);
    if (caller instanceof Response) return caller;
    const { house, token } = caller;
    allow(method, ["POST"], `POST to ${action}`);
    const body = await readBody(request, ackRequestSchema);
    const result = action === "release"
      ? await op(env, house, { kind: "release", id, token, request: body })
      : await op(env, house, { kind: "ack", id, token, request: body, via: action });
    return toResponse(result);
  }

  // Everything else takes a house token, checked before the path is judged.
  if (!m || !SUBSCRIPTION_ID.test(id)) {
    await houseCaller(request, env, false);
    if (!m) throw new ApiError("not_found", "no such route");
    return protocolError(400, "INVALID_REQUEST", "invalid subscription id");
  }
  if (action === "claim") {
    const claims = await houseCaller(request, env, method === "POST");
    allow(method, ["POST"], "POST to claim");
    const body = await readBody(request, claimSchema);
    return toResponse(await op(env, claims.houseId, { kind: "claim", id, worker: body.worker }));
  }
  if (action === "streams") {
    if (rest === undefined) {
      const claims = await houseCaller(request, env, method === "POST");
      allow(method, ["POST"], "POST streams to add");
      const body = await readBody(request, addStreamsSchema);
      return toResponse(await op(env, claims.houseId, { kind: "add_streams", id, streams: body.streams }));
    }
    const claims = await houseCaller(request, env, method === "DELETE");
    allow(method, ["DELETE"], "DELETE a stream to remove it");
    return toResponse(await op(env, claims.houseId, { kind: "remove_stream", id, path: rest }));
  }

  const claims = await houseCaller(request, env, method !== "GET");
  allow(method, ["PUT", "GET", "DELETE"], "PUT, GET or DELETE a subscription");
  if (method === "GET") return toResponse(await op(env, claims.houseId, { kind: "get", id }));
  if (method === "DELETE") return toResponse(await op(env, claims.houseId, { kind: "delete", id }));
  const input = await readBody(request, subscriptionInputSchema);
  return toResponse(await op(env, claims.houseId, { kind: "put", id, input, base }));
}

const isWakeAction = (action: string | undefined) => action === "callback" || action === "ack" || action === "release";

/** The subscription id of a `__ds/` name whose route a wake's own token authorizes (callback, ack, release). */
export function wakeRouteId(name: string): string | undefined {
  const m = ROUTE.exec(name);
  return m && isWakeAction(m[2]) ? m[1] : undefined;
}

/**
 * A wake's own token authorizes the callback, ack and release of subscription `id`, not a house
 * token: it names the house and the wake. A token that does not is the protocol's 401.
 */
export async function wakeCaller(request: Request, env: Env, id: string): Promise<{ house: string; token: string } | Response> {
  const token = /^Bearer (.+)$/i.exec(request.headers.get("authorization") ?? "")?.[1]?.trim() ?? "";
  const claims = peekCallbackToken(token);
  if (!claims || claims.sub !== id) return protocolError(401, "TOKEN_INVALID", "Token invalid");
  // The signature first: an unsigned token must learn nothing (which subscriptions exist, their
  // type) and wake no house. Its wake generation is checked by the house (service.ts, fence).
  const verified = await verifyCallbackToken(env.THREADBOX_TOKEN_SECRET ?? "", token, claims.house, id, Date.now());
  if (!verified.ok) return protocolError(401, verified.code, verified.code === "TOKEN_EXPIRED" ? "Token expired" : "Token invalid");
  return { house: claims.house, token };
}

/** A known route asked with another method: 405 with `Allow` (after the token check). */
function allow(method: string, allowed: string[], message: string): void {
  if (allowed.includes(method)) return;
  // OPTIONS is a CORS preflight, answered on every path (as the other routes' Allow says).
  const withHead = allowed.includes("GET") ? [...allowed, "HEAD"] : allowed;
  throw new ApiError("method_not_allowed", message, undefined, { allow: [...withHead, "OPTIONS"].join(", ") });
}

/** Subscriptions belong to houses: a run's stream token does not reach them. */
async function houseCaller(request: Request, env: Env, write: boolean) {
  const claims = await authenticate(request, env.THREADBOX_TOKEN_SECRET);
  if (claims.kind !== "house") throw new ApiError("forbidden", "subscriptions take a house token");
  requireHouse(claims);
  if (write && !canWrite(claims)) throw new ApiError("forbidden", "token does not allow writes");
  return claims;
}

function op(env: Env, houseId: string, o: SubscriptionOp): Promise<SubResult> {
  return unwrapRpc(houseStub(env, houseId).subscriptionOp(houseId, o));
}
