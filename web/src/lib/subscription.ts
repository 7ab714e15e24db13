// A thread's entries over the WebSocket, from an offset, across reconnects: every entry once,
// in order. The server replays everything after the offset we ask for; we remember the last
// offset we handed on and drop anything at or before it (offsets are fixed-width, sortable).
import type { Entry } from "./api";

export type LinkState = "connecting" | "live" | "reconnecting" | "closed";

export type SubscriptionOptions = {
  threadId: string;
  token: string;
  /** Offset of the last entry already seen; "-1" for the start. */
  from?: string;
  origin?: string;
  onEntry(entry: Entry): void;
  onState?(state: LinkState): void;
  /** Liveness check of a quiet socket (a dropped network often never closes it). */
  pingEveryMs?: number;
  /**
   * The server closed the socket because its token expired (4001): trying again with the same
   * token is refused for good, so the subscription ends and the token must be replaced.
   */
  onTokenExpired?(): void;
  /**
   * A socket closed before it opened. A browser hides why (a refused token's 401 looks like a
   * network failure), so the caller may ask the server over HTTP, where a 401 can be seen.
   */
  onFailedToOpen?(): void;
};

/** Close codes the server sends (src/actors/thread/fanout.ts). */
export const TOKEN_EXPIRED = 4001;

const MAX_RETRY_MS = 5000;

/** True when `offset` comes after `last` (`-1` is before everything). */
export function isAfter(offset: string, last: string): boolean {
  return last === "-1" || offset > last;
}

export function subscribeUrl(origin: string, threadId: string, offset: string): string {
  const ws = origin.replace(/^http/, "ws");
  return `${ws}/api/threads/${encodeURIComponent(threadId)}/subscribe?offset=${encodeURIComponent(offset)}`;
}

export class ThreadSubscription {
  private last: string;
  private ws: WebSocket | null = null;
  private retryMs = 250;
  private retryTimer: ReturnType<typeof setTimeout> | undefined;
  private pingTimer: ReturnType<typeof setInterval> | undefined;
  private heardSincePing = true;
  private closed = false;

  constructor(private readonly opts: SubscriptionOptions) {
    this.last = opts.from ?? "-1";
  }

  get lastOffset(): string {
    return this.last;
  }

  start(): this {
    // The browser knows first when the network goes or comes back: the badge need not wait for a
    // ping to go unanswered, nor the next try for its backoff.
    if (typeof addEventListener === "function") {
      addEventListener("offline", this.onOffline);
      addEventListener("online", this.onOnline);
    }
    this.connect("connecting");
    return this;
  }

  /** Tries begun while the browser was offline: bound to fail, so coming online replaces them. */
  private readonly triedOffline = new WeakSet<WebSocket>();

  private readonly onOffline = () => {
    const ws = this.ws;
    if (!ws) return;
    ws.close(4000, "offline");
    this.drop(ws);
  };

  private readonly onOnline = () => {
    if (this.closed || this.ws?.readyState === WebSocket.OPEN) return;
    // A try begun while offline is bound to fail, and its failure would wait out the backoff. One
    // begun since (its timer fired as the network came back) is left to finish.
    const pending = this.ws;
    if (pending && !this.triedOffline.has(pending)) return;
    if (pending) {
      this.ws = null;
      pending.onclose = null;
      pending.close(4000, "back online");
    }
    clearTimeout(this.retryTimer);
    this.retryMs = 250;
    this.connect("reconnecting");
  };

  close(): void {
    if (typeof removeEventListener === "function") {
      removeEventListener("offline", this.onOffline);
      removeEventListener("online", this.onOnline);
    }
    this.closed = true;
    clearTimeout(this.retryTimer);
    clearInterval(this.pingTimer);
    this.ws?.close(1000, "done");
    this.ws = null;
    this.opts.onState?.("closed");
  }

  private connect(state: LinkState): void {
    if (this.closed) return;
    this.opts.onState?.(state);
    const origin = this.opts.origin ?? location.origin;
    // The server echoes the first subprotocol; the second carries the token (never the URL).
    const ws = new WebSocket(subscribeUrl(origin, this.opts.threadId, this.last), ["threadbox", `bearer.${this.opts.token}`]);
    if (typeof navigator !== "undefined" && navigator.onLine === false) this.triedOffline.add(ws);
    this.ws = ws;
    let opened = false;
    ws.onopen = () => {
      opened = true;
      this.retryMs = 250;
      this.heardSincePing = true;
      this.opts.onState?.("live");
      this.startPings(ws);
    };
    ws.onmessage = (ev) => {
      this.heardSincePing = true;
      let msg: unknown;
      try {
        msg = JSON.parse(String(ev.data));
      } catch {
        return;
      }
      const entry = msg as Entry;
      if (typeof entry?.offset !== "string" || !entry.payload) return; // pong or other control
      if (!isAfter(entry.offset, this.last)) return;
      this.last = entry.offset;
      this.opts.onEntry(entry);
    };
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      if (ev.code === TOKEN_EXPIRED) {
        this.close();
        this.opts.onTokenExpired?.();
        return;
      }
      // Any other close (1013 for a reader held back too long included) resumes from the last offset.
      if (!opened) this.opts.onFailedToOpen?.();
      this.drop(ws);
    };
  }

  /** Forget a socket (closed, or silent) and reconnect from the last offset seen. */
  private drop(ws: WebSocket): void {
    if (this.ws !== ws) return;
    this.ws = null;
    clearInterval(this.pingTimer);
    if (this.closed) return;
    this.opts.onState?.("reconnecting");
    this.retryTimer = setTimeout(() => this.connect("reconnecting"), this.retryMs);
    this.retryMs = Math.min(this.retryMs * 2, MAX_RETRY_MS);
  }

  private startPings(ws: WebSocket): void {
    clearInterval(this.pingTimer);
    const every = this.opts.pingEveryMs ?? 15_000;
    this.pingTimer = setInterval(() => {
      if (!this.heardSincePing) {
        ws.close(4000, "no answer to ping");
        this.drop(ws); // a dead link may take long to report its close
        return;
      }
      this.heardSincePing = false;
      try {
        ws.send("ping");
      } catch {
        this.drop(ws);
      }
    }, every);
  }
}
