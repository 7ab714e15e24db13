/** Wakes long-polls and SSE loops parked on a stream when something changes. In memory only. */
export class WaitHub {
  private waiters = new Set<() => void>();

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

  notify(): void {
    const all = [...this.waiters];
    this.waiters.clear();
    for (const w of all) w();
  }

  get size(): number {
    return this.waiters.size;
  }
}
