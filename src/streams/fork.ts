import { ApiError } from "../errors";
import type { ForkRef } from "./fork-store";
import type { StoredMessage, StreamLog, StreamMeta } from "./log";
import { normalizeContentType, parseOffset, type ParsedOffset } from "./protocol";
import { errorMessage, logEvent } from "../domain/log-event";

/**
 * Durable Streams forking: `PUT` with `Stream-Forked-From: <source path>` creates a stream whose
 * first messages are the source's, up to `Stream-Fork-Offset` (default: the source's tail), then
 * its own.
 *
 * Why a reference and not a copy: the source may hold any amount of data and lives in another
 * actor; copying it would either make one PUT move unbounded data or leave a half-made fork
 * between pages. So a fork stores only (source actor, forkSeq) and reads messages 1..forkSeq
 * through the source's actor, one bounded page per read (recursively along a chain of forks).
 * Only a `Stream-Fork-Sub-Offset` cut inside one binary message copies that message's head
 * (at most one append, ≤ 1 MiB). The price is reference counting: a source keeps the set of its
 * forks; deleting (or expiring) a source that still has forks leaves a tombstone (410, its name
 * not reusable) whose messages stay readable by the forks, and the last fork to go removes it,
 * cascading up the chain.
 */

/** How one stream's actor reaches another's (a port: the actor supplies the stubs). */
export interface ForkLinks {
  /** This actor's identity in a source's set of forks. */
  readonly selfKey: string;
  acquire(sourceKey: string, req: AcquireRequest): Promise<AcquireResult>;
  readPrefix(sourceKey: string, req: PrefixRequest): Promise<Page>;
  release(sourceKey: string, houseId: string, childKey: string): Promise<void>;
}

/** The fork source the worker resolved from `Stream-Forked-From`, always in the caller's house. */
export type ForkSource = { name: string; key: string };

export type AcquireRequest = {
  houseId: string;
  childKey: string;
  /** null = the source's tail. */
  offset: ParsedOffset | null;
  subOffset: number;
  /** The fork's declared content type; null = inherit the source's. */
  contentType: string | null;
};

export type AcquireResult = {
  contentType: string;
  ttlSeconds: number | null;
  expiresAt: string | null;
  forkSeq: number;
  /** The head of the message a binary sub-offset cuts into: the fork's first own message. */
  partial: Uint8Array | null;
};

export type PrefixRequest = { houseId: string; afterSeq: number; uptoSeq: number; maxBytes: number };
export type Page = { messages: StoredMessage[]; upToDate: boolean };

export const FORK_HEADERS = {
  from: "Stream-Forked-From",
  offset: "Stream-Fork-Offset",
  subOffset: "Stream-Fork-Sub-Offset",
} as const;

const SUB_OFFSET = /^(0|[1-9]\d{0,15})$/;

export type ForkRequest = { requestedOffset: string | null; offset: ParsedOffset | null; subOffset: number };

/**
 * The fork headers of a PUT, validated. `isFork` says whether the worker resolved a
 * Stream-Forked-From; fork offsets without one are a client mistake.
 */
export function parseForkHeaders(headers: Headers, isFork: boolean): ForkRequest | null {
  const rawOffset = headers.get(FORK_HEADERS.offset);
  const rawSub = headers.get(FORK_HEADERS.subOffset);
  if (!isFork) {
    if (rawOffset !== null || rawSub !== null) {
      throw new ApiError("bad_request", `${FORK_HEADERS.offset} and ${FORK_HEADERS.subOffset} need ${FORK_HEADERS.from}`);
    }
    return null;
  }
  if (rawSub !== null && !SUB_OFFSET.test(rawSub)) throw new ApiError("bad_request", `invalid ${FORK_HEADERS.subOffset}`);
  const subOffset = rawSub === null ? 0 : Number(rawSub);
  if (subOffset > 0 && rawOffset === null) {
    throw new ApiError("bad_request", `${FORK_HEADERS.subOffset} needs ${FORK_HEADERS.offset}: it counts from that offset`);
  }
  if (rawOffset === "") throw new ApiError("invalid_offset", `${FORK_HEADERS.offset} must not be empty`);
  return { requestedOffset: rawOffset, offset: rawOffset === null ? null : parseOffset(rawOffset), subOffset };
}

/** An existing stream answers a repeated fork PUT like any idempotent create: same fork, or 409. */
export function sameFork(
  meta: StreamMeta, ref: ForkRef | null, source: ForkSource, fork: ForkRequest,
  opts: { contentType: string | null; ttlSeconds: number | null; expiresAt: string | null; closed: boolean },
): boolean {
  if (!ref || ref.sourceKey !== source.key) return false;
  if (fork.requestedOffset !== null && fork.requestedOffset !== ref.requestedOffset) return false;
  if (fork.subOffset !== ref.subOffset) return false;
  // Omitted settings were inherited from the source, so only the ones sent must match.
  if (opts.contentType !== null && normalizeContentType(opts.contentType) !== normalizeContentType(meta.contentType)) return false;
  if (opts.ttlSeconds !== null && opts.ttlSeconds !== meta.ttlSeconds) return false;
  if (opts.expiresAt !== null && opts.expiresAt !== meta.expiresAt) return false;
  return opts.closed === meta.closed;
}

/** A fork's own TTL or expiry wins; without one it inherits the source's (no capping either way). */
export function forkExpiry(
  own: { ttlSeconds: number | null; expiresAt: string | null }, source: { ttlSeconds: number | null; expiresAt: string | null },
): { ttlSeconds: number | null; expiresAt: string | null } {
  if (own.ttlSeconds !== null || own.expiresAt !== null) return own;
  return { ttlSeconds: source.ttlSeconds, expiresAt: source.expiresAt };
}

function bytesOf(messages: StoredMessage[]): number {
  return messages.reduce((n, m) => n + m.data.byteLength, 0);
}

/**
 * One page of a stream's messages after `afterSeq` (up to `uptoSeq`): the inherited part through
 * the source's actor, then this log's own messages, in one page when the budget allows.
 */
export async function readThrough(
  log: StreamLog, links: ForkLinks | undefined, houseId: string, afterSeq: number, maxBytes: number,
  uptoSeq = Number.MAX_SAFE_INTEGER,
): Promise<Page> {
  const ref = log.forks.ref();
  if (!ref || !links || afterSeq >= ref.forkSeq) return log.read(afterSeq, maxBytes, undefined, uptoSeq);
  const inheritedUpto = Math.min(uptoSeq, ref.forkSeq);
  const inherited = await links.readPrefix(ref.sourceKey, { houseId, afterSeq, uptoSeq: inheritedUpto, maxBytes });
  if (!inherited.upToDate || inheritedUpto >= uptoSeq) return inherited;
  const used = bytesOf(inherited.messages);
  if (inherited.messages.length > 0 && used >= maxBytes) {
    const more = log.read(ref.forkSeq, 1, 1, uptoSeq).messages.length > 0;
    return { messages: inherited.messages, upToDate: !more };
  }
  const own = log.read(ref.forkSeq, maxBytes - used, undefined, uptoSeq);
  return { messages: [...inherited.messages, ...own.messages], upToDate: own.upToDate };
}

/**
 * Source side of a fork's creation: checks the request against this stream and records the
 * fork as a reader of its prefix. The message a binary sub-offset cuts into may itself be
 * inherited, so it is fetched first; every check after that runs in one synchronous turn.
 */
export async function acquireFork(log: StreamLog, links: ForkLinks, req: AcquireRequest, nowMs = Date.now()): Promise<AcquireResult> {
  const before = requireSource(log, nowMs);
  const at = forkPoint(before, req.offset);
  let cut: StoredMessage | null = null;
  if (req.subOffset > 0 && !isJsonStream(before)) {
    cut = (await readThrough(log, links, req.houseId, at, Number.MAX_SAFE_INTEGER, at + 1)).messages[0] ?? null;
  }
  const meta = requireSource(log, nowMs);
  if (meta.createdAt !== before.createdAt) throw new ApiError("conflict", "source stream was replaced while forking");
  if (req.contentType !== null && normalizeContentType(req.contentType) !== normalizeContentType(meta.contentType)) {
    throw new ApiError("content_type_mismatch", `source stream content type is ${meta.contentType}`);
  }
  let forkSeq = at;
  let partial: Uint8Array | null = null;
  if (req.subOffset > 0) {
    if (at + 1 > meta.tailSeq) throw new ApiError("bad_request", "invalid fork sub-offset: no message after the fork offset");
    if (isJsonStream(meta)) {
      // Every JSON value is its own message here, so a sub-offset counts whole messages.
      forkSeq = at + req.subOffset;
      if (forkSeq > meta.tailSeq) throw new ApiError("bad_request", "invalid fork sub-offset: beyond the source's messages");
    } else {
      if (!cut) throw new ApiError("bad_request", "invalid fork sub-offset: no message after the fork offset");
      if (req.subOffset > cut.data.byteLength) throw new ApiError("bad_request", "invalid fork sub-offset: beyond the message's length");
      if (req.subOffset === cut.data.byteLength) forkSeq = at + 1;
      else partial = cut.data.slice(0, req.subOffset);
    }
  }
  log.forks.addChild(req.childKey);
  return { contentType: meta.contentType, ttlSeconds: meta.ttlSeconds, expiresAt: meta.expiresAt, forkSeq, partial };
}

function requireSource(log: StreamLog, nowMs: number): StreamMeta {
  const meta = log.meta(nowMs);
  if (meta) return meta;
  if (log.isTombstone()) throw new ApiError("conflict", "source stream was deleted; only its existing forks still read it");
  throw new ApiError("not_found", "source stream not found");
}

function forkPoint(meta: StreamMeta, offset: ParsedOffset | null): number {
  if (offset === null || offset.kind === "now") return meta.tailSeq;
  if (offset.seq > meta.tailSeq) throw new ApiError("invalid_offset", "fork offset is beyond the source stream's tail");
  return offset.seq;
}

function isJsonStream(meta: StreamMeta): boolean {
  return normalizeContentType(meta.contentType) === "application/json";
}

/** Source side of a read through a fork: works on tombstones, never slides the source's TTL. */
export async function readPrefix(log: StreamLog, links: ForkLinks, req: PrefixRequest): Promise<Page> {
  if (!log.meta() && !log.isTombstone()) throw new ApiError("gone", "a fork's source stream is gone");
  return readThrough(log, links, req.houseId, req.afterSeq, req.maxBytes, req.uptoSeq);
}

/** A fork of this stream is gone: a tombstone without forks left is removed, up the chain. */
export async function releaseFork(log: StreamLog, links: ForkLinks, houseId: string, childKey: string): Promise<void> {
  log.forks.removeChild(childKey);
  if (log.isTombstone() && log.forks.childCount() === 0) log.purge();
  await sendReleases(log, links, houseId);
}

/**
 * Sends the releases a purge left behind. A source that cannot be reached keeps its tombstone
 * until this stream's actor runs again; it never loses data a fork still needs.
 */
export async function sendReleases(log: StreamLog, links: ForkLinks, houseId: string): Promise<void> {
  if (!log.forks.mayHaveReleases()) return;
  for (const sourceKey of log.forks.pendingReleases()) {
    try {
      await links.release(sourceKey, houseId, links.selfKey);
      log.forks.releaseSent(sourceKey);
    } catch (err) {
      logEvent("fork_release_failed", { sourceKey, error: errorMessage(err) }, "error");
    }
  }
}
