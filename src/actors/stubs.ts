import type { Env } from "../env";
import type { ForkLinks } from "../streams/fork";
import { unwrapRpc } from "./rpc";

/** Every actor address in one place: the naming of a Durable Object is part of its storage identity. */

export const threadStub = (env: Env, threadId: string) => env.THREADS.get(env.THREADS.idFromName(`thread:${threadId}`));

export const plainStreamStub = (env: Env, houseId: string, name: string) =>
  env.THREADS.get(env.THREADS.idFromName(plainStreamKey(houseId, name)));

/**
 * House ids and stream names may both contain ':'. Keys without one keep their original
 * `stream:<house>:<name>` form (unambiguous with exactly two separators, so existing streams stay
 * reachable); any other pair is length-prefixed under a prefix the first form can never produce.
 */
export function plainStreamKey(houseId: string, name: string): string {
  if (!houseId.includes(":") && !name.includes(":")) return `stream:${houseId}:${name}`;
  return `stream2:${houseId.length}:${houseId}:${name}`;
}

export const houseStub = (env: Env, houseId: string) => env.HOUSES.get(env.HOUSES.idFromName(houseId));

export const sandboxStub = (env: Env, boxId: string) => env.SANDBOXES.get(env.SANDBOXES.idFromName(boxId));

/** How a plain stream's actor reaches the actors of the streams it forks from (by routing key). */
export function streamForkLinks(env: Env, selfKey: string): ForkLinks {
  const actor = (key: string) => env.THREADS.get(env.THREADS.idFromName(key));
  return {
    selfKey,
    acquire: (key, req) => unwrapRpc(actor(key).forkAcquire(req)),
    readPrefix: (key, req) => unwrapRpc(actor(key).forkReadPrefix(req)),
    release: (key, houseId, childKey) => unwrapRpc(actor(key).forkRelease(houseId, childKey)),
  };
}
