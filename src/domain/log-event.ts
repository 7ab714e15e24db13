/**
 * One structured log line per notable event. Callers pass ids and codes, never tokens, secrets or
 * entry bodies.
 */
export function logEvent(event: string, fields: Record<string, unknown> = {}, level: "log" | "warn" | "error" = "log"): void {
  console[level](JSON.stringify({ event, ...fields }));
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
