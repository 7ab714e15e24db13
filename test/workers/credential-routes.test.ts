import { beforeAll, describe, expect, it } from "vitest";
import { SELF, env } from "cloudflare:test";
import { BASE, call, createThread, houseToken, runToken, streamToken, WEBSOCKET_HANDSHAKE } from "./helpers";
import { SignJWT } from "jose";
import { mintHouseToken, mintStreamToken } from "../../src/auth/tokens";
import { tarArchive } from "../support/tar";

/**
 * Every route of the README's API table, called by every kind of credential of the house that
 * owns what it names: each role of a house token, a thread's stream tokens (both scopes) and a
 * run's token, no token and an expired one. Each answers what the README lets it do and a 403
 * (401 without a valid token) for anything more; no answer carries a token or a secret value.
 * Another house's view of the same routes is test/workers/cross-house-routes.test.ts.
 *
 * To cover a new route, add a row to ROWS.
 */

const HOUSE = "creds";
const SECRET = "sk-creds-never-leaks";

const CREDENTIALS = [
  "owner", "member", "admin", "reader", "viewer", "bot", "streamWrite", "streamRead", "run", "none", "expired", "expiredStream",
  // Not a token of the house, whatever it claims: each is a 401 with code unauthorized on every route.
  "forged", "algNone", "noExp", "wrongIssuer", "unknownKind", "malformed", "emptyBearer", "basicScheme",
  // The owner's own token where only the subscribe route looks for one: anywhere else it is no token.
  "ownerInQuery",
] as const;
type Credential = (typeof CREDENTIALS)[number];

/**
 * Who may call a route (README "API reference", "Security"):
 * - houseRead: any house token; a thread's stream token is a 403 (it reaches its one thread only)
 * - houseWrite: a house token that may write (not reader/viewer)
 * - configure: houseWrite but not bot (environments, folder uploads)
 * - threadRead: any house token, and a stream or run token of that thread
 * - threadWrite: houseWrite, and a stream:write or run token of that thread
 * - streamRenew: a stream or run token of that thread (the token renewal)
 * - runOnly: the token of that run (its artifact streams)
 * - nobody: no credential (a thread's parent or child renewing the thread's stream token)
 */
type Who = "houseRead" | "houseWrite" | "configure" | "threadRead" | "threadWrite" | "streamRenew" | "runOnly" | "nobody";

const HOUSE_READERS: Credential[] = ["owner", "member", "admin", "reader", "viewer", "bot"];
const HOUSE_WRITERS: Credential[] = ["owner", "member", "admin", "bot"];
const ALLOWED: Record<Who, Credential[]> = {
  houseRead: HOUSE_READERS,
  houseWrite: HOUSE_WRITERS,
  configure: ["owner", "member", "admin"],
  threadRead: [...HOUSE_READERS, "streamWrite", "streamRead", "run"],
  threadWrite: [...HOUSE_WRITERS, "streamWrite", "run"],
  streamRenew: ["streamWrite", "streamRead", "run"],
  runOnly: ["run"],
  nobody: [],
};

/** `thread` is a child of `parent` and the parent of `child`: a stream token of `thread` reaches neither. */
/** Credentials that are no valid token: a 401 wherever they go. */
const UNAUTHENTICATED: Credential[] = ["none", "expired", "expiredStream", "forged", "algNone", "noExp", "wrongIssuer", "unknownKind", "malformed", "emptyBearer", "basicScheme"];

type House = { thread: string; other: string; parent: string; child: string; environment: string; box: string; agent: string; run: string };
type Row = {
  name: string;
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "HEAD";
  path: (h: House) => string;
  /** "tar" for an archive, a string for text/plain, anything else as JSON. */
  body?: (h: House) => unknown;
  who: Who;
  headers?: Record<string, string>;
};

const json = { "content-type": "application/json" };
const chat = () => ({ payload: { type: "chat", text: "hello" } });
let handles = 0;

const ROWS: Row[] = [
  // threads
  { name: "POST /api/threads", method: "POST", path: () => "/api/threads", body: () => ({ title: "new" }), who: "houseWrite" },
  { name: "GET /api/threads", method: "GET", path: () => "/api/threads", who: "houseRead" },
  { name: "GET /api/threads?parent=", method: "GET", path: (h) => `/api/threads?parent=${h.thread}`, who: "houseRead" },
  { name: "GET /api/threads/:id", method: "GET", path: (h) => `/api/threads/${h.thread}`, who: "threadRead" },
  { name: "HEAD /api/threads/:id", method: "HEAD", path: (h) => `/api/threads/${h.thread}`, who: "threadRead" },
  { name: "GET /api/threads/:id (another thread)", method: "GET", path: (h) => `/api/threads/${h.other}`, who: "houseRead" },
  { name: "POST /api/threads/:id/entries", method: "POST", path: (h) => `/api/threads/${h.thread}/entries`, body: chat, who: "threadWrite" },
  { name: "POST /api/threads/:id/entries (another thread)", method: "POST", path: (h) => `/api/threads/${h.other}/entries`, body: chat, who: "houseWrite" },
  { name: "GET /api/threads/:id/entries", method: "GET", path: (h) => `/api/threads/${h.thread}/entries?offset=-1`, who: "threadRead" },
  { name: "GET /api/threads/:id/entries (another thread)", method: "GET", path: (h) => `/api/threads/${h.other}/entries?offset=-1`, who: "houseRead" },
  { name: "GET /api/threads/:id/subscribe", method: "GET", path: (h) => `/api/threads/${h.thread}/subscribe?offset=-1`, headers: { ...WEBSOCKET_HANDSHAKE }, who: "threadRead" },
  { name: "GET /api/threads/:id/subscribe (another thread)", method: "GET", path: (h) => `/api/threads/${h.other}/subscribe?offset=-1`, headers: { ...WEBSOCKET_HANDSHAKE }, who: "houseRead" },
  { name: "POST /api/threads/:id/tokens stream:read", method: "POST", path: (h) => `/api/threads/${h.thread}/tokens`, body: () => ({ scope: "stream:read" }), who: "houseRead" },
  { name: "POST /api/threads/:id/tokens stream:write", method: "POST", path: (h) => `/api/threads/${h.thread}/tokens`, body: () => ({ scope: "stream:write" }), who: "houseWrite" },
  { name: "POST /api/threads/:id/delegate", method: "POST", path: (h) => `/api/threads/${h.thread}/delegate`, body: () => ({ task: "look", model: "local/m" }), who: "houseWrite" },
  { name: "POST /api/threads/:id/resume", method: "POST", path: (h) => `/api/threads/${h.other}/resume`, body: () => ({ message: "again" }), who: "houseWrite" },
  { name: "POST /api/threads/:id/stop", method: "POST", path: (h) => `/api/threads/${h.thread}/stop`, who: "houseWrite" },
  { name: "POST /api/threads/:id/interrupt", method: "POST", path: (h) => `/api/threads/${h.thread}/interrupt`, who: "houseWrite" },
  { name: "GET /api/threads/:id/config", method: "GET", path: (h) => `/api/threads/${h.thread}/config`, who: "threadRead" },
  { name: "GET /api/threads/:id/config (another thread)", method: "GET", path: (h) => `/api/threads/${h.other}/config`, who: "houseRead" },
  { name: "PATCH /api/threads/:id/config", method: "PATCH", path: (h) => `/api/threads/${h.thread}/config`, body: () => ({ dispatch: { cooldownMs: 5 } }), who: "houseWrite" },
  { name: "GET /api/threads/:id/dispatch", method: "GET", path: (h) => `/api/threads/${h.thread}/dispatch`, who: "threadRead" },
  { name: "GET /api/threads/:id/dispatch (another thread)", method: "GET", path: (h) => `/api/threads/${h.other}/dispatch`, who: "houseRead" },
  { name: "GET /api/threads/:id/artifacts", method: "GET", path: (h) => `/api/threads/${h.thread}/artifacts`, who: "threadRead" },
  { name: "GET /api/threads/:id/artifacts (another thread)", method: "GET", path: (h) => `/api/threads/${h.other}/artifacts`, who: "houseRead" },
  // A thread's stream token reaches neither its parent nor its child.
  ...(["parent", "child"] as const).flatMap((rel): Row[] => [
    { name: `GET /api/threads/:id (its ${rel})`, method: "GET", path: (h) => `/api/threads/${h[rel]}`, who: "houseRead" },
    { name: `POST /api/threads/:id/entries (its ${rel})`, method: "POST", path: (h) => `/api/threads/${h[rel]}/entries`, body: chat, who: "houseWrite" },
    { name: `GET /api/threads/:id/entries (its ${rel})`, method: "GET", path: (h) => `/api/threads/${h[rel]}/entries?offset=-1`, who: "houseRead" },
    { name: `GET /api/threads/:id/subscribe (its ${rel})`, method: "GET", path: (h) => `/api/threads/${h[rel]}/subscribe?offset=-1`, headers: { ...WEBSOCKET_HANDSHAKE }, who: "houseRead" },
    { name: `GET /api/threads/:id/artifacts (its ${rel})`, method: "GET", path: (h) => `/api/threads/${h[rel]}/artifacts`, who: "houseRead" },
    { name: `GET /api/stream/thread-<id> long-poll (its ${rel})`, method: "GET", path: (h) => `/api/stream/thread-${h[rel]}?offset=-1&live=long-poll`, who: "houseRead" },
    { name: `POST /v1/stream/thread-<id> (its ${rel})`, method: "POST", path: (h) => `/v1/stream/thread-${h[rel]}`, body: chat, who: "houseWrite" },
    { name: `POST /api/stream/thread-<id>/token (its ${rel})`, method: "POST", path: (h) => `/api/stream/thread-${h[rel]}/token`, who: "nobody" },
    { name: `PUT /api/stream/thread-<id>/artifacts/<run>/diff (its ${rel})`, method: "PUT", path: (h) => `/api/stream/thread-${h[rel]}/artifacts/${h.run}/diff`, body: () => "", who: "nobody" },
  ]),

  // agents
  { name: "POST /api/agents", method: "POST", path: () => "/api/agents", body: () => ({ name: "helper", handle: `helper-${handles++}`, model: "local/m" }), who: "houseWrite" },
  { name: "GET /api/agents", method: "GET", path: () => "/api/agents", who: "houseRead" },
  { name: "GET /api/agents/:id", method: "GET", path: (h) => `/api/agents/${h.agent}`, who: "houseRead" },
  { name: "PATCH /api/agents/:id", method: "PATCH", path: (h) => `/api/agents/${h.agent}`, body: () => ({ systemPrompt: "be brief" }), who: "houseWrite" },

  // environments and their folders
  { name: "POST /api/environments", method: "POST", path: () => "/api/environments", body: () => ({ name: "more", provider: "test" }), who: "configure" },
  { name: "GET /api/environments", method: "GET", path: () => "/api/environments", who: "houseRead" },
  { name: "GET /api/environments/:id", method: "GET", path: (h) => `/api/environments/${h.environment}`, who: "houseRead" },
  { name: "PATCH /api/environments/:id", method: "PATCH", path: (h) => `/api/environments/${h.environment}`, body: () => ({ name: "renamed" }), who: "configure" },
  { name: "POST /api/environments/:id/exec", method: "POST", path: (h) => `/api/environments/${h.environment}/exec`, body: () => ({ command: "echo hi" }), who: "houseWrite" },
  { name: "POST /api/environments/:id/exec (threadId)", method: "POST", path: (h) => `/api/environments/${h.environment}/exec`, body: (h) => ({ command: "echo hi", threadId: h.thread }), who: "houseWrite" },
  { name: "POST /api/environments/:id/folders", method: "POST", path: (h) => `/api/environments/${h.environment}/folders?name=docs`, body: () => "tar", who: "configure" },
  { name: "GET /api/environments/:id/folders", method: "GET", path: (h) => `/api/environments/${h.environment}/folders`, who: "houseRead" },
  { name: "GET /api/environments/:id/folders/:name", method: "GET", path: (h) => `/api/environments/${h.environment}/folders/docs`, who: "houseRead" },

  // sandboxes
  { name: "GET /api/sandboxes", method: "GET", path: () => "/api/sandboxes", who: "houseRead" },
  { name: "POST /api/sandboxes", method: "POST", path: () => "/api/sandboxes", body: () => ({ provider: "test", ephemeral: true }), who: "houseWrite" },
  { name: "GET /api/sandboxes/:id", method: "GET", path: (h) => `/api/sandboxes/${h.box}`, who: "houseRead" },
  { name: "GET /api/sandboxes/:id/ports/:port/preview", method: "GET", path: (h) => `/api/sandboxes/${h.box}/ports/3000/preview`, who: "houseWrite" },
  { name: "POST /api/sandboxes/reconcile", method: "POST", path: () => "/api/sandboxes/reconcile", who: "houseWrite" },

  // a thread's log over the Durable Streams protocol, and its token renewal
  { name: "GET /api/stream/thread-<id>", method: "GET", path: (h) => `/api/stream/thread-${h.thread}?offset=-1`, who: "threadRead" },
  { name: "GET /v1/stream/thread-<id> long-poll", method: "GET", path: (h) => `/v1/stream/thread-${h.thread}?offset=-1&live=long-poll`, who: "threadRead" },
  { name: "HEAD /v1/stream/thread-<id>", method: "HEAD", path: (h) => `/v1/stream/thread-${h.thread}`, who: "threadRead" },
  { name: "POST /api/stream/thread-<id>", method: "POST", path: (h) => `/api/stream/thread-${h.thread}`, body: chat, who: "threadWrite" },
  { name: "GET /api/stream/thread-<id> (another thread)", method: "GET", path: (h) => `/api/stream/thread-${h.other}?offset=-1`, who: "houseRead" },
  { name: "POST /v1/stream/thread-<id> (another thread)", method: "POST", path: (h) => `/v1/stream/thread-${h.other}`, body: chat, who: "houseWrite" },
  { name: "POST /api/stream/thread-<id>/token", method: "POST", path: (h) => `/api/stream/thread-${h.thread}/token`, who: "streamRenew" },

  // plain streams, a run's artifact streams, folder archives
  { name: "PUT /api/stream/<name>", method: "PUT", path: () => "/api/stream/notes", body: () => "", who: "houseWrite" },
  { name: "POST /api/stream/<name>", method: "POST", path: () => "/api/stream/notes", body: () => "more", who: "houseWrite" },
  { name: "GET /v1/stream/<name>", method: "GET", path: () => "/v1/stream/notes?offset=-1", who: "houseRead" },
  { name: "PUT /api/stream/<fork> (Stream-Forked-From)", method: "PUT", path: () => "/api/stream/notes-fork", headers: { "content-type": "text/plain", "stream-forked-from": "/v1/stream/notes" }, who: "houseWrite" },
  { name: "PUT /api/stream/thread-<id>/artifacts/<run>/diff", method: "PUT", path: (h) => `/api/stream/thread-${h.thread}/artifacts/${h.run}/diff`, body: () => "", who: "runOnly" },
  { name: "POST /api/stream/thread-<id>/artifacts/<run>/diff", method: "POST", path: (h) => `/api/stream/thread-${h.thread}/artifacts/${h.run}/diff`, body: () => "diff --git", who: "runOnly" },
  { name: "GET /api/stream/thread-<id>/artifacts/<run>/diff", method: "GET", path: (h) => `/api/stream/thread-${h.thread}/artifacts/${h.run}/diff?offset=-1`, who: "threadRead" },
  { name: "GET /api/stream/thread-<other>/artifacts/<run>/diff", method: "GET", path: (h) => `/api/stream/thread-${h.other}/artifacts/${h.run}/diff?offset=-1`, who: "houseRead" },

  // webhook subscriptions
  { name: "GET /v1/stream/__ds/subscriptions", method: "GET", path: () => "/v1/stream/__ds/subscriptions", who: "houseRead" },
  { name: "GET /v1/stream/__ds/jwks.json", method: "GET", path: () => "/v1/stream/__ds/jwks.json", who: "houseRead" },
  { name: "PUT /v1/stream/__ds/subscriptions/:id", method: "PUT", path: () => "/v1/stream/__ds/subscriptions/hook", body: () => ({ type: "pull-wake", streams: ["notes"], wake_stream: "wakes" }), who: "houseWrite" },
  { name: "GET /v1/stream/__ds/subscriptions/:id", method: "GET", path: () => "/v1/stream/__ds/subscriptions/hook", who: "houseRead" },
  { name: "POST /v1/stream/__ds/subscriptions/:id/streams", method: "POST", path: () => "/v1/stream/__ds/subscriptions/hook/streams", body: () => ({ streams: ["notes-fork"] }), who: "houseWrite" },
  { name: "DELETE /v1/stream/__ds/subscriptions/:id/streams/:name", method: "DELETE", path: () => "/v1/stream/__ds/subscriptions/hook/streams/notes-fork", who: "houseWrite" },
  { name: "POST /v1/stream/__ds/subscriptions/:id/claim", method: "POST", path: () => "/v1/stream/__ds/subscriptions/hook/claim", body: () => ({ worker: "w1" }), who: "houseWrite" },

  // Last: what the rows above use goes away.
  { name: "DELETE /v1/stream/__ds/subscriptions/:id", method: "DELETE", path: () => "/v1/stream/__ds/subscriptions/hook", who: "houseWrite" },
  { name: "DELETE /api/stream/<name>", method: "DELETE", path: () => "/api/stream/notes-fork", who: "houseWrite" },
  { name: "DELETE /api/agents/:id", method: "DELETE", path: (h) => `/api/agents/${h.agent}`, who: "houseWrite" },
  { name: "DELETE /api/sandboxes/:id", method: "DELETE", path: (h) => `/api/sandboxes/${h.box}?force=true`, who: "houseWrite" },
  { name: "DELETE /api/environments/:id", method: "DELETE", path: (h) => `/api/environments/${h.environment}`, who: "configure" },
];

describe("every credential of a house against its own routes", () => {
  let house: House;
  let tokens: Record<Credential, string | null>;

  beforeAll(async () => {
    const owner = await houseToken(HOUSE, "olivia", "owner");
    const parent = await createThread(owner, { title: "the thread's parent" });
    const thread = await createThread(owner, { title: "the thread", parent: { kind: "thread", id: parent.id } });
    const child = await createThread(owner, { title: "the thread's child", parent: { kind: "thread", id: thread.id } });
    const other = await createThread(owner, { title: "another thread" });
    const e = await call("/api/environments", { method: "POST", token: owner, json: { name: "env", provider: "test", sharedBox: true, secrets: { API_KEY: SECRET } } });
    expect(e.status).toBe(201);
    const environment = ((await e.json()) as { id: string }).id;
    const box = await call("/api/sandboxes", { method: "POST", token: owner, json: { provider: "test", ephemeral: false } });
    expect(box.status).toBe(201);
    const agent = await call("/api/agents", { method: "POST", token: owner, json: { name: "a", handle: "a", model: "local/m", environmentId: environment } });
    expect(agent.status).toBe(201);
    expect((await call("/api/stream/wakes", { method: "PUT", token: owner, headers: { "content-type": "application/json" } })).status).toBe(201);
    house = {
      thread: thread.id, other: other.id, parent: parent.id, child: child.id, environment, run: "run-1",
      box: ((await box.json()) as { id: string }).id, agent: ((await agent.json()) as { id: string }).id,
    };
    const secret = (env as unknown as { THREADBOX_TOKEN_SECRET: string }).THREADBOX_TOKEN_SECRET;
    const anHourAgo = Date.now() - 3_600_000;
    const now = Math.floor(Date.now() / 1000);
    const b64url = (o: unknown) => btoa(JSON.stringify(o)).replace(/=+$/, "").replace(/\+/g, "-").replace(/\//g, "_");
    // Signed with the worker's own secret, but not a token it mints.
    const signed = (claims: Record<string, unknown>, set: (j: SignJWT) => SignJWT) =>
      set(new SignJWT(claims).setProtectedHeader({ alg: "HS256", typ: "JWT" }).setSubject("olivia")).sign(new TextEncoder().encode(secret));
    tokens = {
      owner,
      member: await houseToken(HOUSE, "mia", "member"),
      admin: await houseToken(HOUSE, "ada", "admin"),
      reader: await houseToken(HOUSE, "rita", "reader"),
      viewer: await houseToken(HOUSE, "vic", "viewer"),
      bot: await houseToken(HOUSE, "bob", "bot"),
      streamWrite: await streamToken(HOUSE, thread.id, "stream:write"),
      streamRead: await streamToken(HOUSE, thread.id, "stream:read"),
      run: await runToken(HOUSE, thread.id, house.run, "olivia"),
      none: null,
      expired: (await mintHouseToken(secret, HOUSE, "olivia", "owner", 60, anHourAgo)).token,
      expiredStream: (await mintStreamToken(secret, HOUSE, thread.id, "stream:write", "olivia", 60, anHourAgo)).token,
      forged: (await mintHouseToken("not-the-worker-secret-0123456789", HOUSE, "olivia", "owner")).token,
      algNone: `${b64url({ alg: "none", typ: "JWT" })}.${b64url({ kind: "house", house: HOUSE, sub: "olivia", role: "owner", iss: "threadbox", exp: now + 3600 })}.`,
      noExp: await signed({ kind: "house", house: HOUSE, role: "owner" }, (j) => j.setIssuer("threadbox")),
      wrongIssuer: await signed({ kind: "house", house: HOUSE, role: "owner" }, (j) => j.setIssuer("someone-else").setExpirationTime(now + 3600)),
      unknownKind: await signed({ kind: "admin", house: HOUSE, role: "owner" }, (j) => j.setIssuer("threadbox").setExpirationTime(now + 3600)),
      malformed: "not-a-token",
      emptyBearer: "",
      basicScheme: owner,
      ownerInQuery: owner,
    };
  });

  it.for(ROWS)("$name", async (row) => {
    // A run's token writes while its run is the thread's current one (README "Security"): each
    // row starts with that run on, which an earlier row (a stop) may have ended.
    const thread = (await (await call(`/api/threads/${house.thread}`, { token: tokens.owner! })).json()) as { status: string; runId: string | null };
    if (thread.status !== "running" || thread.runId !== house.run) {
      const claim = await call(`/api/threads/${house.thread}/entries`, { method: "POST", token: tokens.owner!, json: { payload: { type: "signal.thread.status_changed", status: "running", runId: house.run } } });
      expect(claim.status).toBe(201);
    }
    const allowed = ALLOWED[row.who];
    // The refused first: a delete done by an allowed caller would turn a later refusal into a 404.
    const order = [...CREDENTIALS].sort((a, b) => Number(allowed.includes(a)) - Number(allowed.includes(b)));
    const seen: Record<string, number> = {};
    const want: Record<string, number | "ok"> = {};
    for (const who of order) {
      const headers = new Headers(row.headers);
      const token = tokens[who];
      let path = row.path(house);
      if (who === "ownerInQuery") path += `${path.includes("?") ? "&" : "?"}token=${token}`;
      else if (who === "basicScheme") headers.set("authorization", `Basic ${token}`);
      else if (who === "emptyBearer") headers.set("authorization", "Bearer ");
      else if (token) headers.set("authorization", `Bearer ${token}`);
      const raw = row.body?.(house);
      let body: BodyInit | undefined;
      if (raw === "tar") {
        body = tarArchive({ "notes.txt": "notes" });
        headers.set("content-type", "application/x-tar");
      } else if (typeof raw === "string") {
        body = raw;
        if (!headers.has("content-type")) headers.set("content-type", "text/plain");
      } else if (raw !== undefined) {
        body = JSON.stringify(raw);
        for (const [k, v] of Object.entries(json)) headers.set(k, v);
      }
      const res = await SELF.fetch(`${BASE}${path}`, { method: row.method, headers, body });
      if (res.webSocket) {
        res.webSocket.accept();
        res.webSocket.close();
      }
      const text = row.method === "HEAD" ? "" : res.headers.get("content-type")?.startsWith("application/x-tar") ? "" : await res.text();
      seen[who] = res.status;
      const subscribe = /\/subscribe\?/.test(row.path(house));
      want[who] = who === "ownerInQuery" ? (!subscribe ? 401 : allowed.includes("owner") ? "ok" : 403)
        : UNAUTHENTICATED.includes(who) ? 401 : allowed.includes(who) ? "ok" : 403;
      if (want[who] !== "ok" && row.method !== "HEAD") {
        expect({ who, code: JSON.parse(text).error.code }).toEqual({ who, code: want[who] === 401 ? "unauthorized" : "forbidden" });
      }
      // No answer names a credential (the caller's own or anyone's) or a secret value.
      const mustNotLeak = [SECRET, ...Object.values(tokens).filter((t): t is string => !!t)];
      for (const s of mustNotLeak) {
        expect(text, `${who}: body`).not.toContain(s);
        for (const [name, value] of res.headers) expect(value, `${who}: ${name}`).not.toContain(s);
      }
    }
    const got = Object.fromEntries(Object.entries(seen).map(([who, s]) => [who, want[who] === "ok" && s !== 401 && s !== 403 && s < 500 ? "ok" : s]));
    expect(got).toEqual(want);
  });
});
