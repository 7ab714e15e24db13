import { Router } from "itty-router";
import { headOf } from "./http/head";
import { ApiError, errorResponse, json, SECURITY_HEADERS } from "./errors";
import type { Env } from "./env";
import { assertAdminSecret, mintTokenRoute } from "./http/routes-admin";
import {
  createThreadRoute, getThreadRoute, listThreadsRoute, mintThreadTokenRoute, postEntriesRoute, readEntriesRoute, stopThreadRoute, interruptThreadRoute,
  subscribeRoute, delegateRoute, resumeRoute,
} from "./http/routes-threads";
import { downloadFolderRoute, listFoldersRoute, uploadFolderRoute } from "./http/routes-folders";
import { createEnvironmentRoute, execRoute, getEnvironmentRoute, listEnvironmentsRoute, patchEnvironmentRoute, deleteEnvironmentRoute } from "./http/routes-environments";
import { createSandboxRoute, deleteSandboxRoute, getSandboxRoute, listSandboxesRoute, previewLinkRoute, reconcileRoute } from "./http/routes-sandboxes";
import { listArtifactsRoute } from "./http/routes-artifacts";
import { createAgentRoute, deleteAgentRoute, getAgentRoute, listAgentsRoute, patchAgentRoute } from "./http/routes-agents";
import { dispatchDecisionsRoute, getThreadConfigRoute, patchThreadConfigRoute } from "./http/routes-dispatch";
import { streamRoute, withPublicLocation } from "./http/routes-streams";
import { wakeCaller, wakeRouteId } from "./http/routes-subscriptions";
import { CORS_HEADERS, CORS_PREFLIGHT_HEADERS } from "./streams/protocol";
import { assertNoRepeatedQuery, hasRepeatedQuery } from "./http/query";
import { authenticate } from "./auth/authenticate";

/**
 * Every answer carries CORS headers and the security headers (no-store, nosniff): stream answers
 * already do, from the actor; a route's own answer (a folder archive, a 204) may not.
 */
function withCors(res: Response): Response {
  if (res.status === 101) return res;
  const cors = !res.headers.has("access-control-allow-origin");
  const security = Object.keys(SECURITY_HEADERS).filter((k) => !res.headers.has(k));
  if (!cors && security.length === 0) return res;
  const out = new Response(res.body, res);
  if (cors) for (const [k, v] of Object.entries(CORS_HEADERS)) out.headers.set(k, v);
  for (const k of security) out.headers.set(k, SECURITY_HEADERS[k]);
  return out;
}

export { ThreadActor } from "./actors/thread/thread-actor";
export { HouseActor } from "./actors/house/house-actor";
export { SandboxActor } from "./actors/sandbox/sandbox-actor";

type Req = Request & { params: Record<string, string> };

type Method = "GET" | "POST" | "PATCH" | "DELETE";
type RouteHandler = (req: Req, env: Env) => Promise<Response> | Response;

/** Every route but the stream protocol's (which answers its own methods): method, path, handler. */
const ROUTES: [Method, string, RouteHandler][] = [
  ["GET", "/health", () => json({ ok: true, service: "threadbox" })],
  ["POST", "/api/admin/tokens", (req, env) => mintTokenRoute(req, env)],
  ["POST", "/api/threads", (req, env) => createThreadRoute(req, env)],
  ["GET", "/api/threads", (req, env) => listThreadsRoute(req, env)],
  ["GET", "/api/threads/:id", (req, env) => getThreadRoute(req, env, req.params.id)],
  ["POST", "/api/threads/:id/entries", (req, env) => postEntriesRoute(req, env, req.params.id)],
  ["GET", "/api/threads/:id/entries", (req, env) => readEntriesRoute(req, env, req.params.id)],
  ["GET", "/api/threads/:id/subscribe", (req, env) => subscribeRoute(req, env, req.params.id)],
  ["POST", "/api/threads/:id/tokens", (req, env) => mintThreadTokenRoute(req, env, req.params.id)],
  ["POST", "/api/threads/:id/stop", (req, env) => stopThreadRoute(req, env, req.params.id)],
  ["POST", "/api/threads/:id/interrupt", (req, env) => interruptThreadRoute(req, env, req.params.id)],
  ["POST", "/api/threads/:id/delegate", (req, env) => delegateRoute(req, env, req.params.id)],
  ["POST", "/api/threads/:id/resume", (req, env) => resumeRoute(req, env, req.params.id)],
  ["GET", "/api/threads/:id/config", (req, env) => getThreadConfigRoute(req, env, req.params.id)],
  ["PATCH", "/api/threads/:id/config", (req, env) => patchThreadConfigRoute(req, env, req.params.id)],
  ["GET", "/api/threads/:id/dispatch", (req, env) => dispatchDecisionsRoute(req, env, req.params.id)],
  ["GET", "/api/threads/:id/artifacts", (req, env) => listArtifactsRoute(req, env, req.params.id)],
  ["POST", "/api/agents", (req, env) => createAgentRoute(req, env)],
  ["GET", "/api/agents", (req, env) => listAgentsRoute(req, env)],
  ["GET", "/api/agents/:id", (req, env) => getAgentRoute(req, env, req.params.id)],
  ["PATCH", "/api/agents/:id", (req, env) => patchAgentRoute(req, env, req.params.id)],
  ["DELETE", "/api/agents/:id", (req, env) => deleteAgentRoute(req, env, req.params.id)],
  ["POST", "/api/environments", (req, env) => createEnvironmentRoute(req, env)],
  ["GET", "/api/environments", (req, env) => listEnvironmentsRoute(req, env)],
  ["GET", "/api/environments/:id", (req, env) => getEnvironmentRoute(req, env, req.params.id)],
  ["PATCH", "/api/environments/:id", (req, env) => patchEnvironmentRoute(req, env, req.params.id)],
  ["DELETE", "/api/environments/:id", (req, env) => deleteEnvironmentRoute(req, env, req.params.id)],
  ["POST", "/api/environments/:id/exec", (req, env) => execRoute(req, env, req.params.id)],
  ["POST", "/api/environments/:id/folders", (req, env) => uploadFolderRoute(req, env, req.params.id)],
  ["GET", "/api/environments/:id/folders", (req, env) => listFoldersRoute(req, env, req.params.id)],
  ["GET", "/api/environments/:id/folders/:name", (req, env) => downloadFolderRoute(req, env, req.params.id, req.params.name)],
  ["GET", "/api/sandboxes", (req, env) => listSandboxesRoute(req, env)],
  ["POST", "/api/sandboxes", (req, env) => createSandboxRoute(req, env)],
  ["POST", "/api/sandboxes/reconcile", (req, env) => reconcileRoute(req, env)],
  ["GET", "/api/sandboxes/:id", (req, env) => getSandboxRoute(req, env, req.params.id)],
  ["GET", "/api/sandboxes/:id/ports/:port/preview", (req, env) => previewLinkRoute(req, env, req.params.id, req.params.port)],
  ["DELETE", "/api/sandboxes/:id", (req, env) => deleteSandboxRoute(req, env, req.params.id)],
];

/**
 * The path as the router matches it, which takes any number of trailing slashes: the checks made
 * beside it (which token a route takes, which methods a path has) must read it the same way.
 */
const routePath = (pathname: string) => pathname.replace(/(.)\/+$/, "$1");
const ADMIN_PATH = "/api/admin/tokens";

/** A path pattern's matcher: `:name` is one non-empty path segment. */
const patternOf = (path: string) => new RegExp(`^${path.replace(/:[a-z]+/g, "[^/]+")}$`);
const ROUTE_PATTERNS = ROUTES.map(([method, path]) => ({ method, path, pattern: patternOf(path) }));
/**
 * Paths a route names word for word (`/api/sandboxes/reconcile`): such a path is that route's
 * only, never an `:id` of a route beside it (a GET of it is a 405, not a 404 for a box "reconcile").
 */
const LITERAL_PATHS = new Set(ROUTES.filter(([, path]) => !path.includes(":")).map(([, path]) => path));

/** The methods a path is served with (empty for a path no route has). */
function allowedMethods(pathname: string): string[] {
  const literal = LITERAL_PATHS.has(pathname);
  const methods: string[] = ROUTE_PATTERNS.filter((r) => (literal ? r.path === pathname : r.pattern.test(pathname))).map((r) => r.method);
  return methods.includes("GET") ? [...methods, "HEAD"] : methods;
}

const router = Router<Req, [Env, ExecutionContext]>();
// Bearer tokens, never cookies: any origin may call the API, preflights included.
router.options("*", () => new Response(null, { status: 204, headers: CORS_PREFLIGHT_HEADERS }));
for (const [method, path, handler] of ROUTES) {
  const withParams = path.includes(":");
  router.all(path, async (req: Req, env: Env) => {
    if (withParams && LITERAL_PATHS.has(routePath(new URL(req.url).pathname))) return undefined;
    if (req.method === method) return handler(req, env);
    if (method === "GET" && req.method === "HEAD") {
      // An upgrade would open a socket (and send it the whole log) only to drop it.
      if (req.headers.has("upgrade")) throw new ApiError("method_not_allowed", "a WebSocket upgrade is a GET", undefined, { allow: "GET, OPTIONS" });
      return headOf(await Promise.resolve().then(() => handler(req, env)).catch(errorResponse));
    }
    return undefined;
  });
}
router
  .all("/api/stream/*", async (req, env) => withPublicLocation(await streamRoute(req, env, "/api/stream/").catch(errorResponse), req))
  .all("/v1/stream/*", async (req, env) => withPublicLocation(await streamRoute(req, env, "/v1/stream/").catch(errorResponse), req))
  .all("*", async (req, env) => {
    const raw = new URL(req.url).pathname;
    const pathname = routePath(raw);
    // A token problem is reported as such even on a wrong path or method, so a client never
    // chases a 404 or 405 that is really a 401. Minting tokens takes the admin secret instead.
    if (/^\/(api|v1)\//.test(raw) && pathname !== ADMIN_PATH) await authenticate(req, env.THREADBOX_TOKEN_SECRET);
    const allowed = allowedMethods(pathname);
    if (allowed.length > 0) {
      throw new ApiError("method_not_allowed", `${req.method} is not allowed here: use ${allowed.join(" or ")}`, undefined, { allow: [...allowed, "OPTIONS"].join(", ") });
    }
    throw new ApiError("not_found", "no such route");
  });

const STREAM_PREFIXES = ["/v1/stream/", "/api/stream/"];
const SUBSCRIBE_PATH = patternOf("/api/threads/:id/subscribe");

/**
 * The credential check of the route a request is for, on its own: what a request that is refused
 * before its route runs (a repeated query parameter) is told first, so that without a valid
 * token it learns nothing of how the route reads its query. The protocol's 401 for a wake's
 * token comes back as its answer; every other problem is thrown.
 */
async function credentialsProblem(request: Request, env: Env, url: URL): Promise<Response | undefined> {
  const { pathname } = url;
  if (!/^\/(api|v1)\//.test(pathname)) return undefined;
  if (routePath(pathname) === ADMIN_PATH) {
    assertAdminSecret(request, env);
    return undefined;
  }
  const prefix = STREAM_PREFIXES.find((p) => pathname.startsWith(p));
  if (prefix) {
    let id: string | undefined;
    try {
      id = wakeRouteId(decodeURIComponent(pathname.slice(prefix.length)));
    } catch {
      // Not percent-encoding: the stream route takes a house or stream token first, as here.
    }
    if (id !== undefined) {
      const caller = await wakeCaller(request, env, id);
      return caller instanceof Response ? caller : undefined;
    }
  }
  await authenticate(request, env.THREADBOX_TOKEN_SECRET, SUBSCRIBE_PATH.test(routePath(pathname)));
  return undefined;
}

export default {
  async fetch(request: Request, env: Env, ctx: ExecutionContext): Promise<Response> {
    let response: Response;
    try {
      const url = new URL(request.url);
      // Refused on every route, but after that route's token check. A preflight carries no token
      // and is answered the same on every path.
      if (request.method !== "OPTIONS" && hasRepeatedQuery(url)) {
        const refused = await credentialsProblem(request, env, url);
        if (refused) return withCors(refused);
        assertNoRepeatedQuery(url);
      }
      // Stream appends and reads are most of the traffic: they skip the route list.
      const prefix = request.method === "OPTIONS" ? undefined : STREAM_PREFIXES.find((p) => url.pathname.length > p.length && url.pathname.startsWith(p));
      response = prefix
        ? withPublicLocation(await streamRoute(request, env, prefix, url).catch(errorResponse), request)
        : await router.fetch(request as Req, env, ctx);
    } catch (err) {
      response = errorResponse(err);
    }
    return withCors(response);
  },
} satisfies ExportedHandler<Env>;
