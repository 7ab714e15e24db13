// Requests whose answer may have been lost (a server restart, a dropped network) sent again, so
// that a lost answer neither loses the user's action nor does it twice.
import { ApiError } from "./api";
import { randomId } from "./ids";

/** How long a request the server may not have answered is sent again before its error is shown. */
export const RESEND_FOR_MS = 60_000;

/**
 * No answer from threadbox (the network failed, or a proxy in front answered 502–504 while the
 * server was away): the request may or may not have been done. Threadbox's own refusals (its JSON
 * error) are its answer.
 */
export const transient = (err: unknown) => err instanceof ApiError
  && (err.status === 0 || ([502, 503, 504].includes(err.status) && err.code === `http_${err.status}`));

/**
 * Runs `send` (a request that is safe to repeat: one carrying its entry's id or an Idempotency-Key)
 * again after a transient error, with backoff, for up to `forMs`; `onRetry` is told before each wait.
 */
export async function retrying<T>(send: () => Promise<T>, opts: { forMs?: number; onRetry?: () => void } = {}): Promise<T> {
  const until = Date.now() + (opts.forMs ?? RESEND_FOR_MS);
  for (let attempt = 0; ; attempt++) {
    try {
      return await send();
    } catch (err) {
      const delay = Math.min(5_000, 250 * 2 ** attempt);
      if (!transient(err) || Date.now() + delay > until) throw err;
      opts.onRetry?.();
      await new Promise((r) => setTimeout(r, delay));
    }
  }
}

/**
 * The Idempotency-Key of one user action that makes something (a thread, a child, a run). The key
 * stays with the action until the server has answered it: pressed again after the retries gave up
 * with no answer, the same action (the same body) goes under the same key, so the server still
 * makes one. Once answered (done, or refused), or for another body, it is a new action.
 */
export class ActionKey {
  private open: { body: string; key: string } | null = null;

  /** `forMs`: how long each press is sent again while no answer comes. */
  constructor(private readonly forMs = RESEND_FOR_MS) {}

  /** Sends `body` under its action's key with `send`, asking again while no answer comes. */
  async send<T>(body: unknown, send: (key: string) => Promise<T>, onRetry?: () => void): Promise<T> {
    const text = JSON.stringify(body);
    if (this.open?.body !== text) this.open = { body: text, key: randomId() };
    const { key } = this.open;
    try {
      const answer = await retrying(() => send(key), { forMs: this.forMs, onRetry });
      this.open = null;
      return answer;
    } catch (err) {
      if (!transient(err)) this.open = null;
      throw err;
    }
  }
}
