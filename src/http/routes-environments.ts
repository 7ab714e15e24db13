import { z } from "zod";
import { recordSchema } from "../domain/record-schema";
import { ApiError, json } from "../errors";
import type { Env } from "../env";
import { authenticate, canWrite, houseWriter, requireHouse } from "../auth/authenticate";
import { idSchema, type HouseClaims } from "../auth/tokens";
import { apiUrlProblem, environmentInputSchema, environmentNameSchema, publicEnvironment, type Environment } from "../environments";
import { houseStub, newId, sandboxStub, threadStub } from "./actors";
import { LiveOutput } from "../sandbox/live-output";
import { ensureSharedBox, retireSharedBox, sharedBoxView } from "../workspace/shared-box";
import { boxSecretForms, RedactedFeed, redactBoundedOutput } from "../workspace/output-redaction";
import { deleteArchive } from "../workspace/folder-store";
import { writerFor } from "../threads/entries";
import { errorMessage, logEvent } from "../domain/log-event";
import { unwrapRpc } from "../actors/rpc";
import { providerFor } from "../sandbox/providers";
import { providerApiError } from "../sandbox/api-errors";
import { ProviderError } from "../sandbox/errors";
import { OUTPUT_KEEP_BYTES } from "../sandbox/bounded-output";
import type { ExecResult as ProviderExecResult } from "../sandbox/provider";
import { readBody } from "./body";
import { assertNoQuery } from "./query";
import { managedKeys, readManagedFiles, updateManagedFiles } from "../workspace/managed-files";

export async function createEnvironmentRoute(request: Request, env: Env): Promise<Response> {
  const claims = await authenticate(request, env.THREADBOX_TOKEN_SECRET);
  requireHouse(claims);
  if (!canWrite(claims) || claims.role === "bot") throw new ApiError("forbidden", "only owners and members configure environments");
  const input = await readBody(request, environmentInputSchema);
  assertApiUrl(env, input.apiUrl);
  const e = { ...input, id: input.id ?? newId("env_"), houseId: claims.houseId };
  const { environment: stored, retiredBoxId } = (await unwrapRpc(houseStub(env, claims.houseId).putEnvironment(e))) as StoredEnvironment;
  if (retiredBoxId) await retireSharedBox(env, claims.houseId, e.id, retiredBoxId);
  await pruneSharedBox(env, claims.houseId, stored);
  return json(publicEnvironment(stored), 201, { location: `/api/environments/${e.id}` });
}

const patchBodySchema = recordSchema(z.string(), z.unknown());

function assertApiUrl(env: Env, apiUrl: string | undefined): void {
  const problem = apiUrlProblem(env.DAYTONA_API_URL, apiUrl);
  if (problem) throw new ApiError("validation_failed", "invalid request body", [{ path: "apiUrl", message: problem }]);
}

/** What the house stored, and the shared box it let go (if the environment keeps none any more). */
type StoredEnvironment = { environment: Environment; retiredBoxId: string | null };

/** The caller, who must be allowed to configure environments, and the environment `id` of its house. */
async function environmentForConfigurer(request: Request, env: Env, id: string | undefined) {
  const claims = await authenticate(request, env.THREADBOX_TOKEN_SECRET);
  requireHouse(claims);
  if (!canWrite(claims) || claims.role === "bot") throw new ApiError("forbidden", "only owners and members configure environments");
  const parsedId = idSchema.safeParse(id);
  if (!parsedId.success) throw new ApiError("not_found", "environment not found");
  return { claims, environment: await loadEnvironment(env, claims.houseId, parsedId.data) };
}

/**
 * `PATCH /api/environments/:id`: the fields given replace the stored ones (`files` as a whole
 * list), `null` clears one; `secrets` merges by name, `null` removes one. The result is
 * validated like a create.
 */
export async function patchEnvironmentRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  // Authorization before validation: another house's environment answers 404 before the body is read.
  const { claims, environment: current } = await environmentForConfigurer(request, env, id);
  const patch = await readBody(request, patchBodySchema);
  if (typeof patch.apiUrl === "string") assertApiUrl(env, patch.apiUrl);
  // Merged in the house's actor, against what it holds then: two PATCHes at once both take
  // effect, and one after a DELETE is a 404 instead of bringing the environment back.
  const { environment: e, retiredBoxId } = (await unwrapRpc(houseStub(env, claims.houseId).patchEnvironment(current.id, patch))) as StoredEnvironment;
  // An environment that keeps no shared box any more, or changed a secret or sensitive file the box
  // was given, lets the box it had go (it is never reaped otherwise); its next use makes a new one.
  if (retiredBoxId) await retireSharedBox(env, claims.houseId, e.id, retiredBoxId);
  if (["files", "plugins", "piModels", "piSettings"].some((k) => k in patch)) await pruneSharedBox(env, claims.houseId, e);
  return json(publicEnvironment(e));
}

/**
 * What the environment no longer puts into boxes leaves its shared box now, not at its next run:
 * `run_command` there would still find it (a sensitive file taken out lets the whole box go, as
 * what runs made of it stays too: see the house's storeKeepingSharedBox). Best effort (a failure
 * is logged): the next run on the box removes it too.
 */
async function pruneSharedBox(env: Env, houseId: string, e: Environment): Promise<void> {
  const view = await sharedBoxView(env, houseId, e);
  if (!view || view.state !== "live") return;
  try {
    const provider = providerFor(env, view.provider);
    const home = await provider.homeDir(view.providerRef);
    const had = await readManagedFiles(provider, view.providerRef, home);
    const keys = managedKeys(e);
    const stale = had.filter((f) => !keys.has(f.key));
    await updateManagedFiles(provider, view.providerRef, home, stale);
  } catch (err) {
    logEvent("shared_box_prune_failed", { environmentId: e.id, boxId: view.id, error: errorMessage(err) }, "warn");
  }
}

/**
 * `DELETE /api/environments/:id`: its shared box goes first (409 while runs use it: stop them), then
 * its folders' archives, then the environment and its folders' index. Volumes are never deleted with it: they outlive
 * environments as they outlive boxes. Threads keep their `environmentId`; a resume then answers 404.
 */
export async function deleteEnvironmentRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const { claims, environment: e } = await environmentForConfigurer(request, env, id);
  if (e.boxMode === "shared") {
    // Its runs use the shared box from their claim on, before the box counts them as attached.
    const [running] = await unwrapRpc(houseStub(env, claims.houseId).listThreads({ status: "running", environmentId: e.id, limit: 1 }));
    if (running) throw new ApiError("conflict", `thread ${running.id} is running on this environment's shared box: stop it first`);
  }
  if (e.sharedBoxId) {
    try {
      await unwrapRpc(sandboxStub(env, e.sharedBoxId).destroy(claims.houseId, false));
    } catch (err) {
      if (!(err instanceof ApiError && err.code === "not_found")) throw err;
    }
  }
  // The archives go before the index that finds them, so a failure here leaves a delete that can be retried.
  const house = houseStub(env, claims.houseId);
  const deleted = new Set<string>();
  for (const v of await unwrapRpc(house.listFolderVersions(e.id))) {
    await deleteArchive(env, claims.houseId, v.stream);
    deleted.add(v.stream);
  }
  // Versions stored while the ones above were deleted.
  const { archiveStreams, sharedBoxId } = await unwrapRpc(house.deleteEnvironment(e.id));
  for (const stream of archiveStreams) if (!deleted.has(stream)) await deleteArchive(env, claims.houseId, stream);
  // A shared box claimed while this delete went on: no environment will use or delete it, and a
  // shared box is never reaped, so it goes as a retired one does (once its command or run ends).
  // The one deleted above is retired too: a no-op that tells the house it has nothing left to retry.
  if (sharedBoxId) await retireSharedBox(env, claims.houseId, e.id, sharedBoxId);
  return new Response(null, { status: 204 });
}

export async function listEnvironmentsRoute(request: Request, env: Env): Promise<Response> {
  const claims = await authenticate(request, env.THREADBOX_TOKEN_SECRET);
  requireHouse(claims);
  assertNoQuery(request, "GET /api/environments");
  const list = (await unwrapRpc(houseStub(env, claims.houseId).listEnvironments())) as Environment[];
  return json({ environments: list.map(publicEnvironment) });
}

/** The caller's house token and the environment `id` of that house (404 for any other house's). */
export async function environmentForCaller(request: Request, env: Env, id: string | undefined) {
  const claims = await authenticate(request, env.THREADBOX_TOKEN_SECRET);
  requireHouse(claims);
  const parsed = idSchema.safeParse(id);
  if (!parsed.success) throw new ApiError("not_found", "environment not found");
  return { claims, environment: await loadEnvironment(env, claims.houseId, parsed.data) };
}

export async function getEnvironmentRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  return json(publicEnvironment((await environmentForCaller(request, env, id)).environment));
}

/** A command line a box's shell runs: no process takes a NUL byte in its arguments. */
export const commandSchema = z.string().min(1).max(100_000).refine((c) => !c.includes("\0"), "a command cannot contain a NUL byte");
export const cwdSchema = z.string().max(1000).refine((c) => !c.includes("\0"), "a path cannot contain a NUL byte");

export const execSchema = z.object({
  command: commandSchema,
  cwd: cwdSchema.optional(),
  timeoutSec: z.number().int().min(1).max(3600).default(120),
  /** A thread of the house that gets the output live, as `signal.exec.output` entries. */
  threadId: idSchema.optional(),
}).strict();

/**
 * `run_command`: a synchronous shell command on the environment's shared, non-ephemeral box,
 * created on first use. The environment's env vars apply; its secrets do not (output goes back
 * to the caller, and from a bot to a model), and what the box holds of them is redacted.
 */
export type ExecBody = z.infer<typeof execSchema>;
export type ExecResult = {
  boxId: string; exitCode: number; output: string; execId?: string;
  /** The box cut the middle out of a long output (`OUTPUT_KEEP_BYTES`); `omittedBytes` of it are not here. */
  truncated?: true; omittedBytes?: number;
};

/** The answer's view of a provider's result: its output redacted (what a cut left of a secret too), a cut marked. */
function resultOf(boxId: string, r: ProviderExecResult, forms: readonly string[]): ExecResult {
  return { boxId, exitCode: r.exitCode, output: redactBoundedOutput(r.output, forms), ...(r.omittedBytes ? { truncated: true as const, omittedBytes: r.omittedBytes } : {}) };
}

/** Where a command's live output goes: a thread of the caller's house, written as the caller. */
type LiveTarget = { threadId: string; claims: HouseClaims; execId: string; idPrefix?: string };

function liveOutputTo(env: Env, t: LiveTarget): LiveOutput {
  const stub = threadStub(env, t.threadId);
  let n = 0;
  return new LiveOutput(
    t.execId,
    async (payloads) => {
      const raw = payloads.map((payload) => ({ id: `${t.idPrefix ?? t.execId}:out:${n++}`, payload }));
      // Only this command writes under its execId (see assertWritable in threads/entries.ts).
      await unwrapRpc(stub.appendEntries(t.claims.houseId, raw, { ...writerFor(t.claims), execId: t.execId }));
    },
    (err) => logEvent("exec_output_post_failed", { threadId: t.threadId, execId: t.execId, error: errorMessage(err) }, "warn"),
  );
}

/**
 * An environment of the caller's house; any other (another house's, a missing one) is the caller's
 * 404, said as `missing` (what is missing, and what to do).
 */
export async function loadEnvironment(env: Env, houseId: string, environmentId: string, missing = "environment not found"): Promise<Environment> {
  const e = (await unwrapRpc(houseStub(env, houseId).getEnvironment(environmentId))) as Environment | null;
  if (!e) throw new ApiError("not_found", missing);
  return e;
}

/**
 * The id of the one environment of the caller's house called `name`. Only the house's own are
 * looked at, so another house's environment of that name is missing here as any unknown name is.
 */
export async function environmentIdNamed(env: Env, houseId: string, name: string): Promise<string> {
  const named = ((await unwrapRpc(houseStub(env, houseId).listEnvironments())) as Environment[]).filter((e) => e.name === name);
  if (named.length === 0) throw new ApiError("not_found", `no environment named ${JSON.stringify(name)} in this house`);
  if (named.length > 1) throw new ApiError("conflict", `${named.length} environments are named ${JSON.stringify(name)}: name one by environmentId (${named.map((e) => e.id).join(", ")})`);
  return named[0].id;
}

/** Another environment of the house than a thread's, for a delegate or a bot's tool: by id or by name. */
export type EnvironmentChoice = { environmentId?: string; environmentName?: string };

export const environmentChoiceFields = { environmentId: idSchema.optional(), environmentName: environmentNameSchema.optional() };

export const oneEnvironment = <T extends EnvironmentChoice>(s: z.ZodType<T>) =>
  s.refine((a) => a.environmentId === undefined || a.environmentName === undefined, { message: "give environmentId or environmentName, not both", path: ["environmentName"] });

/**
 * The id a choice names, or undefined when it names none. A name is only a way to say an id, looked
 * up among the house's environments only: what takes the id checks it as for an id given.
 */
export async function chosenEnvironmentId(env: Env, houseId: string, choice: EnvironmentChoice): Promise<string | undefined> {
  return choice.environmentName === undefined ? choice.environmentId : environmentIdNamed(env, houseId, choice.environmentName);
}

/** What `exec` on an environment without a shared box answers: its reader can change the environment. */
export const NO_SHARED_BOX = "this environment keeps no shared box (set sharedBox: true)";

async function runOnSharedBox(env: Env, houseId: string, e: Environment, body: ExecBody, live?: LiveTarget): Promise<ExecResult> {
  if (!e.sharedBox) throw new ApiError("conflict", NO_SHARED_BOX);
  const box = await ensureSharedBox(env, houseId, e).catch((err) => { throw providerApiError(err); });
  try {
    return await execOn(env, box, e, body, live);
  } catch (err) {
    // The box the record names may be gone (a provider that lost it, a local host restarted):
    // confirmed dead, it is replaced and the command runs once more, on the new box. One that is
    // being deleted ran nothing: the command goes to the box the environment has now.
    if (!(err instanceof BoxGoing) && (!(err instanceof ProviderError && err.code === "not_found") || !(await confirmedGone(env, houseId, box.id)))) {
      throw providerApiError(err, { timeoutSec: body.timeoutSec, clientInput: "cwd" });
    }
    logEvent("shared_box_replaced", { environmentId: e.id, boxId: box.id });
    const fresh = await ensureSharedBox(env, houseId, await loadEnvironment(env, houseId, e.id)).catch((again) => { throw providerApiError(again); });
    try {
      return await execOn(env, fresh, e, body, live);
    } catch (again) {
      if (again instanceof BoxGoing) throw new ApiError("conflict", "the environment's shared box is being replaced: try again");
      throw providerApiError(again, { timeoutSec: body.timeoutSec, clientInput: "cwd" });
    }
  }
}

/** The box is being deleted (replaced by a change to the environment, or gone): nothing ran. */
class BoxGoing extends Error {
  constructor(boxId: string) {
    super(`box ${boxId} is being deleted`);
  }
}

/** Two probes in a row say the box is gone (the box's actor then records it dead). */
async function confirmedGone(env: Env, houseId: string, boxId: string): Promise<boolean> {
  const stub = sandboxStub(env, boxId);
  for (let i = 0; i < 2; i++) {
    const answer = await unwrapRpc(stub.probe(houseId));
    if (answer.confirmedDead) return true;
    if (answer.verdict !== "dead") return false;
  }
  return false;
}

/**
 * Runs the command on `box`; a provider's failure is thrown as it is. The box is held while the
 * command runs: a change to the environment that replaces it lets it go after, not during.
 */
async function execOn(env: Env, box: { id: string; providerRef: string }, e: Environment, body: ExecBody, live?: LiveTarget): Promise<ExecResult> {
  const stub = sandboxStub(env, box.id);
  const houseId = e.houseId;
  let lease: string;
  try {
    lease = await unwrapRpc(stub.beginExec(houseId, body.timeoutSec));
  } catch (err) {
    if (err instanceof ApiError && err.code === "conflict") throw new BoxGoing(box.id);
    throw err;
  }
  try {
    return await execOnHeld(env, box, e, body, live);
  } finally {
    await unwrapRpc(stub.endExec(houseId, lease)).catch((err) => logEvent("exec_release_failed", { boxId: box.id, error: errorMessage(err) }, "warn"));
  }
}

async function execOnHeld(env: Env, box: { id: string; providerRef: string }, e: Environment, body: ExecBody, live?: LiveTarget): Promise<ExecResult> {
  const provider = providerFor(env, e.provider);
  const opts = { cwd: body.cwd, env: e.env, timeoutSec: body.timeoutSec, keepOutputBytes: OUTPUT_KEEP_BYTES };
  const forms = boxSecretForms(e);
  if (!live) {
    const r = await provider.exec(box.providerRef, body.command, opts);
    return resultOf(box.id, r, forms);
  }
  const out = liveOutputTo(env, live);
  const feed = new RedactedFeed(forms, (stream, text) => out.push(stream, text));
  try {
    const r = await provider.execStreaming(box.providerRef, body.command, { ...opts, onOutput: (stream, text) => feed.write(stream, text) });
    return { ...resultOf(box.id, r, forms), execId: live.execId };
  } finally {
    feed.end();
    await out.end();
  }
}

/**
 * The `run_command` tool comes here, with the bot's claims: the same checks as the route. `missing`
 * is what a 404 for the environment says (see loadEnvironment).
 */
export async function runInEnvironment(env: Env, claims: HouseClaims, environmentId: string, body: ExecBody, live?: { threadId: string; execId: string; idPrefix?: string }, missing?: string): Promise<ExecResult> {
  return runOnSharedBox(env, claims.houseId, await loadEnvironment(env, claims.houseId, environmentId, missing), body, live && { ...live, claims });
}

/**
 * A preview link to a port on the environment's shared box, if that box is up (it is never created
 * for this); else why not: the environment keeps no shared box at all, or its box is not made yet.
 */
export async function previewInEnvironment(env: Env, claims: HouseClaims, environmentId: string, port: number, expiresInSeconds: number, missing?: string) {
  const e = await loadEnvironment(env, claims.houseId, environmentId, missing);
  if (!e.sharedBox) return { unavailable: "no_shared_box" as const };
  const view = await sharedBoxView(env, claims.houseId, e);
  if (!view || view.state !== "live") return { unavailable: "not_running" as const };
  return { link: await unwrapRpc(sandboxStub(env, view.id).previewLink(claims.houseId, port, expiresInSeconds)) };
}

export async function execRoute(request: Request, env: Env, id: string | undefined): Promise<Response> {
  const claims = await houseWriter(request, env.THREADBOX_TOKEN_SECRET);
  const parsed = idSchema.safeParse(id);
  if (!parsed.success) throw new ApiError("not_found", "environment not found");
  // Authorization before validation: another house's environment answers 404 before the body is read.
  const e = await loadEnvironment(env, claims.houseId, parsed.data);
  const body = await readBody(request, execSchema);
  let live: LiveTarget | undefined;
  if (body.threadId) {
    // The thread must be the caller's (404 otherwise) before anything runs.
    await unwrapRpc(threadStub(env, body.threadId).getThread(claims.houseId));
    live = { threadId: body.threadId, claims, execId: newId("exec_") };
  }
  return json(await runOnSharedBox(env, claims.houseId, e, body, live));
}

