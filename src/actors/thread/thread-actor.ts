import { DurableObject } from "cloudflare:workers";
import { LazySchema, prepareSchemas, type Schema } from "../../domain/sql-schema";
import { ApiError, errorResponse } from "../../errors";
import { intVar, type Env } from "../../env";
import type { Entry, EntryWithOffset } from "../../entries/schema";
import { STREAM_LOG_SCHEMA, StreamLog, storedMessage, type NewMessage, type StoredMessage } from "../../streams/log";
import { formatOffset, parseOffset, MAX_READ_BYTES } from "../../streams/protocol";
import { parseJsonBody, prepareEntries, toEntryWithOffset, type EntryWriter, type ToolCallWriters, type WriterRun } from "../../threads/entries";
import { runStanding, showsRunAlive } from "../../threads/run-writes";
import type { LaunchSpec } from "../../threads/launch";
import { LaunchProgressStore, type LaunchStep } from "../../threads/launch-progress";
import { claimedSettings, settingsOfClaim } from "../../threads/run-settings";
import { THREAD_ROW_SCHEMA, ThreadRowStore, publicThread, type ParentRef, type ThreadRow } from "../../threads/thread-row";
import { systemClock, type Clock } from "../clock";
import { errorMessage, logEvent } from "../../domain/log-event";
import { settle, unwrapRpc } from "../rpc";
import { houseStub, sandboxStub, streamForkLinks } from "../stubs";
import type { AcquireRequest, ForkSource, PrefixRequest } from "../../streams/fork";
import { DEADLINES_SCHEMA, Deadlines, type AlarmStep } from "./deadlines";
import { Fanout } from "./fanout";
import { OUTBOX_SCHEMA, Outbox, stopHarnessPayload, type OutboxExecutors, type OutboxKind } from "./outbox";
import { RunLifecycle } from "./run-lifecycle";
import { DispatchService } from "./dispatch";
import type { Agent } from "../../agents";
import type { Environment } from "../../environments";
import type { DispatchConfig, ThreadConfigPatch } from "../../dispatch/config";
import { readwriteFolders } from "../../workspace/folder-sync";
import { serveStream, threadStreamOptions, type AppendPolicy } from "./stream-host";
import { PlainStreamHost } from "./plain-stream";
import { discardBody } from "../../http/bounded-body";
import { threadOutboxExecutors } from "./outbox-executors";
import { STATUS_CHANGED } from "../../domain/statuses";
import { backoffDelayMs } from "../../domain/backoff";
import { parseReach, type Reach } from "../../dispatch/reach";

/**
 * How late the alarm comes for work a handler owes and is about to carry out itself: only when the
 * actor died before finishing does it find anything to do. Later than any outbox call takes.
 */
const OWED_WORK_SAFETY_ALARM_MS = 30_000;

/** How long after an alarm with a failed step the next one comes: doubling from this... */
const ALARM_RETRY_BASE_MS = 2_000;
/** ...up to this. */
const ALARM_RETRY_MAX_MS = 60_000;

/** Which writer posted which tool call (see ToolCallWriters): most threads have none. */
const TOOL_CALL_WRITERS_SCHEMA: Schema = {
  name: "tool_call_writers",
  ddl: `create table if not exists tool_call_writers (call_id text not null, writer text not null, primary key (call_id, writer)) without rowid`,
};
const CREATE_REQUEST_SCHEMA: Schema = { name: "create_request", ddl: `create table if not exists create_request (id integer primary key check (id = 1), fingerprint text not null)` };
/** What a resume with an Idempotency-Key asked for, by the run it started: the same key with another request is refused. */
const RUN_REQUEST_SCHEMA: Schema = { name: "run_request", ddl: `create table if not exists run_request (run_id text primary key, fingerprint text not null) without rowid` };

/**
 * Bump when any of these schemas changes: an actor whose marker is older runs them (and their
 * migrations) again. v3 left the lazy tables out; an older release, finding no marker of its own
 * on an actor made since, creates every table it expects, so going back a release stays safe.
 */
export const THREAD_ACTOR_SCHEMA_VERSION = "v4";
/**
 * The tables every thread uses, created with its actor. The rest (forks, producer state, bots'
 * turns, launches, probes, a plain stream's owner, an idempotent create's fingerprint) are each
 * store's `LazySchema`, created by the first write that needs them.
 */
export const THREAD_ACTOR_SCHEMAS: Schema[] = [STREAM_LOG_SCHEMA, THREAD_ROW_SCHEMA, OUTBOX_SCHEMA, DEADLINES_SCHEMA];

/**
 * Sent by the worker (never by a client: actors are not reachable from outside).
 * `tokenExpiresAtMs`: when the client's token expires. A WebSocket or an SSE response outlives
 * the request that checked the token, and must not deliver past that moment.
 */
export type ActorAuth = { houseId: string; canWrite: boolean; tokenExpiresAtMs?: number } & EntryWriter;
export type StreamTarget = { kind: "thread"; threadId: string } | { kind: "plain"; name: string; forkSource?: ForkSource };

export const AUTH_HEADER = "x-threadbox-auth";
export const TARGET_HEADER = "x-threadbox-target";
/** The origin of the worker's requests to an actor (`forwardToActor`); only the path and query mean anything. */
export const ACTOR_ORIGIN = "https://actor";
const SUBSCRIBE_PATH = `${ACTOR_ORIGIN}/subscribe`;

/**
 * `runId`: named by a request with an Idempotency-Key, so its retry finds the run; `requestFingerprint`:
 * what that request asked for (a resume's), kept with the run so the key with another request is refused.
 */
export type RunStart = Omit<LaunchSpec, "runId" | "resumeBoxId"> & { authorId: string; resume: boolean; runId?: string; requestFingerprint?: string };

export type CreateThreadInput = {
  id: string;
  houseId: string;
  parent: ParentRef;
  environmentId: string | null;
  title: string | null;
  brainId: string | null;
  createdBy: string;
  /** A DM thread starts with its agent answering every message. */
  dispatchConfig?: DispatchConfig;
  /** Set when the client sent an Idempotency-Key: the same key with another request is refused. */
  requestFingerprint: string | null;
  /** A delegated child's first run, started with it: a thread never exists without the run it was made for. */
  firstRun?: RunStart;
};

/**
 * Runs in the same synchronous turn as the append that produced `entries` (never for duplicates).
 * `showsRunAlive`: whether the write counts as a sign of the running run's life (run-writes.ts).
 */
export type AppendHook = (entries: EntryWithOffset[], appended: StoredMessage[], showsRunAlive: boolean) => void;

/**
 * One actor per thread, and one per plain stream (same log core, no thread row). The class only
 * composes services and owns the one alarm.
 *
 * Extension points for a new service (e.g. dispatch):
 * - Deadline: `this.deadlines.addSource({ name, nextDeadline })` — a pure read of the service's
 *   persisted state; every handler ends in `settleTurn()`, which recomputes the alarm from all sources.
 * - Alarm step: push `{ name, run(nowMs) }` onto `alarmSteps`; steps run in order on every alarm
 *   and each decides for itself whether it is due.
 * - Append hook: push onto `appendHooks`; it sees every freshly appended entry in the same turn
 *   as the append (chat entries that should wake bots, say), before any other request can run.
 * - Outbox kind: add the payload type to `OutboxPayloads` (outbox.ts) and its executor to
 *   `outboxExecutors()` below; mark it `slow` if only the alarm may run it, `unordered` if it
 *   depends on nothing owed before it.
 */
export class ThreadActor extends DurableObject<Env> {
  protected readonly clock: Clock;
  protected readonly log: StreamLog;
  protected readonly rows: ThreadRowStore;
  protected readonly outbox: Outbox;
  protected readonly fanout: Fanout;
  protected readonly lifecycle: RunLifecycle;
  protected readonly deadlines: Deadlines;
  protected readonly dispatch: DispatchService;
  /** Set when an append recorded a dispatch trigger: the alarm must be re-armed before answering. */
  private triggersRecorded = false;
  protected readonly appendHooks: AppendHook[];
  protected readonly alarmSteps: AlarmStep[];
  protected readonly launchProgress: LaunchProgressStore;
  private readonly executors: OutboxExecutors;
  private readonly slowKinds: OutboxKind[];
  protected longPollTimeoutMs: number;
  private readonly threadPolicy: AppendPolicy;
  private knownThread = false;
  private readonly createRequest: LazySchema;
  private readonly runRequest: LazySchema;
  private readonly toolCalls: ToolCallWriters;
  protected readonly plain: PlainStreamHost;

  constructor(ctx: DurableObjectState, env: Env, clock: Clock = systemClock) {
    super(ctx, env);
    const sql = ctx.storage.sql;
    // Every store's tables in one batch for a new actor; one marker read for an existing one.
    prepareSchemas(sql, THREAD_ACTOR_SCHEMA_VERSION, THREAD_ACTOR_SCHEMAS);
    this.createRequest = new LazySchema(sql, CREATE_REQUEST_SCHEMA);
    this.runRequest = new LazySchema(sql, RUN_REQUEST_SCHEMA);
    const toolCallTable = new LazySchema(sql, TOOL_CALL_WRITERS_SCHEMA);
    this.toolCalls = {
      has: (callId, writer) => toolCallTable.exists() && sql.exec(`select 1 from tool_call_writers where call_id = ? and writer = ?`, callId, writer).toArray().length > 0,
      add: (pairs) => {
        toolCallTable.ensure();
        for (const [callId, writer] of pairs) sql.exec(`insert or ignore into tool_call_writers (call_id, writer) values (?, ?)`, callId, writer);
      },
    };
    this.clock = clock;
    this.log = new StreamLog(ctx.storage);
    this.rows = new ThreadRowStore(sql);
    this.outbox = new Outbox(sql);
    this.launchProgress = new LaunchProgressStore(sql);
    this.fanout = new Fanout(ctx, this.log);
    this.plain = new PlainStreamHost({
      sql, log: this.log, forkLinks: streamForkLinks(env, ctx.id.toString()), now: () => clock.now(),
      setAlarm: (atMs) => ctx.storage.setAlarm(atMs),
      house: (houseId) => {
        const house = houseStub(env, houseId);
        return {
          streamTouched: async (name) => unwrapRpc(house.streamTouched(houseId, name)),
          streamDeleted: async (name) => void (await unwrapRpc(house.streamDeleted(houseId, name))),
        };
      },
    });
    this.longPollTimeoutMs = intVar(env, "LONG_POLL_TIMEOUT_MS", 20_000);
    this.lifecycle = new RunLifecycle({
      sql, rows: this.rows, log: this.log, outbox: this.outbox, clock,
      config: {
        orphanSilenceMs: intVar(env, "ORPHAN_SILENCE_MS", 300_000),
        probeIntervalMs: intVar(env, "PROBE_INTERVAL_MS", 60_000),
        probeConfirmMs: intVar(env, "PROBE_CONFIRM_MS", 5_000),
      },
      probeBox: (houseId, boxId) => unwrapRpc(sandboxStub(env, boxId).probe(houseId)),
      // A run that ended before its launch recorded it (a fast run) has its folders in the launch's progress.
      owesFolderSync: (runId) => readwriteFolders(this.entryById(`launched:${runId}`)).length > 0
        || (this.launchProgress.get(runId).folders ?? []).some((f) => f.access === "readwrite"),
      launchOnKeptBox: (runId) => {
        const progress = this.launchProgress.get(runId);
        return progress.sameBox === true && progress.shared !== true;
      },
      launchHeldBox: (runId) => {
        const progress = this.launchProgress.get(runId);
        return progress.sameBox === true && progress.boxId ? progress.boxId : null;
      },
      appendSystemSignal: (id, status, reason) => this.appendSystemSignal(id, status, reason),
    });
    this.deadlines = new Deadlines(ctx.storage, () => clock.now());
    for (const source of this.lifecycle.deadlineSources) this.deadlines.addSource(source);
    this.deadlines.addSource({ name: "outbox", nextDeadline: () => this.outbox.nextAt() });
    this.dispatch = new DispatchService({
      sql, env,
      now: () => clock.now(),
      thread: () => this.rows.get()!,
      append: (entries, reach) => void this.appendInternal(entries, reach),
      recentChats: (count, upToSeq, scan) => this.log.lastContaining(`"chat"`, count, upToSeq, scan),
      house: (houseId) => {
        const house = houseStub(env, houseId);
        return {
          agentSet: async () => (await unwrapRpc(house.agentSet())) as { version: number; agents: Agent[] },
          getAgent: async (id) => (await unwrapRpc(house.getAgent(id))) as Agent | null,
          getEnvironment: async (id) => (await unwrapRpc(house.getEnvironment(id))) as Environment | null,
        };
      },
      rearm: () => this.deadlines.recompute(),
      background: (work) => ctx.waitUntil(work),
      turnLeaseMs: intVar(env, "DISPATCH_TURN_LEASE_MS", 60_000),
      agentCacheMs: intVar(env, "DISPATCH_AGENT_CACHE_MS", 60_000),
    });
    this.deadlines.addSource({ name: "dispatch", nextDeadline: () => this.dispatch.nextDeadline() });
    // Every write path (REST, the stream protocol, internal writes) goes through the log: a chat
    // entry's dispatch trigger commits in the same storage transaction as the entry itself.
    this.log.onAppendInTransaction = (fresh) => {
      if (this.isThread() && this.dispatch.recordTriggers(fresh) > 0) this.triggersRecorded = true;
    };
    this.log.appendHookWrites = (messages) => this.isThread() && this.dispatch.wouldRecordTriggers(messages);
    this.log.packsRuns = () => !this.isThread();
    this.appendHooks = [
      (entries, _appended, alive) => this.lifecycle.onAppended(entries, alive),
      (entries, appended) => this.fanout.deliver(appended, entries),
    ];
    this.alarmSteps = [
      { name: "liveness", run: () => this.lifecycle.alarmStep() },
      { name: "outbox", run: () => this.drainOutbox(true) },
      // A bot's turn runs beside the alarm (see DispatchService.onAlarm): nothing else waits for it.
      { name: "dispatch", run: () => this.dispatch.onAlarm() },
    ];
    this.executors = this.outboxExecutors();
    this.slowKinds = (Object.keys(this.executors) as OutboxKind[]).filter((k) => (this.executors[k] as { slow?: boolean }).slow === true);
    this.threadPolicy = {
      prepareAppend: (body, _meta, writer) => {
        const prepared = prepareEntries(parseJsonBody(body), writer, this.clock.now(), this.toolCalls, this.writerRun(writer));
        if (prepared.heartbeats > 0 && this.showsRunAlive(writer)) this.lifecycle.recordLiveness();
        this.dispatch.writtenWith(prepared.messages, writer.reach);
        return prepared.messages.length === 0 ? null : prepared.messages;
      },
      afterAppend: (appended, writer) => this.runAppendHooks(appended, this.showsRunAlive(writer)),
    };
  }

  // ---- HTTP-shaped entry points (streams, WebSocket) ----

  async fetch(request: Request): Promise<Response> {
    const response = await this.serveHttp(request);
    // A refusal (forbidden, bad headers, unknown thread) comes before the body is read. A body
    // that cannot be read (the client went away, a reader left locked) leaves the answer as it is.
    await discardBody(request).catch(() => {});
    return response;
  }

  private async serveHttp(request: Request): Promise<Response> {
    try {
      const auth = JSON.parse(request.headers.get(AUTH_HEADER) ?? "null") as ActorAuth | null;
      const target = JSON.parse(request.headers.get(TARGET_HEADER) ?? "null") as StreamTarget | null;
      if (!auth || !target) throw new ApiError("bad_request", "missing routing headers");
      const store = { log: this.log, hub: this.fanout.hub, longPollTimeoutMs: this.longPollTimeoutMs };
      if (target.kind === "plain") return await this.plain.serve(request, auth, target, store);
      this.requireThread(auth.houseId);
      if (isPath(request.url, SUBSCRIBE_PATH)) return this.fanout.subscribe(request, auth.tokenExpiresAtMs);
      const response = await serveStream(request, store, this.threadPolicy, threadStreamOptions(target.threadId, auth));
      // Heartbeats and ordinary entries only push the silence deadline later: an alarm already
      // set fires early, finds nothing due and re-arms itself. Only state changes need settling.
      // Appends released together (streams/commit-group.ts) write one after the other before
      // any of them gets here: the first to arrive settles for all, and the others wait for it.
      const triggered = this.triggersRecorded;
      this.triggersRecorded = false;
      if (this.lifecycle.takeChanged() || triggered) await this.settleShared();
      else if (this.settling) await this.settling.catch(() => {});
      return response;
    } catch (err) {
      return errorResponse(err);
    }
  }

  // ---- RPC between plain streams: forking (streams/fork.ts) ----

  async forkAcquire(req: AcquireRequest) {
    return settle(() => this.plainOnly(() => this.plain.acquireFork(req)));
  }

  async forkReadPrefix(req: PrefixRequest) {
    return settle(() => this.plainOnly(() => this.plain.readPrefix(req)));
  }

  async forkRelease(houseId: string, childKey: string) {
    return settle(() => this.plainOnly(() => this.plain.releaseFork(houseId, childKey)));
  }

  // ---- Durable Streams subscriptions (the house's subscriptions/service.ts) ----

  /** The tail a subscription compares its consumer's cursor with; null when this stream does not exist for the house. */
  async subscriptionTail(houseId: string) {
    return settle(() => (this.isThread() ? null : this.plain.subscriptionTail(houseId)));
  }

  /** A subscription now links this stream: the next append tells the house. */
  async subscriptionsChanged(): Promise<void> {
    this.plain.subscriptionsChanged();
  }

  // ---- RPC used by the worker ----

  async createThread(input: CreateThreadInput) {
    return settle(async () => {
      const existing = this.rows.get();
      if (existing) {
        const thread = this.replayCreate(existing, input);
        if (!input.firstRun) return { thread: publicThread(thread), created: false };
        const run = this.beginRun(input.houseId, input.firstRun);
        await this.settleTurn();
        return { thread: publicThread(this.rows.get()!), created: false, run };
      }
      const now = this.clock.now();
      const row: ThreadRow = {
        id: input.id, houseId: input.houseId, parent: input.parent, environmentId: input.environmentId, title: input.title,
        status: "idle", statusReason: null, statusDetail: null, boxId: null, lastLivenessAt: null, runStartedAt: null, runId: null,
        brainId: input.brainId, createdBy: input.createdBy, createdAt: now, updatedAt: now,
      };
      this.inTransaction(() => {
        this.rows.insert(row);
        if (input.dispatchConfig) this.dispatch.setConfig(input.dispatchConfig);
        this.log.create(`thread-${input.id}`, { contentType: "application/json", ttlSeconds: null, expiresAt: null, closed: false }, []);
        if (input.requestFingerprint) {
          this.createRequest.ensure();
          this.ctx.storage.sql.exec(`insert into create_request (id, fingerprint) values (1, ?)`, input.requestFingerprint);
        }
        // Owed in the same transaction: the house index learns of the thread even if telling it fails now.
        this.outbox.enqueueNow("sync_index", "sync_index", {}, now);
      });
      // In the same commit as the thread: its first run.
      const run = input.firstRun ? this.beginRun(input.houseId, input.firstRun) : undefined;
      // The thread exists once committed: a failing index is retried by alarm, never this request's error.
      await this.settleTurn();
      return { thread: publicThread(this.rows.get()!), created: true, ...(run ? { run } : {}) };
    });
  }

  /**
   * Starts a run: the prompt goes on the thread first (it is canonical there), then the claim
   * idle -> running, then the launch is queued for the alarm so the caller returns at once.
   */
  async startRun(houseId: string, spec: RunStart) {
    return settle(async () => {
      // A replay carries on too: what the first request left owed (its actor may have died before
      // it armed the alarm) goes on now.
      const started = this.beginRun(houseId, spec);
      await this.settleTurn();
      return { ...started, status: this.rows.get()!.status };
    });
  }

  /** A run's start, written in this turn: the prompt, the claim, the launch owed. */
  private beginRun(houseId: string, spec: RunStart): { runId: string; replayed: boolean } {
    const row = this.requireThread(houseId);
    // A retried request that names its run (an Idempotency-Key) finds the run it started, even
    // once later runs (a resume) followed it: its claim is on the log.
    if (spec.runId !== undefined && (row.runId === spec.runId || this.entryById(`claim:${spec.runId}`) !== null)) {
      if (spec.requestFingerprint !== undefined && this.runRequestFingerprint(spec.runId) !== spec.requestFingerprint) {
        throw new ApiError("conflict", "this Idempotency-Key was used for a different request");
      }
      return { runId: spec.runId, replayed: true };
    }
    if (row.status === "running") throw new ApiError("conflict", "thread is already running");
    if (spec.resume && row.status === "idle") throw new ApiError("conflict", "thread has no finished run to resume");
    const runId = spec.runId ?? crypto.randomUUID();
    const now = this.clock.now();
    const prompt: Entry = { id: `prompt:${runId}`, ts: now, authorId: spec.authorId, payload: { type: "chat", text: spec.task, origin: spec.resume ? "resume" : "task", runId, dispatch: false } };
    const claim: Entry = { id: `claim:${runId}`, ts: now, authorId: "threadbox", payload: { type: STATUS_CHANGED, status: "running", reason: "launching", runId, ...claimedSettings(spec) } };
    this.appendInternal([prompt, claim]);
    if (spec.requestFingerprint !== undefined) {
      this.runRequest.ensure();
      this.ctx.storage.sql.exec(`insert or replace into run_request (run_id, fingerprint) values (?, ?)`, runId, spec.requestFingerprint);
    }
    const { authorId: _author, runId: _named, requestFingerprint: _asked, ...launchSpec } = spec;
    // The claim takes the previous run's box off the row; a resume may go on on it.
    const resumeBoxId = spec.resume && row.boxId ? row.boxId : undefined;
    this.outbox.enqueue(`launch:${runId}`, "launch", { ...launchSpec, runId, ...(resumeBoxId ? { resumeBoxId } : {}) }, now);
    return { runId, replayed: false };
  }

  /** Ends a running run from outside: status failed with reason `stopped`; the harness gets SIGTERM. */
  async stopRun(houseId: string, subject: string) {
    return settle(async () => {
      const row = this.requireThread(houseId);
      if (row.status !== "running") throw new ApiError("conflict", `thread is ${row.status}, not running`);
      const runKey = row.runStartedAt ?? 0;
      if (row.boxId) this.outbox.enqueue(`stop:${runKey}`, "stop_harness", stopHarnessPayload(row.boxId, row.runId), this.clock.now());
      this.appendSystemSignal(`stop:${runKey}`, "stopped", `stopped by ${subject}`);
      await this.settleTurn();
      return publicThread(this.rows.get()!);
    });
  }

  /**
   * Aborts the running agent's current turn without ending the run: the runner, which follows
   * its thread, sees this entry and aborts the harness's turn; the run then waits for a message.
   */
  async interruptRun(houseId: string, subject: string) {
    return settle(() => {
      const row = this.requireThread(houseId);
      if (row.status !== "running") throw new ApiError("conflict", `thread is ${row.status}, not running: nothing to interrupt`);
      const entry: Entry = {
        id: `interrupt:${row.runId ?? row.runStartedAt ?? 0}:${crypto.randomUUID().slice(0, 8)}`, ts: this.clock.now(), authorId: subject,
        payload: { type: "signal.run.interrupt", ...(row.runId ? { runId: row.runId } : {}) },
      };
      this.appendInternal([entry]);
      return { threadId: row.id, runId: row.runId ?? null, entryId: entry.id };
    });
  }

  /** Called by the SandboxActor once it has confirmed this thread's box dead. */
  async boxDied(houseId: string, boxId: string, reason: string) {
    return settle(async () => {
      const row = this.requireThread(houseId);
      if (row.status !== "running" || row.boxId !== boxId) return;
      this.appendSystemSignal(`orphan:${row.runStartedAt ?? 0}`, "pi_session_orphaned", `box ${boxId} is dead: ${reason}`);
      await this.settleTurn();
    });
  }

  /** A delegated child finished: exactly one child_finished + one brain chat, deduped by entry id. */
  async childFinished(houseId: string, n: { childId: string; runKey: number; status: string; reason: string | null; resultText: string; brainId: string | null }) {
    return settle(async () => {
      this.requireThread(houseId);
      const now = this.clock.now();
      const signal: Entry = {
        id: `child_finished:${n.childId}:${n.runKey}`, ts: now, authorId: "threadbox",
        payload: { type: "signal.thread.child_finished", childThreadId: n.childId, status: n.status, reason: n.reason ?? undefined },
      };
      const chatEntry: Entry = {
        id: `child_result:${n.childId}:${n.runKey}`, ts: now, authorId: n.brainId ?? "threadbox",
        // Written by the control plane on the brain's behalf; it must never wake bots again.
        payload: { type: "chat", text: n.resultText, origin: "child_finished", childThreadId: n.childId, dispatch: false },
      };
      this.appendInternal([signal, chatEntry]);
      await this.settleTurn();
    });
  }

  /** Alarms in a row with a step that failed: the next one waits longer. In memory: a woken actor tries at once. */
  private failedAlarms = 0;

  /**
   * The single alarm: every service's step in order, then the alarm is recomputed from all sources.
   * A failing step (its actor unreachable) neither holds the others nor goes without the alarm
   * being set again: the runtime gives up on an alarm that keeps failing, and a running run's
   * liveness would then never be checked again.
   */
  async alarm(): Promise<void> {
    if (!this.rows.get()) return this.plain.alarm();
    this.deadlines.alarmFired();
    let failed = false;
    for (const step of this.alarmSteps) {
      try {
        await step.run(this.clock.now());
      } catch (err) {
        failed = true;
        logEvent("alarm_step_failed", { threadId: this.rows.get()?.id, step: step.name, error: errorMessage(err) }, "error");
      }
    }
    this.failedAlarms = failed ? this.failedAlarms + 1 : 0;
    await this.settleTurn(failed ? this.clock.now() + backoffDelayMs(this.failedAlarms, ALARM_RETRY_BASE_MS, ALARM_RETRY_MAX_MS) : undefined);
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

  /** The house changed its agents (a notice, not a command: nothing to answer). */
  async agentsChanged(version: number): Promise<void> {
    this.dispatch.agentsChanged(version);
  }

  async dispatchDecisions(houseId: string, limit: number) {
    return settle(() => {
      this.requireThread(houseId);
      return { decisions: this.dispatch.decisions(limit) };
    });
  }

  /** `post_to_thread`: a bot's chat in this thread, written internally as that bot, carrying its depth and its turn's reach. */
  async postChat(houseId: string, p: { id: string; text: string; authorId: string; depth: number; sourceThreadId: string; reach: Reach }) {
    return settle(async () => {
      this.requireThread(houseId);
      const entry: Entry = {
        id: p.id, ts: this.clock.now(), authorId: p.authorId,
        payload: { type: "chat", text: p.text, depth: p.depth, origin: "post_to_thread", sourceThreadId: p.sourceThreadId },
      };
      const outcome = this.appendInternal([entry], parseReach(p.reach));
      await this.settleTurn();
      return { entryId: p.id, duplicate: outcome.appended[0]?.duplicate ?? false };
    });
  }

  async getThread(houseId: string) {
    return settle(async () => publicThread(this.requireThread(houseId)));
  }

  /** What the thread's last run set for itself, which a resume of it keeps. */
  async lastRunSettings(houseId: string) {
    return settle(async () => {
      const row = this.requireThread(houseId);
      return settingsOfClaim(row.runId ? this.entryById(`claim:${row.runId}`) : null);
    });
  }

  /** Whether run `runId` is this thread's running run (it may still be launching, its box not yet assigned). */
  async runIsCurrent(houseId: string, runId: string) {
    return settle(async () => {
      const row = this.requireThread(houseId);
      return row.status === "running" && row.runId === runId;
    });
  }

  async appendEntries(houseId: string, raw: unknown, writer: EntryWriter) {
    return settle(async () => {
      this.requireThread(houseId);
      const prepared = prepareEntries(raw, writer, this.clock.now(), this.toolCalls, this.writerRun(writer));
      const alive = this.showsRunAlive(writer);
      if (prepared.heartbeats > 0 && alive) this.lifecycle.recordLiveness();
      if (prepared.messages.length === 0) return { entries: [], nextOffset: this.log.formatTail() };
      this.dispatch.writtenWith(prepared.messages, writer.reach);
      const outcome = this.appendMessages(prepared.messages, alive);
      await this.settleTurn();
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

  /** A run's artifacts (`artifact.*` entries, newest first), found by the ids the runner gives them. */
  /** `before`: an artifact's offset; only older ones are listed (the next page of a long list). */
  async listArtifacts(houseId: string, runId: string | null, limit: number, before: string | null = null) {
    return settle(() => {
      const row = this.requireThread(houseId);
      const bound = before === null ? null : parseOffset(before);
      const beforeSeq = bound === null || bound.kind === "now" ? Number.MAX_SAFE_INTEGER : bound.seq;
      const prefix = `${row.id}:artifacts:${runId === null ? "" : `${runId}:`}`;
      // The ids starting with `prefix`, as a range of the entry-id index: a LIKE pattern this long
      // is more than the runtime's SQLite takes ("LIKE or GLOB pattern too complex").
      const upper = prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1);
      const found: EntryWithOffset[] = [];
      const cursor = this.ctx.storage.sql.exec(`select seq, data, entry_id from messages where entry_id >= ? and entry_id < ? and seq < ? order by seq desc`, prefix, upper, beforeSeq);
      for (const r of cursor) {
        const e = toEntryWithOffset(storedMessage(r));
        if (e.payload.type.startsWith("artifact.")) found.push(e);
        if (found.length >= limit) break;
      }
      // A mistyped run id would read as a run that produced nothing. Every run starts with its
      // prompt and its claim under ids that name it.
      if (runId !== null && found.length === 0 && this.entryById(`claim:${runId}`) === null && this.entryById(`prompt:${runId}`) === null) {
        throw new ApiError("not_found", `no run ${runId} on this thread`);
      }
      return { artifacts: found };
    });
  }

  // ---- WebSocket subscriptions (hibernatable) ----

  async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    this.fanout.onMessage(ws, message);
  }

  async webSocketClose(ws: WebSocket, code: number): Promise<void> {
    this.fanout.onClose(ws, code);
  }

  /** A subscriber's protocol error (a frame past the size limit, say): that socket ends, nothing else. */
  async webSocketError(ws: WebSocket, error: unknown): Promise<void> {
    logEvent("subscriber_socket_error", { threadId: this.rows.get()?.id, error: errorMessage(error) }, "warn");
    this.fanout.onClose(ws, 1011);
  }

  // ---- composition ----

  /** Fork operations exist for plain streams only: on a thread they are "not found". */
  private plainOnly<T>(fn: () => T): T {
    if (this.isThread()) throw new ApiError("not_found", "source stream not found");
    return fn();
  }

  /** Plain streams never get a thread row, and a thread's row is never removed: a yes is cached. */
  private isThread(): boolean {
    this.knownThread ||= this.rows.get() !== null;
    return this.knownThread;
  }

  /** A transaction over the row and the log: if it rolls back, their in-memory copies are dropped too. */
  private inTransaction<T>(fn: () => T): T {
    try {
      return this.ctx.storage.transactionSync(fn);
    } catch (err) {
      this.rows.forget();
      this.log.forgetCached();
      throw err;
    }
  }

  /** A create that reached an existing thread: the same idempotent request gets the same row back. */
  private replayCreate(existing: ThreadRow, input: CreateThreadInput): ThreadRow {
    const stored = !this.createRequest.exists() ? undefined
      : this.ctx.storage.sql.exec(`select fingerprint from create_request where id = 1`).toArray()[0]?.fingerprint as string | undefined;
    if (!input.requestFingerprint || existing.houseId !== input.houseId) throw new ApiError("conflict", "thread already exists");
    if (stored !== input.requestFingerprint) throw new ApiError("conflict", "this Idempotency-Key was used for a different request");
    return existing;
  }

  /** What the request that started this run asked for, when it came with an Idempotency-Key. */
  private runRequestFingerprint(runId: string): string | undefined {
    if (!this.runRequest.exists()) return undefined;
    return this.ctx.storage.sql.exec(`select fingerprint from run_request where run_id = ?`, runId).toArray()[0]?.fingerprint as string | undefined;
  }

  private requireThread(houseId: string): ThreadRow {
    const row = this.rows.get();
    // Another house's thread answers exactly like a missing one.
    if (!row || row.houseId !== houseId) throw new ApiError("not_found", "thread not found");
    return row;
  }

  private runAppendHooks(appended: StoredMessage[], showsRunAlive: boolean): void {
    if (!this.isThread() || appended.length === 0) return;
    const entries = appended.map(toEntryWithOffset);
    for (const hook of this.appendHooks) hook(entries, appended, showsRunAlive);
  }

  /** Where the run a writer's token names stands: what that token may still write (run-writes.ts). */
  private writerRun(writer: EntryWriter): WriterRun | undefined {
    const runId = writer.runId;
    const row = this.rows.get();
    if (runId === undefined || !row) return undefined;
    return {
      standing: runStanding(row, runId, () => this.hasEntry(`claim:${runId}`)),
      onLog: (id) => this.hasEntry(id),
    };
  }

  private showsRunAlive(writer: EntryWriter): boolean {
    const row = this.rows.get();
    return !row || showsRunAlive(row, writer.runId);
  }

  private appendMessages(messages: NewMessage[], showsRunAlive = true) {
    const outcome = this.log.append({ messages });
    if (outcome.kind !== "appended") throw new ApiError("stream_closed", "thread log is closed");
    if (outcome.fresh.length > 0) {
      this.runAppendHooks(outcome.fresh, showsRunAlive);
      this.fanout.notifyWaiters();
    }
    return outcome;
  }

  /**
   * Entries the control plane writes itself; their ids make a re-run of the same path a no-op.
   * `reach`: a bot turn's, for its chats (anything else wakes bots that act within the thread).
   */
  protected appendInternal(entries: Entry[], reach?: Reach) {
    const enc = new TextEncoder();
    const messages = entries.map((e) => ({ data: enc.encode(JSON.stringify(e)), entryId: e.id }));
    this.dispatch.writtenWith(messages, reach);
    return this.appendMessages(messages);
  }

  /** A finished-signal of the control plane, for the given run (default: the current one). */
  private appendSystemSignal(id: string, status: string, reason: string, runId = this.rows.get()?.runId ?? null): void {
    const payload = { type: STATUS_CHANGED, status, reason, ...(runId ? { runId } : {}) };
    this.appendInternal([{ id, ts: this.clock.now(), authorId: "threadbox", payload }]);
  }

  private hasEntry(id: string): boolean {
    return this.ctx.storage.sql.exec(`select 1 from messages where entry_id = ? limit 1`, id).toArray().length > 0;
  }

  private entryById(id: string): Entry | null {
    const r = this.ctx.storage.sql.exec(`select seq, data, entry_id from messages where entry_id = ?`, id).toArray()[0];
    return r ? toEntryWithOffset(storedMessage(r)) : null;
  }

  /** Before a handler's outbox calls; nothing happens here in production (tests crash the actor here). */
  protected async beforeOutboxCalls(): Promise<void> {}

  /** Between launch steps; nothing happens here in production (tests crash the actor at a step). */
  protected launchCheckpoint(_step: LaunchStep): void {}

  /** The settle a stream request started and has not finished; requests answered meanwhile wait for it. */
  private settling: Promise<void> | null = null;

  private settleShared(): Promise<void> {
    const settle = this.settleTurn();
    this.settling = settle;
    const clear = () => {
      if (this.settling === settle) this.settling = null;
    };
    settle.then(clear, clear);
    return settle;
  }

  /**
   * Every handler ends here: run owed side effects, then recompute the one alarm from persisted
   * state (not before `notBeforeMs` when given).
   */
  private async settleTurn(notBeforeMs?: number): Promise<void> {
    this.lifecycle.takeChanged();
    this.triggersRecorded = false;
    // Work only the alarm does (a launch, a stop's grace period) gets its alarm in the same commit
    // that owes it, before the calls below: if this actor dies during them (a crash, a deploy), it
    // still runs. (What the calls below do themselves is owed again by the next turn or alarm.)
    if (this.rows.get() && this.outbox.hasAny(this.slowKinds)) await this.deadlines.recompute(this.clock.now() + OWED_WORK_SAFETY_ALARM_MS);
    await this.beforeOutboxCalls();
    await this.drainOutbox(false);
    if (this.rows.get()) await this.deadlines.recompute(notBeforeMs);
  }

  private drainOutbox(includeSlow: boolean): Promise<void> {
    return this.outbox.drain(this.executors, () => this.clock.now(), includeSlow, (item, outcome, message) => {
      logEvent(outcome === "retry" ? "outbox_item_failed" : "outbox_item_dropped", { threadId: this.rows.get()?.id, kind: item.kind, key: item.key, attempts: item.attempts + 1, error: message }, "warn");
    });
  }

  private outboxExecutors(): OutboxExecutors {
    return threadOutboxExecutors({
      env: this.env,
      row: () => this.rows.get()!,
      now: () => this.clock.now(),
      entryById: (id) => this.entryById(id),
      allEntries: () => this.log.read(0, Number.MAX_SAFE_INTEGER, 1_000_000).messages.map(toEntryWithOffset),
      append: (entry) => void this.appendInternal([entry]),
      appendFailure: (id, reason, runId) => this.appendSystemSignal(id, "pi_failed", reason, runId),
      settle: () => this.drainOutbox(false),
      recordLiveness: () => this.lifecycle.recordLiveness(),
      launchProgress: this.launchProgress,
      persist: () => this.ctx.storage.sync(),
      checkpoint: (step) => this.launchCheckpoint(step),
      primeAgents: (set) => this.dispatch.primeAgents(set),
      outbox: this.outbox,
    });
  }
}

/** Whether `url` is `path` with or without a query; cheaper than parsing the URL on every request. */
function isPath(url: string, path: string): boolean {
  return url.startsWith(path) && (url.length === path.length || url[path.length] === "?");
}
