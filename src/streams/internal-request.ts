import { AUTH_HEADER, TARGET_HEADER, type ActorAuth, type StreamTarget } from "../actors/thread/thread-actor";

/**
 * A request from the control plane itself to a plain stream's actor, in the shape the worker's
 * stream route forwards (auth and target as headers): the protocol's own semantics apply.
 */
export function plainStreamRequest(houseId: string, name: string, method: string, init: { search?: string; body?: BodyInit; contentType?: string } = {}): Request {
  const auth: ActorAuth = { houseId, subject: "threadbox", canWrite: method !== "GET", mayAuthorAsOthers: false, mayNameBox: false };
  const target: StreamTarget = { kind: "plain", name };
  const headers = new Headers({ [AUTH_HEADER]: JSON.stringify(auth), [TARGET_HEADER]: JSON.stringify(target) });
  if (init.contentType) headers.set("content-type", init.contentType);
  return new Request(`https://actor/stream${init.search ?? ""}`, { method, headers, body: init.body });
}
