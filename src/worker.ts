import { Router } from "itty-router";
import { ApiError, errorResponse, json } from "./errors";
import type { Env } from "./env";
import { mintTokenRoute } from "./http/routes-admin";
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
import { CORS_HEADERS, CORS_PREFLIGHT_HEADERS } from "./streams/protocol";
import { assertNoRepeatedQuery } from "./http/query";
import { authenticate } from "./auth/authenticate";

/** Every answer carries CORS headers (stream answers already do, from the actor). */
function withCors(res: Response): Response {
  if (res.status === 101 || res.headers.has("access-control-allow-origin")) return res;
  const out = new Response(res.body, res);
  for (const [k, v] of Object.entries(CORS_HEADERS)) out.headers.set(k, v);
  return out;
}

export { ThreadActor } from "./actors/thread/thread-actor";
export { HouseActor } from "./actors/house/house-actor";
export { SandboxActor } from "./actors/sandbox/sandbox-actor";

type Req = Request & { params: Record<string, string> };

const router = Router<Req, [Env, ExecutionContext]>();

router
  // Bearer tokens, never cookies: any origin may call the API, preflights included.
  .options("*", () => new Response(null, { status: 204, headers: CORS_PREFLIGHT_HEADERS }))
  .get("/health", () => json({ ok: true, service: "threadbox" }))
  .post("/api/admin/tokens", (req, env) => mintTokenRoute(req, env))
  .post("/api/threads", (req, env) => createThreadRoute(req, env))
  .get("/api/threads", (req, env) => listThreadsRoute(req, env))
  .get("/api/threads/:id", (req, env) => getThreadRoute(req, env, req.params.id))
  .post("/api/threads/:id/entries", (req, env) => postEntriesRoute(req, env, req.params.id))
  .get("/api/threads/:id/entries", (req, env) => readEntriesRoute(req, env, req.params.id))
  .get("/api/threads/:id/subscribe", (req, env) => subscribeRoute(req, env, req.params.id))
  .post("/api/threads/:id/tokens", (req, env) => mintThreadTokenRoute(req, env, req.params.id))
  .post("/api/threads/:id/stop", (req, env) => stopThreadRoute(req, env, req.params.id))
  .post("/api/threads/:id/interrupt", (req, env) => interruptThreadRoute(req, env, req.params.id))
  .post("/api/threads/:id/delegate", (req, env) => delegateRoute(req, env, req.params.id))
  .post("/api/threads/:id/resume", (req, env) => resumeRoute(req, env, req.params.id))
  .get("/api/threads/:id/config", (req, env) => getThreadConfigRoute(req, env, req.params.id))
  .patch("/api/threads/:id/config", (req, env) => patchThreadConfigRoute(req, env, req.params.id))
  .get("/api/threads/:id/dispatch", (req, env) => dispatchDecisionsRoute(req, env, req.params.id))
  .get("/api/threads/:id/artifacts", (req, env) => listArtifactsRoute(req, env, req.params.id))
  .post("/api/agents", (req, env) => createAgentRoute(req, env))
  .get("/api/agents", (req, env) => listAgentsRoute(req, env))
  .get("/api/agents/:id", (req, env) => getAgentRoute(req, env, req.params.id))
  .patch("/api/agents/:id", (req, env) => patchAgentRoute(req, env, req.params.id))
  .delete("/api/agents/:id", (req, env) => deleteAgentRoute(req, env, req.params.id))
  .post("/api/environments", (req, env) => createEnvironmentRoute(req, env))
  .get("/api/environments", (req, env) => listEnvironmentsRoute(req, env))
  .get("/api/environments/:id", (req, env) => getEnvironmentRoute(req, env, req.params.id))
  .patch("/api/environments/:id", (req, env) => patchEnvironmentRoute(req, env, req.params.id))
  .delete("/api/environments/:id", (req, env) => deleteEnvironmentRoute(req, env, req.params.id))
  .post("/api/environments/:id/exec", (req, env) => execRoute(req, env, req.params.id))
  .post("/api/environments/:id/folders", (req, env) => uploadFolderRoute(req, env, req.params.id))
  .get("/api/environments/:id/folders", (req, env) => listFoldersRoute(req, env, req.params.id))
  .get("/api/environments/:id/folders/:name", (req, env) => downloadFolderRoute(req, env, req.params.id, req.params.name))
  .get("/api/sandboxes", (req, env) => listSandboxesRoute(req, env))
  .post("/api/sandboxes", (req, env) => createSandboxRoute(req, env))
  .post("/api/sandboxes/reconcile", (req, env) => reconcileRoute(req, env))
  .get("/api/sandboxes/:id", (req, env) => getSandboxRoute(req, env, req.params.id))
  .get("/api/sandboxes/:id/ports/:port/preview", (req, env) => previewLinkRoute(req, env, req.params.id, req.params.port))
  .delete("/api/sandboxes/:id", (req, env) => deleteSandboxRoute(req, env, req.params.id))
  .all("/api/stream/*", async (req, env) => withPublicLocation(await streamRoute(req, env, "/api/stream/").catch(errorResponse), req))
  .all("/v1/stream/*", async (req, env) => withPublicLocation(await streamRoute(req, env, "/v1/stream/").catch(errorResponse), req))
  .all("*", async (req, env) => {
    // A token problem is reported as such even on a wrong path, so a client never chases a 404 that is really a 401.
    if (/^\/(api|v1)\//.test(new URL(req.url).pathname)) await authenticate(req, env.THREADBOX_TOKEN_SECRET);
    throw new ApiError("not_found", "no such route");
  });

const STREAM_PREFIXES = ["/v1/stream/", "/api/stream/"];

export default {
  async fetch(request: Request, env: Env, ctx: ExecutionContext): Promise<Response> {
    let response: Response;
    try {
      const url = new URL(request.url);
      assertNoRepeatedQuery(url);
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
