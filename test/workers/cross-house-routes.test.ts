import { beforeAll, describe, expect, it } from "vitest";
import { SELF, env } from "cloudflare:test";
import { BASE, call, createThread, houseToken, runToken, streamToken, WEBSOCKET_HANDSHAKE } from "./helpers";
import { mintHouseToken } from "../../src/auth/tokens";
import { tarArchive } from "../support/tar";

/**
 * Every route of the README's API table, called by another house against house `xh`'s things
 * (and with xh's own token once it has expired). Each row must answer 404 (or the caller's own,
 * empty, list; or create only in the caller's own house; or 401 for the expired token), leak
 * none of xh's data nor echo a token, and change nothing in xh. The same routes with every
 * credential of the house itself: credential-routes.test.ts.
 *
 * To cover a new route, add a row to ROWS.
 */

type Owner = {
  token: string;
  threadId: string;
  environmentId: string;
  boxId: string;
  streamName: string;
  agentId: string | null;
  /** Its webhook signing key's id (the JWKS `kid`): the attacker's key set must not be it. */
  signingKid: string;
};
/** The attacker's own thread and environment: rows that name xh's things in a body send them there. */
type Attacker = {
  house: string; token: string; streamTokenForOwnersThread: string; runTokenForOwnersThread: string; streamName: string; threadId: string; environmentId: string;
  /** House xh's own owner token, expired: it names nothing any more. */
  expiredOwnerToken: string;
};

type Expect =
  /** `code` when the route answers in its own protocol's codes (subscriptions: upper case). */
  | { status: 404 | 403 | 401 | 400; code?: string }
  /** The caller's own list (none of xh's things in it): `key` holds the list. */
  | { ownList: string }
  /** Succeeds, but only in the caller's own house (xh is checked unchanged). */
  | { ownStatus: number };

type Row = {
  name: string;
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "HEAD";
  path: (o: Owner, a: Attacker) => string;
  body?: (o: Owner) => unknown;
  headers?: Record<string, string>;
  /** Which credential the attacker uses; its house token unless said otherwise. */
  as?: Credential;
  /** Where the credential goes: the Authorization header unless said otherwise (the subscribe route also takes the others). */
  tokenIn?: "query" | "protocol";
  expect: Expect;
  /** xh's thing is named in the body (so the body must be parsed to find it). */
  targetInBody?: boolean;
  /**
   * The id is looked up in the caller's own house only (subscriptions): another house's is just
   * an id the caller has none of, whose body is checked first as for any other.
   */
  callersOwnNamespace?: boolean;
};

/**
 * house: the attacker's own house token; stream/run: a stream token (and a run's token, naming
 * a run) of the attacker's house that names xh's thread; expired: xh's own owner token, expired.
 */
type Credential = "house" | "stream" | "run" | "expired";

const json = { "content-type": "application/json" };
const chatBody = () => ({ id: "xh-attack", payload: { type: "chat", text: "injected" } });


const streamMethods = (label: string, path: (o: Owner, a: Attacker) => string, as: Credential): Row[] => [
  { name: `${label} GET`, method: "GET", path: (o, a) => `${path(o, a)}?offset=-1`, as, expect: { status: 404 } },
  { name: `${label} GET long-poll`, method: "GET", path: (o, a) => `${path(o, a)}?offset=-1&live=long-poll`, as, expect: { status: 404 } },
  { name: `${label} GET sse`, method: "GET", path: (o, a) => `${path(o, a)}?offset=-1&live=sse`, as, expect: { status: 404 } },
  { name: `${label} HEAD`, method: "HEAD", path, as, expect: { status: 404 } },
  { name: `${label} POST`, method: "POST", path, body: chatBody, headers: json, as, expect: { status: 404 } },
  { name: `${label} POST close`, method: "POST", path, headers: { "stream-closed": "true" }, as, expect: { status: 404 } },
  { name: `${label} DELETE`, method: "DELETE", path, as, expect: { status: 404 } },
  { name: `${label} PUT`, method: "PUT", path, headers: json, as, expect: { status: 404 } },
];

const ROWS: Row[] = [
  // threads
  { name: "GET /api/threads", method: "GET", path: () => "/api/threads", expect: { ownList: "threads" } },
  { name: "GET /api/threads?parent=<xh thread>", method: "GET", path: (o) => `/api/threads?parent=${o.threadId}`, expect: { ownList: "threads" } },
  { name: "POST /api/threads (parent = xh thread)", method: "POST", path: () => "/api/threads", body: (o) => ({ parent: { kind: "thread", id: o.threadId } }), headers: json, expect: { status: 404 }, targetInBody: true },
  { name: "GET /api/threads/:id", method: "GET", path: (o) => `/api/threads/${o.threadId}`, expect: { status: 404 } },
  { name: "POST /api/threads/:id/entries", method: "POST", path: (o) => `/api/threads/${o.threadId}/entries`, body: chatBody, headers: json, expect: { status: 404 } },
  { name: "POST /api/threads/:id/entries (stream token)", method: "POST", path: (o) => `/api/threads/${o.threadId}/entries`, body: chatBody, headers: json, as: "stream", expect: { status: 404 } },
  { name: "GET /api/threads/:id/entries", method: "GET", path: (o) => `/api/threads/${o.threadId}/entries?offset=-1`, expect: { status: 404 } },
  { name: "GET /api/threads/:id/entries (stream token)", method: "GET", path: (o) => `/api/threads/${o.threadId}/entries?offset=-1`, as: "stream", expect: { status: 404 } },
  { name: "GET /api/threads/:id/subscribe", method: "GET", path: (o) => `/api/threads/${o.threadId}/subscribe?offset=-1`, headers: { ...WEBSOCKET_HANDSHAKE }, expect: { status: 404 } },
  { name: "GET /api/threads/:id/subscribe (stream token)", method: "GET", path: (o) => `/api/threads/${o.threadId}/subscribe?offset=-1`, headers: { ...WEBSOCKET_HANDSHAKE }, as: "stream", expect: { status: 404 } },
  { name: "POST /api/threads/:id/tokens write", method: "POST", path: (o) => `/api/threads/${o.threadId}/tokens`, body: () => ({ scope: "stream:write" }), headers: json, expect: { status: 404 } },
  { name: "POST /api/threads/:id/tokens read", method: "POST", path: (o) => `/api/threads/${o.threadId}/tokens`, body: () => ({ scope: "stream:read" }), headers: json, expect: { status: 404 } },
  { name: "POST /api/threads/:id/delegate", method: "POST", path: (o) => `/api/threads/${o.threadId}/delegate`, body: () => ({ task: "exfiltrate" }), headers: json, expect: { status: 404 } },
  { name: "POST /api/threads/:id/resume", method: "POST", path: (o) => `/api/threads/${o.threadId}/resume`, body: () => ({ message: "again" }), headers: json, expect: { status: 404 } },
  { name: "POST /api/threads/:id/stop", method: "POST", path: (o) => `/api/threads/${o.threadId}/stop`, expect: { status: 404 } },
  { name: "POST /api/threads/:id/interrupt", method: "POST", path: (o) => `/api/threads/${o.threadId}/interrupt`, expect: { status: 404 } },
  { name: "POST /api/threads/:id/entries (run token)", method: "POST", path: (o) => `/api/threads/${o.threadId}/entries`, body: chatBody, headers: json, as: "run", expect: { status: 404 } },
  { name: "GET /api/threads/:id (expired token of xh)", method: "GET", path: (o) => `/api/threads/${o.threadId}`, as: "expired", expect: { status: 401 } },
  { name: "GET /api/threads/:id/entries (expired token of xh)", method: "GET", path: (o) => `/api/threads/${o.threadId}/entries?offset=-1`, as: "expired", expect: { status: 401 } },
  { name: "POST /api/threads/:id/entries (expired token of xh)", method: "POST", path: (o) => `/api/threads/${o.threadId}/entries`, body: chatBody, headers: json, as: "expired", expect: { status: 401 } },
  { name: "GET /api/threads/:id/subscribe (expired token of xh)", method: "GET", path: (o) => `/api/threads/${o.threadId}/subscribe?offset=-1`, headers: { ...WEBSOCKET_HANDSHAKE }, as: "expired", expect: { status: 401 } },
  { name: "GET /api/threads/:id/config (stream token)", method: "GET", path: (o) => `/api/threads/${o.threadId}/config`, as: "stream", expect: { status: 404 } },
  { name: "GET /api/threads/:id/dispatch (stream token)", method: "GET", path: (o) => `/api/threads/${o.threadId}/dispatch`, as: "stream", expect: { status: 404 } },
  { name: "GET /api/threads/:id/artifacts (run token)", method: "GET", path: (o) => `/api/threads/${o.threadId}/artifacts`, as: "run", expect: { status: 404 } },

  // Path tricks that might reach xh's thread under another spelling: each is xh's thread (404 as a
  // missing one), or no thread at all.
  { name: "GET /api/threads/:id/ (trailing slash)", method: "GET", path: (o) => `/api/threads/${o.threadId}/`, expect: { status: 404 } },
  { name: "GET /api/threads/:id/entries/ (trailing slash)", method: "GET", path: (o) => `/api/threads/${o.threadId}/entries/?offset=-1`, expect: { status: 404 } },
  { name: "GET /api/threads/:id (upper case)", method: "GET", path: (o) => `/api/threads/${o.threadId.toUpperCase()}`, expect: { status: 404 } },
  { name: "GET /api/threads/:id (percent-encoded)", method: "GET", path: (o) => `/api/threads/${o.threadId.replace("_", "%5F")}/entries?offset=-1`, expect: { status: 404 } },
  { name: "GET /api/threads/:id (double-encoded)", method: "GET", path: (o) => `/api/threads/${o.threadId.replace("_", "%255F")}/entries?offset=-1`, expect: { status: 404 } },
  { name: "GET /api/threads/<own>%2F..%2F<xh>/entries (encoded dot segments)", method: "GET", path: (o, a) => `/api/threads/${a.threadId}%2F..%2F${o.threadId}/entries?offset=-1`, expect: { status: 404 } },
  { name: "GET /api/threads/<own>/../<xh>/entries (dot segments)", method: "GET", path: (o, a) => `/api/threads/${a.threadId}/%2e%2e/${o.threadId}/entries?offset=-1`, expect: { status: 404 } },
  { name: "POST /api/threads/<own>/entries/../../<xh>/entries", method: "POST", path: (o, a) => `/api/threads/${a.threadId}/entries/../../${o.threadId}/entries`, body: chatBody, headers: json, expect: { status: 404 } },
  { name: "GET /api/threads/:id/subscribe/ (trailing slash)", method: "GET", path: (o) => `/api/threads/${o.threadId}/subscribe/?offset=-1`, headers: { ...WEBSOCKET_HANDSHAKE }, expect: { status: 404 } },
  { name: "GET /api/threads/<own>%2F..%2F<xh>/subscribe", method: "GET", path: (o, a) => `/api/threads/${a.threadId}%2F..%2F${o.threadId}/subscribe?offset=-1`, headers: { ...WEBSOCKET_HANDSHAKE }, expect: { status: 404 } },
  { name: "GET /api/threads/:id/subscribe (?token=)", method: "GET", path: (o) => `/api/threads/${o.threadId}/subscribe?offset=-1`, headers: { ...WEBSOCKET_HANDSHAKE }, tokenIn: "query", expect: { status: 404 } },
  { name: "GET /api/threads/:id/subscribe (bearer subprotocol)", method: "GET", path: (o) => `/api/threads/${o.threadId}/subscribe?offset=-1`, headers: { ...WEBSOCKET_HANDSHAKE }, tokenIn: "protocol", expect: { status: 404 } },
  { name: "GET /api/threads/:id/subscribe (stream token in ?token=)", method: "GET", path: (o) => `/api/threads/${o.threadId}/subscribe?offset=-1`, headers: { ...WEBSOCKET_HANDSHAKE }, as: "stream", tokenIn: "query", expect: { status: 404 } },
  { name: "GET /api/threads/:id/subscribe (expired token of xh in ?token=)", method: "GET", path: (o) => `/api/threads/${o.threadId}/subscribe?offset=-1`, headers: { ...WEBSOCKET_HANDSHAKE }, as: "expired", tokenIn: "query", expect: { status: 401 } },
  // The token goes in the Authorization header everywhere else: one in the query is no token.
  { name: "GET /api/threads/:id (?token=)", method: "GET", path: (o) => `/api/threads/${o.threadId}`, tokenIn: "query", expect: { status: 401 } },
  { name: "/api/stream/thread-<id> GET (?token=)", method: "GET", path: (o) => `/api/stream/thread-${o.threadId}?offset=-1&live=long-poll`, tokenIn: "query", expect: { status: 401 } },
  { name: "/v1/stream/%74hread-<id> GET (an encoded letter)", method: "GET", path: (o) => `/v1/stream/%74hread-${o.threadId}?offset=-1`, expect: { status: 404 } },
  { name: "/v1/stream/thread%2D<id> GET long-poll (an encoded dash)", method: "GET", path: (o) => `/v1/stream/thread%2D${o.threadId}?offset=-1&live=long-poll`, expect: { status: 404 } },
  { name: "/v1/stream/thread-<id>/ GET (trailing slash: a plain stream of the caller's)", method: "GET", path: (o) => `/v1/stream/thread-${o.threadId}/?offset=-1`, expect: { status: 404 } },
  { name: "/v1/stream/THREAD-<id> GET sse (upper case: a plain stream of the caller's)", method: "GET", path: (o) => `/v1/stream/THREAD-${o.threadId}?offset=-1&live=sse`, expect: { status: 404 } },
  { name: "/v1/stream/<own>%2F..%2Fthread-<id> GET (encoded dot segments)", method: "GET", path: (o, a) => `/v1/stream/${a.streamName}%2F..%2Fthread-${o.threadId}?offset=-1`, expect: { status: 400 } },
  { name: "/v1/stream/thread-<own>/%2e%2e/thread-<id> GET long-poll (dot segments)", method: "GET", path: (o, a) => `/v1/stream/thread-${a.threadId}/%2e%2e/thread-${o.threadId}?offset=-1&live=long-poll`, expect: { status: 404 } },
  { name: "/v1/stream/thread-%2574h... GET (double-encoded)", method: "GET", path: (o) => `/v1/stream/thread-${o.threadId.replace("_", "%255F")}?offset=-1`, expect: { status: 400 } },
  { name: "/v1/stream/thread-<id> POST (run token, encoded slash to artifacts)", method: "POST", path: (o) => `/v1/stream/thread-${o.threadId}%2Fartifacts%2Fr1%2Fdiff`, body: () => "x", headers: { "content-type": "text/plain" }, as: "run", expect: { status: 404 } },
  { name: "/v1/stream/__ds/subscriptions/:id GET (encoded __ds)", method: "GET", path: () => `/v1/stream/%5F%5Fds/subscriptions/${SUBSCRIPTION}`, expect: { status: 404, code: "SUBSCRIPTION_NOT_FOUND" } },

  // environments
  { name: "GET /api/environments", method: "GET", path: () => "/api/environments", expect: { ownList: "environments" } },
  { name: "GET /api/environments/:id", method: "GET", path: (o) => `/api/environments/${o.environmentId}`, expect: { status: 404 } },
  { name: "GET /api/environments/:id (expired token of xh)", method: "GET", path: (o) => `/api/environments/${o.environmentId}`, as: "expired", expect: { status: 401 } },
  { name: "PATCH /api/environments/:id", method: "PATCH", path: (o) => `/api/environments/${o.environmentId}`, body: () => ({ name: "taken over" }), headers: json, expect: { status: 404 } },
  { name: "POST /api/environments/:id/exec", method: "POST", path: (o) => `/api/environments/${o.environmentId}/exec`, body: () => ({ command: "cat /etc/passwd" }), headers: json, expect: { status: 404 } },
  { name: "POST /api/threads (environmentId = xh environment)", method: "POST", path: () => "/api/threads", body: (o) => ({ environmentId: o.environmentId }), headers: json, expect: { status: 404 }, targetInBody: true },
  { name: "POST /api/environments/:id/exec (threadId = xh thread)", method: "POST", path: (_o, a) => `/api/environments/${a.environmentId}/exec`, body: (o) => ({ command: "echo hi", threadId: o.threadId }), headers: json, expect: { status: 404 }, targetInBody: true },
  { name: "POST /api/threads/:id/delegate (environmentId = xh environment)", method: "POST", path: (_o, a) => `/api/threads/${a.threadId}/delegate`, body: (o) => ({ task: "use their secrets", environmentId: o.environmentId, model: "local/m" }), headers: json, expect: { status: 404 }, targetInBody: true },

  // sandboxes
  { name: "GET /api/sandboxes", method: "GET", path: () => "/api/sandboxes", expect: { ownList: "sandboxes" } },
  { name: "GET /api/sandboxes?state=live", method: "GET", path: () => "/api/sandboxes?state=live", expect: { ownList: "sandboxes" } },
  { name: "GET /api/sandboxes/:id", method: "GET", path: (o) => `/api/sandboxes/${o.boxId}`, expect: { status: 404 } },
  // The actors that watch for a box whose create got no answer are named so; they hold no box.
  { name: "GET /api/sandboxes/:id (a late-box watch actor's name)", method: "GET", path: () => "/api/sandboxes/late-box:test:xh", expect: { status: 404 } },
  { name: "GET /api/sandboxes/:id/ports/:port/preview", method: "GET", path: (o) => `/api/sandboxes/${o.boxId}/ports/3000/preview`, expect: { status: 404 } },
  { name: "DELETE /api/sandboxes/:id", method: "DELETE", path: (o) => `/api/sandboxes/${o.boxId}`, expect: { status: 404 } },
  { name: "DELETE /api/sandboxes/:id?force=true", method: "DELETE", path: (o) => `/api/sandboxes/${o.boxId}?force=true`, expect: { status: 404 } },
  { name: "POST /api/sandboxes (xh's environment)", method: "POST", path: () => "/api/sandboxes", body: (o) => ({ provider: "test", environmentId: o.environmentId }), headers: json, expect: { status: 404 }, targetInBody: true },
  { name: "POST /api/sandboxes/reconcile", method: "POST", path: () => "/api/sandboxes/reconcile", expect: { ownStatus: 200 } },

  // a thread's log over the Durable Streams protocol, both prefixes, both credentials
  ...streamMethods("/api/stream/thread-<id>", (o) => `/api/stream/thread-${o.threadId}`, "house"),
  ...streamMethods("/v1/stream/thread-<id>", (o) => `/v1/stream/thread-${o.threadId}`, "house"),
  ...streamMethods("/api/stream/thread-<id> (stream token)", (o) => `/api/stream/thread-${o.threadId}`, "stream"),
  ...streamMethods("/v1/stream/thread-<id> (run token)", (o) => `/v1/stream/thread-${o.threadId}`, "run"),
  { name: "/api/stream/thread-<id> GET (expired token of xh)", method: "GET", path: (o) => `/api/stream/thread-${o.threadId}?offset=-1`, as: "expired", expect: { status: 401 } },
  { name: "/api/stream/thread-<id> GET sse (expired token of xh)", method: "GET", path: (o) => `/api/stream/thread-${o.threadId}?offset=-1&live=sse`, as: "expired", expect: { status: 401 } },
  { name: "POST /api/stream/thread-<id>/token (run token)", method: "POST", path: (o) => `/api/stream/thread-${o.threadId}/token`, as: "run", expect: { status: 404 } },
  { name: "POST /api/stream/thread-<id>/token (house token)", method: "POST", path: (o) => `/api/stream/thread-${o.threadId}/token`, expect: { status: 403 } },
  { name: "POST /api/stream/thread-<id>/token (stream token)", method: "POST", path: (o) => `/api/stream/thread-${o.threadId}/token`, as: "stream", expect: { status: 404 } },

  // plain streams: the attacker's name is what would have reached xh's stream under an ambiguous key
  ...streamMethods("/api/stream/<name>", (_o, a) => `/api/stream/${a.streamName}`, "house").filter((r) => r.method !== "PUT"),
  ...streamMethods("/v1/stream/<name>", (_o, a) => `/v1/stream/${a.streamName}`, "house").filter((r) => r.method !== "PUT"),
  { name: "/api/stream/<xh's own name> GET", method: "GET", path: (o) => `/api/stream/${o.streamName}?offset=-1`, expect: { status: 404 } },
  { name: "/api/stream/<xh's own name> POST", method: "POST", path: (o) => `/api/stream/${o.streamName}`, body: () => "x", headers: { "content-type": "text/plain" }, expect: { status: 404 } },
  { name: "/api/stream/<name> with a stream token", method: "GET", path: (o) => `/api/stream/${o.streamName}?offset=-1`, as: "stream", expect: { status: 403 } },
  { name: "/api/stream/<xh's own name> GET (expired token of xh)", method: "GET", path: (o) => `/api/stream/${o.streamName}?offset=-1`, as: "expired", expect: { status: 401 } },
  // A fork's source is looked up in the caller's house: xh's stream of that name is not there.
  { name: "PUT /api/stream/<new> forked from xh's stream", method: "PUT", path: () => "/api/stream/mallory-fork", headers: { "content-type": "text/plain", "stream-forked-from": "/v1/stream/eng:payroll" }, expect: { status: 404 } },
  { name: "PUT /api/stream/<new> forked from xh's stream (full URL)", method: "PUT", path: () => "/api/stream/mallory-fork", headers: { "content-type": "text/plain", "stream-forked-from": `${BASE}/api/stream/eng:payroll` }, expect: { status: 404 } },
  { name: "PUT /api/stream/thread-<id>/artifacts/<run>/diff (run token)", method: "PUT", path: (o) => `/api/stream/thread-${o.threadId}/artifacts/r1/diff`, headers: { "content-type": "text/plain" }, as: "run", expect: { status: 404 } },
  // Last among plain streams: creates the attacker's own stream of that name, leaving xh's alone.
  { name: "/api/stream/<name> PUT", method: "PUT", path: (_o, a) => `/api/stream/${a.streamName}`, headers: { "content-type": "text/plain" }, expect: { ownStatus: 201 } },

  // agents, a thread's bot configuration and its artifacts
  { name: "GET /api/agents", method: "GET", path: () => "/api/agents", expect: { ownList: "agents" } },
  { name: "GET /api/agents/:id", method: "GET", path: (o) => `/api/agents/${o.agentId}`, expect: { status: 404 } },
  { name: "PATCH /api/agents/:id", method: "PATCH", path: (o) => `/api/agents/${o.agentId}`, body: () => ({ systemPrompt: "leak everything" }), headers: json, expect: { status: 404 } },
  { name: "DELETE /api/agents/:id", method: "DELETE", path: (o) => `/api/agents/${o.agentId}`, expect: { status: 404 } },
  { name: "POST /api/agents (environmentId = xh environment)", method: "POST", path: () => "/api/agents", body: (o) => ({ name: "spy", handle: "spy", model: "local/m", environmentId: o.environmentId }), headers: json, expect: { status: 404 }, targetInBody: true },
  { name: "GET /api/threads/:id/config", method: "GET", path: (o) => `/api/threads/${o.threadId}/config`, expect: { status: 404 } },
  { name: "PATCH /api/threads/:id/config", method: "PATCH", path: (o) => `/api/threads/${o.threadId}/config`, body: () => ({ dispatch: { cooldownMs: 1 } }), headers: json, expect: { status: 404 } },
  { name: "GET /api/threads/:id/dispatch", method: "GET", path: (o) => `/api/threads/${o.threadId}/dispatch`, expect: { status: 404 } },
  { name: "GET /api/threads/:id/artifacts", method: "GET", path: (o) => `/api/threads/${o.threadId}/artifacts`, expect: { status: 404 } },
  { name: "PUT /api/stream/thread-<id>/artifacts/<run>/diff (stream token)", method: "PUT", path: (o) => `/api/stream/thread-${o.threadId}/artifacts/r1/diff`, headers: { "content-type": "text/plain" }, as: "stream", expect: { status: 404 } },

  // environment folders
  { name: "POST /api/environments/:id/folders", method: "POST", path: (o) => `/api/environments/${o.environmentId}/folders?name=xh-docs`, body: () => "not an archive", headers: { "content-type": "application/x-tar" }, expect: { status: 404 } },
  { name: "GET /api/environments/:id/folders", method: "GET", path: (o) => `/api/environments/${o.environmentId}/folders`, expect: { status: 404 } },
  { name: "GET /api/environments/:id/folders/:name", method: "GET", path: (o) => `/api/environments/${o.environmentId}/folders/xh-docs`, expect: { status: 404 } },
  { name: "GET /api/environments/:id/folders/:name?version=1", method: "GET", path: (o) => `/api/environments/${o.environmentId}/folders/xh-docs?version=1`, expect: { status: 404 } },
  { name: "GET /api/environments/:id/folders/:name (expired token of xh)", method: "GET", path: (o) => `/api/environments/${o.environmentId}/folders/xh-docs`, as: "expired", expect: { status: 401 } },
  { name: "DELETE /api/environments/:id", method: "DELETE", path: (o) => `/api/environments/${o.environmentId}`, expect: { status: 404 } },

  // webhook subscriptions (the protocol's reserved __ds/ paths): xh's subscription by its id
  { name: "GET /v1/stream/__ds/subscriptions", method: "GET", path: () => "/v1/stream/__ds/subscriptions", expect: { ownList: "subscriptions" } },
  { name: "GET /v1/stream/__ds/jwks.json", method: "GET", path: () => "/v1/stream/__ds/jwks.json", expect: { ownList: "keys" } },
  { name: "GET /v1/stream/__ds/subscriptions/:id", method: "GET", path: () => `/v1/stream/__ds/subscriptions/${SUBSCRIPTION}`, expect: { status: 404, code: "SUBSCRIPTION_NOT_FOUND" } },
  { name: "HEAD /api/stream/__ds/subscriptions/:id", method: "HEAD", path: () => `/api/stream/__ds/subscriptions/${SUBSCRIPTION}`, expect: { status: 404 } },
  { name: "POST /v1/stream/__ds/subscriptions/:id/streams", method: "POST", path: () => `/v1/stream/__ds/subscriptions/${SUBSCRIPTION}/streams`, body: () => ({ streams: ["stolen"] }), headers: json, expect: { status: 404, code: "SUBSCRIPTION_NOT_FOUND" }, callersOwnNamespace: true },
  { name: "DELETE /v1/stream/__ds/subscriptions/:id/streams/:name", method: "DELETE", path: (o) => `/v1/stream/__ds/subscriptions/${SUBSCRIPTION}/streams/${o.streamName}`, expect: { status: 404, code: "SUBSCRIPTION_NOT_FOUND" } },
  { name: "POST /v1/stream/__ds/subscriptions/:id/claim", method: "POST", path: () => `/v1/stream/__ds/subscriptions/${SUBSCRIPTION}/claim`, body: () => ({ worker: "mallory" }), headers: json, expect: { status: 404, code: "SUBSCRIPTION_NOT_FOUND" }, callersOwnNamespace: true },
  { name: "POST /v1/stream/__ds/subscriptions/:id/ack (house token)", method: "POST", path: () => `/v1/stream/__ds/subscriptions/${SUBSCRIPTION}/ack`, body: () => ({ wake_id: "w", generation: 1, acks: [], done: true }), headers: json, expect: { status: 401, code: "TOKEN_INVALID" } },
  { name: "POST /v1/stream/__ds/subscriptions/:id/callback (house token)", method: "POST", path: () => `/v1/stream/__ds/subscriptions/${SUBSCRIPTION}/callback`, body: () => ({ wake_id: "w", generation: 1, acks: [], done: true }), headers: json, expect: { status: 401, code: "TOKEN_INVALID" } },
  { name: "POST /v1/stream/__ds/subscriptions/:id/release (house token)", method: "POST", path: () => `/v1/stream/__ds/subscriptions/${SUBSCRIPTION}/release`, body: () => ({ wake_id: "w", generation: 1, acks: [], done: true }), headers: json, expect: { status: 401, code: "TOKEN_INVALID" } },
  { name: "DELETE /v1/stream/__ds/subscriptions/:id", method: "DELETE", path: () => `/v1/stream/__ds/subscriptions/${SUBSCRIPTION}`, expect: { status: 404, code: "SUBSCRIPTION_NOT_FOUND" } },
  { name: "GET /v1/stream/__ds/subscriptions/:id (stream token)", method: "GET", path: () => `/v1/stream/__ds/subscriptions/${SUBSCRIPTION}`, as: "stream", expect: { status: 403 } },
  { name: "GET /v1/stream/__ds/subscriptions/:id (expired token of xh)", method: "GET", path: () => `/v1/stream/__ds/subscriptions/${SUBSCRIPTION}`, as: "expired", expect: { status: 401 } },
  { name: "GET /v1/stream/__ds/jwks.json (expired token of xh)", method: "GET", path: () => "/v1/stream/__ds/jwks.json", as: "expired", expect: { status: 401 } },
  // Last among subscriptions: creates the attacker's own subscription of that id, leaving xh's alone.
  { name: "PUT /v1/stream/__ds/subscriptions/:id", method: "PUT", path: () => `/v1/stream/__ds/subscriptions/${SUBSCRIPTION}`, body: () => ({ type: "webhook", pattern: "**", webhook: { url: "https://example.com/mallory" } }), headers: json, expect: { ownStatus: 201 } },

  // Last: after every row that names xh's environment: an environment created with xh's id is the caller's own, xh's is untouched.
  { name: "POST /api/environments (xh's environment id)", method: "POST", path: () => "/api/environments", body: (o) => ({ id: o.environmentId, name: "mine", provider: "test", sharedBox: true }), headers: json, expect: { ownStatus: 201 } },
];

const OWNER_HOUSE = "xh";
const SECRET = "sk-xh-never-leaks";
const STREAM_TEXT = "xh-salary-data";
const SUBSCRIPTION = "xh-sub";
const SUBSCRIPTION_URL = "https://example.com/xh-private-hook";
/** An id of the shape the server gives that names nothing anywhere. */
const ghostId = (prefix: string) => prefix + crypto.randomUUID().replaceAll("-", "").slice(0, 24);

/** Everything house xh can see; compared before and after each row. */
async function snapshot(o: Owner): Promise<string> {
  const get = async (path: string, init: RequestInit = {}) => {
    const r = await call(path, { token: o.token, ...init });
    // An archive is compared as its bytes (reading it as text would only be a lossy decoding).
    const body = init.method === "HEAD" ? "" : r.headers.get("content-type") === "application/x-tar"
      ? new Uint8Array(await r.arrayBuffer()).join(",") : await r.text();
    return { status: r.status, body, tail: r.headers.get("stream-next-offset") };
  };
  const parts = [
    await get(`/api/threads/${o.threadId}`),
    await get(`/api/threads/${o.threadId}/entries?offset=-1`),
    await get("/api/threads"),
    await get("/api/environments"),
    await get(`/api/environments/${o.environmentId}`),
    await get("/api/sandboxes"),
    await get(`/api/sandboxes/${o.boxId}`),
    await get(`/api/stream/${o.streamName}?offset=-1`),
    await get(`/api/stream/${o.streamName}`, { method: "HEAD" }),
    await get(`/api/stream/thread-${o.threadId}?offset=-1`),
    await get(`/api/environments/${o.environmentId}/folders`),
    await get(`/api/environments/${o.environmentId}/folders/xh-docs`),
    await get(`/v1/stream/__ds/subscriptions/${SUBSCRIPTION}`),
    await get("/v1/stream/__ds/subscriptions"),
    await get("/v1/stream/__ds/jwks.json"),
  ];
  if (o.agentId) parts.push(await get("/api/agents"), await get(`/api/agents/${o.agentId}`));
  return JSON.stringify(parts);
}

let ownerOnce: Promise<Owner> | undefined;
/** House xh is set up once; every attacker block checks it is still exactly as it was. */
const setUpOwner = () => (ownerOnce ??= createOwner());

async function createOwner(): Promise<Owner> {
  const token = await houseToken(OWNER_HOUSE, "xh-alice", "owner");
  const t = await createThread(token, { title: "xh private thread" });
  const posted = await call(`/api/threads/${t.id}/entries`, { method: "POST", token, json: { id: "xh-1", payload: { type: "chat", text: "xh private entry" } } });
  expect(posted.status).toBe(201);
  const e = await call("/api/environments", { method: "POST", token, json: { name: "xh-env", provider: "test", sharedBox: true, secrets: { KEY: SECRET } } });
  expect(e.status).toBe(201);
  const box = await call("/api/sandboxes", { method: "POST", token, json: { provider: "test", ephemeral: false } });
  expect(box.status).toBe(201);
  const streamName = "eng:payroll";
  expect((await call(`/api/stream/${streamName}`, { method: "PUT", token, headers: { "content-type": "text/plain" } })).status).toBe(201);
  expect((await call(`/api/stream/${streamName}`, { method: "POST", token, body: STREAM_TEXT, headers: { "content-type": "text/plain" } })).status).toBe(204);
  // Linked at the stream's tail: nothing pending, so no wake (and no webhook call) is made.
  const sub = await call(`/v1/stream/__ds/subscriptions/${SUBSCRIPTION}`, { method: "PUT", token, json: { type: "webhook", streams: [streamName], webhook: { url: SUBSCRIPTION_URL } } });
  expect(sub.status).toBe(201);
  const jwks = (await (await call("/v1/stream/__ds/jwks.json", { token })).json()) as { keys: { kid: string }[] };
  const owner: Owner = {
    token, threadId: t.id, environmentId: ((await e.json()) as { id: string }).id, boxId: ((await box.json()) as { id: string }).id, streamName, agentId: null,
    signingKid: jwks.keys[0].kid,
  };
  const agent = await call("/api/agents", { method: "POST", token, json: { name: "xh-agent", handle: "xh-bot", model: "local/m", environmentId: owner.environmentId } });
  expect(agent.status).toBe(201);
  owner.agentId = ((await agent.json()) as { id: string }).id;
  const folder = await call(`/api/environments/${owner.environmentId}/folders?name=xh-docs`, { method: "POST", token, body: tarArchive({ "notes.txt": "xh private notes" }), headers: { "content-type": "application/x-tar" } });
  expect(folder.status).toBe(201);
  return owner;
}

// `xh:eng` + `payroll` and `xh` + `eng:payroll` were one storage key once; `other` is unrelated.
const ATTACKERS = [
  { house: "xh:eng", streamName: "payroll" },
  { house: "other-house", streamName: "eng:payroll" },
];

describe.each(ATTACKERS)("another house ($house) against house xh", ({ house, streamName }) => {
  let owner: Owner;
  let attacker: Attacker;
  let baseline: string;

  beforeAll(async () => {
    owner = await setUpOwner();
    const token = await houseToken(house, "mallory", "admin");
    const ownEnv = await call("/api/environments", { method: "POST", token, json: { name: "mallory-env", provider: "test", sharedBox: true } });
    expect(ownEnv.status).toBe(201);
    attacker = {
      house,
      token,
      threadId: (await createThread(token, { title: "mallory's own" })).id,
      environmentId: ((await ownEnv.json()) as { id: string }).id,
      // A validly signed token of the attacker's house that names xh's thread: still nothing.
      streamTokenForOwnersThread: await streamToken(house, owner.threadId, "stream:write"),
      runTokenForOwnersThread: await runToken(house, owner.threadId, "r1", "mallory"),
      expiredOwnerToken: (await mintHouseToken((env as unknown as { THREADBOX_TOKEN_SECRET: string }).THREADBOX_TOKEN_SECRET, OWNER_HOUSE, "xh-alice", "owner", 60, Date.now() - 3_600_000)).token,
      streamName,
    };
    baseline = await snapshot(owner);
  });

  /** Sends `row` as the attacker, naming `o`'s things (xh's own, or ones that exist nowhere). */
  const send = async (row: Row, o: Owner, a: Attacker) => {
    const headers = new Headers(row.headers);
    const credential = { house: a.token, stream: a.streamTokenForOwnersThread, run: a.runTokenForOwnersThread, expired: a.expiredOwnerToken }[row.as ?? "house"];
    let path = row.path(o, a);
    if (row.tokenIn === "query") path += `${path.includes("?") ? "&" : "?"}token=${credential}`;
    else if (row.tokenIn === "protocol") headers.set("sec-websocket-protocol", `threadbox, bearer.${credential}`);
    else headers.set("authorization", `Bearer ${credential}`);
    const rawBody = row.body?.(o);
    const init: RequestInit = { method: row.method, headers };
    if (rawBody !== undefined) init.body = typeof rawBody === "string" ? rawBody : JSON.stringify(rawBody);
    const res = await SELF.fetch(`${BASE}${path}`, init);
    const text = row.method === "HEAD" ? "" : await res.text();
    if (res.webSocket) res.webSocket.accept();
    return { res, text, headers, credential };
  };

  it.for(ROWS)("$name", async (row) => {
    const sent = await send(row, owner, attacker);
    const { res, text, headers, credential } = sent;

    if ("status" in row.expect) {
      expect(res.status).toBe(row.expect.status);
      const code = row.expect.code ?? { 400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found" }[row.expect.status];
      if (row.method !== "HEAD") expect(JSON.parse(text).error.code).toBe(code);
    } else if ("ownList" in row.expect) {
      expect(res.status).toBe(200);
      expect(Array.isArray(JSON.parse(text)[row.expect.ownList])).toBe(true);
    } else {
      expect(res.status).toBe(row.expect.ownStatus);
    }

    // Authorization comes before validation: a malformed body changes nothing about the answer.
    if (row.body && "status" in row.expect && !row.targetInBody && !row.callersOwnNamespace) {
      for (const [garbage, contentType] of [["{not json", "application/json"], ["[[[[[[[[", "application/json; charset=latin1"], ["x", "text/html"]]) {
        const bad = await SELF.fetch(`${BASE}${row.path(owner, attacker)}`, { method: row.method, headers: { authorization: headers.get("authorization")!, "content-type": contentType }, body: garbage });
        expect({ garbage, status: bad.status }).toEqual({ garbage, status: row.expect.status });
        await bad.body?.cancel();
      }
    }

    // xh's things answer exactly as things that exist nowhere: status, body and headers alike
    // (ids aside), so a refusal tells the attacker nothing about what xh has.
    if ("status" in row.expect) {
      const ghost: Owner = { ...owner, threadId: ghostId("th_"), environmentId: ghostId("env_"), boxId: ghostId("box_"), agentId: ghostId("ag_"), streamName: "nobody:has-this" };
      const ghostAttacker: Attacker = {
        ...attacker,
        streamTokenForOwnersThread: await streamToken(attacker.house, ghost.threadId, "stream:write"),
        runTokenForOwnersThread: await runToken(attacker.house, ghost.threadId, "r1", "mallory"),
      };
      const missing = await send(row, ghost, ghostAttacker);
      const ids = (o: Owner) => [[o.threadId, "<thread>"], [o.environmentId, "<environment>"], [o.boxId, "<box>"], [o.agentId!, "<agent>"], [o.streamName, "<stream>"]] as const;
      const seen = (r: Awaited<ReturnType<typeof send>>, o: Owner) => {
        const plain = (v: string) => ids(o).reduce((t, [id, name]) => t.replaceAll(id, name), v);
        return { status: r.res.status, body: plain(r.text), headers: [...r.res.headers].filter(([k]) => k !== "date").map(([k, v]) => [k, plain(v)]) };
      };
      expect(seen(sent, owner)).toEqual(seen(missing, ghost));
    }

    // Nothing of xh's comes back...
    // Nor is a credential echoed.
    const mustNotLeak = [SECRET, STREAM_TEXT, "xh private", "xh-alice", SUBSCRIPTION_URL, owner.signingKid, credential, owner.token];
    if (!("ownStatus" in row.expect)) mustNotLeak.push(owner.threadId, owner.environmentId, owner.boxId);
    for (const secret of mustNotLeak) expect(text).not.toContain(secret);
    for (const [, value] of res.headers) for (const secret of mustNotLeak) expect(value).not.toContain(secret);
    // ...and nothing of xh's changed.
    expect(await snapshot(owner)).toBe(baseline);
  });
});
