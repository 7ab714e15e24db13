import { z } from "zod";
import { parseQuery, queryInt } from "./query";
import { ApiError, json } from "../errors";
import type { Env } from "../env";
import { assertThreadAccess, authenticate, houseWriter } from "../auth/authenticate";
import { threadConfigPatchSchema } from "../dispatch/config";
import { houseStub, threadStub } from "./actors";
import { unwrapRpc } from "../actors/rpc";
import { readBody } from "./body";
import { assertThreadInHouse, threadIdParam } from "./routes-threads";

export async function getThreadConfigRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const claims = await authenticate(request, env.THREADBOX_TOKEN_SECRET);
  const threadId = threadIdParam(id);
  assertThreadAccess(claims, claims.houseId, threadId, false);
  return json(await unwrapRpc(threadStub(env, threadId).getDispatchConfig(claims.houseId)));
}

export async function patchThreadConfigRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const claims = await houseWriter(request, env.THREADBOX_TOKEN_SECRET);
  const threadId = threadIdParam(id);
  // Authorization before validation: another house's thread answers 404 whatever the body is.
  await assertThreadInHouse(env, claims, threadId);
  const patch = await readBody(request, threadConfigPatchSchema);
  // An override for a bot the house does not have is a typo that would do nothing, silently.
  const named = Object.entries(patch.dispatch.perAgent ?? {}).filter(([, v]) => v !== null).map(([agentId]) => agentId);
  const house = houseStub(env, claims.houseId);
  for (const agentId of named) {
    if (!(await unwrapRpc(house.getAgent(agentId)))) {
      throw new ApiError("validation_failed", `no agent ${agentId} in this house`, [{ path: `dispatch.perAgent.${agentId}`, message: "not an agent of this house" }]);
    }
  }
  return json(await unwrapRpc(threadStub(env, threadId).patchDispatchConfig(claims.houseId, patch)));
}

const decisionsQuery = z.object({ limit: queryInt(1, 500).default(100) }).strict();

/** Why each bot did or did not answer each recent chat entry, newest first. */
export async function dispatchDecisionsRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const claims = await authenticate(request, env.THREADBOX_TOKEN_SECRET);
  const threadId = threadIdParam(id);
  assertThreadAccess(claims, claims.houseId, threadId, false);
  const q = parseQuery(request, decisionsQuery, "query: limit is an integer from 1 to 500");
  return json(await unwrapRpc(threadStub(env, threadId).dispatchDecisions(claims.houseId, q.limit)));
}
