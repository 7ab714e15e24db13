import type { Env } from "../env";
import type { ForkLinks } from "../streams/fork";
import { unwrapRpc } from "./rpc";

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
