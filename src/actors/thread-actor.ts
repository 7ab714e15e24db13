import { DurableObject } from "cloudflare:workers";
import { ApiError, errorResponse } from "../errors";
import { intVar, type Env } from "../env";
import type { Entry, EntryWithOffset } from "../entries/schema";
import { StreamLog, type NewMessage, type StoredMessage, type StreamMeta } from "../streams/log";
import { formatOffset, parseOffset, MAX_READ_BYTES } from "../streams/protocol";
import { bodyToMessages, handleStreamHttp, type StreamHost } from "../streams/stream-http";
import { WaitHub } from "../streams/wait-hub";
import { parseJsonBody, prepareEntries, toEntryWithOffset } from "../threads/entries";
import { decideSignal, isTerminal } from "../threads/run-rules";
import { decideLiveness, livenessDeadlines, type LivenessConfig, type ProbeState } from "../threads/liveness";
import { Outbox, type OutboxItem } from "../threads/outbox";
import { launchRun, type LaunchSpec } from "../threads/launch";
import type { Environment } from "../environments";
import type { DetachedHandle } from "../sandbox/provider";
import { ThreadRowStore, publicThread, type ParentRef, type ThreadRow } from "../threads/thread-row";
import type { ThreadSummary } from "./house-actor";
import { settle, unwrapRpc } from "./rpc";
import { DispatchService } from "./thread/dispatch";
import type { Agent } from "../agents";
import type { DispatchConfig, ThreadConfigPatch } from "../dispatch/config";

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
  dispatchConfig?: DispatchConfig;
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
  readonly outbox: Outbox;
  readonly longPollTimeoutMs: number;
  readonly liveness: LivenessConfig;
  readonly dispatch: DispatchService;
  streamName = "";
  /** Tests shift the actor's clock instead of sleeping; always 0 in a deployment. */
  clockSkewMs = 0;
  allowCreate = true;
  allowDelete = true;
  allowClose = true;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.log = new StreamLog(ctx.storage);
    this.rows = new ThreadRowStore(ctx.storage.sql);
    this.outbox = new Outbox(ctx.storage.sql);
    ctx.storage.sql.exec(`create table if not exists probe_state (id integer primary key check (id = 1), last_probe_at integer, dead_streak integer not null default 0)`);
    ctx.storage.sql.exec(`create table if not exists stream_owner (id integer primary key check (id = 1), house_id text not null)`);
    ctx.storage.sql.exec(`create table if not exists deadlines (name text primary key, at integer not null)`);
    this.longPollTimeoutMs = intVar(env.LONG_POLL_TIMEOUT_MS, 20_000);
    const enc = new TextEncoder();
    this.dispatch = new DispatchService({
      sql: ctx.storage.sql,
      env,
      now: () => this.now(),
      thread: () => this.rows.get()!,
      append: (entries) => { this.appendEntriesInternal(entries.map((e) => ({ data: enc.encode(JSON.stringify(e)), entryId: e.id }))); },
      recent: (count, upToSeq) => this.log.lastMessages(count, upToSeq).map(toEntryWithOffset),
      rearm: () => this.recomputeDeadlines(),
      turnLeaseMs: intVar(env.DISPATCH_TURN_LEASE_MS, 60_000),
      house: (houseId) => {
        const house = env.HOUSES.get(env.HOUSES.idFromName(houseId));
        return {
          listAgents: async () => (await house.listAgents()) as Agent[],
          getAgent: async (id) => (await house.getAgent(id)) as Agent | null,
          getEnvironment: async (id) => (await house.getEnvironment(id)) as Environment | null,
        };
      },
    });
    // Every write path (REST, the stream protocol, internal writes) goes through the log: a chat
    // entry's dispatch trigger commits in the same transaction as the entry.
    this.log.onAppendInTransaction = (fresh) => {
      if (this.isThread() && this.dispatch.recordTriggers(fresh) > 0) this.settleNeeded = true;
    };
    // What the house index last saw; a woken actor must not re-sync the index on its first request.
    const row = this.rows.get();
    if (row) this.statusBefore = `${row.status}|${row.statusReason}|${row.boxId}`;
    this.liveness = {
      orphanSilenceMs: intVar(env.ORPHAN_SILENCE_MS, 300_000),
      probeIntervalMs: intVar(env.PROBE_INTERVAL_MS, 60_000),
      probeConfirmMs: intVar(env.PROBE_CONFIRM_MS, 5_000),
    };
  }

  now(): number {
    return Date.now() + this.clockSkewMs;
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
        this.allowClose = false;
        if (url.pathname.endsWith("/subscribe")) return this.subscribe(request);
      } else {
        this.claimPlainStream(auth.houseId);
        this.streamName = target.name;
        this.allowCreate = true;
        this.allowDelete = true;
        this.allowClose = true;
      }
      const response = await handleStreamHttp(request, this, { canWrite: auth.canWrite, subject: auth.subject });
      // Heartbeats and ordinary entries only push the silence deadline later: an alarm already
      // set fires early, finds nothing due and re-arms itself. Only state changes need settling.
      if (target.kind === "thread" && this.settleNeeded) await this.afterHandler();
      return response;
    } catch (err) {
      return errorResponse(err);
    }
  }

  // ---- StreamHost ----

  prepareAppend(body: Uint8Array, meta: StreamMeta) {
    if (!this.isThread()) return bodyToMessages(body, meta.contentType, false);
    const prepared = prepareEntries(parseJsonBody(body), undefined, this.now());
    if (prepared.heartbeats > 0) this.recordLiveness();
    return prepared.messages.length === 0 ? null : prepared.messages;
  }

  afterAppend(appended: StoredMessage[]): void {
    if (!this.isThread()) return;
    this.recordLiveness();
    const entries = appended.map(toEntryWithOffset);
    this.applySignals(entries);
    this.fanOut(appended, entries);
  }

  // ---- RPC used by the worker ----

  async createThread(input: CreateThreadInput) {
    return settle(async () => {
      const existing = this.rows.get();
      if (existing) throw new ApiError("conflict", "thread already exists");
      const now = this.now();
      const row: ThreadRow = {
        id: input.id, houseId: input.houseId, parent: input.parent, environmentId: input.environmentId, title: input.title,
        status: "idle", statusReason: null, statusDetail: null, boxId: null, lastLivenessAt: null, runStartedAt: null,
        brainId: input.brainId, createdBy: input.createdBy, createdAt: now, updatedAt: now,
      };
      this.ctx.storage.transactionSync(() => {
        this.rows.insert(row);
        if (input.dispatchConfig) this.dispatch.setConfig(input.dispatchConfig);
        this.log.create(`thread-${input.id}`, { contentType: "application/json", ttlSeconds: null, expiresAt: null, closed: false }, []);
      });
      await this.syncIndex();
      return publicThread(this.rows.get()!);
    });
  }

  /**
   * Starts a run: the prompt goes on the thread first (it is canonical there), then the claim
   * idle -> running, then the launch is queued for the alarm so the caller returns at once.
   */
  async startRun(houseId: string, spec: Omit<LaunchSpec, "runId"> & { authorId: string; resume: boolean }) {
    return settle(async () => {
      const row = this.requireThread(houseId);
      if (row.status === "running") throw new ApiError("conflict", "thread is already running");
      if (spec.resume && row.status === "idle") throw new ApiError("conflict", "thread has no finished run to resume");
      const runId = crypto.randomUUID();
      const enc = new TextEncoder();
      const now = this.now();
      const prompt: Entry = { id: `prompt:${runId}`, ts: now, authorId: spec.authorId, payload: { type: "chat", text: spec.task, origin: spec.resume ? "resume" : "task", runId, dispatch: false } };
      const claim: Entry = { id: `claim:${runId}`, ts: now, authorId: "threadbox", payload: { type: "signal.thread.status_changed", status: "running", reason: "launching", runId, harness: spec.harness } };
      this.appendEntriesInternal([prompt, claim].map((e) => ({ data: enc.encode(JSON.stringify(e)), entryId: e.id })));
      const { authorId: _author, ...launch } = spec;
      this.outbox.enqueue(`launch:${runId}`, "launch", { ...launch, runId }, now);
      await this.afterHandler();
      return { runId, status: this.rows.get()!.status };
    });
  }

  /** Ends a running run from outside: status failed with reason `stopped`; the harness gets SIGTERM. */
  async stopRun(houseId: string, subject: string) {
    return settle(async () => {
      const row = this.requireThread(houseId);
      if (row.status !== "running") throw new ApiError("conflict", `thread is ${row.status}, not running`);
      const runKey = row.runStartedAt ?? 0;
      if (row.boxId) this.outbox.enqueue(`stop:${runKey}`, "stop_harness", { boxId: row.boxId }, this.now());
      this.appendSystemSignal(`stop:${runKey}`, "stopped", `stopped by ${subject}`);
      await this.afterHandler();
      return publicThread(this.rows.get()!);
    });
  }

  /** Called by the SandboxActor once it has confirmed this thread's box dead. */
  async boxDied(houseId: string, boxId: string, reason: string) {
    return settle(async () => {
      const row = this.requireThread(houseId);
      if (row.status !== "running" || row.boxId !== boxId) return;
      this.appendSystemSignal(`orphan:${row.runStartedAt ?? 0}`, "pi_session_orphaned", `box ${boxId} is dead: ${reason}`);
      await this.afterHandler();
    });
  }

  /** A delegated child finished: exactly one child_finished + one brain chat, deduped by entry id. */
  async childFinished(houseId: string, n: { childId: string; runKey: number; status: string; reason: string | null; resultText: string; brainId: string | null }) {
    return settle(async () => {
      this.requireThread(houseId);
      const enc = new TextEncoder();
      const now = this.now();
      const signal: Entry = {
        id: `child_finished:${n.childId}:${n.runKey}`, ts: now, authorId: "threadbox",
        payload: { type: "signal.thread.child_finished", childThreadId: n.childId, status: n.status, reason: n.reason ?? undefined },
      };
      const chatEntry: Entry = {
        id: `child_result:${n.childId}:${n.runKey}`, ts: now, authorId: n.brainId ?? "threadbox",
        // Written by the control plane on the brain's behalf; it must never wake bots again.
        payload: { type: "chat", text: n.resultText, origin: "child_finished", childThreadId: n.childId, dispatch: false },
      };
      this.appendEntriesInternal([signal, chatEntry].map((e) => ({ data: enc.encode(JSON.stringify(e)), entryId: e.id })));
      await this.afterHandler();
    });
  }

  /** The single alarm: liveness checks while running, and retries of owed side effects. */
  async alarm(): Promise<void> {
    const row = this.rows.get();
    if (!row) return;
    const now = this.now();
    const decision = decideLiveness(row, this.probeState(), this.liveness, now);
    if (decision.kind === "orphan") {
      this.appendSystemSignal(`orphan:${row.runStartedAt ?? 0}`, "pi_session_orphaned", decision.reason);
    } else if (decision.kind === "probe" && row.boxId && !this.outbox.pending().some((i) => i.kind === "launch")) {
      let answer: { verdict: string; confirmedDead: boolean };
      try {
        answer = await unwrapRpc(this.env.SANDBOXES.get(this.env.SANDBOXES.idFromName(row.boxId)).probe(row.houseId));
      } catch {
        answer = { verdict: "unknown", confirmedDead: false };
      }
      const deadStreak = answer.verdict === "dead" && !answer.confirmedDead ? 1 : 0;
      this.ctx.storage.sql.exec(
        `insert into probe_state (id, last_probe_at, dead_streak) values (1, ?, ?)
         on conflict(id) do update set last_probe_at = excluded.last_probe_at, dead_streak = excluded.dead_streak`,
        this.now(), deadStreak,
      );
      const current = this.rows.get()!;
      if (answer.confirmedDead && current.status === "running" && current.boxId === row.boxId) {
        this.appendSystemSignal(`orphan:${row.runStartedAt ?? 0}`, "pi_session_orphaned", `box ${row.boxId} confirmed dead by two probes`);
      }
    }
    await this.drainOutbox(true);
    await this.dispatch.onAlarm();
    await this.afterHandler();
  }

  // ---- dispatch (bots) ----

  async getDispatchConfig(houseId: string) {
    return settle(() => {
      this.requireThread(houseId);
      return { dispatch: this.dispatch.config() };
    });
  }

  async patchDispatchConfig(houseId: string, patch: ThreadConfigPatch) {
    return settle(() => {
      this.requireThread(houseId);
      return { dispatch: this.dispatch.patchConfig(patch) };
    });
  }

  async dispatchDecisions(houseId: string, limit: number) {
    return settle(() => {
      this.requireThread(houseId);
      return { decisions: this.dispatch.decisions(limit) };
    });
  }

  /** `post_to_thread`: a bot's chat in this thread, written internally as that bot, carrying its depth. */
  async postChat(houseId: string, p: { id: string; text: string; authorId: string; depth: number; sourceThreadId: string }) {
    return settle(async () => {
      this.requireThread(houseId);
      const entry: Entry = {
        id: p.id, ts: this.now(), authorId: p.authorId,
        payload: { type: "chat", text: p.text, depth: p.depth, origin: "post_to_thread", sourceThreadId: p.sourceThreadId },
      };
      const outcome = this.appendEntriesInternal([{ data: new TextEncoder().encode(JSON.stringify(entry)), entryId: entry.id }]);
      await this.afterHandler();
      return { entryId: p.id, duplicate: outcome.appended[0]?.duplicate ?? false };
    });
  }

  async getThread(houseId: string) {
    return settle(async () => {
      return publicThread(this.requireThread(houseId));
    });
  }

  async appendEntries(houseId: string, raw: unknown, defaultAuthor: string | undefined) {
    return settle(async () => {
      this.requireThread(houseId);
      const prepared = prepareEntries(raw, defaultAuthor, this.now());
      if (prepared.heartbeats > 0) this.recordLiveness();
      if (prepared.messages.length === 0) return { entries: [], nextOffset: this.log.formatTail() };
      const outcome = this.appendEntriesInternal(prepared.messages);
      await this.afterHandler();
      return {
        entries: outcome.appended.map((a) => ({ id: a.entryId, offset: formatOffset(a.seq), duplicate: a.duplicate })),
        nextOffset: formatOffset(outcome.tailSeq),
      };
    });
  }

  async readEntries(houseId: string, offset: string | null, limit: number) {
    return settle(async () => {
      this.requireThread(houseId);
      const parsed = parseOffset(offset);
      const tail = this.log.tailSeq();
      const from = parsed.kind === "now" ? tail : parsed.seq;
      const page = this.log.read(from, MAX_READ_BYTES, limit);
      const entries = page.messages.map(toEntryWithOffset);
      const last = entries.length > 0 ? page.messages[page.messages.length - 1].seq : Math.min(from, tail);
      return { entries, nextOffset: formatOffset(last), upToDate: last >= tail };
    });
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

  /**
   * Live delivery: every subscriber that is caught up gets the same serialized frames (no log
   * read per subscriber); one that lags behind catches up from the log first.
   */
  private fanOut(appended: StoredMessage[], entries: EntryWithOffset[]): void {
    if (appended.length === 0) return;
    const sockets = this.ctx.getWebSockets();
    if (sockets.length === 0) return;
    const firstSeq = appended[0].seq;
    const lastSeq = appended[appended.length - 1].seq;
    const frames = entries.map((e) => JSON.stringify(e));
    for (const ws of sockets) {
      const state = (ws.deserializeAttachment() as SocketState | null) ?? { seq: 0 };
      if (state.seq >= lastSeq) continue;
      try {
        if (state.seq === firstSeq - 1) {
          for (const f of frames) ws.send(f);
          state.seq = lastSeq;
          ws.serializeAttachment(state);
        } else {
          this.sendFrom(ws, state);
        }
      } catch {
        // A socket that cannot take more is closed; the client reconnects from its last offset.
        try { ws.close(1011, "send failed"); } catch { /* already gone */ }
      }
    }
  }

  async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    if (message === "ping") ws.send(JSON.stringify({ type: "pong" }));
  }

  async webSocketClose(ws: WebSocket, code: number): Promise<void> {
    try { ws.close(code === 1005 ? 1000 : code, "closing"); } catch { /* already closed */ }
  }

  // ---- thread internals ----

  private knownThread = false;

  /** Plain streams never get a thread row, and a thread's row is never removed: a yes is cached. */
  private isThread(): boolean {
    this.knownThread ||= this.rows.get() !== null;
    return this.knownThread;
  }

  /**
   * A plain stream belongs to the house that first reached it; the routing key already separates
   * houses, and this check keeps another house out even if two keys ever collided.
   */
  private claimPlainStream(houseId: string): void {
    const sql = this.ctx.storage.sql;
    const owner = sql.exec(`select house_id from stream_owner where id = 1`).toArray()[0]?.house_id as string | undefined;
    if (owner === undefined) sql.exec(`insert into stream_owner (id, house_id) values (1, ?)`, houseId);
    else if (owner !== houseId) throw new ApiError("not_found", "stream not found");
  }

  private requireThread(houseId: string): ThreadRow {
    const row = this.rows.get();
    // Another house's thread answers exactly like a missing one.
    if (!row || row.houseId !== houseId) throw new ApiError("not_found", "thread not found");
    return row;
  }

  private recordLiveness(): void {
    this.rows.touchLiveness(this.now());
  }

  private statusBefore: string | null = null;
  private settleNeeded = false;

  private appendEntriesInternal(messages: NewMessage[]) {
    const outcome = this.log.append({ messages });
    if (outcome.kind !== "appended") throw new ApiError("stream_closed", "thread log is closed");
    if (outcome.fresh.length > 0) {
      this.afterAppend(outcome.fresh);
      this.hub.notify();
    }
    return outcome;
  }

  /** Finished-signals the control plane itself writes; the id makes a re-run of the same path a no-op. */
  private appendSystemSignal(id: string, status: string, reason: string): void {
    const entry: Entry = { id, ts: this.now(), authorId: "threadbox", payload: { type: "signal.thread.status_changed", status, reason } };
    this.appendEntriesInternal([{ data: new TextEncoder().encode(JSON.stringify(entry)), entryId: id }]);
  }

  private applySignals(entries: Entry[]): void {
    for (const entry of entries) {
      const before = this.rows.get()!;
      const now = this.now();
      if (entry.payload.type === "signal.thread.box_assigned" && before.status === "running" && typeof entry.payload.boxId === "string") {
        this.settleNeeded = true;
        this.rows.update({ boxId: entry.payload.boxId }, now);
        this.outbox.enqueue(`attach:${entry.payload.boxId}:${before.runStartedAt}`, "attach", { boxId: entry.payload.boxId }, now);
        continue;
      }
      const patch = decideSignal(before, entry, now);
      if (!patch) continue;
      this.settleNeeded = true;
      this.rows.update(patch, now);
      const after = this.rows.get()!;
      if (patch.status === "running") {
        this.ctx.storage.sql.exec(`delete from probe_state`);
        if (after.boxId) this.outbox.enqueue(`attach:${after.boxId}:${after.runStartedAt}`, "attach", { boxId: after.boxId }, now);
      } else if (isTerminal(after.status)) {
        this.onTerminal(after, now);
      }
    }
  }

  /** Owed once per run: release the box, and tell a delegating parent how the child ended. */
  private onTerminal(row: ThreadRow, now: number): void {
    const runKey = row.runStartedAt ?? 0;
    // An orphaned run may still have live processes (a hung runner, a box that lost its network):
    // end them before the box is released, so nothing writes to a settled thread.
    if (row.boxId && row.statusReason === "pi_session_orphaned") {
      this.outbox.enqueue(`stop:${runKey}`, "stop_harness", { boxId: row.boxId }, now);
    }
    if (row.boxId) {
      const keepBox = row.statusReason === "stopped";
      this.outbox.enqueue(`detach:${row.boxId}:${runKey}`, "detach", { boxId: row.boxId, keepBox }, now);
    }
    if (row.parent.kind === "thread" && row.parent.id) {
      this.outbox.enqueue(`notify_parent:${runKey}`, "notify_parent", {
        parentId: row.parent.id, runKey, status: row.status === "completed" ? "completed" : row.statusReason ?? "failed",
        reason: row.statusDetail, resultText: this.resultText(row), brainId: row.brainId,
      }, now);
    }
  }

  private resultText(row: ThreadRow): string {
    if (row.status !== "completed") {
      return `Task ${row.id} ended: ${row.statusReason ?? "failed"}${row.statusDetail ? ` (${row.statusDetail})` : ""}`;
    }
    const recent = this.log.lastMessages(200).map(toEntryWithOffset).reverse();
    const last = recent.find((e) => e.payload.type === "pi.assistant" && typeof e.payload.text === "string" && e.payload.text !== "");
    return (last?.payload.text as string | undefined) ?? `Task ${row.id} completed.`;
  }

  private probeState(): ProbeState {
    const r = this.ctx.storage.sql.exec(`select last_probe_at, dead_streak from probe_state where id = 1`).toArray()[0];
    return { lastProbeAt: (r?.last_probe_at as number | null) ?? null, deadStreak: (r?.dead_streak as number) ?? 0 };
  }

  /** After every handler: run owed side effects, then recompute the one alarm from persisted state. */
  private async afterHandler(): Promise<void> {
    this.settleNeeded = false;
    await this.drainOutbox();
    await this.syncIndexIfChanged();
    await this.recomputeDeadlines();
  }

  /**
   * Items run in the order they were owed. Launches (box creation, installs) and stops (a grace
   * period for the harness) take long: only the alarm runs them, and what was owed after them
   * (e.g. releasing the box after a stop) waits for them.
   */
  private async drainOutbox(includeSlow = false): Promise<void> {
    for (const item of this.outbox.due(this.now())) {
      if ((item.kind === "launch" || item.kind === "stop_harness") && !includeSlow) break;
      try {
        await this.perform(item);
        this.outbox.done(item.key);
      } catch (err) {
        const message = err instanceof Error ? err.message.split("\u0000")[0] : String(err);
        if (item.kind === "launch") {
          // A launch is not retried blindly (it would make another box): the run fails visibly.
          this.outbox.done(item.key);
          const row = this.rows.get()!;
          if (row.status === "running") this.appendSystemSignal(`launch_failed:${item.payload.runId}`, "pi_failed", `launch failed: ${message}`);
          continue;
        }
        console.warn("outbox item failed; will retry", item.kind, message);
        this.outbox.failed(item, this.now());
      }
    }
  }

  private async perform(item: OutboxItem): Promise<void> {
    const row = this.rows.get()!;
    const p = item.payload;
    const box = (id: unknown) => this.env.SANDBOXES.get(this.env.SANDBOXES.idFromName(String(id)));
    switch (item.kind) {
      case "attach":
        await unwrapRpc(box(p.boxId).attach(row.houseId, row.id));
        return;
      case "detach":
        await unwrapRpc(box(p.boxId).detach(row.houseId, row.id, { keepBox: p.keepBox === true }));
        return;
      case "stop_harness":
        await unwrapRpc(box(p.boxId).stopRun(row.houseId, row.id));
        return;
      case "launch":
        await this.launch(item.payload as unknown as LaunchSpec);
        return;
      case "notify_parent":
        await unwrapRpc(this.env.THREADS.get(this.env.THREADS.idFromName(`thread:${String(p.parentId)}`)).childFinished(row.houseId, {
          childId: row.id, runKey: Number(p.runKey), status: String(p.status), reason: (p.reason as string | null) ?? null,
          resultText: String(p.resultText), brainId: (p.brainId as string | null) ?? null,
        }));
        return;
      default:
        console.warn("unknown outbox item dropped", item.kind);
    }
  }

  private async launch(spec: LaunchSpec): Promise<void> {
    const row = this.rows.get()!;
    if (row.status !== "running") return; // stopped or settled before the launch got its turn
    const house = this.env.HOUSES.get(this.env.HOUSES.idFromName(row.houseId));
    const environment = row.environmentId ? ((await house.getEnvironment(row.environmentId)) as Environment | null) : null;
    const sandboxes = this.env.SANDBOXES;
    await launchRun(spec, {
      env: this.env,
      row,
      environment,
      entries: () => this.log.read(0, Number.MAX_SAFE_INTEGER, 1_000_000).messages.map(toEntryWithOffset),
      registerBox: async (info) => {
        const boxId = `box_${crypto.randomUUID().replace(/-/g, "").slice(0, 24)}`;
        await unwrapRpc(sandboxes.get(sandboxes.idFromName(boxId)).register({ boxId, houseId: row.houseId, ephemeral: true, ...info }));
        return boxId;
      },
      boxIsLive: async (boxId) => {
        const stub = sandboxes.get(sandboxes.idFromName(boxId));
        try {
          const view = await unwrapRpc(stub.view(row.houseId));
          if (view.state !== "live") return null;
          const answer = await unwrapRpc(stub.probe(row.houseId));
          return answer.verdict === "live" ? { providerRef: view.providerRef } : null;
        } catch {
          return null;
        }
      },
      assignBox: async (boxId) => {
        const entry: Entry = { id: `box:${spec.runId}`, ts: this.now(), authorId: "threadbox", payload: { type: "signal.thread.box_assigned", boxId, runId: spec.runId } };
        this.appendEntriesInternal([{ data: new TextEncoder().encode(JSON.stringify(entry)), entryId: entry.id }]);
        await this.drainOutbox();
      },
      rememberHandle: async (boxId, handle) => {
        await unwrapRpc(sandboxes.get(sandboxes.idFromName(boxId)).attach(row.houseId, row.id, handle as DetachedHandle));
      },
      launched: async (info) => {
        const entry: Entry = { id: `launched:${spec.runId}`, ts: this.now(), authorId: "threadbox", payload: { type: "signal.run.launched", runId: spec.runId, harness: spec.harness, ...info } };
        this.appendEntriesInternal([{ data: new TextEncoder().encode(JSON.stringify(entry)), entryId: entry.id }]);
      },
      alive: () => this.recordLiveness(),
    });
  }

  private async recomputeDeadlines(): Promise<void> {
    const row = this.rows.get();
    if (!row) return;
    const { silenceAt, probeAt } = livenessDeadlines(row, this.probeState(), this.liveness);
    const deadlines: [string, number | null][] = [["silence", silenceAt], ["probe", probeAt], ["outbox", this.outbox.nextAt()], ["dispatch", this.dispatch.nextDeadline()]];
    const sql = this.ctx.storage.sql;
    for (const [name, at] of deadlines) {
      if (at === null) sql.exec(`delete from deadlines where name = ?`, name);
      else sql.exec(`insert into deadlines (name, at) values (?, ?) on conflict(name) do update set at = excluded.at`, name, at);
    }
    const next = sql.exec(`select min(at) as at from deadlines`).toArray()[0]?.at as number | null;
    if (next === null || next === undefined) await this.ctx.storage.deleteAlarm();
    else await this.ctx.storage.setAlarm(Math.max(next, this.now()));
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
