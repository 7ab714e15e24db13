import { z } from "zod";
import { parseQuery, queryInt } from "./query";
import { ApiError, json } from "../errors";
import type { Env } from "../env";
import { authenticate, houseWriter, requireHouse } from "../auth/authenticate";
import { idSchema } from "../auth/tokens";
import { LABEL_EPHEMERAL, LABEL_ENVIRONMENT, LABEL_HOUSE } from "../sandbox/provider";
import { loadEnvironment } from "./routes-environments";
import { sharedBoxSpec } from "../workspace/shared-box";
import { providerFor, providerNameSchema } from "../sandbox/providers";
import { providerApiError } from "../sandbox/api-errors";
import { houseStub, newId, sandboxStub } from "./actors";
import { readOptionalBody } from "./body";
import { unwrapRpc } from "../actors/rpc";
import { createBox, deleteUnregisteredBox } from "../actors/sandbox/late-box";
import type { BoxView } from "../actors/sandbox/sandbox-actor";
import { idempotencyKey, idempotentBoxId, requestFingerprint as idempotentFingerprint } from "../threads/idempotency";

const listSchema = z.object({
  state: z.enum(["provisioning", "live", "dead", "deleted"]).optional(),
  ephemeral: z.enum(["true", "false"]).optional(),
}).strict();

const createSchema = z.object({
  provider: providerNameSchema.default("daytona"),
  ephemeral: z.boolean().default(false),
  environmentId: idSchema.optional(),
  snapshot: z.string().max(200).optional(),
  image: z.string().max(500).optional(),
}).strict();

async function houseClaims(request: Request, env: Env, write: boolean) {
  if (write) return houseWriter(request, env.THREADBOX_TOKEN_SECRET);
  const claims = await authenticate(request, env.THREADBOX_TOKEN_SECRET);
  requireHouse(claims);
  return claims;
}

export async function listSandboxesRoute(request: Request, env: Env): Promise<Response> {
  const claims = await houseClaims(request, env, false);
  const q = parseQuery(request, listSchema, "query: state is provisioning|live|dead|deleted, ephemeral true|false");
  const ephemeral = q.ephemeral === undefined ? undefined : q.ephemeral === "true";
  const boxes = await unwrapRpc(houseStub(env, claims.houseId).listBoxes({ state: q.state, ephemeral }));
  return json({ sandboxes: boxes });
}

/** Creates a box at the provider and registers its actor (e.g. an environment's shared box). */
export async function createSandboxRoute(request: Request, env: Env): Promise<Response> {
  const claims = await houseClaims(request, env, true);
  const body = await readOptionalBody(request, createSchema);
  // An unknown or unconfigured provider is refused before anything is looked up.
  providerFor(env, body.provider);
  const labels: Record<string, string> = { [LABEL_HOUSE]: claims.houseId, [LABEL_EPHEMERAL]: String(body.ephemeral) };
  // A box made for an environment is made as the environment's own boxes are: its egress (an
  // allow-list, a closed network) and volumes hold here too, and its snapshot or image unless the
  // body names another.
  let spec: ReturnType<typeof sharedBoxSpec> | undefined;
  if (body.environmentId) {
    spec = sharedBoxSpec(env, claims.houseId, await loadEnvironment(env, claims.houseId, body.environmentId));
    labels[LABEL_ENVIRONMENT] = body.environmentId;
  }
  // With an Idempotency-Key the box's id derives from it: a retry finds the box the first request made.
  const key = idempotencyKey(request);
  const requestFingerprint = key === null ? undefined : await idempotentFingerprint(body);
  const boxId = key === null ? newId("box_") : await idempotentBoxId(claims.houseId, claims.subject, key);
  const stub = sandboxStub(env, boxId);
  const replayed = (view: BoxView) => json(view, 200, { location: `/api/sandboxes/${boxId}`, "idempotent-replayed": "true" });
  if (requestFingerprint) {
    const earlier = await unwrapRpc(stub.replayedCreate(claims.houseId, requestFingerprint));
    if (earlier) return replayed(earlier);
  }
  let info;
  try {
    info = await createBox(env, claims.houseId, body.provider, {
      labels: { house: claims.houseId, environment: body.environmentId }, ephemeral: body.ephemeral,
      snapshot: body.snapshot ?? spec?.snapshot, image: body.image ?? spec?.image,
      egress: spec?.egress, volumes: spec?.volumes,
    });
  } catch (err) {
    throw providerApiError(err);
  }
  // A request with the same key that ran beside this one registered its box first: that box is
  // the answer (or, for another body, the 409), and the one made here goes.
  // No box actor has it: a delete the provider fails is retried by a watch of it; when that watch
  // cannot be started either, the answer is an error naming the box left (nothing here lasts to retry
  // it), and a retry with the same key answers as this would have.
  const dropMine = () => deleteUnregisteredBox(env, claims.houseId, body.provider, info.ref);
  let view: BoxView;
  try {
    view = await unwrapRpc(stub.register({
      boxId, houseId: claims.houseId, provider: body.provider, providerRef: info.ref, ephemeral: body.ephemeral, labels: { ...info.labels, ...labels },
      deleteIfUnused: true, ...(requestFingerprint ? { requestFingerprint } : {}),
    }));
  } catch (err) {
    if (requestFingerprint && err instanceof ApiError && err.code === "conflict") await dropMine();
    throw err;
  }
  if (view.providerRef !== info.ref) {
    await dropMine();
    return replayed(view);
  }
  return json(view, 201, { location: `/api/sandboxes/${boxId}` });
}

/** Cold-row sweep: every box that claims to be live is probed twice; what is dead is settled. */
export async function reconcileRoute(request: Request, env: Env): Promise<Response> {
  const claims = await houseClaims(request, env, true);
  const live = await unwrapRpc(houseStub(env, claims.houseId).listBoxes({ state: "live" }));
  const results: { id: string; verdict: string; dead: boolean }[] = new Array(live.length);
  // Side by side: a provider that hangs costs one request timeout per probe, and one after another
  // that is a minute per box.
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < live.length; i = next++) {
      const stub = sandboxStub(env, live[i].id);
      let answer = await unwrapRpc(stub.probe(claims.houseId));
      if (answer.verdict === "dead" && !answer.confirmedDead) answer = await unwrapRpc(stub.probe(claims.houseId));
      results[i] = { id: live[i].id, verdict: answer.verdict, dead: answer.confirmedDead };
    }
  };
  await Promise.all(Array.from({ length: Math.min(RECONCILE_CONCURRENCY, live.length) }, worker));
  return json({ probed: results.length, dead: results.filter((r) => r.dead).map((r) => r.id), results });
}

/** Probes a reconcile runs at once (each a request to the provider). */
const RECONCILE_CONCURRENCY = 8;

export async function deleteSandboxRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const claims = await houseClaims(request, env, true);
  const boxId = idSchema.safeParse(id);
  if (!boxId.success) throw new ApiError("not_found", "box not found");
  const forceParam = new URL(request.url).searchParams.get("force");
  if (forceParam !== null && forceParam !== "true" && forceParam !== "false") throw new ApiError("validation_failed", "force must be true or false", [{ path: "force", message: "true or false" }]);
  const force = forceParam === "true";
  const view = await unwrapRpc(sandboxStub(env, boxId.data).destroy(claims.houseId, force));
  return json(view);
}

export async function getSandboxRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const claims = await houseClaims(request, env, false);
  const boxId = idSchema.safeParse(id);
  if (!boxId.success) throw new ApiError("not_found", "box not found");
  return json(await unwrapRpc(sandboxStub(env, boxId.data).view(claims.houseId)));
}

const previewQuery = z.object({
  expiresInSeconds: queryInt(1, 86_400).default(3_600),
}).strict();
const portSchema = z.coerce.number().int().min(1).max(65_535);

/** A URL that reaches `port` inside the box (Daytona's signed preview link; the local host's proxy). */
export async function previewLinkRoute(request: Request, env: Env, id: string | undefined, rawPort: string | undefined): Promise<Response> {
  const claims = await houseClaims(request, env, true);
  const boxId = idSchema.safeParse(id);
  if (!boxId.success) throw new ApiError("not_found", "box not found");
  const port = portSchema.safeParse(rawPort);
  if (!port.success || !/^\d+$/.test(rawPort ?? "")) throw new ApiError("validation_failed", "port must be an integer from 1 to 65535", [{ path: "port", message: "an integer from 1 to 65535" }]);
  const q = parseQuery(request, previewQuery, "expiresInSeconds must be an integer from 1 to 86400");
  return json(await unwrapRpc(sandboxStub(env, boxId.data).previewLink(claims.houseId, port.data, q.expiresInSeconds)));
}
