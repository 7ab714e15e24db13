import { ApiError, json } from "../errors";
import type { Env } from "../env";
import { authenticate, houseWriter, requireHouse } from "../auth/authenticate";
import { idSchema, type HouseClaims } from "../auth/tokens";
import { AGENT_ID_PREFIX, agentInputSchema, agentPatchSchema, type Agent, type AgentInput } from "../agents";
import { houseStub, newId } from "./actors";
import { unwrapRpc } from "../actors/rpc";
import { readBody } from "./body";
import { assertNoQuery } from "./query";
import { loadEnvironment } from "./routes-environments";

/** The one way an agent is made: the route and the `create_agent` tool both come here. */
export async function createAgent(env: Env, claims: HouseClaims, input: AgentInput): Promise<Agent> {
  if (input.environmentId) await loadEnvironment(env, claims.houseId, input.environmentId);
  const now = new Date().toISOString();
  const agent: Agent = { ...input, id: newId(AGENT_ID_PREFIX), houseId: claims.houseId, createdBy: claims.subject, createdAt: now, updatedAt: now };
  return unwrapRpc(houseStub(env, claims.houseId).createAgent(agent));
}

function agentIdParam(raw: string | undefined): string {
  const parsed = idSchema.safeParse(raw);
  if (!parsed.success) throw new ApiError("not_found", "agent not found");
  return parsed.data;
}

export async function createAgentRoute(request: Request, env: Env): Promise<Response> {
  const claims = await houseWriter(request, env.THREADBOX_TOKEN_SECRET);
  const input = await readBody(request, agentInputSchema);
  const agent = await createAgent(env, claims, input);
  return json(agent, 201, { location: `/api/agents/${agent.id}` });
}

export async function listAgentsRoute(request: Request, env: Env): Promise<Response> {
  const claims = await authenticate(request, env.THREADBOX_TOKEN_SECRET);
  requireHouse(claims);
  assertNoQuery(request, "GET /api/agents");
  return json({ agents: await unwrapRpc(houseStub(env, claims.houseId).listAgents()) });
}

export async function getAgentRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const claims = await authenticate(request, env.THREADBOX_TOKEN_SECRET);
  requireHouse(claims);
  const agent = await unwrapRpc(houseStub(env, claims.houseId).getAgent(agentIdParam(id)));
  if (!agent) throw new ApiError("not_found", "agent not found");
  return json(agent);
}

export async function patchAgentRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const claims = await houseWriter(request, env.THREADBOX_TOKEN_SECRET);
  const agentId = agentIdParam(id);
  // Authorization before validation: another house's agent answers 404 whatever the body is.
  if (!(await unwrapRpc(houseStub(env, claims.houseId).getAgent(agentId)))) throw new ApiError("not_found", "agent not found");
  const patch = await readBody(request, agentPatchSchema);
  if (patch.environmentId) await loadEnvironment(env, claims.houseId, patch.environmentId);
  return json(await unwrapRpc(houseStub(env, claims.houseId).updateAgent(agentId, patch, new Date().toISOString())));
}

export async function deleteAgentRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const claims = await houseWriter(request, env.THREADBOX_TOKEN_SECRET);
  await unwrapRpc(houseStub(env, claims.houseId).deleteAgent(agentIdParam(id)));
  return new Response(null, { status: 204 });
}
