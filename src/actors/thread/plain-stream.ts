import { ApiError } from "../../errors";
import { logEvent, errorMessage } from "../../domain/log-event";
import type { StreamLog } from "../../streams/log";
import { formatOffset } from "../../streams/protocol";
import { acquireFork, readPrefix, releaseFork, sendReleases, type AcquireRequest, type ForkLinks, type ForkSource, type PrefixRequest } from "../../streams/fork";
import { plainStreamOptions, plainStreamPolicy, serveStream, type StreamStore } from "./stream-host";
import type { ActorAuth } from "./thread-actor";
import { LazySchema, type Schema } from "../../domain/sql-schema";

/** What a plain stream tells its house's subscriptions; both may fail (the writer never sees it). */
export type HouseStreamNotices = {
  streamTouched(name: string): Promise<boolean>;
  streamDeleted(name: string): Promise<void>;
};

export type PlainStreamPorts = {
  sql: SqlStorage;
  log: StreamLog;
  forkLinks: ForkLinks;
  now(): number;
  setAlarm(atMs: number): Promise<void>;
  house(houseId: string): HouseStreamNotices;
};

export const PLAIN_STREAM_SCHEMA: Schema = { name: "stream_owner", ddl: `create table if not exists stream_owner (id integer primary key check (id = 1), house_id text not null)` };

/** How long a stream no subscription links waits before asking the house again. */
export const SUBSCRIPTION_RECHECK_MS = 5_000;

/** A failed fork release is sent again this soon. */
const PLAIN_RELEASE_RETRY_MS = 30_000;

/**
 * A plain stream (any stream name but `thread-<id>`) hosted by the same actor class as a thread:
 * its owning house, its expiry alarm, forks from and of it, and the notices its house's
 * subscriptions need. The actor calls it only for an actor that has no thread row.
 */
export class PlainStreamHost {
  /** The house the stream belongs to, or null; never changes once set, so it is read once. */
  private owner: string | null | undefined;
  /** When the alarm is set for (in memory: a restart re-arms on the next request or alarm). */
  private alarmAt: number | null = null;
  private alarmChecked = false;
  /** Whether a subscription of the house links this stream, as the house last said. */
  private subscriptionInterest: { linked: boolean; checkedAt: number } | null = null;

  /** A thread's actor never has an owner row. */
  private readonly ownerTable: LazySchema;

  constructor(private readonly p: PlainStreamPorts) {
    this.ownerTable = new LazySchema(p.sql, PLAIN_STREAM_SCHEMA);
  }

  /** One protocol request for the stream, from the house in `auth`. */
  async serve(request: Request, auth: ActorAuth, target: { name: string; forkSource?: ForkSource }, store: StreamStore): Promise<Response> {
    this.claim(auth.houseId);
    const fork = { links: this.p.forkLinks, houseId: auth.houseId, source: target.forkSource ?? null };
    const response = await serveStream(request, store, plainStreamPolicy, plainStreamOptions(target.name, auth, fork));
    if (response.status < 300) {
      if (request.method === "DELETE") await this.tellHouse(auth.houseId, target.name, "deleted");
      else if (request.method === "POST" || (request.method === "PUT" && response.status === 201)) await this.tellHouse(auth.houseId, target.name, request.method === "PUT" ? "created" : "appended");
    }
    // Expiry is fixed when a stream is created; only a create or delete can change what to arm.
    if (!this.alarmChecked || request.method === "PUT" || request.method === "DELETE") await this.armAlarm();
    return response;
  }

  acquireFork(req: AcquireRequest) {
    this.requireOwnedBy(req.houseId);
    return acquireFork(this.p.log, this.p.forkLinks, req);
  }

  readPrefix(req: PrefixRequest) {
    this.requireOwnedBy(req.houseId);
    return readPrefix(this.p.log, this.p.forkLinks, req);
  }

  releaseFork(houseId: string, childKey: string) {
    this.requireOwnedBy(houseId);
    return releaseFork(this.p.log, this.p.forkLinks, houseId, childKey);
  }

  /** The tail a subscription compares its consumer's cursor with; null when this stream does not exist for the house. */
  subscriptionTail(houseId: string): string | null {
    const meta = this.ownerHouse() !== houseId ? null : this.p.log.meta();
    return meta ? formatOffset(meta.tailSeq) : null;
  }

  /** A subscription now links this stream: the next append tells the house. */
  subscriptionsChanged(): void {
    this.subscriptionInterest = null;
  }

  /**
   * The stream's alarm: its expiry (or a fork release that could not be sent yet). An expired
   * stream nobody touches again is purged (or made a tombstone while forks read through it) and
   * gives back its references to the streams it forked from, so those are not held forever.
   */
  async alarm(): Promise<void> {
    this.alarmAt = null;
    const owner = this.ownerHouse();
    if (!owner) return;
    this.p.log.meta(this.p.now());
    await sendReleases(this.p.log, this.p.forkLinks, owner);
    await this.armAlarm();
  }

  /** The house a plain stream belongs to, or null. */
  ownerHouse(): string | null {
    if (this.owner === undefined) {
      const row = !this.ownerTable.exists() ? undefined : this.p.sql.exec(`select house_id from stream_owner where id = 1`).toArray()[0];
      this.owner = (row?.house_id as string | undefined) ?? null;
    }
    return this.owner;
  }

  /** A fork's source must be a plain stream of the fork's own house; anything else is "not found". */
  private requireOwnedBy(houseId: string): void {
    if (this.ownerHouse() !== houseId) throw new ApiError("not_found", "source stream not found");
  }

  /**
   * A plain stream belongs to the house that first reached it; the routing key already separates
   * houses, and this check keeps another house out even if two keys ever collided.
   */
  private claim(houseId: string): void {
    const owner = this.ownerHouse();
    if (owner === null) {
      this.ownerTable.ensure();
      this.p.sql.exec(`insert into stream_owner (id, house_id) values (1, ?)`, houseId);
      this.owner = houseId;
    } else if (owner !== houseId) throw new ApiError("not_found", "stream not found");
  }

  /** Arms the alarm for the stream's expiry (sliding TTLs re-arm when it fires early) or a pending release. */
  private async armAlarm(): Promise<void> {
    this.alarmChecked = true;
    const now = this.p.now();
    const meta = this.p.log.meta(now);
    let at = meta ? plainStreamExpiry(meta) : null;
    if (this.p.log.forks.mayHaveReleases() && this.p.log.forks.pendingReleases().length > 0) at = Math.min(at ?? Infinity, now + PLAIN_RELEASE_RETRY_MS);
    if (at === null || (this.alarmAt !== null && this.alarmAt <= at)) return;
    this.alarmAt = at;
    await this.p.setAlarm(Math.max(at, now));
  }

  /**
   * Tells the house's subscriptions about a create, append or delete. A stream no subscription
   * links asks again only every SUBSCRIPTION_RECHECK_MS (a new subscription that links it says so
   * itself); a linked one reports every append. A failure is logged, never the writer's problem.
   */
  private async tellHouse(houseId: string, name: string, what: "created" | "appended" | "deleted"): Promise<void> {
    const now = this.p.now();
    const known = this.subscriptionInterest;
    if (what === "appended" && known && !known.linked && now - known.checkedAt < SUBSCRIPTION_RECHECK_MS) return;
    try {
      const house = this.p.house(houseId);
      if (what === "deleted") {
        await house.streamDeleted(name);
        this.subscriptionInterest = null;
      } else {
        this.subscriptionInterest = { linked: await house.streamTouched(name), checkedAt: now };
      }
    } catch (err) {
      logEvent("subscription_notify_failed", { stream: name, what, error: errorMessage(err) }, "warn");
    }
  }
}

/** When a plain stream expires: its fixed `Stream-Expires-At`, else its sliding TTL from the last access. */
export function plainStreamExpiry(meta: { expiresAt: string | null; ttlSeconds: number | null; lastAccessAt: number }): number | null {
  const fixed = meta.expiresAt ? Date.parse(meta.expiresAt) : null;
  const sliding = meta.ttlSeconds !== null ? meta.lastAccessAt + meta.ttlSeconds * 1000 : null;
  if (fixed === null) return sliding;
  return sliding === null ? fixed : Math.min(fixed, sliding);
}
