export type BoxState = "provisioning" | "live" | "dead" | "deleted";

export type BoxRowView = { ephemeral: boolean; state: BoxState; runningThreads: number; deletePending: boolean };

/** An ephemeral box with no running thread is deleted; a shared box never is; a tombstone stays one. */
export function shouldReap(box: BoxRowView): boolean {
  return box.ephemeral && box.runningThreads === 0 && (box.state === "live" || box.state === "provisioning" || box.state === "dead") && !box.deletePending;
}

export const DELETE_BACKOFF_BASE_MS = 5_000;
export const DELETE_BACKOFF_MAX_MS = 10 * 60_000;

/** Exponential backoff for delete retries: 5 s, 10 s, 20 s, ... capped at 10 min. */
export function deleteRetryDelayMs(attempts: number): number {
  return Math.min(DELETE_BACKOFF_MAX_MS, DELETE_BACKOFF_BASE_MS * 2 ** Math.max(0, attempts - 1));
}
