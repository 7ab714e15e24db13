import { z } from "zod";
import { parseQuery, queryInt } from "./query";
import { modelNameSchema } from "../agents";
import { ApiError, json, SECURITY_HEADERS } from "../errors";
import type { Env } from "../env";
import { nonBlankText, THREAD_STATUSES } from "../entries/schema";
import { assertThreadAccess, authenticate, authenticateUntil, BEARER_PROTOCOL_PREFIX, canWrite, houseWriter, requireHouse } from "../auth/authenticate";
import { initialDispatchConfig } from "../dispatch/config";
import { idSchema, mintStreamToken, STREAM_SCOPES, streamTokenTtlSeconds, type HouseClaims, type TokenClaims } from "../auth/tokens";
import { authorFor, writerFor } from "../threads/entries";
import { readBody, readOptionalBody, readJson } from "./body";
import { assertWebSocketHandshake } from "./websocket-handshake";
import { houseStub, newId, threadStub } from "./actors";
import { allowedToolsSchema, branchNameSchema, permissionModeSchema, repositoryUrlSchema } from "../workspace/box-config";
import { ACTOR_ORIGIN, AUTH_HEADER, TARGET_HEADER, type ActorAuth, type StreamTarget } from "../actors/thread/thread-actor";
import { unwrapRpc } from "../actors/rpc";
import { idempotencyKey, idempotentDelegation, idempotentResumeRunId, idempotentThreadId, requestFingerprint } from "../threads/idempotency";
import type { EntryWithOffset } from "../entries/schema";
import type { Environment } from "../environments";
import { chosenEnvironmentId, environmentChoiceFields, loadEnvironment, oneEnvironment } from "./routes-environments";
import type { HarnessName } from "../sandbox/harness";

type EntriesPage = { entries: EntryWithOffset[]; nextOffset: string; upToDate: boolean };

export const createThreadSchema = z.object({
  title: z.string().max(500).optional(),
  parent: z.object({ kind: z.enum(["none", "agent", "thread"]), id: idSchema.optional() }).strict()
    .refine((p) => p.kind !== "none" || p.id === undefined, { message: "a thread without a parent names no parent id", path: ["id"] })
    .optional(),
  environmentId: idSchema.optional(),
  brainId: z.string().min(1).max(200).optional(),
}).strict();

const tokenSchema = z.object({ scope: z.enum(STREAM_SCOPES).default("stream:write") }).strict();

/** The offset is the log's to judge (`invalid_offset`); only the limit is checked here. */
const entriesQuery = z.object({ limit: queryInt(1, 10_000).default(1000), offset: z.string().optional() }).strict();

const listSchema = z.object({
  // Empty is refused, not taken as no filter: a client that lost the id would list the whole house.
  parent: z.string().min(1, "parent must be none or a thread id").max(200).optional(),
  parentKind: z.enum(["none", "agent", "thread"]).optional(),
  status: z.enum(THREAD_STATUSES).optional(),
  limit: queryInt(1, 1000).default(100),
  // Compared with the stored createdAt (ISO, milliseconds, UTC) as a string: any other spelling of
  // an instant is made that form first, and what is not an instant is refused rather than matching
  // nothing (epoch milliseconds would compare below every date) or the wrong threads. A zone offset
  // can carry a 9999 or 0000 date out of four-digit years, where toISOString writes a signed
  // six-digit year that sorts below every stored date.
  // A `+01:00` zone written into the URL as it is arrives as ` 01:00` (a `+` in a query string is
  // a space): nothing else can put a space there, so it is read back as the `+` it was.
  before: z.preprocess((v) => (typeof v === "string" ? v.replace(/(T[\d:.]+) (\d{2}:?\d{2})$/, "$1+$2") : v), z.iso.datetime({ offset: true })
    .transform((s) => new Date(s).toISOString())
    .refine((s) => /^\d{4}-/.test(s), { message: "before must fall within years 0000-9999 (UTC)" }))
    .optional(),
  beforeId: z.string().max(64).optional(),
}).strict().refine((q) => q.beforeId === undefined || q.before !== undefined, { message: "beforeId needs before (the createdAt of that thread)", path: ["beforeId"] });

/**
 * Authorization before validation: another house's thread answers 404 before its body is read.
 */
export async function assertThreadInHouse(env: Env, claims: TokenClaims, threadId: string): Promise<void> {
  await unwrapRpc(threadStub(env, threadId).getThread(claims.houseId));
}

/** A thread id from the path; a malformed one is a thread that does not exist. */
export function threadIdParam(raw: string | undefined): string {
  const parsed = idSchema.safeParse(raw);
  if (!parsed.success) throw new ApiError("not_found", "thread not found");
  return parsed.data;
}

export type CreateThreadBody = z.infer<typeof createThreadSchema>;

/** A 404 said again as `message` (what is missing, and what to do); any other error as it is. */
const notFoundAs = (message: string) => (err: unknown): never => {
  if (err instanceof ApiError && err.code === "not_found") throw new ApiError("not_found", message);
  throw err;
};

/** A child's environment, taken from its parent, deleted since the parent was made. */
export const goneParentEnvironment = (environmentId: string | null, parentId: string) =>
  `environment ${environmentId} of parent thread ${parentId} no longer exists: name another environmentId`;

/** The one way a thread is made: the route and the `create_thread` tool (as the bot) both come here. */
export async function createThread(env: Env, claims: HouseClaims, body: CreateThreadBody, idem?: { key: string }) {
  const parent = body.parent ?? { kind: "none" as const };
  if (parent.kind !== "none" && !parent.id) throw new ApiError("validation_failed", "parent.id is required unless parent.kind is none");
  let environmentId = body.environmentId ?? null;
  // Naming an environment that is not the house's own is a 404, as reading it would be.
  if (environmentId) await loadEnvironment(env, claims.houseId, environmentId);
  if (parent.kind === "thread") {
    // A child inherits its parent's environment; the parent must be in the same house.
    const parentRow = await unwrapRpc(threadStub(env, parent.id!).getThread(claims.houseId));
    // An environment deleted since the parent was made is refused as any missing one is: a child
    // carrying its id would only fail later, at its first run or command.
    if (environmentId === null && parentRow.environmentId !== null) {
      environmentId = parentRow.environmentId;
      await loadEnvironment(env, claims.houseId, environmentId).catch(notFoundAs(goneParentEnvironment(environmentId, parent.id!)));
    }
  }
  if (parent.kind === "agent" && !(await unwrapRpc(houseStub(env, claims.houseId).getAgent(parent.id!)))) {
    throw new ApiError("not_found", "agent not found");
  }
  const id = idem ? await idempotentThreadId(claims.houseId, claims.subject, idem.key) : newId("th_");
  const parentRef = { kind: parent.kind, id: parent.id ?? null };
  return unwrapRpc(threadStub(env, id).createThread({
    id, houseId: claims.houseId, parent: parentRef, environmentId,
    // A run's box writes as the brain: naming one is authoring as it, so the authorship rule applies.
    title: body.title ?? null, brainId: body.brainId === undefined ? null : authorFor(body.brainId, writerFor(claims), "brainId"), createdBy: claims.subject,
    requestFingerprint: idem ? await requestFingerprint(body) : null,
    dispatchConfig: initialDispatchConfig(parentRef),
  }));
}

export async function createThreadRoute(request: Request, env: Env): Promise<Response> {
  const claims = await houseWriter(request, env.THREADBOX_TOKEN_SECRET);
  const body = await readOptionalBody(request, createThreadSchema);
  const key = idempotencyKey(request);
  const { thread, created } = await createThread(env, claims, body, key === null ? undefined : { key });
  // A retry with the same Idempotency-Key answers the row it created the first time.
  return json(thread, created ? 201 : 200, { location: `/api/threads/${thread.id}`, ...(created ? {} : { "idempotent-replayed": "true" }) });
}

export async function getThreadRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const claims = await authenticate(request, env.THREADBOX_TOKEN_SECRET);
  const threadId = threadIdParam(id);
  assertThreadAccess(claims, claims.houseId, threadId, false);
  return json(await unwrapRpc(threadStub(env, threadId).getThread(claims.houseId)));
}

export async function listThreadsRoute(request: Request, env: Env): Promise<Response> {
  const claims = await authenticate(request, env.THREADBOX_TOKEN_SECRET);
  requireHouse(claims);
  const q = parseQuery(request, listSchema, "query: parent is a thread id or none, parentKind none|agent|thread, status idle|running|completed|failed, limit an integer from 1 to 1000, before an ISO-8601 date-time, beforeId (with before) a thread id");
  let parentKind = q.parentKind;
  let parentId: string | undefined;
  if (q.parent === "none") {
    // The filters combine: roots have no parent of any other kind.
    if (parentKind !== undefined && parentKind !== "none") return json({ threads: [] });
    parentKind = "none";
  } else if (q.parent) parentId = q.parent;
  const threads = await unwrapRpc(houseStub(env, claims.houseId).listThreads({ parentKind, parentId, status: q.status, limit: q.limit, before: q.before, beforeId: q.beforeId }));
  return json({ threads });
}

export async function postEntriesRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const claims = await authenticate(request, env.THREADBOX_TOKEN_SECRET);
  const threadId = threadIdParam(id);
  assertThreadAccess(claims, claims.houseId, threadId, true);
  await assertThreadInHouse(env, claims, threadId);
  const raw = await readJson(request);
  const result = await unwrapRpc(threadStub(env, threadId).appendEntries(claims.houseId, raw, writerFor(claims)));
  return json(result, 201, { "Stream-Next-Offset": result.nextOffset });
}

/** The quality an Accept header gives each media type it names (letter case ignored, q defaults to 1). */
function acceptQualities(accept: string): Map<string, number> {
  const qualities = new Map<string, number>();
  for (const range of accept.split(",")) {
    const [type, ...params] = range.split(";").map((p) => p.trim().toLowerCase());
    if (!type) continue;
    const q = params.find((p) => /^q\s*=/.test(p));
    const value = q === undefined ? 1 : Number(q.slice(q.indexOf("=") + 1).trim());
    qualities.set(type, Math.max(qualities.get(type) ?? 0, Number.isFinite(value) ? value : 0));
  }
  return qualities;
}

/** NDJSON only when the client names it, does not refuse it (q=0) and does not prefer JSON to it. */
function prefersNdjson(accept: string | null): boolean {
  if (!accept) return false;
  const q = acceptQualities(accept);
  const ndjson = q.get("application/x-ndjson") ?? 0;
  return ndjson > 0 && ndjson >= (q.get("application/json") ?? 0);
}

export async function readEntriesRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const claims = await authenticate(request, env.THREADBOX_TOKEN_SECRET);
  const threadId = threadIdParam(id);
  assertThreadAccess(claims, claims.houseId, threadId, false);
  const { limit, offset } = parseQuery(request, entriesQuery, "query: offset is -1, 0, now or an offset returned by the server, limit an integer from 1 to 10000 (long-poll and SSE reads are on /api/stream/thread-<id>)");
  const page = (await unwrapRpc(threadStub(env, threadId).readEntries(claims.houseId, offset ?? null, limit))) as EntriesPage;
  const headers = { "Stream-Next-Offset": page.nextOffset, ...(page.upToDate ? { "Stream-Up-To-Date": "true" } : {}) };
  if (prefersNdjson(request.headers.get("accept"))) {
    const body = page.entries.map((e) => JSON.stringify(e) + "\n").join("");
    return new Response(body, { headers: { "content-type": "application/x-ndjson", ...SECURITY_HEADERS, ...headers } });
  }
  return json(page, 200, headers);
}

export async function mintThreadTokenRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const { claims, expiresAtMs } = await authenticateUntil(request, env.THREADBOX_TOKEN_SECRET);
  const threadId = threadIdParam(id);
  requireHouse(claims);
  await assertThreadInHouse(env, claims, threadId);
  const body = await readOptionalBody(request, tokenSchema);
  if (body.scope === "stream:write" && !canWrite(claims)) throw new ApiError("forbidden", "a reader cannot mint write tokens");
  // The token writes as the person who minted it (see the authorship rule in the README), and no
  // longer than that person's token allows: renewals carry the cap on.
  const notAfter = Math.floor(expiresAtMs / 1000);
  const minted = await mintStreamToken(env.THREADBOX_TOKEN_SECRET, claims.houseId, threadId, body.scope, claims.subject, streamTokenTtlSeconds(env), undefined, { notAfter });
  return json({ ...minted, scope: body.scope, threadId }, 201);
}

export async function subscribeRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  // Checked before the upgrade: a bad token never gets a socket.
  const { claims, expiresAtMs } = await authenticateUntil(request, env.THREADBOX_TOKEN_SECRET, true);
  const threadId = threadIdParam(id);
  assertThreadAccess(claims, claims.houseId, threadId, false);
  assertWebSocketHandshake(request.headers);
  const auth: ActorAuth = { houseId: claims.houseId, canWrite: false, subject: claims.subject, mayAuthorAsOthers: false, mayNameBox: false, tokenExpiresAtMs: expiresAtMs };
  return forwardToActor(withoutBearerProtocols(request), threadStub(env, threadId), auth, { kind: "thread", threadId }, "/subscribe");
}

/**
 * A browser offers `bearer.<token>` next to a real protocol name; only the name may be selected
 * (and echoed in the handshake), so the token is dropped before the actor picks one.
 */
function withoutBearerProtocols(request: Request): Request {
  const offered = request.headers.get("sec-websocket-protocol");
  if (offered === null) return request;
  const kept = offered.split(",").map((p) => p.trim()).filter((p) => p !== "" && !p.startsWith(BEARER_PROTOCOL_PREFIX));
  const headers = new Headers(request.headers);
  if (kept.length > 0) headers.set("sec-websocket-protocol", kept.join(", "));
  else headers.delete("sec-websocket-protocol");
  return new Request(request, { headers });
}

export function forwardToActor(
  request: Request,
  stub: { fetch(r: Request): Promise<Response> },
  auth: ActorAuth,
  target: StreamTarget,
  path: string,
  search = new URL(request.url).search,
): Promise<Response> {
  const inner = `${ACTOR_ORIGIN}${path}${search}`;
  const headers = new Headers(request.headers);
  headers.set(AUTH_HEADER, JSON.stringify(auth));
  headers.set(TARGET_HEADER, JSON.stringify(target));
  headers.delete("authorization");
  // A body on a GET or HEAD means nothing to these routes, and a Request cannot carry one: dropped.
  const bodyless = request.method === "GET" || request.method === "HEAD";
  if (bodyless) {
    headers.delete("content-length");
    headers.delete("transfer-encoding");
  }
  return stub.fetch(new Request(inner, { method: request.method, headers, body: bodyless ? null : request.body, signal: request.signal }));
}

export async function stopThreadRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const claims = await houseWriter(request, env.THREADBOX_TOKEN_SECRET);
  const threadId = threadIdParam(id);
  return json(await unwrapRpc(threadStub(env, threadId).stopRun(claims.houseId, claims.subject)));
}

/** Aborts the current turn of the thread's running agent; the run goes on (unlike stop). */
export async function interruptThreadRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const claims = await houseWriter(request, env.THREADBOX_TOKEN_SECRET);
  const threadId = threadIdParam(id);
  return json(await unwrapRpc(threadStub(env, threadId).interruptRun(claims.houseId, claims.subject)), 202);
}

/** A branch is checked out of the repository a run clones: without one it would be dropped unsaid. */
export const BRANCH_NEEDS_REPO = "branch needs repo: it names a branch of the repository the run clones";

/**
 * What a `delegate_task` call may pass too: the same checks as the route's, so neither path lets
 * more through. `model` and the environment are here because the route's errors name them as the
 * fix (a run without a model, a parent whose environment was deleted): a bot must be able to follow.
 */
export const delegateTaskFields = {
  task: nonBlankText(200_000, "task"),
  repo: repositoryUrlSchema.optional(),
  branch: branchNameSchema.optional(),
  /** A shallow clone of `repo`: this many commits. */
  depth: z.number().int().min(1).max(100_000).optional(),
  harness: z.enum(["pi", "claude-code", "codex"]).optional(),
  model: modelNameSchema.optional(),
  ...environmentChoiceFields,
};

export const DEPTH_NEEDS_REPO = "depth needs repo: it is how many commits of the repository the run clones";

export const branchNeedsRepo = <T extends { repo?: string; branch?: string; depth?: number }>(s: z.ZodType<T>) =>
  s.refine((b) => b.branch === undefined || b.repo !== undefined, { message: BRANCH_NEEDS_REPO, path: ["branch"] })
    .refine((b) => b.depth === undefined || b.repo !== undefined, { message: DEPTH_NEEDS_REPO, path: ["depth"] });

export const delegateSchema = branchNeedsRepo(oneEnvironment(z.object({
  ...delegateTaskFields,
  title: z.string().max(500).optional(),
  /** This run's, instead of the environment's. */
  permissionMode: permissionModeSchema.optional(),
  allowedTools: allowedToolsSchema.optional(),
}).strict()));

const resumeSchema = z.object({
  message: nonBlankText(200_000, "message"),
  model: modelNameSchema.optional(),
}).strict();

/** The environment a run uses; a missing environment is the caller's 404. */
async function runEnvironment(env: Env, houseId: string, environmentId: string | null): Promise<Environment | null> {
  return environmentId ? loadEnvironment(env, houseId, environmentId) : null;
}

/**
 * pi started without a model fails in the box with a message nobody sees: a pi run must name its
 * model (in the request or as the environment's default) before any box is made for it. Without
 * an environment there is none to set one in (nor the "piModels" a custom provider needs): a
 * delegation (`canNameEnvironment`) is told to name an environment, which it can.
 */
function requireModel(harness: HarnessName, model: string | undefined, environment: Environment | null, canNameEnvironment = false): void {
  if (harness !== "pi" || model || environment?.model) return;
  if (environment) {
    throw new ApiError("validation_failed", `no model for this run: environment ${environment.id} has no default model; pass "model" (e.g. "local/my-model") or set the environment's "model" (and its "piModels" for a custom provider)`);
  }
  const nameOne = canNameEnvironment ? `name an environment whose "model" is set ("environmentId" or "environmentName"), or ` : "";
  throw new ApiError("validation_failed", `no model for this run: the thread has no environment to take one from; ${nameOne}pass "model" (a custom provider's needs an environment's "piModels")`);
}

export type DelegateBody = z.infer<typeof delegateSchema>;

/**
 * Hands a task to a coding agent on a child thread; returns at once, the run goes on in the box.
 * The caller's subject is the child's brain: it authors the prompt, everything the harness posts
 * and the result chat on the parent. The route and the `delegate_task` tool both come here.
 */
export async function delegateTask(env: Env, claims: HouseClaims, parent: { id: string; environmentId: string | null }, body: DelegateBody, idem?: { key: string }) {
  const chosen = await chosenEnvironmentId(env, claims.houseId, body);
  const environmentId = chosen ?? parent.environmentId;
  // An environment deleted since the parent was made: say whose it was and what to do, as a child
  // thread made with POST /api/threads is told, not a bare "environment not found".
  const loading = runEnvironment(env, claims.houseId, environmentId ?? null);
  const environment = await (chosen === undefined ? loading.catch(notFoundAs(goneParentEnvironment(environmentId, parent.id))) : loading);
  const harness = body.harness ?? environment?.harness ?? "pi";
  requireModel(harness, body.model, environment, true);
  // With an Idempotency-Key, a retry names the same child and run: it finds them, and a retry
  // of a request that died between the two steps completes it.
  const ids = idem ? await idempotentDelegation(claims.houseId, claims.subject, parent.id, idem.key) : { childId: newId("th_"), runId: undefined };
  const childId = ids.childId;
  // One call: the child and its run are written together, so no crash leaves a child that never runs.
  const made = await unwrapRpc(threadStub(env, childId).createThread({
    id: childId, houseId: claims.houseId, parent: { kind: "thread", id: parent.id }, environmentId: environmentId ?? null,
    title: body.title ?? body.task.slice(0, 120), brainId: claims.subject, createdBy: claims.subject,
    requestFingerprint: idem ? await requestFingerprint({ parent: parent.id, ...body }) : null,
    firstRun: {
      task: body.task, harness, model: body.model, repo: body.repo, branch: body.branch, ...(body.depth ? { depth: body.depth } : {}), authorId: claims.subject, resume: false,
      ...(ids.runId ? { runId: ids.runId } : {}),
      ...(body.permissionMode ? { permissionMode: body.permissionMode } : {}),
      ...(body.allowedTools ? { allowedTools: body.allowedTools } : {}),
    },
  }));
  const run = made.run!;
  // `status` is the child's status when the call returned: claimed `running` before any launch work.
  return { childThreadId: childId, runId: run.runId, status: made.thread.status, replayed: run.replayed };
}

export async function delegateRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const claims = await houseWriter(request, env.THREADBOX_TOKEN_SECRET);
  const parentId = threadIdParam(id);
  const parent = await unwrapRpc(threadStub(env, parentId).getThread(claims.houseId));
  const body = await readBody(request, delegateSchema);
  const key = idempotencyKey(request);
  const { replayed, ...out } = await delegateTask(env, claims, parent, body, key === null ? undefined : { key });
  return json(out, 202, { location: `/api/threads/${out.childThreadId}`, ...(replayed ? { "idempotent-replayed": "true" } : {}) });
}

/** Continues a finished thread with a new message: same box if it is alive, else a rebuilt session. */
export async function resumeRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const claims = await houseWriter(request, env.THREADBOX_TOKEN_SECRET);
  const threadId = threadIdParam(id);
  const row = await unwrapRpc(threadStub(env, threadId).getThread(claims.houseId));
  const body = await readBody(request, resumeSchema);
  const key = idempotencyKey(request);
  const environment = await runEnvironment(env, claims.houseId, row.environmentId).catch(notFoundAs(
    `environment ${row.environmentId} of thread ${threadId} no longer exists: the thread cannot run again; delegate the task anew from a thread with another environment`,
  ));
  // The run goes on as it was started: its harness, and what its request chose over the environment.
  const previous = await unwrapRpc(threadStub(env, threadId).lastRunSettings(claims.houseId));
  const harness = previous.harness ?? environment?.harness ?? "pi";
  const model = body.model ?? previous.model;
  // A thread with nothing to resume gets its 409 from the actor first.
  if (row.status === "completed" || row.status === "failed") requireModel(harness, model, environment);
  // With an Idempotency-Key the run's id derives from it: a retry finds the run the first request
  // started (even once it has ended or a later run followed it) and starts nothing more.
  const idem = key === null ? {} : { runId: await idempotentResumeRunId(claims.houseId, claims.subject, threadId, key), requestFingerprint: await requestFingerprint(body) };
  const { runId, status, replayed } = await unwrapRpc(threadStub(env, threadId).startRun(claims.houseId, {
    task: body.message, harness, model, authorId: claims.subject, resume: true,
    ...(previous.permissionMode ? { permissionMode: previous.permissionMode } : {}),
    ...(previous.allowedTools ? { allowedTools: previous.allowedTools } : {}),
    ...idem,
  }));
  return json({ threadId, runId, status }, 202, replayed ? { "idempotent-replayed": "true" } : {});
}
