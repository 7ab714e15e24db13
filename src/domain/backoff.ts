/** Exponential backoff: `baseMs` after the first failure, doubling, capped at `maxMs`. */
export function backoffDelayMs(attempts: number, baseMs: number, maxMs: number): number {
  return Math.min(maxMs, baseMs * 2 ** Math.max(0, attempts - 1));
}
