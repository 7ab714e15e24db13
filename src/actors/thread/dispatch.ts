import type { Env } from "../../env";
import type { Agent } from "../../agents";
import type { Entry } from "../../entries/schema";
import type { Environment } from "../../environments";
import type { StoredMessage } from "../../streams/log";
import type { ThreadRow } from "../../threads/thread-row";
import { DEFAULT_DISPATCH_CONFIG, mergeDispatchConfig, type DispatchConfig, type ThreadConfigPatch } from "../../dispatch/config";
import { afterGate, effectiveMode, entryDepth, isTriggerable, mayMention, selectResponders, type Candidate, type Decision, type DecisionReason, type Trigger } from "../../dispatch/selection";
import { resolveModel, type PiModelsConfig, type ResolvedModel } from "../../dispatch/models";
import { runToolLoop, type LoopEvent, type LoopMessage, type LoopResult, type ToolSpec } from "../../dispatch/tool-loop";
import { askGate } from "../../dispatch/gate";
import { buildTools } from "../../dispatch/tools";
import type { ToolContext } from "../../dispatch/tools/context";
import { errorMessage, logEvent } from "../../domain/log-event";
import { redactValues } from "../../domain/secret-forms";
import { addColumnIfMissing, LazySchema, type Schema } from "../../domain/sql-schema";
import { UTF8_DECODER } from "../../entries/json-limits";
import { BOT_ROLE, toEntryWithOffset } from "../../threads/entries";
import { parseReach, THREAD_REACH_NOTE, withheldToolResult, withinReach, type Reach } from "../../dispatch/reach";

/** What the dispatch service needs from its actor. */
export type DispatchPorts = {
  sql: SqlStorage;
  env: Env;
  now(): number;
  thread(): ThreadRow;
  /**
   * Appends entries the control plane writes (deduped by id), as one atomic write; `reach`: that
   * of the turn that wrote them, which a chat among them passes on to the bots it wakes.
   */
  append(entries: Entry[], reach?: Reach): void;
  /**
   * The last `count` stored messages that may be chat entries (their bytes name `"chat"`), among
   * the `scan` messages up to and including `upToSeq`, oldest first.
   */
  recentChats(count: number, upToSeq: number, scan: number): StoredMessage[];
  house(houseId: string): {
    /** The house's agents and the version of that set. */
    agentSet(): Promise<{ version: number; agents: Agent[] }>;
    getAgent(id: string): Promise<Agent | null>;
    getEnvironment(id: string): Promise<Environment | null>;
  };
  /** Re-arms the actor's alarm from persisted state (a running turn's lease is a deadline). */
  rearm(): Promise<void>;
  /**
   * Keeps a turn going after the alarm that started it has returned. Default: awaited in the
   * alarm (tests that drive one alarm at a time).
   */
  background?(work: Promise<void>): void;
  /** How long a running turn's lease lasts; an expired lease means its incarnation died. */
  turnLeaseMs?: number;
  /** How long a cached agent set decides chats inline without asking the house again. */
  agentCacheMs?: number;
  /** Swappable in tests; the real pi-ai loop and gate by default. */
  llm?: { runToolLoop: typeof runToolLoop; askGate: typeof askGate };
};

type TurnState = "gate" | "pending" | "running" | "done" | "failed";
type TurnRow = {
  id: string; agentId: string; triggerEntryId: string; triggerSeq: number; depth: number; state: TurnState;
  runAt: number; attempts: number; updatedAt: number;
  /** The reach of the writer of the chat this turn answers: how far the bot may act in it. */
  reach: Reach;
};

export type DecisionRecord = { at: string; triggerEntryId: string; agentId: string; verdict: string; reason: DecisionReason; detail: string | null; turnId: string | null; reach: Reach };

/** Well inside the runtime's inactivity eviction (about 70 s without an event). */
export const TURN_KEEPALIVE_MS = 20_000;

/** A running turn renews this lease every round; an expired one belongs to a dead incarnation and is resumed. */
export const DEFAULT_TURN_LEASE_MS = 60_000;
/** A turn interrupted this many times ends with an error entry instead of trying again. */
export const MAX_TURN_ATTEMPTS = 3;
const RECENT_CHAT = 40;
/**
 * How far back a turn looks for those chats. Chats are a small part of a busy thread (one command
 * streams up to 200 output entries, a run writes a round per step): a window of the last few
 * entries would hold none of what was said before such a burst.
 */
export const HISTORY_SCAN_ENTRIES = 5_000;
/** Bounds how long a lost change notice from the house can leave a thread with an old agent set. */
export const DEFAULT_AGENT_CACHE_MS = 60_000;
const DECISIONS_KEPT = 500;
const enc = new TextEncoder();

/** A thread's own dispatch settings (a DM's, or a PATCH's): most threads keep the defaults. */
export const DISPATCH_CONFIG_SCHEMA: Schema = {
  name: "dispatch_config",
  ddl: `create table if not exists dispatch_config (id integer primary key check (id = 1), body text not null)`,
};

/** The house's agent set as this thread last loaded it, kept across evictions. */
export const DISPATCH_AGENTS_SCHEMA: Schema = {
  name: "dispatch_agents",
  ddl: `create table if not exists dispatch_agents (id integer primary key check (id = 1), version integer not null, candidates text not null, loaded_at integer not null)`,
};

/**
 * Triggers, turns and what was decided: only a thread whose chat may wake a bot has them. Each
 * names the reach of the chat's writer (`reach`); every row written now says it, so none has a
 * default.
 */
export const DISPATCH_TURNS_SCHEMA: Schema = {
  name: "dispatch_turns",
  ddl: `create table if not exists dispatch_triggers (
      entry_id text primary key, seq integer not null, author_id text, text text not null, depth integer not null, mentions text,
      reach text not null);
    create table if not exists dispatch_turns (
      id text primary key, agent_id text not null, trigger_entry_id text not null, trigger_seq integer not null, depth integer not null,
      state text not null, run_at integer not null, attempts integer not null default 0, progress text not null default '[]',
      updated_at integer not null, reach text not null);
    create unique index if not exists dispatch_turns_once on dispatch_turns(trigger_entry_id, agent_id);
    create table if not exists dispatch_decisions (
      seq integer primary key autoincrement, at integer not null, trigger_entry_id text not null, agent_id text not null,
      verdict text not null, reason text not null, detail text, turn_id text, reach text not null);
    create table if not exists dispatch_replies (agent_id text primary key, at integer not null)`,
  // An older actor's rows were written before the writer's reach was recorded: taken as `house`,
  // they run as they would have when they were written (a pending trigger wakes its bots with the
  // tools it had, a running turn keeps them, an old decision shows how it ran). The rows waiting
  // at an upgrade are a few seconds' chats; a narrower default would take tools away mid-turn.
  migrate: (sql) => {
    for (const table of ["dispatch_triggers", "dispatch_turns", "dispatch_decisions"]) addColumnIfMissing(sql, table, "reach", "text not null default 'house'");
  },
};

/**
 * A running turn's rounds, one row each. A turn may write up to DEFAULT_MAX_ROUNDS rounds of
 * several 16 KiB tool results each: all of them in one value would pass the storage's limit on
 * a row (about 2 MB), and rewriting the whole transcript every round costs the square of it.
 * (Older actors' turns may still hold rounds in `dispatch_turns.progress`: those come first.)
 */
export const DISPATCH_ROUNDS_SCHEMA: Schema = {
  name: "dispatch_turn_rounds",
  ddl: `create table if not exists dispatch_turn_rounds (
      turn_id text not null, idx integer not null, body text not null, primary key (turn_id, idx))`,
};

/** The bot's model, instructions and environment as a running turn began with them, kept across restarts. */
export const DISPATCH_SETTINGS_SCHEMA: Schema = {
  name: "dispatch_turn_settings",
  ddl: `create table if not exists dispatch_turn_settings (turn_id text primary key, body text not null)`,
};

type TurnSettings = Pick<Agent, "name" | "handle" | "model"> & { systemPrompt: string | null; environmentId: string | null };

function withSettings(current: Agent, began: TurnSettings): Agent {
  const { systemPrompt, environmentId, ...rest } = current;
  return {
    ...rest, name: began.name, handle: began.handle, model: began.model,
    ...(began.systemPrompt !== null ? { systemPrompt: began.systemPrompt } : {}),
    ...(began.environmentId !== null ? { environmentId: began.environmentId } : {}),
  };
}

/**
 * Bots reacting to chat, inside the ThreadActor. A chat entry becomes a trigger in the same
 * transaction that appends it; the actor's alarm turns triggers into decisions and turns, and
 * runs turns. A turn persists its progress with every round it writes to the thread, so after
 * an eviction it resumes from there; every entry it writes has an id fixed by the turn, so a
 * replayed step is deduplicated by the log instead of posted twice.
 */
export class DispatchService {
  /** The turns this incarnation is running, by id: the bot each runs for. */
  private readonly active = new Map<string, string>();
  /**
   * The messages being appended by a writer that reaches the whole house, by their bytes: the log
   * hands recordTriggers the very bytes the append carried. The reach is kept beside the entry, not
   * in it (a client's entry could claim any); bytes nobody marked are taken to reach their thread.
   */
  private readonly houseReach = new WeakSet<Uint8Array>();
  /** The secret values of each running turn's environment, which its failure reasons must not show. */
  private readonly turnSecrets = new Map<string, string[]>();
  private readonly llm: { runToolLoop: typeof runToolLoop; askGate: typeof askGate };
  private readonly leaseMs: number;
  private readonly agentCacheMs: number;
  /** The house's agent set as last loaded, so a chat that addresses nobody is decided inline. */
  private agentCache: { version: number; candidates: Candidate[]; ids: Set<string>; loadedAt: number; mentionOnly?: boolean } | null = null;
  /** The newest agent-set version the house announced; an older load never becomes the cache. */
  private newestAgentsVersion = 0;
  private configCache: DispatchConfig | null = null;
  private readonly configTable: LazySchema;
  private readonly agentsTable: LazySchema;
  private readonly turnTables: LazySchema;
  private readonly roundsTable: LazySchema;
  private readonly settingsTable: LazySchema;

  constructor(private readonly ports: DispatchPorts) {
    const sql = ports.sql;
    this.llm = ports.llm ?? { runToolLoop, askGate };
    this.leaseMs = ports.turnLeaseMs ?? DEFAULT_TURN_LEASE_MS;
    this.agentCacheMs = ports.agentCacheMs ?? DEFAULT_AGENT_CACHE_MS;
    this.configTable = new LazySchema(sql, DISPATCH_CONFIG_SCHEMA);
    this.agentsTable = new LazySchema(sql, DISPATCH_AGENTS_SCHEMA);
    this.turnTables = new LazySchema(sql, DISPATCH_TURNS_SCHEMA);
    this.roundsTable = new LazySchema(sql, DISPATCH_ROUNDS_SCHEMA);
    this.settingsTable = new LazySchema(sql, DISPATCH_SETTINGS_SCHEMA);
  }

  // ---- config ----

  config(): DispatchConfig {
    if (this.configCache) return this.configCache;
    const r = !this.configTable.exists() ? undefined : this.ports.sql.exec(`select body from dispatch_config where id = 1`).toArray()[0];
    this.configCache = r ? { ...DEFAULT_DISPATCH_CONFIG, ...(JSON.parse(r.body as string) as DispatchConfig) } : DEFAULT_DISPATCH_CONFIG;
    return this.configCache;
  }

  setConfig(c: DispatchConfig): void {
    this.configCache = null;
    if (this.agentCache) this.agentCache.mentionOnly = undefined;
    this.configTable.ensure();
    this.ports.sql.exec(`insert into dispatch_config (id, body) values (1, ?) on conflict(id) do update set body = excluded.body`, JSON.stringify(c));
  }

  // ---- the house's agent set ----

  /** The house changed its agents: a cached set older than `version` no longer decides anything. */
  agentsChanged(version: number): void {
    this.newestAgentsVersion = Math.max(this.newestAgentsVersion, version);
    if (this.agentCache && this.agentCache.version < version) this.agentCache = null;
    if (this.agentsTable.exists()) this.ports.sql.exec(`delete from dispatch_agents where version < ?`, version);
  }

  private async loadAgents(houseId: string): Promise<Candidate[]> {
    const { version, agents } = await this.ports.house(houseId).agentSet();
    const candidates = agents.map((a) => ({ id: a.id, handle: a.handle, triggerMode: a.triggerMode }));
    this.primeAgents({ version, candidates });
    return candidates;
  }

  /** A copy of the house's agent set that came with another answer (the index sync): cached unless older. */
  primeAgents(set: { version: number; candidates: Candidate[] }): void {
    if (set.version < this.newestAgentsVersion) return;
    this.newestAgentsVersion = set.version;
    const loadedAt = this.ports.now();
    this.agentCache = agentCacheOf(set.version, set.candidates, loadedAt);
    // Kept with the thread: an actor evicted and woken again within the cache's lifetime still
    // decides an unaddressed chat without a trigger row, an alarm and a call to the house.
    this.agentsTable.ensure();
    this.ports.sql.exec(
      `insert into dispatch_agents (id, version, candidates, loaded_at) values (1, ?, ?, ?)
       on conflict(id) do update set version = excluded.version, candidates = excluded.candidates, loaded_at = excluded.loaded_at`,
      set.version, JSON.stringify(set.candidates), loadedAt,
    );
  }

  /** The agent set this thread kept from before an eviction, if it has not been read yet. */
  private persistedAgentsRead = false;
  private cachedAgents() {
    if (this.agentCache || this.persistedAgentsRead) return this.agentCache;
    this.persistedAgentsRead = true;
    const r = !this.agentsTable.exists() ? undefined : this.ports.sql.exec(`select version, candidates, loaded_at from dispatch_agents where id = 1`).toArray()[0];
    if (!r || (r.version as number) < this.newestAgentsVersion) return null;
    const candidates = JSON.parse(r.candidates as string) as Candidate[];
    this.newestAgentsVersion = r.version as number;
    this.agentCache = agentCacheOf(r.version as number, candidates, r.loaded_at as number);
    return this.agentCache;
  }

  /**
   * True when a fresh cached agent set shows that no bot would do or record anything for this chat
   * (every bot is mention-only and none is named): it then needs no trigger row and no alarm.
   * A mention of a handle the cache does not know is never decided here.
   */
  private nobodyAddressed(e: Entry): boolean {
    const cache = this.cachedAgents();
    if (!cache || this.ports.now() - cache.loadedAt >= this.agentCacheMs) return false;
    const text = String(e.payload.text ?? "");
    const mentions = mentionList(e.payload.mentions);
    // A bot's own message gets a recorded "author" decision, and any `@` may name somebody.
    if (mayMention(text) || (mentions?.length ?? 0) > 0 || (e.authorId !== undefined && cache.ids.has(e.authorId))) return false;
    cache.mentionOnly ??= cache.candidates.every((a) => effectiveMode(a, this.config()) === "mention");
    return cache.mentionOnly;
  }

  patchConfig(patch: ThreadConfigPatch): DispatchConfig {
    const next = mergeDispatchConfig(this.config(), patch.dispatch);
    this.setConfig(next);
    return next;
  }

  // ---- the append path (synchronous, inside the append's transaction) ----

  /** Says who is appending `messages`: a chat among them wakes bots that act with this reach. */
  writtenWith(messages: { data: Uint8Array }[], reach: Reach | undefined): void {
    if (reach !== "house") return;
    for (const m of messages) this.houseReach.add(m.data);
  }

  /**
   * Returns how many triggers need the alarm re-armed: none when triggers were already pending,
   * since the alarm that decides those is armed already and re-arms itself when it ends (an
   * untriggered chat then costs one row, not an alarm write per append).
   */
  recordTriggers(fresh: StoredMessage[]): number {
    let n = 0;
    let alreadyArmed: boolean | null = null;
    for (const m of fresh) {
      const e = this.triggerIn(m);
      if (!e) continue;
      alreadyArmed ??= this.turnTables.exists() && this.ports.sql.exec(`select 1 from dispatch_triggers limit 1`).toArray().length > 0;
      this.turnTables.ensure();
      const mentions = Array.isArray(e.payload.mentions) ? JSON.stringify(e.payload.mentions) : null;
      this.ports.sql.exec(
        `insert into dispatch_triggers (entry_id, seq, author_id, text, depth, mentions, reach) values (?, ?, ?, ?, ?, ?, ?) on conflict do nothing`,
        e.id, m.seq, e.authorId ?? null, String(e.payload.text ?? ""), entryDepth(e.payload), mentions, this.houseReach.has(m.data) ? "house" : "thread",
      );
      if (!alreadyArmed) n++;
    }
    return n;
  }

  /** Whether recordTriggers would write a row for any of these messages (it decides alike, from the same cache). */
  wouldRecordTriggers(messages: { data: Uint8Array; parsed?: unknown }[]): boolean {
    return messages.some((m) => this.triggerIn(m) !== null);
  }

  /** The chat entry in `m` that needs a trigger row, if any. */
  private triggerIn(m: { data: Uint8Array; parsed?: unknown }): Entry | null {
    let e = m.parsed as Entry | undefined;
    if (e === undefined) {
      const raw = UTF8_DECODER.decode(m.data);
      if (!raw.includes(`"chat"`)) return null; // cheap pre-check: most entries are pi.* and signals
      e = JSON.parse(raw) as Entry;
    }
    if (!isTriggerable(e.payload) || this.nobodyAddressed(e)) return null;
    return e;
  }

  // ---- the alarm ----

  nextDeadline(): number | null {
    // Turns run only from rows in these tables: with no tables there is nothing to run.
    if (!this.turnTables.exists()) return null;
    const sql = this.ports.sql;
    if (sql.exec(`select 1 from dispatch_triggers limit 1`).toArray().length > 0) return this.ports.now();
    // A turn this incarnation is running is not due, whatever its lease says (a model call may
    // outlast it): only a turn nobody runs (its incarnation died) is resumed at its lease's end.
    // A bot's later turns wait for its running one, which re-arms the alarm when it ends.
    let at: number | null = null;
    for (const t of this.nextTurns()) at = Math.min(at ?? Infinity, dueAt(t, this.leaseMs));
    // A turn running beside the alarm is not an event of the actor: a thread that gets nothing
    // else while its bot waits minutes on a model would be evicted for inactivity, cutting the
    // call off. An alarm every TURN_KEEPALIVE_MS keeps it alive until the turn ends (and, never
    // further off than a lease, still resumes the turn in time if this incarnation dies).
    if (this.active.size === 0) return at;
    const keepAlive = this.ports.now() + Math.min(TURN_KEEPALIVE_MS, this.leaseMs);
    return at === null ? keepAlive : Math.min(at, keepAlive);
  }

  async onAlarm(): Promise<void> {
    await this.decidePending();
    const now = this.ports.now();
    const due = this.nextTurns().filter((t) => dueAt(t, this.leaseMs) <= now);
    const runs = due.map((t) => this.runTurn(t));
    if (!this.ports.background) {
      await Promise.all(runs);
      return;
    }
    // A turn may wait minutes on its model. It runs beside the alarm, not inside it, so the
    // thread's next alarm (a launch, a stop's grace, the next chat's decision) does not queue
    // behind it; when it ends, the alarm is set again for what it left (its reply's triggers).
    // Its lease still covers an eviction meanwhile.
    for (const run of runs) {
      this.ports.background(run.then(() => this.ports.rearm()).catch((err) => {
        logEvent("dispatch_rearm_failed", { error: errorMessage(err) }, "error");
      }));
    }
  }

  /** Triggers -> decisions (recorded with reasons) -> turns. */
  private async decidePending(): Promise<void> {
    if (!this.turnTables.exists()) return;
    const sql = this.ports.sql;
    const triggers = sql.exec(`select * from dispatch_triggers order by seq`).toArray();
    if (triggers.length === 0) return;
    const row = this.ports.thread();
    const candidates = await this.loadAgents(row.houseId);
    const config = this.config();
    const lastReplyAt: Record<string, number> = Object.fromEntries(sql.exec(`select agent_id, at from dispatch_replies`).toArray().map((r) => [r.agent_id as string, r.at as number]));
    // A reply under way counts for the cooldown as one just made: three chats in a row must not
    // start three turns of an `always` bot while its first answer is still being written.
    if (config.cooldownMs > 0) {
      for (const r of sql.exec(`select distinct agent_id from dispatch_turns where state in ('gate', 'pending', 'running')`).toArray()) {
        lastReplyAt[r.agent_id as string] = this.ports.now();
      }
    }
    for (const t of triggers) {
      const trigger: Trigger = {
        entryId: t.entry_id as string, authorId: (t.author_id as string | null) ?? null, text: t.text as string, depth: t.depth as number,
        mentions: t.mentions ? (JSON.parse(t.mentions as string) as string[]) : undefined,
      };
      const reach = parseReach(t.reach);
      const now = this.ports.now();
      const decisions = selectResponders({ trigger, agents: candidates, config, lastReplyAt, nowMs: now });
      for (const d of decisions) {
        let turnId: string | null = null;
        if (d.verdict !== "skip") {
          turnId = `turn_${crypto.randomUUID().replace(/-/g, "").slice(0, 20)}`;
          sql.exec(
            `insert into dispatch_turns (id, agent_id, trigger_entry_id, trigger_seq, depth, state, run_at, updated_at, reach)
             values (?, ?, ?, ?, ?, ?, ?, ?, ?) on conflict do nothing`,
            turnId, d.agentId, trigger.entryId, t.seq as number, d.depth, d.verdict === "gate" ? "gate" : "pending", d.runAt, now, reach,
          );
          if (config.cooldownMs > 0) lastReplyAt[d.agentId] = now;
        }
        // A bot nobody addressed is the common case for every chat: recording it would cost a
        // row per bot per message and tell a user nothing they asked about.
        if (d.reason !== "not_mentioned") this.decide(trigger.entryId, reach, d, null, turnId, false);
      }
      sql.exec(`delete from dispatch_triggers where entry_id = ?`, trigger.entryId);
    }
    this.trimDecisions();
  }

  private decide(triggerEntryId: string, reach: Reach, d: Pick<Decision, "agentId" | "verdict" | "reason">, detail: string | null, turnId: string | null, trim = true): void {
    this.ports.sql.exec(
      `insert into dispatch_decisions (at, trigger_entry_id, agent_id, verdict, reason, detail, turn_id, reach) values (?, ?, ?, ?, ?, ?, ?, ?)`,
      this.ports.now(), triggerEntryId, d.agentId, d.verdict, d.reason, detail, turnId, reach,
    );
    if (trim) this.trimDecisions();
  }

  private trimDecisions(): void {
    this.ports.sql.exec(`delete from dispatch_decisions where seq <= (select max(seq) from dispatch_decisions) - ?`, DECISIONS_KEPT);
  }

  decisions(limit: number): DecisionRecord[] {
    if (!this.turnTables.exists()) return [];
    return this.ports.sql.exec(`select * from dispatch_decisions order by seq desc limit ?`, limit).toArray().map((r) => ({
      at: new Date(r.at as number).toISOString(), triggerEntryId: r.trigger_entry_id as string, agentId: r.agent_id as string,
      verdict: r.verdict as string, reason: r.reason as DecisionReason, detail: (r.detail as string | null) ?? null, turnId: (r.turn_id as string | null) ?? null,
      reach: parseReach(r.reach),
    }));
  }

  /**
   * The turn each bot may run next in this thread, for bots with none running here: one cut off
   * by a restart first, else the one for the oldest message. A bot answers one message at a time,
   * so its next turn sees its answer to the one before (run side by side, both would answer the
   * earlier message, and the answers could land out of order).
   */
  private nextTurns(): TurnRow[] {
    const busy = new Set(this.active.values());
    const next = new Map<string, TurnRow>();
    for (const t of this.turns(`state in ('gate', 'pending', 'running')`, [], `(state = 'running') desc, trigger_seq, run_at`)) {
      if (!busy.has(t.agentId) && !next.has(t.agentId)) next.set(t.agentId, t);
    }
    return [...next.values()];
  }

  private turns(where: string, args: unknown[] = [], order = "run_at"): TurnRow[] {
    if (!this.turnTables.exists()) return [];
    return this.ports.sql.exec(`select * from dispatch_turns where ${where} order by ${order}`, ...args).toArray().map((r) => ({
      id: r.id as string, agentId: r.agent_id as string, triggerEntryId: r.trigger_entry_id as string, triggerSeq: r.trigger_seq as number,
      depth: r.depth as number, state: r.state as TurnState, runAt: r.run_at as number, attempts: r.attempts as number,
      updatedAt: r.updated_at as number, reach: parseReach(r.reach),
    }));
  }

  private setTurn(id: string, patch: { state?: TurnState; attempts?: number }): void {
    this.ports.sql.exec(
      `update dispatch_turns set state = coalesce(?, state), attempts = coalesce(?, attempts), updated_at = ? where id = ?`,
      patch.state ?? null, patch.attempts ?? null, this.ports.now(), id,
    );
    // An ended turn's rounds are on the thread; kept here they would only fill the actor's storage.
    if (patch.state === "done" || patch.state === "failed") {
      this.ports.sql.exec(`update dispatch_turns set progress = '[]' where id = ? and progress != '[]'`, id);
      if (this.roundsTable.exists()) this.ports.sql.exec(`delete from dispatch_turn_rounds where turn_id = ?`, id);
      if (this.settingsTable.exists()) this.ports.sql.exec(`delete from dispatch_turn_settings where turn_id = ?`, id);
    }
  }

  private keepSettings(turnId: string, agent: Agent): void {
    this.settingsTable.ensure();
    const kept: TurnSettings = { name: agent.name, handle: agent.handle, model: agent.model, systemPrompt: agent.systemPrompt ?? null, environmentId: agent.environmentId ?? null };
    this.ports.sql.exec(`insert into dispatch_turn_settings (turn_id, body) values (?, ?) on conflict do update set body = excluded.body`, turnId, JSON.stringify(kept));
  }

  /** The bot's settings as the turn began (none for a turn an older actor began). */
  private settingsOf(turnId: string): TurnSettings | null {
    if (!this.settingsTable.exists()) return null;
    const r = this.ports.sql.exec(`select body from dispatch_turn_settings where turn_id = ?`, turnId).toArray()[0];
    return r ? (JSON.parse(r.body as string) as TurnSettings) : null;
  }

  /** The rounds a turn has written so far, oldest first. */
  private progressOf(turnId: string): LoopMessage[] {
    const legacy = this.ports.sql.exec(`select progress from dispatch_turns where id = ?`, turnId).toArray()[0];
    const out = legacy ? (JSON.parse(legacy.progress as string) as LoopMessage[]) : [];
    if (!this.roundsTable.exists()) return out;
    for (const r of this.ports.sql.exec(`select body from dispatch_turn_rounds where turn_id = ? order by idx`, turnId)) {
      out.push(JSON.parse(r.body as string) as LoopMessage);
    }
    return out;
  }

  // ---- one turn ----

  private async runTurn(turn: TurnRow): Promise<void> {
    this.active.set(turn.id, turn.agentId);
    // What the turn was doing when something of ours threw: its failure names that, not the model.
    let doing: TurnStep = "setup";
    try {
      const resumed = turn.state === "running";
      const attempts = turn.attempts + 1;
      if (resumed && attempts > MAX_TURN_ATTEMPTS) {
        this.fail(turn, `the turn was interrupted ${turn.attempts} times and was given up`);
        return;
      }
      const row = this.ports.thread();
      doing = "house";
      const house = this.ports.house(row.houseId);
      const current = await house.getAgent(turn.agentId);
      if (!current) {
        this.drop(turn, "agent was deleted");
        return;
      }
      // A turn resumed after a restart answers as the bot it began as: a model or instructions
      // edited meanwhile would take over half-way through its rounds. Its tools are the bot's
      // current ones, as between rounds (a tool taken away must act no more).
      const began = resumed ? this.settingsOf(turn.id) : null;
      const agent: Agent = began ? withSettings(current, began) : current;
      const environmentId = agent.environmentId ?? row.environmentId;
      const environment = environmentId ? await house.getEnvironment(environmentId) : null;
      this.turnSecrets.set(turn.id, Object.values(environment?.secrets ?? {}));
      const resolve = (ref: string) => {
        if (!environment && agent.environmentId) {
          return { ok: false as const, reason: `no model: the environment ${agent.environmentId} of bot @${agent.handle} no longer exists (give the bot another environment, or none to use the thread's)` };
        }
        if (!environment && environmentId) {
          return { ok: false as const, reason: `no model: this thread's environment ${environmentId} no longer exists, and bot @${agent.handle} has none of its own (give the bot an environment with piModels)` };
        }
        if (!environment) return { ok: false as const, reason: `no model: bot @${agent.handle} has no environment to resolve "${ref}" from (give the bot or the thread an environment with piModels)` };
        const r = resolveModel(ref, (environment.piModels ?? null) as PiModelsConfig | null, environment.secrets ?? {});
        // The model call cuts a provider's error to a line before this turn can redact it: it must
        // know every secret of the environment, not only those its key and headers used.
        return r.ok ? { ...r, model: { ...r.model, secretValues: [...r.model.secretValues, ...Object.values(environment.secrets ?? {})] } } : r;
      };
      doing = "setup";
      const history = this.history(agent, turn);

      if (turn.state === "gate") {
        // A gate that cannot be asked (no model for it, or its call failed) is an error with its
        // detail, not a "no"; and nothing is posted: an ambient bot is asked about every chat
        // nobody addressed to it, and would fill every conversation with its failures.
        const gateModel = resolve(agent.gateModel ?? agent.model);
        if (!gateModel.ok) {
          this.drop(turn, gateModel.reason);
          return;
        }
        const answer = await this.llm.askGate({ model: gateModel.model, botName: agent.name, botInstructions: agent.systemPrompt ?? "", recent: history });
        if (answer.failed) {
          this.endAsError(turn, this.redacted(turn, answer.reason).slice(0, 500));
          return;
        }
        const d = afterGate({ agentId: agent.id, verdict: "gate", reason: "ambient_wait", runAt: turn.runAt, depth: turn.depth }, answer.reply);
        this.decide(turn.triggerEntryId, turn.reach, d, this.redacted(turn, answer.reason).slice(0, 500), turn.id);
        if (d.verdict === "skip") {
          this.setTurn(turn.id, { state: "done" });
          return;
        }
      }

      const model = resolve(agent.model);
      if (!model.ok) return this.fail(turn, model.reason);
      if (!resumed) this.keepSettings(turn.id, agent);
      this.setTurn(turn.id, { state: "running", attempts });
      // If this incarnation dies mid-turn, the lease deadline wakes the next one to resume.
      await this.ports.rearm();
      const saved = this.progressOf(turn.id);
      const progress = closeInterruptedCalls(saved);
      if (progress.length !== saved.length) this.persist(turn, agent.id, progress.slice(saved.length).map(toEvent), saved.length);
      const last = progress.at(-1);
      if (last?.role === "assistant" && !last.toolCalls?.length) {
        // Interrupted after the final round was written: that round is the answer.
        this.finish(turn, agent.id, last.text);
        return;
      }
      // The model may come from the bot's own environment; the hands are always the thread's.
      const context = this.toolContext(row, agent, turn, row.environmentId, progress);
      doing = "tools";
      // A writer who reaches this thread only wakes a bot that acts within it (reach.ts).
      let { offered: tools, withheld } = withinReach(turn.reach, buildTools(context, agent.tools));
      doing = "model";
      let written = progress.length;
      let deletedMidTurn = false;
      const stop = new AbortController();
      let result: LoopResult;
      try {
        result = await this.llm.runToolLoop({
          model: model.model,
          systemPrompt: () => systemPrompt(agent, tools, turn.reach),
          messages: [...history, ...progress],
          tools: () => tools,
          withheld: (name) => (withheld.has(name) ? withheldToolResult(name) : null),
          signal: stop.signal,
          onEvent: async (e: LoopEvent) => {
            // The bot as it is now, before its next call runs: one deleted, or a tool taken away (a
            // user revoking a dangerous one), acts no more, even for the rest of a round whose
            // earlier calls took minutes. Its model and instructions stay the turn's.
            const refresh = async (): Promise<boolean> => {
              doing = "house";
              const now = await house.getAgent(turn.agentId);
              if (!now) {
                deletedMidTurn = true;
                stop.abort();
                return false;
              }
              doing = "tools";
              ({ offered: tools, withheld } = withinReach(turn.reach, buildTools(context, now.tools)));
              return true;
            };
            // A bot deleted while its model was answering shows nothing of that round: the tools it
            // asked for would still run as it (post into other threads, waking their bots; delegate
            // a run), for as many rounds as its model keeps asking.
            if (e.kind === "assistant" && !(await refresh())) return;
            doing = "save";
            this.persist(turn, agent.id, [boundedRound(e)], written);
            written += 1;
            if (e.kind === "tool_result") await refresh();
            doing = "model";
          },
        });
      } catch (err) {
        if (deletedMidTurn) return this.drop(turn, "agent was deleted while it worked");
        return this.failInternally(turn, doing, err);
      }
      // Deleted while it worked: its pending turns end without a reply (it would wake other bots).
      // Every round asked the house just now.
      if (deletedMidTurn) {
        this.drop(turn, "agent was deleted while it worked");
        return;
      }
      if (!result.ok) return this.fail(turn, result.reason);
      if (!result.finalText.trim()) return this.fail(turn, "the model's answer was empty");
      this.finish(turn, agent.id, capText(result.finalText));
    } catch (err) {
      this.failInternally(turn, doing, err);
    } finally {
      this.active.delete(turn.id);
      this.turnSecrets.delete(turn.id);
    }
  }

  /** The reply is itself a trigger: other bots may answer it, one level deeper. */
  private finish(turn: TurnRow, agentId: string, text: string): void {
    const now = this.ports.now();
    // The reply wakes bots with the reach of the chat it answers: a chain of bots never widens it.
    this.ports.append([{
      id: `reply:${turn.id}`, ts: now, authorId: agentId,
      // The message it answers: a client that posted several can tell which reply is whose.
      payload: { type: "chat", text, depth: turn.depth, turnId: turn.id, triggerEntryId: turn.triggerEntryId },
    }], turn.reach);
    this.ports.sql.exec(`insert into dispatch_replies (agent_id, at) values (?, ?) on conflict(agent_id) do update set at = excluded.at`, agentId, now);
    this.setTurn(turn.id, { state: "done" });
  }

  /** Each round goes on the thread and into the turn's progress in one synchronous step. */
  private persist(turn: TurnRow, agentId: string, events: LoopEvent[], firstIndex: number): void {
    const now = this.ports.now();
    const entries: Entry[] = events.map((e, i) => ({
      id: `turn:${turn.id}:${firstIndex + i}`, ts: now, authorId: agentId,
      payload: e.kind === "assistant"
        ? { type: "pi.assistant", text: e.text, toolCalls: e.toolCalls, stopReason: e.stopReason, depth: turn.depth, turnId: turn.id }
        : { type: "pi.tool_result", toolCallId: e.toolCallId, toolName: e.name, output: e.output, isError: e.isError, depth: turn.depth, turnId: turn.id },
    }));
    this.ports.append(entries);
    this.roundsTable.ensure();
    for (const [i, e] of events.entries()) {
      this.ports.sql.exec(
        `insert into dispatch_turn_rounds (turn_id, idx, body) values (?, ?, ?) on conflict do update set body = excluded.body`,
        turn.id, firstIndex + i, JSON.stringify(toMessage(e)),
      );
    }
    this.setTurn(turn.id, {});
  }

  private fail(turn: TurnRow, raw: string): void {
    const reason = this.redacted(turn, raw);
    this.ports.append([{
      id: `dispatch_error:${turn.id}`, ts: this.ports.now(), authorId: turn.agentId,
      payload: { type: "signal.dispatch.error", agentId: turn.agentId, turnId: turn.id, triggerEntryId: turn.triggerEntryId, reason, depth: turn.depth },
    }]);
    this.endAsError(turn, reason);
  }

  /**
   * A turn ended by an error of the control plane's own (storage, the house, the tools), not of
   * the model: the thread is told what failed in words a user can act on; the error's own text
   * (a SQLite code, a stack) goes to the log only, redacted: it may quote a model provider's
   * answer or a tool's result, and so any secret of the turn's environment.
   */
  private failInternally(turn: TurnRow, doing: TurnStep, err: unknown): void {
    const raw = errorMessage(err);
    logEvent("dispatch_turn_failed", { turnId: turn.id, step: doing, error: this.redacted(turn, raw) }, "error");
    this.fail(turn, internalFailureReason(doing, raw));
  }

  /** Ends a turn as an error decision with `detail`, posting nothing to the thread. */
  private drop(turn: TurnRow, detail: string): void {
    this.endAsError(turn, this.redacted(turn, detail));
  }

  private endAsError(turn: TurnRow, redactedDetail: string): void {
    this.setTurn(turn.id, { state: "failed" });
    this.decide(turn.triggerEntryId, turn.reach, { agentId: turn.agentId, verdict: "skip", reason: "error" }, redactedDetail, turn.id);
  }

  /**
   * A reason or detail as the thread may show it: none of the secrets of the environment the
   * turn's model came from (a provider's error may quote any of them, not only the key it sent).
   */
  private redacted(turn: TurnRow, text: string): string {
    return redactValues(text, this.turnSecrets.get(turn.id) ?? []);
  }

  /** The conversation up to the trigger, as the bot sees it: its own replies as its turns. */
  private history(agent: Agent, turn: TurnRow): LoopMessage[] {
    // A text that merely quotes `"chat"` is a candidate too: the parsed type decides.
    const chatsOf = (ms: StoredMessage[]) => ms.map(toEntryWithOffset).filter((e) => e.payload.type === "chat");
    const chats = chatsOf(this.ports.recentChats(RECENT_CHAT * 2, turn.triggerSeq, HISTORY_SCAN_ENTRIES)).slice(-RECENT_CHAT);
    // The bot answers one message at a time: its answers to messages before this one may have
    // been written after this one arrived. Each goes right after the message it answers, or the
    // model would see those messages unanswered and answer them again.
    const shown = new Set(chats.map((e) => e.id));
    const later = new Map<string, Entry[]>();
    const after = this.ports.recentChats(RECENT_CHAT * 2, Number.MAX_SAFE_INTEGER, HISTORY_SCAN_ENTRIES).filter((m) => m.seq > turn.triggerSeq);
    for (const e of chatsOf(after)) {
      const answers = e.payload.triggerEntryId;
      if (e.authorId !== agent.id || typeof answers !== "string" || answers === turn.triggerEntryId || !shown.has(answers)) continue;
      later.set(answers, [...(later.get(answers) ?? []), e]);
    }
    const ordered = chats.flatMap((e) => [e, ...(later.get(e.id) ?? [])]);
    // A chat may hold a megabyte: forty pasted documents would be a request no model takes, and
    // every turn of the thread would fail on it. The newest are kept, each cut, within a budget.
    const out: LoopMessage[] = [];
    let left = MAX_HISTORY_CHARS;
    for (let i = ordered.length - 1; i >= 0; i--) {
      const e = ordered[i];
      const text = capText(String(e.payload.text ?? ""), e.id === turn.triggerEntryId ? MAX_BOT_TEXT_CHARS : MAX_HISTORY_CHAT_CHARS);
      if (text.length > left && out.length > 0) break;
      left -= text.length;
      out.push(e.authorId === agent.id ? { role: "assistant" as const, text } : { role: "user" as const, text, authorId: e.authorId ?? "someone" });
    }
    return out.reverse();
  }

  private toolContext(row: ThreadRow, agent: Agent, turn: TurnRow, environmentId: string | null, progress: LoopMessage[]): ToolContext {
    return {
      env: this.ports.env,
      claims: { kind: "house", houseId: row.houseId, subject: agent.id, role: BOT_ROLE },
      threadId: row.id,
      environmentId,
      depth: turn.depth,
      turnId: turn.id,
      reach: turn.reach,
      // A resumed turn has already spent what it posted before the restart.
      postBudget: { left: Math.max(0, this.config().widthCap - postsMade(progress)) },
    };
  }
}

/** When a turn nobody runs is due: a running one (its incarnation died) at its lease's end. */
function dueAt(t: TurnRow, leaseMs: number): number {
  return t.state === "running" ? t.updatedAt + leaseMs : t.runAt;
}

function agentCacheOf(version: number, candidates: Candidate[], loadedAt: number) {
  return { version, candidates, ids: new Set(candidates.map((a) => a.id)), loadedAt };
}

/**
 * The most of a bot's text one entry holds: far below an entry's storage limit (a row is at most
 * about 2 MB), and more than any answer meant for a thread.
 */
export const MAX_BOT_TEXT_CHARS = 100_000;

/** The most of one earlier chat a turn shows its model (the message it answers: MAX_BOT_TEXT_CHARS). */
export const MAX_HISTORY_CHAT_CHARS = 20_000;
/** The most of the conversation a turn shows its model: about 50,000 tokens, within any current model's window. */
export const MAX_HISTORY_CHARS = 200_000;

function capText(text: string, max = MAX_BOT_TEXT_CHARS): string {
  if (text.length <= max) return text;
  return `${text.slice(0, max)}\n[cut: ${text.length - max} more characters]`;
}

/**
 * The most of one tool call's arguments a round keeps on the thread (and in the turn's progress),
 * and of all its calls' together: a model may write megabytes of arguments, and a round past a
 * row's limit could be stored nowhere. The tool itself runs with the arguments as the model gave
 * them (and refuses what is too long for it). Tool results are cut the same way.
 */
export const MAX_TOOL_ARGS_CHARS = 16 * 1024;
export const MAX_ROUND_TOOL_ARGS_CHARS = 256 * 1024;

/** A round as the thread keeps it: text, tool-call arguments and tool output bounded. */
export function boundedRound(e: LoopEvent): LoopEvent {
  if (e.kind === "tool_result") return { ...e, output: capText(e.output) };
  let left = MAX_ROUND_TOOL_ARGS_CHARS;
  const toolCalls = e.toolCalls.map((c) => {
    const json = JSON.stringify(c.args);
    const keep = Math.min(MAX_TOOL_ARGS_CHARS, left);
    if (json.length <= keep) {
      left -= json.length;
      return c;
    }
    left -= keep;
    // Not an object the tool would take: a resumed turn shows the model what it asked for, cut.
    return { ...c, args: { cut: `${json.slice(0, keep)}\n[cut: ${json.length - keep} more characters of the arguments]` } };
  });
  return { ...e, text: capText(e.text), toolCalls };
}

type TurnStep = "house" | "setup" | "tools" | "model" | "save";

/** Why a turn stopped when the control plane failed it, as the thread shows it. */
export function internalFailureReason(doing: TurnStep, raw: string): string {
  switch (doing) {
    case "save":
      return /TOOBIG|too big|too large/i.test(raw)
        ? "the bot's round could not be saved to the thread: it is too large to store (not an error of the model)"
        : "the bot's round could not be saved to the thread: the thread's storage refused it (not an error of the model)";
    case "house":
      return "the bot's settings could not be read from its house (not an error of the model); ask it again";
    case "tools":
      return "the bot's tools could not be prepared (not an error of the model)";
    case "setup":
      return "the bot's turn could not be prepared (not an error of the model)";
    case "model":
      return "internal error while calling the bot's model (not an error the model answered)";
  }
}

/** The posts into other threads a turn's recorded rounds made (a resumed turn counts them against its width cap). */
function postsMade(progress: LoopMessage[]): number {
  return progress.filter((m) => m.role === "tool" && m.name === "post_to_thread" && !m.isError).length;
}

function systemPrompt(agent: Agent, tools: ToolSpec[], reach: Reach): string {
  const lines = [
    `You are ${agent.name} (@${agent.handle}), a bot in a shared thread. Messages from others start with their author id in brackets.`,
    `Your final answer is posted to the thread as your reply.`,
  ];
  if (tools.length > 0) lines.push(`Tools you may call: ${tools.map((t) => t.name).join(", ")}.`);
  if (reach === "thread") lines.push(THREAD_REACH_NOTE);
  if (agent.systemPrompt) lines.push("", agent.systemPrompt);
  return lines.join("\n");
}

function toMessage(e: LoopEvent): LoopMessage {
  return e.kind === "assistant"
    ? { role: "assistant", text: e.text, toolCalls: e.toolCalls }
    : { role: "tool", toolCallId: e.toolCallId, name: e.name, output: e.output, isError: e.isError };
}

function toEvent(m: LoopMessage): LoopEvent {
  if (m.role === "tool") return { kind: "tool_result", toolCallId: m.toolCallId, name: m.name, output: m.output, isError: m.isError ?? false };
  if (m.role === "assistant") return { kind: "assistant", text: m.text, toolCalls: m.toolCalls ?? [], stopReason: "toolUse" };
  throw new Error("a turn's progress holds no user messages");
}

/**
 * A turn interrupted between a tool call and its result may or may not have had its effect
 * (a delegated child may exist). It is not run again: the model is told, and decides.
 */
export function closeInterruptedCalls(progress: LoopMessage[]): LoopMessage[] {
  const out = [...progress];
  const last = [...out].reverse().find((m) => m.role === "assistant") as Extract<LoopMessage, { role: "assistant" }> | undefined;
  if (!last?.toolCalls?.length) return out;
  const answered = new Set(out.filter((m) => m.role === "tool").map((m) => (m as Extract<LoopMessage, { role: "tool" }>).toolCallId));
  for (const c of last.toolCalls) {
    if (!answered.has(c.id)) {
      out.push({ role: "tool", toolCallId: c.id, name: c.name, output: "interrupted by a restart: this call may or may not have taken effect; check before repeating it", isError: true });
    }
  }
  return out;
}

function mentionList(v: unknown): string[] | undefined {
  return Array.isArray(v) ? v.filter((m): m is string => typeof m === "string") : undefined;
}
