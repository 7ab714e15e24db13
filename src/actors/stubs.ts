import type { Env } from "../env";
import type { ForkLinks } from "../streams/fork";
import { unwrapRpc } from "./rpc";

/** Every actor address in one place: the naming of a Durable Object is part of its storage identity. */

/** Most names whose ids are kept per namespace; the oldest goes first once it is full. */
export const ID_CACHE_NAMES = 4096;
const idCaches = new WeakMap<object, Map<string, DurableObjectId>>();

/**
 * `idFromName` hashes the name on every call, and the same few thread names take most of the
 * traffic; an id carries no request's I/O, so one computed for an earlier request serves this one.
 */
export function idFor(ns: { idFromName(name: string): DurableObjectId }, name: string): DurableObjectId {
  let cache = idCaches.get(ns);
  if (!cache) idCaches.set(ns, (cache = new Map()));
  let id = cache.get(name);
  if (id === undefined) {
    id = ns.idFromName(name);
    if (cache.size >= ID_CACHE_NAMES) cache.delete(cache.keys().next().value!);
    cache.set(name, id);
  }
  return id;
}

export const threadStub = (env: Env, threadId: string) => env.THREADS.get(idFor(env.THREADS, `thread:${threadId}`));

export const plainStreamStub = (env: Env, houseId: string, name: string) =>
  env.THREADS.get(idFor(env.THREADS, plainStreamKey(houseId, name)));

/**
 * House ids and stream names may both contain ':'. Keys without one keep their original
 * `stream:<house>:<name>` form (unambiguous with exactly two separators, so existing streams stay
 * reachable); any other pair is length-prefixed under a prefix the first form can never produce.
 */
export function plainStreamKey(houseId: string, name: string): string {
  if (!houseId.includes(":") && !name.includes(":")) return `stream:${houseId}:${name}`;
  return `stream2:${houseId.length}:${houseId}:${name}`;
}

export const houseStub = (env: Env, houseId: string) => env.HOUSES.get(idFor(env.HOUSES, houseId));

export const sandboxStub = (env: Env, boxId: string) => env.SANDBOXES.get(env.SANDBOXES.idFromName(boxId));

/** How a plain stream's actor reaches the actors of the streams it forks from (by routing key). */
export function streamForkLinks(env: Env, selfKey: string): ForkLinks {
  const actor = (key: string) => env.THREADS.get(idFor(env.THREADS, key));
  return {
    selfKey,
    acquire: (key, req) => unwrapRpc(actor(key).forkAcquire(req)),
    readPrefix: (key, req) => unwrapRpc(actor(key).forkReadPrefix(req)),
    release: (key, houseId, childKey) => unwrapRpc(actor(key).forkRelease(houseId, childKey)),
  };
}
