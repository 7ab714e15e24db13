type Waiter = { deadlineMs: number; finish: (r: "changed" | "timeout") => void };

/** Wakes long-polls and SSE loops parked on a stream when something changes. In memory only. */
export class WaitHub {
  private waiters = new Set<Waiter>();
  /** What the waiters woken by one change compute alike, computed once; every change starts it afresh. */
  private memo = new Map<string, unknown>();
  // One timer for the whole hub, armed for the earliest deadline: 50 parked long-polls re-parking
  // after every append would otherwise create and clear 50 runtime timers per append.
  private timer: ReturnType<typeof setTimeout> | null = null;
  private timerAtMs = Infinity;

  wait(timeoutMs: number, signal?: AbortSignal): Promise<"changed" | "timeout"> {
    return new Promise((resolve) => {
      const onAbort = () => waiter.finish("timeout");
      const waiter: Waiter = {
        deadlineMs: Date.now() + timeoutMs,
        finish: (r) => {
          if (!this.waiters.delete(waiter)) return;
          signal?.removeEventListener("abort", onAbort);
          resolve(r);
        },
      };
      this.waiters.add(waiter);
      signal?.addEventListener("abort", onAbort);
      if (waiter.deadlineMs < this.timerAtMs) this.arm(waiter.deadlineMs);
    });
  }

  /**
   * The value for `key` since the last change: the first caller computes it, the others get the
   * same (50 long-polls woken by one append read and format the same page once, not 50 times).
   */
  shared<T>(key: string, compute: () => T): T {
    if (this.memo.has(key)) return this.memo.get(key) as T;
    const value = compute();
    this.memo.set(key, value);
    return value;
  }

  notify(): void {
    this.memo.clear();
    const all = [...this.waiters];
    for (const w of all) w.finish("changed");
    this.disarm();
  }

  get size(): number {
    return this.waiters.size;
  }

  private arm(atMs: number): void {
    this.disarm();
    this.timerAtMs = atMs;
    this.timer = setTimeout(() => this.expire(), Math.max(0, atMs - Date.now()));
  }

  private disarm(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.timerAtMs = Infinity;
  }

  /** Times out every waiter whose deadline has passed, then arms for the next one. */
  private expire(): void {
    this.disarm();
    const nowMs = Date.now();
    let next = Infinity;
    for (const w of [...this.waiters]) {
      if (w.deadlineMs <= nowMs) w.finish("timeout");
      else next = Math.min(next, w.deadlineMs);
    }
    if (next < Infinity) this.arm(next);
  }
}
