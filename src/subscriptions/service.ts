import {
  BEFORE_FIRST_OFFSET, ZERO_OFFSET, ackProblem, checkWebhookUrl, configKey, hasPending, globMatch, normalizePath, retryDelayMs, streamInfo,
  type AckRequest, type LinkView, type SubscriptionInput,
} from "./rules";
import { generateSigningKey, mintCallbackToken, signWebhook, verifyCallbackToken, type SigningKey } from "./signing";
import { errorMessage, logEvent } from "../domain/log-event";

/** An answer in the protocol's own shape (`{error: {code, message}}`, upper-case codes). */
export type SubResult = { status: number; body?: unknown; headers?: Record<string, string> };

export type SubscriptionPorts = {
  sql: SqlStorage;
  now(): number;
  /** Signs callback tokens (the deployment's token secret). */
  secret: string;
  /** The tail offset of a plain stream of the house; null when it does not exist. */
  tailOf(houseId: string, path: string): Promise<string | null>;
  /** Appends one JSON event to a plain stream of the house; false when the stream is missing. */
  appendWake(houseId: string, path: string, event: unknown): Promise<boolean>;
  /** POSTs a signed webhook; `done` when the receiver answered `{done: true}`. */
  deliver(url: string, body: string, signature: string): Promise<{ ok: boolean; done: boolean }>;
  /** A stream a subscription now links: it should report its appends from now on. */
  linked(houseId: string, path: string): Promise<void>;
  /** Arms the actor's alarm (null: none needed). */
  setAlarm(atMs: number | null): Promise<void>;
  log(event: string, fields: Record<string, unknown>): void;
};

type Row = {
  id: string; type: "webhook" | "pull-wake"; pattern: string | null; webhook_url: string | null; wake_stream: string | null;
  lease_ttl_ms: number; description: string | null; created_at: string; config_key: string; base: string; status: string;
  generation: number; wake_id: string | null; holder: string | null; token: string | null; lease_expires_at: number | null;
  retry_count: number; next_attempt_at: number | null; snapshot: string | null;
};

const err = (status: number, code: string, message: string, extra: Record<string, unknown> = {}): SubResult => ({ status, body: { error: { code, message, ...extra } } });
const NOT_FOUND = err(404, "SUBSCRIPTION_NOT_FOUND", "Subscription not found");

/**
 * A house's subscriptions, in the HouseActor's SQLite: which streams each links and what its
 * consumer acknowledged, the current wake (generation, id, token, holder, lease) and webhook
 * retries. Stream tails are asked of the streams' own actors, never cached here. The actor's
 * alarm belongs to this service: lease expiries and webhook deliveries are its deadlines.
 */
export class SubscriptionService {
  constructor(private readonly p: SubscriptionPorts) {
    p.sql.exec(`create table if not exists subscriptions (
      id text primary key, type text not null, pattern text, webhook_url text, wake_stream text, lease_ttl_ms integer not null,
      description text, created_at text not null, config_key text not null, base text not null, status text not null,
      generation integer not null default 0, wake_id text, holder text, token text, lease_expires_at integer,
      retry_count integer not null default 0, next_attempt_at integer, snapshot text)`);
    p.sql.exec(`create table if not exists subscription_links (
      subscription_id text not null, path text not null, explicit integer not null, glob integer not null, acked text not null,
      primary key (subscription_id, path))`);
    // The house's plain streams seen created or appended to: what a new pattern is matched against.
    p.sql.exec(`create table if not exists known_streams (path text primary key)`);
    p.sql.exec(`create table if not exists signing_key (id integer primary key check (id = 1), body text not null)`);
  }

  // ---- management ----

  async put(houseId: string, id: string, input: SubscriptionInput, base: string): Promise<SubResult> {
    const key = configKey(input);
    const existing = this.row(id);
    if (existing) {
      if (existing.config_key !== key) return err(409, "SUBSCRIPTION_ALREADY_EXISTS", "Subscription already exists with different configuration");
      return { status: 200, body: await this.serialize(houseId, existing) };
    }
    if (input.type === "webhook") {
      if (!input.webhook) return err(400, "INVALID_REQUEST", "webhook subscriptions require webhook.url");
      const check = checkWebhookUrl(input.webhook.url);
      if (!check.ok) return err(400, "WEBHOOK_URL_REJECTED", check.message);
    }
    if (input.type === "pull-wake" && !input.wake_stream) return err(400, "INVALID_REQUEST", "pull-wake subscriptions require wake_stream");
    this.p.sql.exec(
      `insert into subscriptions (id, type, pattern, webhook_url, wake_stream, lease_ttl_ms, description, created_at, config_key, base, status)
       values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'active')`,
      id, input.type, input.pattern ?? null, input.webhook?.url ?? null, input.wake_stream ?? null, input.lease_ttl_ms,
      input.description ?? null, new Date(this.p.now()).toISOString(), key, base,
    );
    const created = this.row(id)!;
    const linked = new Set(input.streams);
    if (input.pattern) for (const path of this.knownStreams()) if (globMatch(input.pattern, path)) linked.add(path);
    // Streams that exist now are linked at their tail: a subscription sees what comes after it.
    for (const path of linked) {
      const tail = await this.p.tailOf(houseId, path);
      this.link(id, path, input.streams.includes(path) ? "explicit" : "glob", tail ?? ZERO_OFFSET);
      if (tail !== null) await this.tellLinked(houseId, path);
    }
    if (input.type === "webhook") await this.signingKey();
    // A DELETE may have come while the streams were linked: this create still happened, before it.
    return { status: 201, body: await this.serialize(houseId, this.row(id) ?? created) };
  }

  async get(houseId: string, id: string): Promise<SubResult> {
    const r = this.row(id);
    return r ? { status: 200, body: await this.serialize(houseId, r) } : NOT_FOUND;
  }

  async list(houseId: string): Promise<SubResult> {
    const rows = this.p.sql.exec(`select * from subscriptions order by id`).toArray() as unknown as Row[];
    return { status: 200, body: { subscriptions: await Promise.all(rows.map((r) => this.serialize(houseId, r))) } };
  }

  async remove(id: string): Promise<SubResult> {
    if (!this.row(id)) return NOT_FOUND;
    this.p.sql.exec(`delete from subscription_links where subscription_id = ?`, id);
    this.p.sql.exec(`delete from subscriptions where id = ?`, id);
    await this.rearm();
    return { status: 204 };
  }

  /** A stream that misses this notice asks the house again on its own within SUBSCRIPTION_RECHECK_MS. */
  private async tellLinked(houseId: string, path: string): Promise<void> {
    await this.p.linked(houseId, path).catch((err) => logEvent("subscription_link_notice_failed", { houseId, stream: path, error: errorMessage(err) }, "warn"));
  }

  async addStreams(houseId: string, id: string, streams: string[]): Promise<SubResult> {
    if (!this.row(id)) return NOT_FOUND;
    for (const path of streams) {
      const tail = await this.p.tailOf(houseId, path);
      this.link(id, path, "explicit", tail ?? ZERO_OFFSET);
      if (tail !== null) await this.tellLinked(houseId, path);
    }
    return { status: 204 };
  }

  async removeStream(id: string, rawPath: string): Promise<SubResult> {
    if (!this.row(id)) return NOT_FOUND;
    const path = normalizePath(rawPath);
    this.p.sql.exec(`update subscription_links set explicit = 0 where subscription_id = ? and path = ?`, id, path);
    this.p.sql.exec(`delete from subscription_links where subscription_id = ? and path = ? and explicit = 0 and glob = 0`, id, path);
    return { status: 204 };
  }

  async jwks(): Promise<SubResult> {
    const key = await this.signingKey();
    return { status: 200, body: { keys: [key.publicJwk] }, headers: { "content-type": "application/jwk-set+json" } };
  }

  // ---- stream events (from the plain streams' actors) ----

  /** A stream of the house was created or appended to; answers whether any subscription links it. */
  async streamTouched(houseId: string, rawPath: string): Promise<boolean> {
    const path = normalizePath(rawPath);
    this.p.sql.exec(`insert into known_streams (path) values (?) on conflict(path) do nothing`, path);
    let linked = false;
    for (const r of this.rows()) {
      if (r.pattern && globMatch(r.pattern, path)) this.link(r.id, path, "glob", this.acked(r.id, path) ?? BEFORE_FIRST_OFFSET);
      if (this.acked(r.id, path) !== null) {
        linked = true;
        await this.maybeWake(houseId, r.id, path);
      }
    }
    return linked;
  }

  streamDeleted(rawPath: string): void {
    const path = normalizePath(rawPath);
    this.p.sql.exec(`delete from known_streams where path = ?`, path);
    this.p.sql.exec(`delete from subscription_links where path = ?`, path);
  }

  // ---- consumers ----

  async claim(houseId: string, id: string, worker: string): Promise<SubResult> {
    this.expireLeaseIfDue(id);
    let r = this.row(id);
    if (!r) return NOT_FOUND;
    if (r.type !== "pull-wake") return err(400, "INVALID_REQUEST", "Subscription is not pull-wake");
    if (r.holder) return { status: 409, body: { error: { code: "ALREADY_CLAIMED", message: "Subscription is claimed", current_holder: r.holder, generation: r.generation } } };
    const links = await this.links(houseId, id);
    const pending = [...links.values()].find(hasPending);
    if (!pending) return err(409, "NO_PENDING_WORK", "Subscription has no pending work");
    if (!r.wake_id) await this.createWake(houseId, id, pending.path, links);
    const now = this.row(id);
    if (!now) return NOT_FOUND; // deleted while its links were read
    r = now;
    const token = await mintCallbackToken(this.p.secret, houseId, id, r.generation, this.p.now());
    this.p.sql.exec(`update subscriptions set holder = ?, token = ?, lease_expires_at = ? where id = ?`, worker, token, this.p.now() + r.lease_ttl_ms, id);
    await this.rearm();
    return { status: 200, body: { wake_id: r.wake_id, generation: r.generation, token, streams: [...links.values()].map(streamInfo), lease_ttl_ms: r.lease_ttl_ms } };
  }

  /** A webhook callback or a pull-wake ack: acks move cursors; `done` ends the wake (and starts the next if work is pending). */
  async ack(houseId: string, id: string, token: string, req: AckRequest, kind: "callback" | "ack"): Promise<SubResult> {
    this.expireLeaseIfDue(id);
    const r = this.row(id);
    if (!r) return NOT_FOUND;
    if (kind === "ack" && r.type !== "pull-wake") return err(400, "INVALID_REQUEST", "Subscription is not pull-wake");
    const fenced = await this.fence(houseId, r, token, req);
    if (fenced) return fenced;
    if (req.acks?.length) {
      const links = await this.links(houseId, id);
      const problem = ackProblem(req.acks, links);
      if (problem) return err(409, "INVALID_OFFSET", problem);
      for (const a of req.acks) this.p.sql.exec(`update subscription_links set acked = ? where subscription_id = ? and path = ?`, a.offset, id, normalizePath(a.stream ?? a.path ?? ""));
    }
    this.p.sql.exec(`update subscriptions set lease_expires_at = ? where id = ?`, this.p.now() + r.lease_ttl_ms, id);
    let nextWake = false;
    if (req.done === true) {
      this.endWake(id);
      nextWake = await this.wakeIfPending(houseId, id);
    }
    await this.rearm();
    return { status: 200, body: { ok: true, next_wake: nextWake } };
  }

  async release(houseId: string, id: string, token: string, req: AckRequest): Promise<SubResult> {
    this.expireLeaseIfDue(id);
    const r = this.row(id);
    if (!r) return NOT_FOUND;
    if (r.type !== "pull-wake") return err(400, "INVALID_REQUEST", "Subscription is not pull-wake");
    const fenced = await this.fence(houseId, r, token, req);
    if (fenced) return fenced;
    this.endWake(id);
    await this.wakeIfPending(houseId, id);
    await this.rearm();
    return { status: 204 };
  }

  // ---- the alarm ----

  async alarm(houseId: string): Promise<void> {
    const now = this.p.now();
    for (const r of this.rows()) {
      if (r.lease_expires_at !== null && r.lease_expires_at <= now) {
        this.endWake(r.id);
        await this.wakeIfPending(houseId, r.id);
      }
    }
    for (const r of this.rows()) {
      if (r.next_attempt_at !== null && r.next_attempt_at <= now) await this.deliver(houseId, r.id);
    }
    await this.rearm();
  }

  // ---- internals ----

  private async maybeWake(houseId: string, id: string, triggeredBy: string): Promise<void> {
    const r = this.row(id);
    if (!r || r.wake_id || r.holder) return;
    const links = await this.links(houseId, id);
    if (![...links.values()].some(hasPending)) return;
    if (this.row(id)?.wake_id) return;
    await this.createWake(houseId, id, triggeredBy, links);
    await this.rearm();
  }

  private async wakeIfPending(houseId: string, id: string): Promise<boolean> {
    const links = await this.links(houseId, id);
    const pending = [...links.values()].find(hasPending);
    if (!pending || this.row(id)?.wake_id) return false;
    await this.createWake(houseId, id, pending.path, links);
    return true;
  }

  /** A new wake: the generation moves on (fencing every older token); a webhook is delivered by the alarm. */
  private async createWake(houseId: string, id: string, triggeredBy: string, links: Map<string, LinkView>): Promise<void> {
    const r = this.row(id);
    if (!r) return; // deleted while its links were read
    const generation = r.generation + 1;
    const wakeId = `w_${[...crypto.getRandomValues(new Uint8Array(12))].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
    const snapshot = JSON.stringify(Object.fromEntries([...links.values()].map((l) => [l.path, l.tail])));
    if (r.type === "webhook") {
      const token = await mintCallbackToken(this.p.secret, houseId, id, generation, this.p.now());
      this.p.sql.exec(
        `update subscriptions set generation = ?, wake_id = ?, snapshot = ?, token = ?, lease_expires_at = ?, next_attempt_at = ? where id = ?`,
        generation, wakeId, snapshot, token, this.p.now() + r.lease_ttl_ms, this.p.now(), id,
      );
      return;
    }
    this.p.sql.exec(`update subscriptions set generation = ?, wake_id = ?, snapshot = ? where id = ?`, generation, wakeId, snapshot, id);
    const written = await this.p.appendWake(houseId, r.wake_stream!, { type: "wake", subscription_id: id, stream: triggeredBy, generation, ts: this.p.now() });
    if (!written) this.p.log("subscription_wake_stream_missing", { subscriptionId: id, wakeStream: r.wake_stream });
  }

  private async deliver(houseId: string, id: string): Promise<void> {
    const r = this.row(id);
    if (!r || r.type !== "webhook" || !r.wake_id || !r.token || !r.webhook_url) {
      this.p.sql.exec(`update subscriptions set next_attempt_at = null where id = ?`, id);
      return;
    }
    const links = await this.links(houseId, id);
    const body = JSON.stringify({
      subscription_id: id, wake_id: r.wake_id, generation: r.generation, streams: [...links.values()].map(streamInfo),
      callback_url: `${r.base}/__ds/subscriptions/${encodeURIComponent(id)}/callback`, callback_token: r.token,
    });
    let outcome: { ok: boolean; done: boolean };
    try {
      outcome = await this.p.deliver(r.webhook_url, body, await signWebhook(await this.signingKey(), body, this.p.now()));
    } catch (e) {
      this.p.log("subscription_webhook_failed", { subscriptionId: id, error: e instanceof Error ? e.message : String(e) });
      outcome = { ok: false, done: false };
    }
    const now = this.p.now();
    if (this.row(id)?.wake_id !== r.wake_id) return;
    if (!outcome.ok) {
      const attempts = r.retry_count + 1;
      this.p.sql.exec(`update subscriptions set status = 'failed', retry_count = ?, next_attempt_at = ? where id = ?`, attempts, now + retryDelayMs(attempts), id);
      return;
    }
    // The lease runs from delivery: the consumer's time to call back starts when it is told.
    this.p.sql.exec(`update subscriptions set status = 'active', retry_count = 0, next_attempt_at = null, lease_expires_at = ? where id = ?`, now + r.lease_ttl_ms, id);
    if (outcome.done) {
      const snapshot = JSON.parse(r.snapshot ?? "{}") as Record<string, string>;
      for (const [path, tail] of Object.entries(snapshot)) {
        this.p.sql.exec(`update subscription_links set acked = ? where subscription_id = ? and path = ? and acked < ?`, tail, id, path, tail);
      }
      this.endWake(id);
      await this.wakeIfPending(houseId, id);
    }
  }

  private async fence(houseId: string, r: Row, token: string, req: AckRequest): Promise<SubResult | null> {
    const v = await verifyCallbackToken(this.p.secret, token, houseId, r.id, this.p.now());
    if (!v.ok) return err(401, v.code, v.code === "TOKEN_EXPIRED" ? "Token expired" : "Token invalid");
    if (v.epoch !== r.generation || req.generation !== r.generation || !r.wake_id || req.wake_id !== r.wake_id) return err(409, "FENCED", "Wake generation is stale");
    return null;
  }

  private endWake(id: string): void {
    this.p.sql.exec(`update subscriptions set holder = null, token = null, wake_id = null, snapshot = null, lease_expires_at = null, next_attempt_at = null where id = ?`, id);
  }

  private expireLeaseIfDue(id: string): void {
    const r = this.row(id);
    if (r?.lease_expires_at != null && r.lease_expires_at <= this.p.now()) this.endWake(id);
  }

  private async rearm(): Promise<void> {
    const at = this.p.sql.exec(`select min(t) as at from (select lease_expires_at as t from subscriptions where lease_expires_at is not null union all select next_attempt_at from subscriptions where next_attempt_at is not null)`).toArray()[0]?.at as number | null;
    await this.p.setAlarm(at ?? null);
  }

  /**
   * Links a stream to a subscription that still exists: one deleted while a tail was asked for
   * would keep the link, and a later subscription of that id would be woken by its stream.
   */
  private link(id: string, rawPath: string, kind: "explicit" | "glob", acked: string): void {
    const path = normalizePath(rawPath);
    this.p.sql.exec(
      `insert into subscription_links (subscription_id, path, explicit, glob, acked)
       select ?, ?, ?, ?, ? where exists (select 1 from subscriptions where id = ?)
       on conflict(subscription_id, path) do update set explicit = max(explicit, excluded.explicit), glob = max(glob, excluded.glob)`,
      id, path, kind === "explicit" ? 1 : 0, kind === "glob" ? 1 : 0, acked, id,
    );
  }

  private acked(id: string, path: string): string | null {
    return (this.p.sql.exec(`select acked from subscription_links where subscription_id = ? and path = ?`, id, path).toArray()[0]?.acked as string | undefined) ?? null;
  }

  private async links(houseId: string, id: string): Promise<Map<string, LinkView>> {
    const rows = this.p.sql.exec(`select path, explicit, acked from subscription_links where subscription_id = ? order by path`, id).toArray();
    const tails = await Promise.all(rows.map((l) => this.p.tailOf(houseId, l.path as string)));
    return new Map(rows.map((l, i) => [l.path as string, { path: l.path as string, explicit: l.explicit === 1, acked: l.acked as string, tail: tails[i] ?? ZERO_OFFSET }]));
  }

  private async serialize(houseId: string, r: Row) {
    const links = await this.links(houseId, r.id);
    return {
      id: r.id, subscription_id: r.id, type: r.type, ...(r.pattern ? { pattern: r.pattern } : {}),
      streams: [...links.values()].map((l) => ({ path: l.path, link_type: l.explicit ? "explicit" : "glob", acked_offset: l.acked })),
      ...(r.webhook_url ? { webhook: { url: r.webhook_url, signing: { alg: "ed25519", kid: (await this.signingKey()).publicJwk.kid, jwks_url: `${r.base}/__ds/jwks.json` } } } : {}),
      ...(r.wake_stream ? { wake_stream: r.wake_stream } : {}),
      lease_ttl_ms: r.lease_ttl_ms, created_at: r.created_at, status: r.status, ...(r.description ? { description: r.description } : {}),
    };
  }

  private async signingKey(): Promise<SigningKey> {
    const stored = this.p.sql.exec(`select body from signing_key where id = 1`).toArray()[0];
    if (stored) return JSON.parse(stored.body as string) as SigningKey;
    const key = await generateSigningKey();
    // A concurrent first call may have stored one meanwhile: the first stored wins.
    this.p.sql.exec(`insert into signing_key (id, body) values (1, ?) on conflict(id) do nothing`, JSON.stringify(key));
    return JSON.parse(this.p.sql.exec(`select body from signing_key where id = 1`).one().body as string) as SigningKey;
  }

  private row(id: string): Row | null {
    return (this.p.sql.exec(`select * from subscriptions where id = ?`, id).toArray()[0] as unknown as Row | undefined) ?? null;
  }

  private rows(): Row[] {
    return this.p.sql.exec(`select * from subscriptions order by id`).toArray() as unknown as Row[];
  }

  private knownStreams(): string[] {
    return this.p.sql.exec(`select path from known_streams`).toArray().map((r) => r.path as string);
  }
}
