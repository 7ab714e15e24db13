/**
 * One structured log line per notable event. Callers pass ids and codes, never tokens, secrets or
 * entry bodies.
 */
export function logEvent(event: string, fields: Record<string, unknown> = {}, level: "log" | "warn" | "error" = "log"): void {
  console[level](JSON.stringify({ event, ...fields }));
}

/**
 * An error's words, for a log line or a reader. An ApiError's message carries its details and
 * headers after a NUL, as JSON (errors.ts: all an actor's RPC keeps of a thrown error); that part
 * is for rebuilding the error, not for reading, and is cut here.
 */
export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message.split("\u0000")[0] : String(err);
}
