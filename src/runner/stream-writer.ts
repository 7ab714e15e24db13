/**
 * Ordered, retrying writer of entries to one Durable Streams thread, with idempotent producer
 * headers (Producer-Id / Producer-Epoch / Producer-Seq). Used by the mirror and the runner.
 *
 * - append() never blocks: entries queue in order.
 * - One POST in flight at a time. A batch, once sent, is frozen (same body, same seq) until the
 *   server acknowledges it, so a retry after a lost response is a duplicate the server drops.
 * - An entry over MAX_ENTRY_BYTES is cut down to it (bound-entry.ts) before it is queued.
 * - A batch stays within the worker's append limit (MAX_APPEND_BYTES): the worker refuses a larger
 *   body whole, which would drop entries that each fit.
 * - Network errors, timeouts, 5xx, 404, 408, 429, 401, 403 (non-fencing) -> retry with backoff.
 *   400/413/other 4xx -> seq is not consumed; a batch of several entries is sent again in halves
 *   until the refused entry is alone, and that one is dropped (logged with the worker's answer).
 *   403 with Producer-Epoch (fenced: a newer producer epoch exists) -> this writer stops.
 *   409 sequence gap -> adopt the server's expected seq and resend.
 * - flush(ms) waits for the queue to drain, bounded.
 */
import { backoffDelayMs } from "../domain/backoff";
import { MAX_APPEND_BYTES } from "../streams/protocol";
import { boundEntry } from "./bound-entry";

export interface StreamWriterOptions {
  /** full stream URL: <THREADBOX_STREAM_URL>/thread-<id> */
  url: string;
  /** a token, or a function giving the current one (see TokenKeeper) */
  token?: string | (() => string | undefined);
  producerId: string;
  epoch?: number;
  maxBatch?: number;
  /** largest request body a batch of several entries may make, in bytes */
  maxBatchBytes?: number;
  requestTimeoutMs?: number;
  baseDelayMs?: number;
  maxDelayMs?: number;
  log?: (msg: string) => void;
  fetchImpl?: typeof fetch;
}

export interface WireEntry {
  id?: string;
  ts?: number;
  authorId?: string;
  payload: { type: string; [k: string]: unknown };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class StreamWriter {
  private queue: WireEntry[] = [];
  private inflight: { body: string; entries: WireEntry[] } | undefined;
  /**
   * Most entries the next batch may hold: halved when a batch is refused, so the entry the worker
   * refused is found and dropped alone; doubled back towards maxBatch by each batch it takes.
   */
  private batchLimit = Number.POSITIVE_INFINITY;
  private seq = 0;
  private running = false;
  private stopped = false;
  private waiters: Array<() => void> = [];
  private wake: (() => void) | undefined;
  readonly opts: Required<Omit<StreamWriterOptions, "token" | "fetchImpl">> & Pick<StreamWriterOptions, "token" | "fetchImpl">;
  /** count of entries acknowledged by the server */
  acked = 0;
  /** count of entries dropped after a permanent rejection */
  dropped = 0;

  constructor(opts: StreamWriterOptions) {
    this.opts = {
      epoch: 0,
      maxBatch: 50,
      maxBatchBytes: MAX_APPEND_BYTES,
      requestTimeoutMs: 10_000,
      baseDelayMs: 200,
      maxDelayMs: 5_000,
      log: (m) => process.stderr.write(`[threadbox] ${m}\n`),
      ...opts,
    } as StreamWriter["opts"];
  }

  get pending(): number {
    return this.queue.length + (this.inflight?.entries.length ?? 0);
  }

  get isStopped(): boolean {
    return this.stopped;
  }

  append(...entries: WireEntry[]): void {
    if (this.stopped) return;
    this.queue.push(...entries.map((e) => boundEntry(e)));
    if (!this.running) void this.loop();
  }

  /** Wait until everything queued so far is acknowledged, or `timeoutMs` passes. true when drained. */
  async flush(timeoutMs: number): Promise<boolean> {
    if (this.pending === 0 || this.stopped) return this.pending === 0;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const drained = new Promise<boolean>((resolve) => this.waiters.push(() => resolve(true)));
    const timeout = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), timeoutMs);
    });
    const ok = await Promise.race([drained, timeout]);
    if (timer) clearTimeout(timer);
    return ok;
  }

  /** Stop retrying; whatever is still queued is abandoned. */
  stop(): void {
    this.stopped = true;
    if (this.wake) this.wake();
    for (const w of this.waiters.splice(0)) w();
  }

  private headers(): Record<string, string> {
    const h: Record<string, string> = { "content-type": "application/json" };
    const token = typeof this.opts.token === "function" ? this.opts.token() : this.opts.token;
    if (token) h.authorization = `Bearer ${token}`;
    return h;
  }

  private async loop(): Promise<void> {
    this.running = true;
    let attempt = 0;
    try {
      while (!this.stopped) {
        if (!this.inflight) {
          if (this.queue.length === 0) break;
          this.inflight = this.nextBatch();
        }
        const verdict = await this.post(this.inflight.body);
        if (verdict === "ok") {
          this.acked += this.inflight.entries.length;
          this.inflight = undefined;
          this.seq++;
          attempt = 0;
          this.batchLimit = Math.min(this.opts.maxBatch, this.batchLimit * 2);
          continue;
        }
        if (verdict === "drop") {
          // The worker takes a batch whole or not at all: one entry it refuses must not take the
          // others with it. A refused batch goes back in halves until the refused entry is alone.
          if (this.inflight.entries.length > 1) {
            this.queue.unshift(...this.inflight.entries);
            this.batchLimit = Math.ceil(this.inflight.entries.length / 2);
          } else {
            this.dropped += 1;
          }
          this.inflight = undefined;
          attempt = 0;
          continue;
        }
        if (verdict === "fenced") {
          this.opts.log(`producer ${this.opts.producerId} fenced by a newer epoch; stopping`);
          this.stopped = true;
          break;
        }
        if (verdict === "resend") continue;
        // retry with exponential backoff and jitter
        const delay = backoffDelayMs(attempt + 1, this.opts.baseDelayMs, this.opts.maxDelayMs) * (0.5 + Math.random() / 2);
        attempt = Math.min(attempt + 1, 20);
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, delay);
          this.wake = () => {
            if (this.stopped) {
              clearTimeout(t);
              resolve();
            }
          };
        });
        this.wake = undefined;
      }
    } finally {
      this.running = false;
      if (this.pending === 0 || this.stopped) for (const w of this.waiters.splice(0)) w();
    }
  }

  /** The longest prefix of the queue within maxBatch entries and maxBatchBytes (at least one entry). */
  private nextBatch(): { body: string; entries: WireEntry[] } {
    const parts: string[] = [];
    let bytes = 2; // the brackets
    const most = Math.min(this.opts.maxBatch, this.batchLimit);
    while (parts.length < most && parts.length < this.queue.length) {
      const part = JSON.stringify(this.queue[parts.length]);
      const size = utf8Length(part) + (parts.length > 0 ? 1 : 0);
      if (parts.length > 0 && bytes + size > this.opts.maxBatchBytes) break;
      parts.push(part);
      bytes += size;
    }
    const entries = this.queue.splice(0, parts.length);
    return { body: `[${parts.join(",")}]`, entries };
  }

  private async post(body: string): Promise<"ok" | "retry" | "drop" | "fenced" | "resend"> {
    const f = this.opts.fetchImpl ?? fetch;
    let res: Response;
    try {
      res = await f(this.opts.url, {
        method: "POST",
        headers: {
          ...this.headers(),
          "Producer-Id": this.opts.producerId,
          "Producer-Epoch": String(this.opts.epoch),
          "Producer-Seq": String(this.seq),
        },
        body,
        signal: AbortSignal.timeout(this.opts.requestTimeoutMs),
      });
    } catch (err) {
      this.opts.log(`POST failed (${(err as Error)?.name ?? "error"}); will retry`);
      return "retry";
    }
    const s = res.status;
    // Read whole either way (the connection is reused); a refusal's words go to the log.
    const answer = await res.text().catch(() => "");
    if (s >= 200 && s < 300) return "ok";
    if (s === 409) {
      const expected = Number(res.headers.get("producer-expected-seq"));
      if (Number.isInteger(expected) && expected >= 0 && expected !== this.seq) {
        this.opts.log(`producer seq gap: server expects ${expected}, had ${this.seq}`);
        this.seq = expected;
        return "resend";
      }
      return "retry";
    }
    if (s === 403 && res.headers.get("producer-epoch") !== null) return "fenced";
    if (s >= 500 || s === 404 || s === 408 || s === 429 || s === 401 || s === 403) {
      this.opts.log(`POST answered ${s}; will retry`);
      return "retry";
    }
    const count = this.inflight?.entries.length ?? 0;
    this.opts.log(count > 1
      ? `POST rejected with ${s}; sending its ${count} entries again in smaller batches to find the refused one`
      : `POST rejected with ${s}; dropping the entry${answer ? ` (${answer.slice(0, 500)})` : ""}`);
    return "drop";
  }
}

/** POST a heartbeat (no producer headers). Never throws. */
export async function postHeartbeat(url: string, token: string | undefined, timeoutMs = 5_000): Promise<boolean> {
  try {
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (token) headers.authorization = `Bearer ${token}`;
    const res = await fetch(url, {
      method: "POST",
      headers,
      body: JSON.stringify({ payload: { type: "signal.heartbeat" } }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    await res.arrayBuffer().catch(() => undefined);
    return res.ok;
  } catch {
    return false;
  }
}

/**
 * Read the whole thread: GET ?offset=-1, then follow Stream-Next-Offset until
 * Stream-Up-To-Date. Throws on a network error or a non-2xx answer.
 */
export async function readThread(url: string, token: string | undefined, timeoutMs = 10_000): Promise<WireEntry[]> {
  const out: WireEntry[] = [];
  let offset = "-1";
  for (let guard = 0; guard < 100_000; guard++) {
    const headers: Record<string, string> = { accept: "application/json" };
    if (token) headers.authorization = `Bearer ${token}`;
    const res = await fetch(`${url}?offset=${encodeURIComponent(offset)}`, { headers, signal: AbortSignal.timeout(timeoutMs) });
    if (!res.ok) {
      await res.arrayBuffer().catch(() => undefined);
      throw new Error(`GET ${res.status}`);
    }
    const text = await res.text();
    if (text.trim()) {
      const parsed = JSON.parse(text);
      if (Array.isArray(parsed)) out.push(...parsed);
      else out.push(parsed);
    }
    const next = res.headers.get("stream-next-offset");
    const upToDate = res.headers.get("stream-up-to-date") === "true";
    if (upToDate || !next || next === offset) break;
    offset = next;
  }
  return out;
}

const encoder = new TextEncoder();
function utf8Length(s: string): number {
  return encoder.encode(s).byteLength;
}

export function threadStreamUrl(base: string, threadId: string): string {
  return `${base.replace(/\/+$/, "")}/thread-${threadId}`;
}

export { sleep };
