import { ApiError } from "../../errors";
import type { EntryWithOffset } from "../../entries/schema";
import type { StoredMessage, StreamLog } from "../../streams/log";
import { MAX_READ_BYTES, parseOffset } from "../../streams/protocol";
import { WaitHub } from "../../streams/wait-hub";
import { toEntryWithOffset } from "../../threads/entries";
import { logEvent } from "../../domain/log-event";

/**
 * `expiresAtMs`: when the token that opened the socket expires; nothing is sent past it.
 * `heldSinceMs`: since when a full send buffer has held the socket back without it reading any of it.
 * `closing`: the actor closed it; it gets nothing more while its close completes.
 */
type SocketState = { seq: number; expiresAtMs?: number; heldSinceMs?: number; closing?: true };

/** The close a subscriber gets once its token has expired: reconnect with a fresh token. */
export const TOKEN_EXPIRED_CLOSE = { code: 4001, reason: "token expired" } as const;

/**
 * How many bytes may wait in one subscriber's send buffer. A socket past it is sent nothing more
 * until it has read its way back below: the log is its buffer, not the actor's memory, which a
 * reader that never reads (or a catch-up of a long thread) would otherwise fill without bound.
 */
export const SUBSCRIBER_BUFFER_BYTES = 4 * 1024 * 1024;
/**
 * A subscriber held back this long without reading anything is closed (it reconnects from its last
 * offset): otherwise a reader that never reads would keep its thread's actor from ever hibernating.
 */
export const SUBSCRIBER_STALLED_AFTER_MS = 60_000;
export const STALLED_CLOSE = { code: 1013, reason: "subscriber too slow: reconnect from your last offset" } as const;
/** How often, at first, a subscriber held back by a full buffer is looked at again (doubling to the max). */
const CATCH_UP_RETRY_MS = 50;
const CATCH_UP_RETRY_MAX_MS = 2_000;

/**
 * Everyone waiting for new entries: hibernatable WebSocket subscribers (their position lives in
 * the socket's attachment, so it survives hibernation) and long-poll/SSE readers (the wait hub).
 */
export class Fanout {
  readonly hub = new WaitHub();

  private readonly stalledAfterMs: number;

  constructor(private readonly ctx: DurableObjectState, private readonly log: StreamLog, opts: { stalledAfterMs?: number } = {}) {
    this.stalledAfterMs = opts.stalledAfterMs ?? SUBSCRIBER_STALLED_AFTER_MS;
  }

  private catchUpTimer: ReturnType<typeof setTimeout> | null = null;
  private catchUpDelayMs = CATCH_UP_RETRY_MS;

  /** Replays from `offset`, then streams live. */
  subscribe(request: Request, tokenExpiresAtMs: number | undefined): Response {
    if (request.headers.get("upgrade")?.toLowerCase() !== "websocket") {
      throw new ApiError("upgrade_required", "this route needs a WebSocket upgrade");
    }
    const parsed = parseOffset(new URL(request.url).searchParams.get("offset"));
    // An offset past the tail is read as the tail, as an HTTP read does: otherwise the socket
    // would count itself ahead of every append and never be sent anything.
    const tail = this.log.tailSeq();
    const seq = parsed.kind === "now" ? tail : Math.min(parsed.seq, tail);
    const pair = new WebSocketPair();
    const server = pair[1];
    this.ctx.acceptWebSocket(server);
    // Catch-up and the switch to live happen in one synchronous turn: no append can interleave.
    this.sendFrom(server, { seq, expiresAtMs: tokenExpiresAtMs });
    const protocol = request.headers.get("sec-websocket-protocol");
    const headers = new Headers();
    if (protocol) headers.set("sec-websocket-protocol", protocol.split(",")[0].trim());
    return new Response(null, { status: 101, webSocket: pair[0], headers });
  }

  /**
   * Live delivery: every subscriber that is caught up gets the same serialized frames (no log
   * read per subscriber); one that lags behind catches up from the log first.
   */
  deliver(appended: StoredMessage[], entries: EntryWithOffset[]): void {
    if (appended.length === 0) return;
    const sockets = this.ctx.getWebSockets();
    if (sockets.length === 0) return;
    const firstSeq = appended[0].seq;
    const lastSeq = appended[appended.length - 1].seq;
    const frames = entries.map((e) => JSON.stringify(e));
    for (const ws of sockets) {
      const state = (ws.deserializeAttachment() as SocketState | null) ?? { seq: 0 };
      if (state.seq >= lastSeq || state.closing) continue;
      if (this.closedForExpiry(ws, state)) continue;
      try {
        if (state.seq === firstSeq - 1 && !this.isFull(ws)) {
          for (const f of frames) ws.send(f);
          state.seq = lastSeq;
          ws.serializeAttachment(state);
        } else {
          this.sendFrom(ws, state);
        }
      } catch (err) {
        // A socket that cannot take more is closed; the client reconnects from its last offset.
        logEvent("subscriber_closed", { reason: "send_failed", seq: state.seq, error: err instanceof Error ? err.message : String(err) }, "warn");
        try { ws.close(1011, "send failed"); } catch { /* already gone: nothing left to close */ }
      }
    }
  }

  /** Wakes long-poll and SSE readers. */
  notifyWaiters(): void {
    this.hub.notify();
  }

  onMessage(ws: WebSocket, message: string | ArrayBuffer): void {
    if (message !== "ping") return;
    // A client that pings learns its token expired even while the thread is quiet.
    if (this.closedForExpiry(ws, (ws.deserializeAttachment() as SocketState | null) ?? { seq: 0 })) return;
    ws.send(JSON.stringify({ type: "pong" }));
  }

  /** Closes the socket when the token that opened it has expired: a socket must not outlive its token's access. */
  private closedForExpiry(ws: WebSocket, state: SocketState): boolean {
    if (state.expiresAtMs === undefined || Date.now() < state.expiresAtMs) return false;
    try { ws.close(TOKEN_EXPIRED_CLOSE.code, TOKEN_EXPIRED_CLOSE.reason); } catch { /* already closing */ }
    return true;
  }

  onClose(ws: WebSocket, code: number): void {
    try { ws.close(code === 1005 ? 1000 : code, "closing"); } catch { /* already closed by the peer */ }
  }

  /** Sends from the log after `state.seq` until the tail or a full send buffer; a socket left behind is caught up later. */
  private sendFrom(ws: WebSocket, state: SocketState): void {
    const from = state.seq;
    let behind = false;
    for (;;) {
      if (this.isFull(ws)) {
        behind = state.seq < this.log.tailSeq();
        break;
      }
      const page = this.log.read(state.seq, MAX_READ_BYTES, 500);
      for (const m of page.messages) {
        ws.send(JSON.stringify(toEntryWithOffset(m)));
        state.seq = m.seq;
        if (this.isFull(ws)) break;
      }
      if (page.upToDate && state.seq >= this.log.tailSeq()) break;
    }
    if (!behind) delete state.heldSinceMs;
    else if (state.seq > from || state.heldSinceMs === undefined) state.heldSinceMs = Date.now();
    ws.serializeAttachment(state);
    if (behind) this.scheduleCatchUp();
  }

  /** `bufferedAmount`: what the runtime still holds for the socket (a runtime without it is never held back). */
  private isFull(ws: WebSocket): boolean {
    return ((ws as { bufferedAmount?: number }).bufferedAmount ?? 0) >= SUBSCRIBER_BUFFER_BYTES;
  }

  private scheduleCatchUp(): void {
    if (this.catchUpTimer !== null) return;
    this.catchUpTimer = setTimeout(() => {
      this.catchUpTimer = null;
      this.catchUp();
    }, this.catchUpDelayMs);
  }

  /** Sends on to every subscriber that was held back, as far as its buffer lets it; looks again later while any still lags. */
  private catchUp(): void {
    const tail = this.log.tailSeq();
    let lagging = false;
    let moved = false;
    for (const ws of this.ctx.getWebSockets()) {
      const state = (ws.deserializeAttachment() as SocketState | null) ?? { seq: 0 };
      if (state.seq >= tail || state.closing || this.closedForExpiry(ws, state)) continue;
      const before = state.seq;
      try {
        this.sendFrom(ws, state);
      } catch (err) {
        logEvent("subscriber_closed", { reason: "send_failed", seq: state.seq, error: err instanceof Error ? err.message : String(err) }, "warn");
        try { ws.close(1011, "send failed"); } catch { /* already gone: nothing left to close */ }
        continue;
      }
      if (state.seq > before) moved = true;
      if (state.heldSinceMs !== undefined && Date.now() - state.heldSinceMs >= this.stalledAfterMs) {
        logEvent("subscriber_closed", { reason: "stalled", seq: state.seq, heldMs: Date.now() - state.heldSinceMs }, "warn");
        state.closing = true;
        ws.serializeAttachment(state);
        try { ws.close(STALLED_CLOSE.code, STALLED_CLOSE.reason); } catch { /* already closing */ }
        continue;
      }
      if (state.seq < tail) lagging = true;
    }
    // A reader that reads again is served at once; one that does not is looked at less and less often.
    this.catchUpDelayMs = moved ? CATCH_UP_RETRY_MS : Math.min(this.catchUpDelayMs * 2, CATCH_UP_RETRY_MAX_MS);
    if (lagging) this.scheduleCatchUp();
  }
}
