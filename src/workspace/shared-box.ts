import type { Env } from "../env";
import { ApiError } from "../errors";
import { apiUrlProblem, type Environment } from "../environments";
import { unwrapRpc } from "../actors/rpc";
import { houseStub, sandboxStub } from "../actors/stubs";
import { providerFor } from "../sandbox/providers";
import { ProviderError } from "../sandbox/errors";
import { newId } from "../http/actors";
import { egressSettings, providerVolumes } from "./box-config";
import { LABEL_SPEC } from "../sandbox/provider";
import { errorMessage, logEvent } from "../domain/log-event";
import { createBox, deleteUnregisteredBox } from "../actors/sandbox/late-box";

/**
 * The environment's one long-lived box (`boxMode: "shared"`): created on first use, then used by
 * `run_command`, previews and delegated runs alike, and never reaped. Two first uses at once
 * agree on one box through the house (the loser's box is deleted). A provider's failure is thrown
 * as it is: a run's launch names it in its reason (as for a box of its own), an HTTP route maps
 * it for its client.
 */
export async function ensureSharedBox(env: Env, houseId: string, e: Environment): Promise<{ id: string; providerRef: string; created: boolean }> {
  const apiUrlRefused = apiUrlProblem(env.DAYTONA_API_URL, e.apiUrl);
  if (apiUrlRefused) throw new ApiError("bad_request", `environment ${e.id}: ${apiUrlRefused}`);
  const provider = providerFor(env, e.provider);
  const spec = sharedBoxSpec(env, houseId, e);
  const key = await specKey(e.provider, spec);
  // A box that is gone or unreadable is replaced, and so is one made with settings the
  // environment no longer has (egress, volumes, image): a box keeps what it was created with.
  const current = await sharedBoxView(env, houseId, e);
  const stale = !!current && current.labels[LABEL_SPEC] !== undefined && current.labels[LABEL_SPEC] !== key;
  if (current && current.state === "live" && !stale) {
    // A box the provider stopped for idleness is still this environment's box: it is started
    // again, or every command and run on it would fail for good. One that is gone is left to
    // the callers, which confirm that before replacing it.
    try {
      await provider.ensureStarted(current.providerRef);
    } catch (err) {
      if (!(err instanceof ProviderError && err.code === "not_found")) throw err;
    }
    return { id: current.id, providerRef: current.providerRef, created: false };
  }
  const info = await createBox(env, houseId, e.provider, { labels: { house: houseId, environment: e.id, spec: key }, ephemeral: false, env: e.env, ...spec });
  const boxId = newId("box_");
  let view;
  try {
    view = await unwrapRpc(sandboxStub(env, boxId).register({
      boxId, houseId, provider: e.provider, providerRef: info.ref, ephemeral: false, labels: info.labels, claimFor: e.id,
    }));
  } catch (err) {
    // No actor has the box: nothing else would ever delete it (a box that may be left is what is thrown then).
    await deleteUnregisteredBox(env, houseId, e.provider, info.ref);
    throw err;
  }
  // The environment deleted, or keeping no shared box any more, while its box was made, or another
  // first use's box won: no environment will ever use or delete this box, and a shared box is never
  // reaped. It is retired (deleted now: nothing runs on it); the house, which recorded that when it
  // did not take the box, retries a retire that does not reach the box.
  const letGo = (retriedBy?: string) => retireSharedBox(env, houseId, e.id, boxId, retriedBy);
  let winner: string | null;
  try {
    winner = (await unwrapRpc(houseStub(env, houseId).claimSharedBox(e.id, boxId, e.sharedBoxId ?? null, houseId))) as string | null;
  } catch (err) {
    // Refused, or the house not reached: then nothing recorded it, and a retire that does not reach
    // the box either is carried out by the box itself, whose claim was never confirmed (see claimFor).
    await letGo(err instanceof ApiError ? undefined : "the box's claim check");
    throw err;
  }
  if (winner === null) {
    await letGo();
    throw new ApiError("not_found", "environment not found");
  }
  if (winner !== boxId) {
    await letGo();
    const other = await unwrapRpc(sandboxStub(env, winner).view(houseId));
    return { id: other.id, providerRef: other.providerRef, created: false };
  }
  // Whatever made it replaced (stale, gone, or only unreadable for a moment, and then still live
  // at the provider), the box the environment had is no longer its box: nothing would delete it.
  // Taken: the box need not ask the house about its claim (it asks later if this is not heard).
  await unwrapRpc(sandboxStub(env, boxId).claimed(houseId)).catch((err) =>
    logEvent("shared_box_claim_unconfirmed", { environmentId: e.id, boxId, checkedBy: "the box's claim check", error: errorMessage(err) }, "warn"));
  if (e.sharedBoxId) await retireSharedBox(env, houseId, e.id, e.sharedBoxId);
  return { id: view.id, providerRef: view.providerRef, created: true };
}

/** What the provider creates an environment's boxes with: what a box keeps from its creation. */
export function sharedBoxSpec(env: Env, houseId: string, e: Environment) {
  return {
    snapshot: e.snapshot, image: e.image, egress: egressSettings(e.egress, env.THREADBOX_STREAM_URL), volumes: providerVolumes(houseId, e.volumes),
    ...(e.target ? { target: e.target } : {}),
  };
}

async function specKey(provider: string, spec: ReturnType<typeof sharedBoxSpec>): Promise<string> {
  // A target only when set: the boxes of environments without one keep the key they were made with.
  const bytes = new TextEncoder().encode(JSON.stringify([provider, spec.snapshot ?? null, spec.image ?? null, spec.egress ?? null, spec.volumes, ...(spec.target ? [spec.target] : [])]));
  const d = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(d.slice(0, 8), (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * A box the environment no longer keeps as its shared one: reaped as an ephemeral box is, now if
 * nothing runs on it, else when its last run ends. Its actor retries a delete the provider fails
 * until the provider confirms; a retire that does not reach the actor is retried by the house's
 * alarm (the house recorded it when it let the box go), so a failure here is only logged.
 */
export async function retireSharedBox(env: Env, houseId: string, environmentId: string, boxId: string, retriedBy = "house alarm"): Promise<void> {
  try {
    await unwrapRpc(sandboxStub(env, boxId).retire(houseId));
  } catch (err) {
    logEvent("shared_box_retire_failed", { environmentId, boxId, retriedBy, error: errorMessage(err) }, "warn");
    return;
  }
  await unwrapRpc(houseStub(env, houseId).boxRetired(boxId)).catch((err) =>
    logEvent("shared_box_retire_unrecorded", { environmentId, boxId, error: errorMessage(err) }, "warn"));
}

/** The environment's shared box as its actor sees it; null when it has none or the box cannot be read (logged). */
export async function sharedBoxView(env: Env, houseId: string, e: Environment) {
  if (!e.sharedBoxId) return null;
  return unwrapRpc(sandboxStub(env, e.sharedBoxId).view(houseId)).catch((err) => {
    logEvent("shared_box_unavailable", { environmentId: e.id, boxId: e.sharedBoxId, error: errorMessage(err) }, "warn");
    return null;
  });
}
