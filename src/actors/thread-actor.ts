import { DurableObject } from "cloudflare:workers";
import { ApiError, errorResponse } from "../errors";
import { intVar, type Env } from "../env";
import type { Entry, EntryWithOffset } from "../entries/schema";
import { StreamLog, type StoredMessage, type StreamMeta } from "../streams/log";
import { formatOffset, parseOffset, MAX_READ_BYTES } from "../streams/protocol";
import { handleStreamHttp, splitJsonMessages, type StreamHost } from "../streams/stream-http";
import { WaitHub } from "../streams/wait-hub";
import { parseJsonBody, prepareEntries, toEntryWithOffset } from "../threads/entries";
import { decideSignal } from "../threads/run-rules";
import { ThreadRowStore, publicThread, type ParentRef, type ThreadRow } from "../threads/thread-row";
import type { ThreadSummary } from "./house-actor";

/** Sent by the worker (never by a client: actors are not reachable from outside). */
export type ActorAuth = { houseId: string; subject: string; canWrite: boolean };
export type StreamTarget = { kind: "thread"; threadId: string } | { kind: "plain"; name: string };

export const AUTH_HEADER = "x-threadbox-auth";
export const TARGET_HEADER = "x-threadbox-target";

export type CreateThreadInput = {
  id: string;
  houseId: string;
  parent: ParentRef;
  environmentId: string | null;
  title: string | null;
  brainId: string | null;
  createdBy: string;
};

type SocketState = { seq: number };

/**
 * One actor per thread, and one per plain stream (same log core, no thread row).
 * The class stays thin: the protocol lives in streams/, thread rules in threads/.
 */
export class ThreadActor extends DurableObject<Env> implements StreamHost {
  readonly log: StreamLog;
  readonly hub = new WaitHub();
  readonly rows: ThreadRowStore;
  readonly longPollTimeoutMs: number;
  streamName = "";
  allowCreate = true;
  allowDelete = true;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.log = new StreamLog(ctx.storage);
    this.rows = new ThreadRowStore(ctx.storage.sql);
    this.longPollTimeoutMs = intVar(env.LONG_POLL_TIMEOUT_MS, 20_000);
  }

  // ---- HTTP-shaped entry points (streams, WebSocket) ----

  async fetch(request: Request): Promise<Response> {
    try {
      const auth = JSON.parse(request.headers.get(AUTH_HEADER) ?? "null") as ActorAuth | null;
      const target = JSON.parse(request.headers.get(TARGET_HEADER) ?? "null") as StreamTarget | null;
      if (!auth || !target) throw new ApiError("bad_request", "missing routing headers");
      const url = new URL(request.url);
      if (target.kind === "thread") {
        this.requireThread(auth.houseId);
        this.streamName = `thread-${target.threadId}`;
        this.allowCreate = false;
        this.allowDelete = false;
        if (url.pathname.endsWith("/subscribe")) return this.subscribe(request);
      } else {
        this.streamName = target.name;
        this.allowCreate = true;
        this.allowDelete = true;
      }
      const response = await handleStreamHttp(request, this, { canWrite: auth.canWrite, subject: auth.subject });
      if (target.kind === "thread") await this.syncIndexIfChanged();
      return response;
    } catch (err) {
      return errorResponse(err);
    }
  }

  // ---- StreamHost ----

  prepareAppend(body: Uint8Array, meta: StreamMeta) {
    if (!this.isThread()) return splitJsonOrRaw(body, meta);
    const prepared = prepareEntries(parseJsonBody(body), undefined, Date.now());
    if (prepared.heartbeats > 0) this.recordLiveness();
    return prepared.messages.length === 0 ? null : prepared.messages;
  }

  afterAppend(appended: StoredMessage[]): void {
    if (!this.isThread()) return;
    this.recordLiveness();
    const entries = appended.map(toEntryWithOffset);
    this.applySignals(entries);
    this.fanOut(entries);
  }

  // ---- RPC used by the worker ----

  async createThread(input: CreateThreadInput): Promise<ReturnType<typeof publicThread>> {
    const existing = this.rows.get();
    if (existing) throw new ApiError("conflict", "thread already exists");
    const now = Date.now();
    const row: ThreadRow = {
      id: input.id, houseId: input.houseId, parent: input.parent, environmentId: input.environmentId, title: input.title,
      status: "idle", statusReason: null, statusDetail: null, boxId: null, lastLivenessAt: null, runStartedAt: null,
      brainId: input.brainId, createdBy: input.createdBy, createdAt: now, updatedAt: now,
    };
    this.ctx.storage.transactionSync(() => {
      this.rows.insert(row);
      this.log.create(`thread-${input.id}`, { contentType: "application/json", ttlSeconds: null, expiresAt: null, closed: false }, []);
    });
    await this.syncIndex();
    return publicThread(this.rows.get()!);
  }

  getThread(houseId: string): ReturnType<typeof publicThread> {
    return publicThread(this.requireThread(houseId));
  }

  async appendEntries(houseId: string, raw: unknown, defaultAuthor: string | undefined) {
    this.requireThread(houseId);
    this.streamName = this.streamName || `thread-${this.rows.get()!.id}`;
    const prepared = prepareEntries(raw, defaultAuthor, Date.now());
    if (prepared.heartbeats > 0) this.recordLiveness();
    if (prepared.messages.length === 0) return { entries: [], nextOffset: this.log.formatTail() };
    const outcome = this.log.append({ messages: prepared.messages });
    if (outcome.kind !== "appended") throw new ApiError("stream_closed", "thread log is closed");
    const fresh = outcome.appended.filter((a) => !a.duplicate);
    if (fresh.length > 0) {
      const first = Math.min(...fresh.map((a) => a.seq));
      this.afterAppend(this.log.read(first - 1, Number.MAX_SAFE_INTEGER, fresh.length).messages);
      this.hub.notify();
    }
    await this.syncIndexIfChanged();
    return {
      entries: outcome.appended.map((a) => ({ id: a.entryId, offset: formatOffset(a.seq), duplicate: a.duplicate })),
      nextOffset: formatOffset(outcome.tailSeq),
    };
  }

  readEntries(houseId: string, offset: string | null, limit: number): { entries: EntryWithOffset[]; nextOffset: string; upToDate: boolean } {
    this.requireThread(houseId);
    const parsed = parseOffset(offset);
    const tail = this.log.tailSeq();
    const from = parsed.kind === "now" ? tail : parsed.seq;
    const page = this.log.read(from, MAX_READ_BYTES, limit);
    const entries = page.messages.map(toEntryWithOffset);
    const last = entries.length > 0 ? page.messages[page.messages.length - 1].seq : Math.min(from, tail);
    return { entries, nextOffset: formatOffset(last), upToDate: last >= tail };
  }

  // ---- WebSocket subscriptions (hibernatable) ----

  private subscribe(request: Request): Response {
    if (request.headers.get("upgrade")?.toLowerCase() !== "websocket") {
      throw new ApiError("upgrade_required", "this route needs a WebSocket upgrade");
    }
    const parsed = parseOffset(new URL(request.url).searchParams.get("offset"));
    const seq = parsed.kind === "now" ? this.log.tailSeq() : parsed.seq;
    const pair = new WebSocketPair();
    const server = pair[1];
    this.ctx.acceptWebSocket(server);
    // Catch-up and the switch to live happen in one synchronous turn: no append can interleave.
    const state: SocketState = { seq };
    this.sendFrom(server, state);
    const protocol = request.headers.get("sec-websocket-protocol");
    const headers = new Headers();
    if (protocol) headers.set("sec-websocket-protocol", protocol.split(",")[0].trim());
    return new Response(null, { status: 101, webSocket: pair[0], headers });
  }

  private sendFrom(ws: WebSocket, state: SocketState): void {
    for (;;) {
      const page = this.log.read(state.seq, MAX_READ_BYTES, 500);
      for (const m of page.messages) {
        ws.send(JSON.stringify(toEntryWithOffset(m)));
        state.seq = m.seq;
      }
      if (page.upToDate) break;
    }
    ws.serializeAttachment(state);
  }

  private fanOut(entries: EntryWithOffset[]): void {
    if (entries.length === 0) return;
    const lastSeq = parseOffset(entries[entries.length - 1].offset);
    for (const ws of this.ctx.getWebSockets()) {
      const state = (ws.deserializeAttachment() as SocketState | null) ?? { seq: 0 };
      try {
        this.sendFrom(ws, state);
      } catch {
        // A socket that cannot take more is closed; the client reconnects from its last offset.
        try { ws.close(1011, "send failed"); } catch { /* already gone */ }
      }
    }
    void lastSeq;
  }

  async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    if (message === "ping") ws.send(JSON.stringify({ type: "pong" }));
  }

  async webSocketClose(ws: WebSocket, code: number): Promise<void> {
    try { ws.close(code === 1005 ? 1000 : code, "closing"); } catch { /* already closed */ }
  }

  // ---- thread internals ----

  private isThread(): boolean {
    return this.streamName.startsWith("thread-") && this.rows.get() !== null;
  }

  private requireThread(houseId: string): ThreadRow {
    const row = this.rows.get();
    // Another house's thread answers exactly like a missing one.
    if (!row || row.houseId !== houseId) throw new ApiError("not_found", "thread not found");
    return row;
  }

  private recordLiveness(): void {
    this.rows.touchLiveness(Date.now());
  }

  private statusBefore: string | null = null;

  private applySignals(entries: Entry[]): void {
    for (const entry of entries) {
      const row = this.rows.get()!;
      const patch = decideSignal(row, entry, Date.now());
      if (patch) this.rows.update(patch);
    }
  }

  private async syncIndexIfChanged(): Promise<void> {
    const row = this.rows.get();
    if (!row) return;
    const key = `${row.status}|${row.statusReason}|${row.boxId}`;
    if (key !== this.statusBefore) await this.syncIndex();
  }

  private async syncIndex(): Promise<void> {
    const row = this.rows.get();
    if (!row) return;
    this.statusBefore = `${row.status}|${row.statusReason}|${row.boxId}`;
    const t = publicThread(row);
    const summary: ThreadSummary = {
      id: t.id, parent: t.parent, status: t.status, reason: t.reason, title: t.title, environmentId: t.environmentId,
      boxId: t.boxId, createdAt: t.createdAt, updatedAt: t.updatedAt,
    };
    await this.env.HOUSES.get(this.env.HOUSES.idFromName(row.houseId)).upsertThread(summary);
  }
}

function splitJsonOrRaw(body: Uint8Array, meta: StreamMeta) {
  const ct = meta.contentType.split(";")[0].trim().toLowerCase();
  if (ct === "application/json") return splitJsonMessages(body, false).map((data) => ({ data }));
  return [{ data: body }];
}
