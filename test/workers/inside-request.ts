/**
 * Interleavings driven from inside one request. A test that has an actor wait on a promise the
 * test resolves makes one request await what another request context settles; workerd may never
 * wake it, and the run then stalls, idle, until vitest gives up. Instead, the actor's hook runs a
 * step the test wrote (its requests made from inside the actor's request, one after another) and
 * the test reads what the step saw once that request has answered: no promise crosses requests,
 * and every wait has a timer that fails the case, saying what never answered.
 */

/** `p`, or a failure naming `what` once `ms` pass: a request that never answers fails its case instead of stalling the run. */
export async function within<T>(p: Promise<T>, what: string, ms = 15_000): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A step for an actor's hook to run inside its request, and what it saw, for the test to read after. */
export type Step<T> = {
  /** Called by the hook: runs the step for at most `ms` and never throws (the actor then goes on as it would). */
  run(): Promise<void>;
  /** What the step returned; throws saying so if it never ran, failed or ran out of time. */
  value(): T;
};

/** Shorter than `within`'s default, so the request the step runs inside still answers before its own timer. */
export const STEP_MS = 8_000;

export function step<T>(what: string, fn: () => Promise<T>, ms = STEP_MS): Step<T> {
  let seen: { value: T } | { error: string } | undefined;
  return {
    async run() {
      try {
        seen = { value: await within(fn(), what, ms) };
      } catch (err) {
        const message = err instanceof Error ? err.message : String(err);
        seen = { error: message.startsWith(`${what}: no answer`) ? message : `${what} failed: ${message}` };
      }
    },
    value() {
      if (seen === undefined) throw new Error(`${what}: never ran (the hook was not reached)`);
      if ("error" in seen) throw new Error(seen.error);
      return seen.value;
    },
  };
}
