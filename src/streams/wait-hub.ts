/** Wakes long-polls and SSE loops parked on a stream when something changes. In memory only. */
export class WaitHub {
  private waiters = new Set<() => void>();
  /** What the waiters woken by one change compute alike, computed once; every change starts it afresh. */
  private memo = new Map<string, unknown>();

  wait(timeoutMs: number, signal?: AbortSignal): Promise<"changed" | "timeout"> {
    return new Promise((resolve) => {
      let done = false;
      const finish = (r: "changed" | "timeout") => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        this.waiters.delete(wake);
        signal?.removeEventListener("abort", onAbort);
        resolve(r);
      };
      const wake = () => finish("changed");
      const onAbort = () => finish("timeout");
      const timer = setTimeout(() => finish("timeout"), timeoutMs);
      this.waiters.add(wake);
      signal?.addEventListener("abort", onAbort);
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
    this.waiters.clear();
    for (const w of all) w();
  }

  get size(): number {
    return this.waiters.size;
  }
}
