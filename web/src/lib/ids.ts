/**
 * A random id for an entry or an Idempotency-Key. `crypto.randomUUID` exists only in a secure
 * context (https, or loopback): a server reached over plain http by its LAN address would have no
 * way to post. `getRandomValues` exists everywhere.
 */
export function randomId(prefix = "ui-"): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return prefix + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
