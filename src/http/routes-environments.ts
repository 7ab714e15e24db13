import { ApiError, json } from "../errors";
import type { Env } from "../env";
import { authenticate, canWrite, requireHouse } from "../auth/authenticate";
import { idSchema } from "../auth/tokens";
import { environmentInputSchema, publicEnvironment, type Environment } from "../environments";
import { houseStub, newId } from "./actors";
import { readBody } from "./body";

export async function createEnvironmentRoute(request: Request, env: Env): Promise<Response> {
  const claims = await authenticate(request, env.THREADBOX_TOKEN_SECRET);
  requireHouse(claims);
  if (!canWrite(claims) || claims.role === "bot") throw new ApiError("forbidden", "only owners and members configure environments");
  const input = await readBody(request, environmentInputSchema);
  const e: Environment = { ...input, id: input.id ?? newId("env_"), houseId: claims.houseId, createdAt: new Date().toISOString() };
  await houseStub(env, claims.houseId).putEnvironment(e);
  return json(publicEnvironment(e), 201);
}

export async function listEnvironmentsRoute(request: Request, env: Env): Promise<Response> {
  const claims = await authenticate(request, env.THREADBOX_TOKEN_SECRET);
  requireHouse(claims);
  const list = (await houseStub(env, claims.houseId).listEnvironments()) as Environment[];
  return json({ environments: list.map(publicEnvironment) });
}

export async function getEnvironmentRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const claims = await authenticate(request, env.THREADBOX_TOKEN_SECRET);
  requireHouse(claims);
  const parsed = idSchema.safeParse(id);
  if (!parsed.success) throw new ApiError("not_found", "environment not found");
  const e = (await houseStub(env, claims.houseId).getEnvironment(parsed.data)) as Environment | null;
  if (!e) throw new ApiError("not_found", "environment not found");
  return json(publicEnvironment(e));
}
