/**
 * Follows the run's own thread through the stream path the box already writes to: a catch-up read
 * from the start, then long-polls from the last offset. No inbound channel into the box is needed.
 */
import type { WireEntry } from "./stream-writer";

export interface ThreadWatchOptions {
  url: string;
  token: () => string | undefined;
  /** Called with each page of entries, in order; `live` is false while catching up. */
  onEntries: (entries: WireEntry[], live: boolean) => void;
  /** Called once when the catch-up read reached the tail. */
  onCaughtUp?: () => void;
  log?: (m: string) => void;
  fetchImpl?: typeof fetch;
  /**
   * A read not answered by then is abandoned and made again from the same offset. The server
   * answers a long-poll within its LONG_POLL_TIMEOUT_MS (20 s by default); a read past this is
   * hung (a connection that died without closing), and messages would wait minutes for the socket's own timeouts.
   */
  requestTimeoutMs?: number;
}

const DEFAULT_READ_TIMEOUT_MS = 60_000;

export class ThreadWatch {
  private readonly abort = new AbortController();
  private stopped = false;
  private done: Promise<void> | undefined;

  constructor(private readonly o: ThreadWatchOptions) {}

  start(): void {
    this.done ??= this.loop();
  }

  /** Stops following; true once the last read has ended, false if it has not within `graceMs`. */
  async stop(graceMs = 2_000): Promise<boolean> {
    this.stopped = true;
    this.abort.abort();
    if (!this.done) return true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const ended = await Promise.race([
      this.done.then(() => true, () => true),
      new Promise<boolean>((r) => { timer = setTimeout(() => r(false), graceMs); }),
    ]);
    clearTimeout(timer);
    return ended;
  }

  private async loop(): Promise<void> {
    const f = this.o.fetchImpl ?? fetch;
    let offset = "-1";
    let live = false;
    let failures = 0;
    while (!this.stopped) {
      try {
        const headers: Record<string, string> = { accept: "application/json" };
        const token = this.o.token();
        if (token) headers.authorization = `Bearer ${token}`;
        const q = `offset=${encodeURIComponent(offset)}${live ? "&live=long-poll" : ""}`;
        const signal = AbortSignal.any([this.abort.signal, AbortSignal.timeout(this.o.requestTimeoutMs ?? DEFAULT_READ_TIMEOUT_MS)]);
        const res = await f(`${this.o.url}?${q}`, { headers, signal });
        const text = await res.text();
        if (res.status >= 400) throw new Error(`GET ${res.status}`);
        if (text.trim()) {
          const parsed = JSON.parse(text);
          const entries = (Array.isArray(parsed) ? parsed : [parsed]) as WireEntry[];
          if (entries.length) this.o.onEntries(entries, live);
        }
        offset = res.headers.get("stream-next-offset") ?? offset;
        if (!live && res.headers.get("stream-up-to-date") === "true") {
          live = true;
          this.o.onCaughtUp?.();
        }
        failures = 0;
      } catch (err) {
        if (this.stopped) return;
        failures += 1;
        this.o.log?.(`watching the thread failed (${(err as Error).message}); retrying`);
        await new Promise((r) => setTimeout(r, Math.min(5_000, 250 * 2 ** Math.min(failures, 5))));
      }
    }
  }
}
