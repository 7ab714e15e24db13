import { DurableObject } from "cloudflare:workers";
import type { Env } from "../../env";
import type { ThreadStatus } from "../../entries/schema";
import type { ParentRef } from "../../threads/thread-row";
import type { BoxView } from "../sandbox/sandbox-actor";
import { applyEnvironmentPatch, type Environment } from "../../environments";
import { retiresBoxSecret } from "../../workspace/output-redaction";
import { settle, unwrapRpc } from "../rpc";
import { applyAgentPatch, type Agent, type AgentPatch } from "../../agents";
import type { Candidate } from "../../dispatch/selection";
import { ApiError } from "../../errors";
import { plainStreamStub, sandboxStub, threadStub } from "../stubs";
import { SubscriptionService, type SubResult } from "../../subscriptions/service";
import type { AckRequest, SubscriptionInput } from "../../subscriptions/rules";
import { plainStreamRequest } from "../../streams/internal-request";
import { errorMessage, logEvent } from "../../domain/log-event";
import { backoffDelayMs } from "../../domain/backoff";
import { systemClock, type Clock } from "../clock";

export type ThreadSummary = {
  id: string;
  parent: ParentRef;
  status: ThreadStatus;
  reason: string | null;
  title: string | null;
  environmentId: string | null;
  boxId: string | null;
  createdAt: string;
  updatedAt: string;
};

/** One stored version of an environment's folder (the archive itself is the plain stream `stream`). */
export type FolderVersion = {
  name: string;
  version: number;
  stream: string;
  format: "tar" | "tar.gz" | "zip";
  bytes: number;
  sha256: string;
  createdAt: string;
  createdBy: string;
  /** Set when a readwrite run synced it back. */
  threadId?: string;
  runId?: string;
};

export type SubscriptionOp =
  | { kind: "put"; id: string; input: SubscriptionInput; base: string }
  | { kind: "get" | "delete"; id: string }
  | { kind: "list" | "jwks" }
  | { kind: "add_streams"; id: string; streams: string[] }
  | { kind: "remove_stream"; id: string; path: string }
  | { kind: "claim"; id: string; worker: string }
  | { kind: "ack"; id: string; token: string; request: AckRequest; via: "callback" | "ack" }
  | { kind: "release"; id: string; token: string; request: AckRequest };

const WEBHOOK_TIMEOUT_MS = 10_000;

/**
 * A shared box the house let go is retired by the caller at once; the house's alarm retries one
 * that could not be (its actor unreachable) this long after, then with backoff up to the maximum.
 */
const RETIRE_RETRY_FIRST_MS = 30_000;
const RETIRE_RETRY_MAX_MS = 10 * 60_000;

/** `before` (a `createdAt`) with `beforeId` resumes a listing after that thread, including threads made in the same millisecond. */
export type ThreadFilter = { parentKind?: string; parentId?: string; status?: ThreadStatus; environmentId?: string; limit: number; before?: string; beforeId?: string };

/**
 * One per house: an index so listing does not ask every thread. Answers with the same typed
 * results (`settle`) as the other actors; callers `unwrapRpc`. The ThreadActor stays the
 * authority for its own row and pushes every change here.
 */
export class HouseActor extends DurableObject<Env> {
  private readonly subscriptions: SubscriptionService;

  constructor(ctx: DurableObjectState, env: Env, private readonly clock: Clock = systemClock) {
    super(ctx, env);
    ctx.storage.sql.exec(`create table if not exists threads (
      id text primary key, parent_kind text not null, parent_id text, status text not null, reason text,
      title text, environment_id text, box_id text, created_at text not null, updated_at text not null)`);
    ctx.storage.sql.exec(`create index if not exists threads_parent on threads(parent_kind, parent_id)`);
    ctx.storage.sql.exec(`create index if not exists threads_created on threads(created_at desc, id)`);
    ctx.storage.sql.exec(`create table if not exists environments (id text primary key, body text not null)`);
    // `handle` is unique per house: it is what `@handle` in chat text resolves to.
    ctx.storage.sql.exec(`create table if not exists agents (id text primary key, handle text not null unique, body text not null)`);
    ctx.storage.sql.exec(`create table if not exists boxes (id text primary key, ephemeral integer not null, state text not null, view text not null)`);
    ctx.storage.sql.exec(`create table if not exists counters (name text primary key, value integer not null)`);
    ctx.storage.sql.exec(`create table if not exists folder_versions (
      environment_id text not null, name text not null, version integer not null, body text not null,
      primary key (environment_id, name, version))`);
    ctx.storage.sql.exec(`create table if not exists house_meta (id integer primary key check (id = 1), house_id text not null)`);
    // Shared boxes no environment keeps any more, until their box actor has taken the retire (see retireLater).
    ctx.storage.sql.exec(`create table if not exists box_retirements (
      box_id text primary key, house_id text not null, environment_id text not null, attempts integer not null default 0, next_at integer not null)`);
    // When each user of the one alarm wants it (the subscriptions); the retirements' own times are in their table.
    ctx.storage.sql.exec(`create table if not exists alarm_wants (owner text primary key, at integer not null)`);
    this.subscriptions = new SubscriptionService({
      sql: ctx.storage.sql,
      now: () => clock.now(),
      secret: env.THREADBOX_TOKEN_SECRET ?? "",
      tailOf: async (houseId, path) => unwrapRpc(plainStreamStub(env, houseId, path).subscriptionTail(houseId)),
      appendWake: async (houseId, path, event) => {
        const r = await plainStreamStub(env, houseId, path).fetch(plainStreamRequest(houseId, path, "POST", { contentType: "application/json", body: JSON.stringify(event) }));
        await r.body?.cancel();
        return r.ok;
      },
      deliver: async (url, body, signature) => {
        // Only `url` passed the webhook URL rules: a redirect could point anywhere (a private
        // address, this machine), so it is not followed and the delivery counts as failed.
        const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json", "webhook-signature": signature }, body, redirect: "manual", signal: AbortSignal.timeout(WEBHOOK_TIMEOUT_MS) });
        const answer = r.ok ? ((await r.json().catch(() => null)) as { done?: unknown } | null) : (await r.body?.cancel(), null);
        return { ok: r.ok, done: answer?.done === true };
      },
      linked: (_houseId, path) => plainStreamStub(env, _houseId, path).subscriptionsChanged(),
      setAlarm: async (at) => {
        if (at === null) ctx.storage.sql.exec(`delete from alarm_wants where owner = 'subscriptions'`);
        else ctx.storage.sql.exec(`insert into alarm_wants (owner, at) values ('subscriptions', ?) on conflict(owner) do update set at = excluded.at`, at);
        await this.armAlarm();
      },
      log: (event, fields) => logEvent(event, fields, "warn"),
    });
  }

  // ---- Durable Streams subscriptions (subscriptions/service.ts owns this actor's alarm) ----

  async subscriptionOp(houseId: string, op: SubscriptionOp) {
    return settle(async (): Promise<SubResult> => {
      this.rememberHouse(houseId);
      const s = this.subscriptions;
      switch (op.kind) {
        case "put": return s.put(houseId, op.id, op.input, op.base);
        case "get": return s.get(houseId, op.id);
        case "list": return s.list(houseId);
        case "delete": return s.remove(op.id);
        case "add_streams": return s.addStreams(houseId, op.id, op.streams);
        case "remove_stream": return s.removeStream(op.id, op.path);
        case "claim": return s.claim(houseId, op.id, op.worker);
        case "ack": return s.ack(houseId, op.id, op.token, op.request, op.via);
        case "release": return s.release(houseId, op.id, op.token, op.request);
        case "jwks": return s.jwks();
      }
    });
  }

  /** A plain stream of the house was created or appended to: answers whether a subscription links it. */
  async streamTouched(houseId: string, path: string) {
    return settle(async () => {
      this.rememberHouse(houseId);
      return this.subscriptions.streamTouched(houseId, path);
    });
  }

  async streamDeleted(houseId: string, path: string) {
    return settle(() => {
      this.rememberHouse(houseId);
      this.subscriptions.streamDeleted(path);
    });
  }

  async alarm(): Promise<void> {
    const houseId = this.ctx.storage.sql.exec(`select house_id from house_meta where id = 1`).toArray()[0]?.house_id as string | undefined;
    if (houseId) await this.subscriptions.alarm(houseId);
    await this.retryRetirements();
    await this.armAlarm();
  }

  /** The one alarm, at the earliest time one of its users wants it. */
  private async armAlarm(): Promise<void> {
    const at = this.ctx.storage.sql.exec(
      `select min(at) as at from (select at from alarm_wants union all select next_at as at from box_retirements)`,
    ).toArray()[0]?.at as number | null | undefined;
    if (at == null) await this.ctx.storage.deleteAlarm();
    else await this.ctx.storage.setAlarm(at);
  }

  /**
   * Records, in the transaction that lets the box go, that it is to be retired: if the caller's
   * retire does not reach the box, the alarm retries it (a shared box is never reaped otherwise).
   */
  private retireLater(houseId: string, environmentId: string, boxId: string): void {
    this.ctx.storage.sql.exec(
      `insert into box_retirements (box_id, house_id, environment_id, next_at) values (?, ?, ?, ?) on conflict(box_id) do nothing`,
      boxId, houseId, environmentId, this.clock.now() + RETIRE_RETRY_FIRST_MS,
    );
  }

  /** Arms the alarm for the retirements just recorded, never later than it was. */
  private async armForRetirements(): Promise<void> {
    const at = this.ctx.storage.sql.exec(`select min(next_at) as at from box_retirements`).toArray()[0]?.at as number | null | undefined;
    if (at == null) return;
    const current = await this.ctx.storage.getAlarm();
    if (current === null || current > at) await this.ctx.storage.setAlarm(at);
  }

  /** The box's actor has taken the retire (it deletes the box from now on, retrying until the provider confirms). */
  async boxRetired(boxId: string) {
    return settle(() => {
      this.ctx.storage.sql.exec(`delete from box_retirements where box_id = ?`, boxId);
    });
  }

  private async retryRetirements(): Promise<void> {
    const now = this.clock.now();
    const due = this.ctx.storage.sql.exec(`select * from box_retirements where next_at <= ?`, now).toArray();
    for (const r of due) {
      const boxId = r.box_id as string;
      try {
        await unwrapRpc(sandboxStub(this.env, boxId).retire(r.house_id as string));
        this.ctx.storage.sql.exec(`delete from box_retirements where box_id = ?`, boxId);
      } catch (err) {
        // A box its actor does not know (never registered, or of no such house) has nothing to retire.
        if (err instanceof ApiError && err.code === "not_found") {
          this.ctx.storage.sql.exec(`delete from box_retirements where box_id = ?`, boxId);
          continue;
        }
        const attempts = (r.attempts as number) + 1;
        const at = this.clock.now() + backoffDelayMs(attempts, RETIRE_RETRY_FIRST_MS, RETIRE_RETRY_MAX_MS);
        logEvent("shared_box_retire_failed", { environmentId: r.environment_id, boxId, attempts, retryAt: at, error: errorMessage(err) }, "warn");
        this.ctx.storage.sql.exec(`update box_retirements set attempts = ?, next_at = ? where box_id = ?`, attempts, at, boxId);
      }
    }
  }

  private rememberHouse(houseId: string): void {
    this.ctx.storage.sql.exec(`insert into house_meta (id, house_id) values (1, ?) on conflict(id) do nothing`, houseId);
  }

  /** Records an archive already stored in `v.stream` as the folder's next version (404 once the environment is gone). */
  async addFolderVersion(environmentId: string, name: string, v: Omit<FolderVersion, "version">) {
    return settle(() => {
      const sql = this.ctx.storage.sql;
      if (!this.getEnvironmentSync(environmentId)) throw new ApiError("not_found", "environment not found");
      const last = sql.exec(`select max(version) as v from folder_versions where environment_id = ? and name = ?`, environmentId, name).toArray()[0]?.v as number | null;
      const version = (last ?? 0) + 1;
      const row: FolderVersion = { ...v, version };
      sql.exec(`insert into folder_versions (environment_id, name, version, body) values (?, ?, ?, ?)`, environmentId, name, version, JSON.stringify(row));
      return row;
    });
  }

  /** One version, or the newest when `version` is null. */
  async getFolderVersion(environmentId: string, name: string, version: number | null) {
    return settle(() => {
      const r = version === null
        ? this.ctx.storage.sql.exec(`select body from folder_versions where environment_id = ? and name = ? order by version desc limit 1`, environmentId, name).toArray()[0]
        : this.ctx.storage.sql.exec(`select body from folder_versions where environment_id = ? and name = ? and version = ?`, environmentId, name, version).toArray()[0];
      return r ? (JSON.parse(r.body as string) as FolderVersion) : null;
    });
  }

  async listFolderVersions(environmentId: string) {
    return settle(() => this.folderVersionsSync(environmentId));
  }

  private folderVersionsSync(environmentId: string): FolderVersion[] {
    return this.ctx.storage.sql.exec(`select name, body from folder_versions where environment_id = ? order by name, version`, environmentId)
      .toArray().map((r) => JSON.parse(r.body as string) as FolderVersion);
  }

  /** Updates arrive through the thread's outbox and may be retried: an older row never overwrites a newer one. */
  /**
   * Also answers with the house's bots as the thread's dispatch needs them: a new thread then
   * decides its first chats from that copy instead of asking again (no trigger row, alarm or call).
   */
  async upsertThread(t: ThreadSummary) {
    return settle(() => {
      this.upsertThreadSync(t);
      return { agentSet: this.candidateSet() };
    });
  }

  /** The agent set as dispatch candidates, kept in memory per version (every change bumps it). */
  private candidates: { version: number; candidates: Candidate[] } | null = null;
  private candidateSet(): { version: number; candidates: Candidate[] } {
    const version = this.agentsVersion();
    if (this.candidates?.version !== version) {
      this.candidates = { version, candidates: this.listAgentsSync().map((a) => ({ id: a.id, handle: a.handle, triggerMode: a.triggerMode })) };
    }
    return this.candidates;
  }

  private upsertThreadSync(t: ThreadSummary): void {
    this.ctx.storage.sql.exec(
      `insert into threads (id, parent_kind, parent_id, status, reason, title, environment_id, box_id, created_at, updated_at)
       values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
       on conflict(id) do update set status = excluded.status, reason = excluded.reason, title = excluded.title,
         box_id = excluded.box_id, updated_at = excluded.updated_at
       where excluded.updated_at >= threads.updated_at`,
      t.id, t.parent.kind, t.parent.id, t.status, t.reason, t.title, t.environmentId, t.boxId, t.createdAt, t.updatedAt,
    );
  }

  /**
   * Creates or replaces an environment's configuration. Its shared box is the house's record
   * (claimSharedBox), not part of what a client sends: a replace or a PATCH keeps it, so the box
   * is neither forgotten (and leaked, as nothing reaps a shared box) nor doubled.
   */
  /** Creates or replaces an environment, dated here: a replace keeps the createdAt it was first made with. */
  async putEnvironment(e: Omit<Environment, "createdAt" | "updatedAt">) {
    return settle(async () => {
      const stored = this.ctx.storage.transactionSync(() => {
        const { sharedBoxId: _sent, ...config } = e;
        const existing = this.getEnvironmentSync(e.id);
        const at = new Date(this.clock.now()).toISOString();
        return this.storeKeepingSharedBox({ ...config, createdAt: existing?.createdAt ?? at, updatedAt: at }, existing);
      });
      if (stored.retiredBoxId) await this.armForRetirements();
      return stored;
    });
  }

  /** Applies a PATCH to the environment as it is now, in one step: 404 once it is deleted. */
  async patchEnvironment(id: string, patch: Record<string, unknown>) {
    return settle(async () => {
      const stored = this.ctx.storage.transactionSync(() => {
        const current = this.getEnvironmentSync(id);
        if (!current) throw new ApiError("not_found", "environment not found");
        const { sharedBoxId: _kept, ...next } = applyEnvironmentPatch(current, patch);
        return this.storeKeepingSharedBox({ ...next, updatedAt: new Date(this.clock.now()).toISOString() }, current);
      });
      if (stored.retiredBoxId) await this.armForRetirements();
      return stored;
    });
  }

  /**
   * Stores an environment with the shared box it had (`before`'s), while it still keeps one; one
   * that no longer does lets its box go: `retiredBoxId` is the box for the caller to retire. So
   * does one that changes or removes a secret or a sensitive file: the box holds what runs wrote
   * of the old value, which redaction would no longer know (a box keeps what it was given, as it
   * keeps its image).
   */
  private storeKeepingSharedBox(e: Environment, before: Environment | null): { environment: Environment; retiredBoxId: string | null } {
    const kept = before?.sharedBoxId;
    const keeps = e.sharedBox && !retiresBoxSecret(before, e);
    const environment = kept && keeps ? { ...e, sharedBoxId: kept } : e;
    this.putEnvironmentSync(environment);
    const retiredBoxId = kept && !keeps ? kept : null;
    if (retiredBoxId) this.retireLater(e.houseId, e.id, retiredBoxId);
    return { environment, retiredBoxId };
  }

  /**
   * Forgets an environment and its folders' version index; volumes and threads are not its to delete.
   * Answers the archive streams of the versions it dropped and the shared box it had at the last
   * moment (a first command may have claimed one after the caller read the environment): the
   * caller deletes those.
   */
  async deleteEnvironment(id: string) {
    return settle(async () => {
      const deleted = this.ctx.storage.transactionSync(() => {
        const archiveStreams = this.folderVersionsSync(id).map((v) => v.stream);
        const e = this.getEnvironmentSync(id);
        const sharedBoxId = e?.sharedBoxId ?? null;
        if (e && sharedBoxId) this.retireLater(e.houseId, e.id, sharedBoxId);
        this.ctx.storage.sql.exec(`delete from environments where id = ?`, id);
        this.ctx.storage.sql.exec(`delete from folder_versions where environment_id = ?`, id);
        return { archiveStreams, sharedBoxId };
      });
      if (deleted.sharedBoxId) await this.armForRetirements();
      return deleted;
    });
  }

  /**
   * Lets the environment's shared box go if it is still `boxId` (see storeKeepingSharedBox): a run
   * launched there with secrets or sensitive files the environment changed since. True when it was let go: the
   * caller retires the box.
   */
  async letGoSharedBox(environmentId: string, boxId: string) {
    return settle(async () => {
      const letGo = this.ctx.storage.transactionSync(() => {
        const e = this.getEnvironmentSync(environmentId);
        if (!e || e.sharedBoxId !== boxId) return false;
        const { sharedBoxId: _gone, ...rest } = e;
        this.putEnvironmentSync(rest);
        this.retireLater(e.houseId, e.id, boxId);
        return true;
      });
      if (letGo) await this.armForRetirements();
      return letGo;
    });
  }

  private putEnvironmentSync(e: Environment): void {
    this.ctx.storage.sql.exec(`insert into environments (id, body) values (?, ?) on conflict(id) do update set body = excluded.body`, e.id, JSON.stringify(e));
  }

  async getEnvironment(id: string) {
    return settle(() => this.getEnvironmentSync(id));
  }

  private getEnvironmentSync(id: string): Environment | null {
    const r = this.ctx.storage.sql.exec(`select body from environments where id = ?`, id).toArray()[0];
    return r ? (JSON.parse(r.body as string) as Environment) : null;
  }

  /**
   * The environment's shared box: the first registered box wins, so two concurrent first
   * commands cannot leave two shared boxes behind (the loser deletes its own).
   */
  async claimSharedBox(environmentId: string, boxId: string, replace: string | null, houseId?: string) {
    return settle(async () => {
      const claim = this.ctx.storage.transactionSync(() => this.claimSharedBoxSync(environmentId, boxId, replace, houseId));
      // The box the claim lets go (the one offered, when it is not taken; the one it replaces) is the caller's to retire.
      if (claim.winner !== boxId || replace) await this.armForRetirements();
      // Turned off while the box was made: recorded, it would stay live with nothing to use or reap it.
      if (claim.refused) throw new ApiError("conflict", "this environment keeps no shared box (set sharedBox: true)");
      return claim.winner;
    });
  }

  private claimSharedBoxSync(environmentId: string, boxId: string, replace: string | null, houseId: string | undefined): { winner: string | null; refused?: true } {
    const e = this.getEnvironmentSync(environmentId);
    if (!e || !e.sharedBox || (e.sharedBoxId && e.sharedBoxId !== replace)) {
      // Not taken (the environment is gone, keeps no shared box, or another box won): no environment
      // will use or delete the box offered, so it is to be retired as one let go is. (A caller older
      // than this rule sends no house id; it deletes the box itself.)
      const house = e?.houseId ?? houseId;
      if (house) this.retireLater(house, environmentId, boxId);
      return !e ? { winner: null } : !e.sharedBox ? { winner: null, refused: true } : { winner: e.sharedBoxId! };
    }
    this.putEnvironmentSync({ ...e, sharedBoxId: boxId });
    // The box it replaces is the environment's no more: the caller retires it.
    if (e.sharedBoxId && e.sharedBoxId !== boxId) this.retireLater(e.houseId, e.id, e.sharedBoxId);
    return { winner: boxId };
  }

  async listEnvironments() {
    return settle(() => this.listEnvironmentsSync());
  }

  private listEnvironmentsSync(): Environment[] {
    return this.ctx.storage.sql.exec(`select body from environments order by id`).toArray().map((r) => JSON.parse(r.body as string) as Environment);
  }

  async createAgent(a: Agent) {
    return settle(() => {
      if (this.agentByHandle(a.handle)) throw new ApiError("conflict", `handle @${a.handle} is taken in this house`);
      this.ctx.storage.sql.exec(`insert into agents (id, handle, body) values (?, ?, ?)`, a.id, a.handle, JSON.stringify(a));
      this.agentsChanged();
      return a;
    });
  }

  async listAgents() {
    return settle(() => this.listAgentsSync());
  }

  /** The agents with the version of the set they belong to, for threads that cache it. */
  async agentSet() {
    return settle(() => ({ version: this.agentsVersion(), agents: this.listAgentsSync() }));
  }

  private listAgentsSync(): Agent[] {
    return this.ctx.storage.sql.exec(`select body from agents order by handle`).toArray().map((r) => JSON.parse(r.body as string) as Agent);
  }

  private agentsVersion(): number {
    return (this.ctx.storage.sql.exec(`select value from counters where name = 'agents'`).toArray()[0]?.value as number | undefined) ?? 0;
  }

  /**
   * Threads decide an unaddressed chat from a cached agent set; every change to the set bumps its
   * version and tells the house's threads to drop older copies. A notice that is lost (an eviction
   * mid-way) is bounded by the threads' cache lifetime.
   */
  private agentsChanged(): void {
    const sql = this.ctx.storage.sql;
    sql.exec(`insert into counters (name, value) values ('agents', 1) on conflict(name) do update set value = value + 1`);
    const version = this.agentsVersion();
    const ids = sql.exec(`select id from threads`).toArray().map((r) => r.id as string);
    this.ctx.waitUntil(notifyThreads(this.env, ids, version));
  }

  async getAgent(id: string) {
    return settle(() => this.getAgentSync(id));
  }

  private getAgentSync(id: string): Agent | null {
    const r = this.ctx.storage.sql.exec(`select body from agents where id = ?`, id).toArray()[0];
    return r ? (JSON.parse(r.body as string) as Agent) : null;
  }

  async updateAgent(id: string, patch: AgentPatch, nowIso: string) {
    return settle(() => {
      const current = this.getAgentSync(id);
      if (!current) throw new ApiError("not_found", "agent not found");
      const next = applyAgentPatch(current, patch, nowIso);
      const holder = this.agentByHandle(next.handle);
      if (holder && holder !== id) throw new ApiError("conflict", `handle @${next.handle} is taken in this house`);
      this.ctx.storage.sql.exec(`update agents set handle = ?, body = ? where id = ?`, next.handle, JSON.stringify(next), id);
      this.agentsChanged();
      return next;
    });
  }

  async deleteAgent(id: string) {
    return settle(() => {
      if (this.ctx.storage.sql.exec(`delete from agents where id = ?`, id).rowsWritten === 0) throw new ApiError("not_found", "agent not found");
      this.agentsChanged();
      return true;
    });
  }

  private agentByHandle(handle: string): string | null {
    return (this.ctx.storage.sql.exec(`select id from agents where handle = ?`, handle).toArray()[0]?.id as string | undefined) ?? null;
  }

  async upsertBox(box: BoxView) {
    return settle(() => this.upsertBoxSync(box));
  }

  private upsertBoxSync(box: BoxView): void {
    this.ctx.storage.sql.exec(
      `insert into boxes (id, ephemeral, state, view) values (?, ?, ?, ?)
       on conflict(id) do update set ephemeral = excluded.ephemeral, state = excluded.state, view = excluded.view`,
      box.id, box.ephemeral ? 1 : 0, box.state, JSON.stringify(box),
    );
  }

  async listBoxes(f: { state?: string; ephemeral?: boolean }) {
    return settle(() => this.listBoxesSync(f));
  }

  private listBoxesSync(f: { state?: string; ephemeral?: boolean }): BoxView[] {
    const where: string[] = [];
    const args: unknown[] = [];
    if (f.state) { where.push("state = ?"); args.push(f.state); }
    if (f.ephemeral !== undefined) { where.push("ephemeral = ?"); args.push(f.ephemeral ? 1 : 0); }
    const sql = `select view from boxes ${where.length ? "where " + where.join(" and ") : ""} order by id`;
    return this.ctx.storage.sql.exec(sql, ...args).toArray().map((r) => JSON.parse(r.view as string) as BoxView);
  }

  async listThreads(f: ThreadFilter) {
    return settle(() => this.listThreadsSync(f));
  }

  private listThreadsSync(f: ThreadFilter): ThreadSummary[] {
    const where: string[] = [];
    const args: unknown[] = [];
    if (f.parentKind) { where.push("parent_kind = ?"); args.push(f.parentKind); }
    if (f.parentId) { where.push("parent_id = ?"); args.push(f.parentId); }
    if (f.status) { where.push("status = ?"); args.push(f.status); }
    if (f.environmentId) { where.push("environment_id = ?"); args.push(f.environmentId); }
    if (f.before && f.beforeId) { where.push("(created_at < ? or (created_at = ? and id > ?))"); args.push(f.before, f.before, f.beforeId); }
    else if (f.before) { where.push("created_at < ?"); args.push(f.before); }
    const sql = `select * from threads ${where.length ? "where " + where.join(" and ") : ""} order by created_at desc, id limit ?`;
    return this.ctx.storage.sql.exec(sql, ...args, f.limit).toArray().map((r) => ({
      id: r.id as string,
      parent: { kind: r.parent_kind as ParentRef["kind"], id: r.parent_id as string | null },
      status: r.status as ThreadStatus,
      reason: r.reason as string | null,
      title: r.title as string | null,
      environmentId: r.environment_id as string | null,
      boxId: r.box_id as string | null,
      createdAt: r.created_at as string,
      updatedAt: r.updated_at as string,
    }));
  }
}

const NOTIFY_CONCURRENCY = 16;

async function notifyThreads(env: Env, threadIds: string[], version: number): Promise<void> {
  let failed = 0;
  for (let i = 0; i < threadIds.length; i += NOTIFY_CONCURRENCY) {
    const batch = threadIds.slice(i, i + NOTIFY_CONCURRENCY);
    const results = await Promise.allSettled(batch.map((id) => threadStub(env, id).agentsChanged(version)));
    failed += results.filter((r) => r.status === "rejected").length;
  }
  if (failed > 0) logEvent("agents_notify_failed", { threads: threadIds.length, failed, version }, "warn");
}
