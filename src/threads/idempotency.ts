import { ApiError } from "../errors";

export const IDEMPOTENCY_HEADER = "idempotency-key";
const KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;

/** The request's Idempotency-Key, or null without one. 1-255 visible ASCII characters. */
export function idempotencyKey(request: Request): string | null {
  const raw = request.headers.get(IDEMPOTENCY_HEADER);
  if (raw === null) return null;
  if (!KEY_PATTERN.test(raw)) throw new ApiError("validation_failed", "Idempotency-Key must be 1-255 visible ASCII characters", [{ path: "Idempotency-Key", message: "1-255 visible ASCII characters" }]);
  return raw;
}

async function sha256Hex(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * A retried create lands on the same thread: its id is derived from who asked (house and subject)
 * and the key, so the retry reaches the same actor, which already holds the row.
 */
export async function idempotentThreadId(houseId: string, subject: string, key: string): Promise<string> {
  return `th_${(await sha256Hex(JSON.stringify(["thread", houseId, subject, key]))).slice(0, 24)}`;
}

/** A retried `POST /api/sandboxes` reaches the same box actor, which holds the box the first one made. */
export async function idempotentBoxId(houseId: string, subject: string, key: string): Promise<string> {
  return `box_${(await sha256Hex(JSON.stringify(["sandbox", houseId, subject, key]))).slice(0, 24)}`;
}

/**
 * The child thread and run a delegation with an Idempotency-Key makes: the same on a retry, so
 * the retry finds them instead of starting a second child (a run id, shaped like a UUID).
 */
export async function idempotentDelegation(houseId: string, subject: string, parentId: string, key: string): Promise<{ childId: string; runId: string }> {
  const h = await sha256Hex(JSON.stringify(["delegate", houseId, subject, parentId, key]));
  return { childId: `th_${h.slice(0, 24)}`, runId: `${h.slice(24, 32)}-${h.slice(32, 36)}-${h.slice(36, 40)}-${h.slice(40, 44)}-${h.slice(44, 56)}` };
}

/**
 * The run a resume with an Idempotency-Key starts: the same on a retry, so the retry finds the run
 * the first request started (its claim is on the log) instead of starting another.
 */
export async function idempotentResumeRunId(houseId: string, subject: string, threadId: string, key: string): Promise<string> {
  const h = await sha256Hex(JSON.stringify(["resume", houseId, subject, threadId, key]));
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20, 32)}`;
}

/** What the first request asked for; the same key with another body is refused, not replayed. */
export function requestFingerprint(body: unknown): Promise<string> {
  return sha256Hex(JSON.stringify(body));
}
