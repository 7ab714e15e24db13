import { z } from "zod";
import { ApiError, SECURITY_HEADERS, errorResponse } from "../errors";
import {
  forkExpiry, parseForkHeaders, readThrough, sameFork, sendReleases,
  type ForkLinks, type ForkRequest, type ForkSource, type Page,
} from "./fork";
import { StreamLog, type AppendOutcome, type NewMessage, type ProducerTuple, type StreamMeta, type StoredMessage } from "./log";
import {
  CORS_HEADERS, CORS_PREFLIGHT_HEADERS, H, MAX_APPEND_BYTES, MAX_READ_BYTES, boundedHeader, formatOffset, isJsonContentType, normalizeContentType,
  parseOffset, responseCursor,
} from "./protocol";
import { WaitHub } from "./wait-hub";
import type { EntryWriter } from "../threads/entries";
import { assertUtf8Charset, readBoundedBody } from "../http/bounded-body";
import { parseCheckedJson, scanJsonValues } from "../entries/json-limits";

/** What a stream's owner (a plain stream, or a thread) decides on top of the generic protocol. */
export interface StreamHost {
  readonly log: StreamLog;
  readonly hub: WaitHub;
  readonly longPollTimeoutMs: number;
  readonly streamName: string;
  /** Turns an append body into messages; a thread validates entries (and their author) here. `null` = nothing to append. */
  prepareAppend(body: Uint8Array, meta: StreamMeta, writer: StreamRequestAuth): NewMessage[] | null;
  /** Called after messages were durably appended (not for duplicates). */
  afterAppend(appended: StoredMessage[], outcome: AppendOutcome): void;
  /** Whether this stream may be created / deleted through the protocol. */
  allowCreate: boolean;
  allowDelete: boolean;
  /** A thread's log must stay open: the control plane still has to write its finished-signal. */
  allowClose: boolean;
  onDelete?(): void;
  /** Plain streams only (threads are not forkable): see fork.ts. */
  readonly fork?: ForkHost;
  /** When the reader's token expires: an SSE response, which outlives the token check, ends there. */
  readonly readableUntilMs?: number;
}

/** A plain stream's view of forking, for the current request. */
export type ForkHost = {
  readonly links: ForkLinks;
  readonly houseId: string;
  /** The source a PUT's Stream-Forked-From named, resolved in the caller's house; null without one. */
  readonly source: ForkSource | null;
};

/** Whether the request may write at all, and who writes (see EntryWriter). */
export type StreamRequestAuth = { canWrite: boolean } & EntryWriter;


const STRICT_INT = /^\d+$/;
const TTL_PATTERN = /^(0|[1-9]\d*)$/;

const BASE_HEADERS: Record<string, string> = { ...CORS_HEADERS, ...SECURITY_HEADERS };

/** A plain record: the Response makes its Headers once, instead of a Headers object plus a set() per header. */
function headers(extra: Record<string, string | undefined> = {}): Record<string, string> {
  const h = { ...BASE_HEADERS };
  for (const k in extra) {
    const v = extra[k];
    if (v !== undefined) h[k] = v;
  }
  return h;
}

function withCors(res: Response): Response {
  const out = new Response(res.body, res);
  for (const [k, v] of Object.entries(CORS_HEADERS)) out.headers.set(k, v);
  return out;
}

/** Splits a JSON-mode body into one message per value (top-level arrays are flattened one level). */
export function splitJsonMessages(body: Uint8Array, allowEmptyArray: boolean): Uint8Array[] {
  // One scan checks the depth and finds each value's bytes; the parse then only validates.
  const scan = scanJsonValues(body);
  const parsed = parseCheckedJson(body, scan);
  const values = Array.isArray(parsed) ? parsed : [parsed];
  if (values.length === 0 && !allowEmptyArray) throw new ApiError("bad_request", "empty arrays are not allowed");
  const raw = scan.values;
  if (raw && raw.length === values.length) return raw;
  const enc = new TextEncoder();
  return values.map((v) => enc.encode(JSON.stringify(v)));
}

/** A plain stream's append body as messages: one per JSON value in JSON mode, else the bytes as one. */
export function bodyToMessages(body: Uint8Array, contentType: string, allowEmptyArray: boolean): NewMessage[] {
  return isJsonContentType(contentType) ? splitJsonMessages(body, allowEmptyArray).map((data) => ({ data })) : [{ data: body }];
}

function producerFrom(request: Request): ProducerTuple | undefined {
  const id = boundedHeader(request, H.producerId);
  const epoch = request.headers.get(H.producerEpoch);
  const seq = request.headers.get(H.producerSeq);
  if (id === null && epoch === null && seq === null) return undefined;
  if (id === null || epoch === null || seq === null) {
    throw new ApiError("bad_request", "Producer-Id, Producer-Epoch and Producer-Seq must be sent together");
  }
  if (id === "") throw new ApiError("bad_request", "Producer-Id must not be empty");
  if (!STRICT_INT.test(epoch) || !Number.isSafeInteger(Number(epoch))) throw new ApiError("bad_request", "invalid Producer-Epoch");
  if (!STRICT_INT.test(seq) || !Number.isSafeInteger(Number(seq))) throw new ApiError("bad_request", "invalid Producer-Seq");
  return { id, epoch: Number(epoch), seq: Number(seq) };
}

function formatBody(meta: StreamMeta, messages: StoredMessage[]): Uint8Array {
  // JSON messages are stored as their serialized bytes: a page is `[` + joined by `,` + `]`.
  const json = isJsonContentType(meta.contentType);
  const payload = messages.reduce((n, m) => n + m.data.byteLength, 0);
  const out = new Uint8Array(json ? payload + Math.max(0, messages.length - 1) + 2 : payload);
  let at = 0;
  if (json) out[at++] = 0x5b;
  messages.forEach((m, i) => {
    if (json && i > 0) out[at++] = 0x2c;
    out.set(m.data, at);
    at += m.data.byteLength;
  });
  if (json) out[at++] = 0x5d;
  return out;
}

/**
 * A page's validator: its stream, its bounds, and what its headers say of the tail. A page that
 * stays the same while the log grows past it (a full page) must not keep the "up to date" of the
 * time it was the tail, which a 304 would hand back.
 */
function etagFor(name: string, start: string, end: string, closed: boolean, upToDate: boolean): string {
  const b64 = btoa(String.fromCharCode(...new TextEncoder().encode(name)));
  return `"${b64}:${start}:${end}${upToDate ? ":u" : ""}${closed ? ":c" : ""}"`;
}

export async function handleStreamHttp(request: Request, host: StreamHost, auth: StreamRequestAuth): Promise<Response> {
  try {
    return await dispatch(request, host, auth);
  } catch (err) {
    return withCors(errorResponse(err));
  } finally {
    // A delete or an expiry may have left a fork's reference on its source to drop.
    if (host.fork) await sendReleases(host.log, host.fork.links, host.fork.houseId);
  }
}

/** The stream's metadata; a tombstone (a deleted source that forks still read) is 410. */
function requireMeta(host: StreamHost): StreamMeta {
  const meta = host.log.meta();
  if (meta) return meta;
  if (host.log.isTombstone()) throw new ApiError("gone", "stream was deleted");
  throw new ApiError("not_found", "stream not found");
}

function readPage(host: StreamHost, afterSeq: number): Promise<Page> {
  return readThrough(host.log, host.fork?.links, host.fork?.houseId ?? "", afterSeq, MAX_READ_BYTES);
}

/** The methods a stream answers (a thread's log is never deleted through it). */
function streamMethods(host: StreamHost): string[] {
  return ["GET", "HEAD", "POST", "PUT", ...(host.allowDelete ? ["DELETE"] : []), "OPTIONS"];
}

async function dispatch(request: Request, host: StreamHost, auth: StreamRequestAuth): Promise<Response> {
  const method = request.method.toUpperCase();
  if (method === "OPTIONS") return new Response(null, { status: 204, headers: { ...CORS_PREFLIGHT_HEADERS, ...SECURITY_HEADERS } });
  if (method !== "GET" && method !== "HEAD" && !auth.canWrite) throw new ApiError("forbidden", "token does not allow writes");
  switch (method) {
    case "PUT": return handleCreate(request, host);
    case "POST": return handleAppend(request, host, auth);
    case "GET": return handleRead(request, host);
    case "HEAD": return handleHead(host);
    case "DELETE": return handleDelete(host);
    default: throw new ApiError("method_not_allowed", `${method} is not supported on a stream`, undefined, { allow: streamMethods(host).join(", ") });
  }
}

/** The longest a stream may be set to live: far enough for any use, short of the alarms' limit. */
export const MAX_STREAM_TTL_SECONDS = 100 * 365 * 24 * 3600;

const RFC3339 = z.iso.datetime({ offset: true });

type CreateSettings = { contentType: string | null; ttlSeconds: number | null; expiresAt: string | null; closed: boolean };

async function handleCreate(request: Request, host: StreamHost): Promise<Response> {
  let declaredType = request.headers.get("content-type");
  if (declaredType && !/^[\w.+-]+\/[\w.+-]+/.test(declaredType.trim())) declaredType = null;
  const ttl = request.headers.get(H.ttl);
  const expiresAt = request.headers.get(H.expiresAt);
  if (ttl !== null && expiresAt !== null) throw new ApiError("bad_request", "send Stream-TTL or Stream-Expires-At, not both");
  if (ttl !== null && !TTL_PATTERN.test(ttl)) throw new ApiError("bad_request", "invalid Stream-TTL");
  // An RFC 3339 time that names a real day: Date.parse alone takes 2030-02-30 as March 2.
  if (expiresAt !== null && (!RFC3339.safeParse(expiresAt.trim()).success || Number.isNaN(Date.parse(expiresAt)))) {
    throw new ApiError("bad_request", "invalid Stream-Expires-At: an RFC 3339 date-time with a zone, e.g. 2030-01-31T00:00:00Z");
  }
  // A stream that would be expired the moment it exists is the client's mistake, not a create.
  if (ttl !== null && Number(ttl) === 0) throw new ApiError("bad_request", "Stream-TTL must be at least 1 second");
  if (expiresAt !== null && Date.parse(expiresAt) <= Date.now()) throw new ApiError("bad_request", "Stream-Expires-At is in the past");
  // An expiry is an alarm, and alarms end in 2189: refused before anything is stored.
  if (ttl !== null && Number(ttl) > MAX_STREAM_TTL_SECONDS) throw new ApiError("bad_request", `Stream-TTL is at most ${MAX_STREAM_TTL_SECONDS} seconds (100 years)`);
  if (expiresAt !== null && Date.parse(expiresAt) > Date.now() + MAX_STREAM_TTL_SECONDS * 1000) throw new ApiError("bad_request", "Stream-Expires-At is more than 100 years away");
  if (declaredType && isJsonContentType(declaredType)) assertUtf8Charset(declaredType);
  const closed = request.headers.get(H.closed) === "true";
  if (closed && !host.allowClose) throw new ApiError("forbidden", "this stream cannot be closed");
  const fork = parseForkHeaders(request.headers, !!host.fork?.source);
  const body = await readBoundedBody(request, MAX_APPEND_BYTES);
  const settings = { contentType: declaredType, ttlSeconds: ttl === null ? null : Number(ttl), expiresAt, closed };
  if (fork && host.fork?.source) return createFork(request, host, host.fork, host.fork.source, fork, settings, body);
  const contentType = declaredType ?? "application/octet-stream";
  const existing = host.log.meta();
  if (!existing && !host.allowCreate) throw new ApiError("not_found", "stream not found");
  if (existing && host.log.forks.ref()) throw new ApiError("conflict", "stream already exists as a fork");
  let initial: NewMessage[] = [];
  if (body.byteLength > 0 && !existing) {
    initial = bodyToMessages(body, contentType, true);
  }
  const { created, meta } = host.log.create(host.streamName, {
    contentType, ttlSeconds: ttl === null ? null : Number(ttl), expiresAt, closed,
  }, initial);
  if (created && initial.length > 0) {
    host.afterAppend(host.log.read(0, Number.MAX_SAFE_INTEGER).messages, { kind: "appended", tailSeq: meta.tailSeq, appended: [], fresh: [], closed });
  }
  if (created) host.hub.notify();
  return createdResponse(request, meta, created);
}

function createdResponse(request: Request, meta: StreamMeta, created: boolean): Response {
  return new Response(null, {
    status: created ? 201 : 200,
    headers: headers({
      "content-type": meta.contentType,
      [H.offset]: formatOffset(meta.tailSeq),
      [H.closed]: meta.closed ? "true" : undefined,
      location: created ? request.url : undefined,
    }),
  });
}

/**
 * PUT with Stream-Forked-From. The source's actor checks the request and counts the fork as its
 * reader before this log exists; any failure after that (a bad body, say) gives the reference back.
 */
async function createFork(
  request: Request, host: StreamHost, ctx: ForkHost, source: ForkSource, fork: ForkRequest, settings: CreateSettings, body: Uint8Array,
): Promise<Response> {
  if (host.log.meta() || host.log.isTombstone()) return repeatedFork(request, host, source, fork, settings);
  const acquired = await ctx.links.acquire(source.key, {
    houseId: ctx.houseId, childKey: ctx.links.selfKey, offset: fork.offset, subOffset: fork.subOffset, contentType: settings.contentType,
  });
  // An earlier fork under this name may not have sent its release to the same source yet.
  host.log.forks.cancelRelease(source.key);
  // Another PUT may have created this stream while the source answered.
  const raced = host.log.meta() !== null || host.log.isTombstone();
  const holdsReference = raced && host.log.forks.ref()?.sourceKey === source.key;
  try {
    if (raced) return repeatedFork(request, host, source, fork, settings);
    const contentType = settings.contentType ?? acquired.contentType;
    const initial: NewMessage[] = acquired.partial ? [{ data: acquired.partial }] : [];
    if (body.byteLength > 0) initial.push(...bodyToMessages(body, contentType, true));
    const { meta } = host.log.create(host.streamName, { contentType, ...forkExpiry(settings, acquired), closed: settings.closed }, initial, undefined, {
      sourceKey: source.key, sourceName: source.name, forkSeq: acquired.forkSeq, requestedOffset: fork.requestedOffset, subOffset: fork.subOffset,
    });
    host.hub.notify();
    return createdResponse(request, meta, true);
  } catch (err) {
    // Sent when this request ends (handleStreamHttp), retried later if the source is unreachable.
    if (!holdsReference) host.log.forks.queueRelease(source.key);
    throw err;
  }
}

function repeatedFork(request: Request, host: StreamHost, source: ForkSource, fork: ForkRequest, settings: CreateSettings): Response {
  const meta = host.log.meta();
  if (!meta || !sameFork(meta, host.log.forks.ref(), source, fork, settings)) {
    throw new ApiError("conflict", "stream already exists with a different configuration");
  }
  return createdResponse(request, meta, false);
}

function handleHead(host: StreamHost): Response {
  const meta = host.log.meta();
  if (!meta) return new Response(null, { status: host.log.isTombstone() ? 410 : 404, headers: headers() });
  const tail = formatOffset(meta.tailSeq);
  return new Response(null, {
    status: 200,
    headers: headers({
      "content-type": meta.contentType,
      [H.offset]: tail,
      "cache-control": "no-store",
      [H.closed]: meta.closed ? "true" : undefined,
      [H.ttl]: meta.ttlSeconds !== null ? String(meta.ttlSeconds) : undefined,
      [H.expiresAt]: meta.expiresAt ?? undefined,
      etag: etagFor(host.streamName, "-1", tail, meta.closed, true),
    }),
  });
}

function handleDelete(host: StreamHost): Response {
  if (!host.allowDelete) throw new ApiError("method_not_allowed", "this stream cannot be deleted", undefined, { allow: streamMethods(host).join(", ") });
  requireMeta(host);
  host.log.delete();
  host.onDelete?.();
  host.hub.notify();
  return new Response(null, { status: 204, headers: headers() });
}

async function handleAppend(request: Request, host: StreamHost, auth: StreamRequestAuth): Promise<Response> {
  const producer = producerFrom(request);
  const close = request.headers.get(H.closed) === "true";
  if (close && !host.allowClose) throw new ApiError("forbidden", "this stream cannot be closed");
  const streamSeq = boundedHeader(request, H.seq) ?? undefined;
  // From here to the write nothing awaits: appends released together commit together.
  const body = await host.log.commits.read(() => readBoundedBody(request, MAX_APPEND_BYTES));
  const meta = requireMeta(host);

  let outcome: AppendOutcome;
  if (body.byteLength === 0) {
    if (!close) throw new ApiError("bad_request", "empty body");
    outcome = host.log.close(producer);
    host.log.touch(meta);
    if (outcome.kind === "appended") {
      host.hub.notify();
      return new Response(null, {
        status: 204,
        headers: headers({
          [H.offset]: formatOffset(outcome.tailSeq),
          [H.closed]: "true",
          [H.producerEpoch]: producer ? String(producer.epoch) : undefined,
          [H.producerSeq]: producer ? String(producer.seq) : undefined,
        }),
      });
    }
  } else {
    const contentType = request.headers.get("content-type");
    if (!contentType) throw new ApiError("bad_request", "Content-Type is required");
    if (isJsonContentType(contentType)) assertUtf8Charset(contentType);
    if (normalizeContentType(contentType) !== normalizeContentType(meta.contentType)) {
      throw new ApiError("content_type_mismatch", `stream content type is ${meta.contentType}`);
    }
    if (meta.closed) {
      outcome = host.log.append({ messages: [], producer, close }, undefined, meta); // closed / duplicate-of-close verdict only
    } else {
      // A producer's retry of a request already taken is answered as the duplicate it is, with its
      // body not judged again: what judged it may have changed since (the run whose token wrote
      // it has ended), and the producer must still get the success it lost.
      if (producer !== undefined && host.log.isProducerReplay(producer)) {
        return appendResponse(host, host.log.append({ messages: [], producer, close, streamSeq }, undefined, meta), producer);
      }
      const messages = host.prepareAppend(body, meta, auth);
      if (messages === null && producer === undefined && streamSeq === undefined) {
        // Nothing durable to write (a heartbeat): acknowledge with the current tail.
        return new Response(null, { status: 204, headers: headers({ [H.offset]: formatOffset(meta.tailSeq) }) });
      }
      // A producer's (or Stream-Seq's) request is sequenced even when it stores nothing: an
      // acknowledged seq that was never recorded would make the producer's next one a "gap".
      outcome = host.log.append({ messages: messages ?? [], producer, close, streamSeq }, undefined, meta);
    }
  }
  return appendResponse(host, outcome, producer);
}

function appendResponse(host: StreamHost, outcome: AppendOutcome, producer: ProducerTuple | undefined): Response {
  const tail = formatOffset(outcome.tailSeq);
  if (outcome.kind === "closed") {
    throw new ApiError("stream_closed", "stream is closed", undefined, { [H.closed]: "true", [H.offset]: tail });
  }
  if (outcome.kind === "duplicate") {
    return new Response(null, {
      status: 204,
      headers: headers({
        [H.offset]: tail,
        [H.closed]: outcome.closed ? "true" : undefined,
        [H.producerEpoch]: producer ? String(producer.epoch) : undefined,
        [H.producerSeq]: producer ? String(outcome.lastSeq) : undefined,
      }),
    });
  }
  if (outcome.fresh.length > 0) host.afterAppend(outcome.fresh, outcome);
  if (outcome.fresh.length > 0 || outcome.closed) host.hub.notify();
  let last = outcome.tailSeq;
  if (outcome.appended.length > 0) last = outcome.appended.reduce((m, a) => Math.max(m, a.seq), 0);
  return new Response(null, {
    status: producer ? 200 : 204,
    headers: headers({
      [H.offset]: formatOffset(outcome.appended.length > 0 ? last : outcome.tailSeq),
      [H.closed]: outcome.closed ? "true" : undefined,
      [H.producerEpoch]: producer ? String(producer.epoch) : undefined,
      [H.producerSeq]: producer ? String(producer.seq) : undefined,
    }),
  });
}

async function handleRead(request: Request, host: StreamHost): Promise<Response> {
  const url = new URL(request.url);
  const offsets = url.searchParams.getAll("offset");
  if (offsets.length > 1) throw new ApiError("invalid_offset", "only one offset parameter is allowed");
  const rawOffset = offsets[0] ?? null;
  if (rawOffset === "") throw new ApiError("invalid_offset", "offset must not be empty");
  const live = url.searchParams.get("live");
  if (live !== null && live !== "long-poll" && live !== "sse") throw new ApiError("bad_request", "live must be long-poll or sse");
  if (live !== null && rawOffset === null) throw new ApiError("bad_request", `${live} requires an offset`);
  const parsed = parseOffset(rawOffset);
  const cursor = url.searchParams.get("cursor");

  let meta = requireMeta(host);
  const startSeq = parsed.kind === "now" ? meta.tailSeq : parsed.seq;

  if (live === "sse") return sseResponse(request, host, meta, startSeq, cursor);

  if (parsed.kind === "now" && live === null) {
    host.log.touch(meta);
    return new Response(isJsonContentType(meta.contentType) ? "[]" : "", {
      status: 200,
      headers: headers({
        "content-type": meta.contentType,
        [H.offset]: formatOffset(meta.tailSeq),
        [H.upToDate]: "true",
        "cache-control": "no-store",
        [H.closed]: meta.closed ? "true" : undefined,
      }),
    });
  }

  // A plain catch-up read of a JSON stream's own messages: SQLite builds the body.
  const fork = host.log.forks.ref();
  if (live === null && isJsonContentType(meta.contentType) && (!fork || startSeq >= fork.forkSeq)) {
    const joined = host.log.readJoined(startSeq, MAX_READ_BYTES);
    host.log.touch(meta);
    const lastSeq = joined.count > 0 ? joined.lastSeq : Math.min(startSeq, meta.tailSeq);
    return pageResponse(request, host, meta, rawOffset, lastSeq, joined.upToDate, null, () => joined.body);
  }

  let page = await readPage(host, startSeq);
  let wokenBody: ReturnType<typeof formatBody> | null = null;
  // A fork's inherited page came from another actor: take the tail as it is now.
  meta = requireMeta(host);
  host.log.touch(meta);
  if (live === "long-poll" && page.messages.length === 0) {
    if (!meta.closed) {
      await host.hub.wait(host.longPollTimeoutMs, request.signal);
      // Everyone woken by the same append at the same offset gets the same page.
      const woke = await host.hub.shared(`long-poll:${startSeq}`, async () => {
        const p = await readPage(host, startSeq);
        const m = requireMeta(host);
        return { page: p, meta: m, body: p.messages.length > 0 ? formatBody(m, p.messages) : null };
      });
      page = woke.page;
      meta = woke.meta;
      wokenBody = woke.body;
    }
    if (page.messages.length === 0) {
      const at = formatOffset(Math.min(startSeq, meta.tailSeq));
      return new Response(null, {
        status: 204,
        headers: headers({
          [H.offset]: at,
          [H.upToDate]: "true",
          [H.cursor]: responseCursor(cursor),
          [H.closed]: meta.closed ? "true" : undefined,
        }),
      });
    }
  }

  const lastSeq = page.messages.length > 0 ? page.messages[page.messages.length - 1].seq : Math.min(startSeq, meta.tailSeq);
  const messages = page.messages;
  // A shared body is copied: a response may take ownership of the bytes it is given.
  const body = () => (wokenBody ? wokenBody.slice() : formatBody(meta, messages));
  return pageResponse(request, host, meta, rawOffset, lastSeq, page.upToDate, live === "long-poll" ? responseCursor(cursor) : null, body);
}

/** A read's 200 (or 304 when the client has this page): the page ends at `lastSeq`. */
function pageResponse(
  request: Request, host: StreamHost, meta: StreamMeta, rawOffset: string | null, lastSeq: number, upToDate: boolean,
  cursor: string | null, body: () => Uint8Array,
): Response {
  const next = formatOffset(lastSeq);
  const atTail = lastSeq >= meta.tailSeq;
  const closedAtTail = meta.closed && atTail && upToDate;
  const etag = etagFor(host.streamName, rawOffset ?? "-1", next, closedAtTail, upToDate && atTail);
  if (request.headers.get("if-none-match") === etag) {
    return new Response(null, { status: 304, headers: headers({ etag }) });
  }
  return new Response(body(), {
    status: 200,
    headers: headers({
      "content-type": meta.contentType,
      [H.offset]: next,
      [H.upToDate]: upToDate && atTail ? "true" : undefined,
      [H.cursor]: cursor ?? undefined,
      [H.closed]: closedAtTail ? "true" : undefined,
      etag,
    }),
  });
}

function sseData(payload: string): string {
  return payload.split(/\r\n|\r|\n/).map((line) => `data:${line}`).join("\n") + "\n\n";
}

function toBase64(bytes: Uint8Array): string {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

function sseResponse(request: Request, host: StreamHost, initialMeta: StreamMeta, startSeq: number, cursor: string | null): Response {
  const ct = normalizeContentType(initialMeta.contentType);
  const isJson = ct === "application/json";
  const base64 = !(isJson || ct.startsWith("text/"));
  const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>();
  const writer = writable.getWriter();
  const enc = new TextEncoder();
  const dec = new TextDecoder();
  let connected = true;
  request.signal.addEventListener("abort", () => { connected = false; });
  const write = async (s: string) => {
    try {
      await writer.write(enc.encode(s));
    } catch {
      connected = false;
    }
  };

  // The token was checked once, when the response began; the stream ends when it expires, and the
  // client reconnects from its last control event with a token that is checked again.
  const until = host.readableUntilMs ?? Infinity;
  const loop = async () => {
    let seq = startSeq;
    while (connected && Date.now() < until) {
      const page = await readPage(host, seq);
      const meta = host.log.meta();
      if (!meta) break;
      host.log.touch(meta);
      const controlAt = (at: number) => {
        const atTail = at >= meta.tailSeq;
        const control: Record<string, unknown> = { streamNextOffset: formatOffset(at) };
        if (meta.closed && atTail) control.streamClosed = true;
        else {
          control.streamCursor = responseCursor(cursor);
          if (atTail) control.upToDate = true;
        }
        return `event: control\n${sseData(JSON.stringify(control))}`;
      };
      // Every data event is followed by its own control event, so a reader can resume exactly there.
      let out = "";
      for (const m of page.messages) {
        const data = base64 ? toBase64(m.data) : isJson ? `[${dec.decode(m.data)}]` : dec.decode(m.data);
        seq = m.seq;
        out += `event: data\n${sseData(data)}${controlAt(seq)}`;
      }
      if (page.messages.length === 0) {
        seq = Math.min(seq, meta.tailSeq);
        out += controlAt(seq);
      }
      const atTail = seq >= meta.tailSeq;
      await write(out);
      if (meta.closed && atTail) break;
      if (!atTail) continue;
      const r = await host.hub.wait(Math.min(host.longPollTimeoutMs, until - Date.now()), request.signal);
      if (r === "timeout" && connected && Date.now() < until) {
        const after = host.log.meta();
        if (after && after.tailSeq === seq && !after.closed) {
          await write(`event: control\n${sseData(JSON.stringify({ streamNextOffset: formatOffset(seq), streamCursor: responseCursor(cursor), upToDate: true }))}`);
        }
      }
    }
    try { await writer.close(); } catch { /* client went away */ }
  };
  const done = loop();
  // Keep the actor working on the stream after the response has been handed back.
  void done;
  return new Response(readable, {
    status: 200,
    headers: headers({
      "content-type": "text/event-stream",
      "cache-control": "no-cache",
      [H.sseEncoding]: base64 ? "base64" : undefined,
    }),
  });
}
