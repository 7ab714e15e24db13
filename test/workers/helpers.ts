import { SELF, env, runInDurableObject } from "cloudflare:test";
import { mintHouseToken, mintRunToken, mintStreamToken } from "../../src/auth/tokens";
import { idempotentDelegation } from "../../src/threads/idempotency";
import type { ThreadActor } from "./test-worker";

export const BASE = "http://threadbox.test";
export const ADMIN = "test-admin-secret";
const secret = () => (env as unknown as { THREADBOX_TOKEN_SECRET: string }).THREADBOX_TOKEN_SECRET;

export async function houseToken(houseId = "house-a", subject = "alice", role = "owner") {
  return (await mintHouseToken(secret(), houseId, subject, role)).token;
}

export async function streamToken(houseId: string, threadId: string, scope: "stream:write" | "stream:read" = "stream:write", ttlSeconds?: number, nowMs?: number) {
  return (await mintStreamToken(secret(), houseId, threadId, scope, undefined, ttlSeconds, nowMs)).token;
}

/** The token run `runId`'s box writes with (as the launch mints it). */
export async function runToken(houseId: string, threadId: string, runId: string, subject = "alice") {
  return (await mintRunToken(secret(), houseId, threadId, runId, subject)).token;
}

/** The headers of a WebSocket handshake, as a real client sends them (SELF.fetch adds none). */
export const WEBSOCKET_HANDSHAKE = { upgrade: "websocket", "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==", "sec-websocket-version": "13" } as const;

export function call(path: string, init: RequestInit & { token?: string; json?: unknown } = {}) {
  const headers = new Headers(init.headers);
  if (init.token) headers.set("authorization", `Bearer ${init.token}`);
  let body = init.body;
  if (init.json !== undefined) {
    headers.set("content-type", "application/json");
    body = JSON.stringify(init.json);
  }
  return SELF.fetch(`${BASE}${path}`, { ...init, headers, body });
}

export async function createThread(token: string, body: Record<string, unknown> = {}) {
  const r = await call("/api/threads", { method: "POST", token, json: body });
  if (r.status !== 201) throw new Error(`create thread: ${r.status} ${await r.text()}`);
  return (await r.json()) as { id: string; houseId: string; status: string; parent: { kind: string; id: string | null } };
}

export async function post(token: string, threadId: string, entries: unknown) {
  return call(`/api/threads/${threadId}/entries`, { method: "POST", token, json: entries });
}

export async function readAll(token: string, threadId: string, offset = "-1") {
  const r = await call(`/api/threads/${threadId}/entries?offset=${offset}`, { token });
  if (r.status !== 200) throw new Error(`read: ${r.status} ${await r.text()}`);
  return (await r.json()) as { entries: { id: string; offset: string; authorId?: string; payload: { type: string; [k: string]: unknown } }[]; nextOffset: string; upToDate: boolean };
}

/**
 * Delegates `body` in `parent` so that its child's run can launch: the child's actor gets a
 * THREADBOX_STREAM_URL before the delegate, since the launch runs from an alarm due as soon as the
 * delegate commits (set after the answer, it raced that alarm). `subject` is the token's.
 */
export async function delegateLaunchable(token: string, parent: { id: string; houseId: string }, body: Record<string, unknown>, subject = "alice") {
  const key = `launchable-${crypto.randomUUID()}`;
  const { childId } = await idempotentDelegation(parent.houseId, subject, parent.id, key);
  const threads = (env as unknown as { THREADS: DurableObjectNamespace<ThreadActor> }).THREADS;
  await runInDurableObject(threads.get(threads.idFromName(`thread:${childId}`)), (a: ThreadActor) => a.setTestEnv({ THREADBOX_STREAM_URL: "http://stream.test/api/stream" }));
  const d = await call(`/api/threads/${parent.id}/delegate`, { method: "POST", token, json: body, headers: { "idempotency-key": key } });
  if (d.status !== 202) throw new Error(`delegate: ${d.status} ${await d.text()}`);
  const child = (await d.json()) as { childThreadId: string; runId: string };
  if (child.childThreadId !== childId) throw new Error(`delegate made ${child.childThreadId}, not ${childId}`);
  return child;
}

export const chat = (text: string, id?: string) => ({ ...(id ? { id } : {}), payload: { type: "chat", text } });

export async function errorCode(r: Response): Promise<string> {
  const body = (await r.json()) as { error?: { code?: string } };
  return body.error?.code ?? "";
}
