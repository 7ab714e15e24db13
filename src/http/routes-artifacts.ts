import { z } from "zod";
import { parseQuery, queryInt } from "./query";
import { ApiError, json } from "../errors";
import type { Env } from "../env";
import { assertThreadAccess, authenticate } from "../auth/authenticate";
import { idSchema } from "../auth/tokens";
import { threadStub } from "./actors";
import { unwrapRpc } from "../actors/rpc";

const artifactsQuery = z.object({
  runId: idSchema.optional(),
  limit: queryInt(1, 200).default(50),
  /** The `offset` of the last artifact of the page before: the next page lists older ones. */
  before: z.string().max(64).optional(),
}).strict();

/** What the thread's runs left behind (`artifact.diff`, `artifact.files`), newest first. */
export async function listArtifactsRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const claims = await authenticate(request, env.THREADBOX_TOKEN_SECRET);
  const parsedId = idSchema.safeParse(id);
  if (!parsedId.success) throw new ApiError("not_found", "thread not found");
  const threadId = parsedId.data;
  assertThreadAccess(claims, claims.houseId, threadId, false);
  const q = parseQuery(request, artifactsQuery, "query: runId is an id, limit an integer from 1 to 200, before an artifact's offset");
  return json(await unwrapRpc(threadStub(env, threadId).listArtifacts(claims.houseId, q.runId ?? null, q.limit, q.before ?? null)));
}
