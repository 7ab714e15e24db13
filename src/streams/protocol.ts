import { ApiError } from "../errors";

/** Header and query names of the Durable Streams protocol. */
export const H = {
  offset: "Stream-Next-Offset",
  cursor: "Stream-Cursor",
  upToDate: "Stream-Up-To-Date",
  closed: "Stream-Closed",
  seq: "Stream-Seq",
  ttl: "Stream-TTL",
  expiresAt: "Stream-Expires-At",
  producerId: "Producer-Id",
  producerEpoch: "Producer-Epoch",
  producerSeq: "Producer-Seq",
  producerExpectedSeq: "Producer-Expected-Seq",
  producerReceivedSeq: "Producer-Received-Seq",
  sseEncoding: "Stream-SSE-Data-Encoding",
} as const;

export const CORS_HEADERS: Record<string, string> = {
  "access-control-allow-origin": "*",
  "access-control-expose-headers":
    "Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, Stream-TTL, Stream-Expires-At, Stream-SSE-Data-Encoding, Producer-Epoch, Producer-Seq, Producer-Expected-Seq, Producer-Received-Seq, etag, content-type, location, Allow, Idempotent-Replayed, Folder-Version, Content-Disposition",
};

/** What a browser's preflight (OPTIONS) needs on top: only there do methods, headers and max-age mean anything. */
export const CORS_PREFLIGHT_HEADERS: Record<string, string> = {
  ...CORS_HEADERS,
  "access-control-allow-methods": "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS",
  "access-control-allow-headers":
    "content-type, authorization, idempotency-key, if-none-match, Stream-Seq, Stream-TTL, Stream-Expires-At, Stream-Closed, Producer-Id, Producer-Epoch, Producer-Seq, Stream-Forked-From, Stream-Fork-Offset, Stream-Fork-Sub-Offset",
  "access-control-max-age": "86400",
};

/**
 * Offsets are `<epoch>_<seq>`, both 16 zero-padded digits, so string order is log order.
 * `seq` counts messages: the offset after message n is n, the start is 0.
 */
const OFFSET_PATTERN = /^(\d{1,16})_(\d{1,16})$/;

export function formatOffset(seq: number): string {
  return `0000000000000000_${String(seq).padStart(16, "0")}`;
}

export const START_OFFSET = formatOffset(0);

export type ParsedOffset = { kind: "seq"; seq: number } | { kind: "now" };

export function parseOffset(raw: string | null): ParsedOffset {
  if (raw === null || raw === "-1" || raw === "0") return { kind: "seq", seq: 0 };
  if (raw === "now") return { kind: "now" };
  const m = OFFSET_PATTERN.exec(raw);
  if (!m) throw new ApiError("invalid_offset", "offset must be -1, 0, now or an offset returned by the server");
  const epoch = Number(m[1]);
  // A later epoch than ours can only come from another server: it is past our tail.
  return { kind: "seq", seq: epoch > 0 ? Number.MAX_SAFE_INTEGER : Number(m[2]) };
}

const CURSOR_EPOCH_MS = Date.UTC(2024, 9, 9);
const CURSOR_INTERVAL_MS = 20_000;

/** Cursors only let CDNs collapse requests; a client echo must always get a larger one. */
export function responseCursor(clientCursor: string | null, nowMs = Date.now()): string {
  const current = Math.floor((nowMs - CURSOR_EPOCH_MS) / CURSOR_INTERVAL_MS);
  const client = clientCursor === null ? NaN : Number.parseInt(clientCursor, 10);
  if (Number.isNaN(client) || client < current) return String(current);
  return String(client + 1 + Math.floor(Math.random() * 180));
}

export function normalizeContentType(ct: string | null | undefined): string {
  return (ct ?? "").split(";")[0].trim().toLowerCase();
}

export function isJsonContentType(ct: string | null | undefined): boolean {
  return normalizeContentType(ct) === "application/json";
}

export const MAX_APPEND_BYTES = 1024 * 1024;
/**
 * Producer-Id and Stream-Seq are client-chosen strings we store and repeat in answers (the 409 of a
 * Stream-Seq regression names both); the protocol sets no bound, so we do, like its advice for offsets.
 */
export const MAX_IDENTIFIER_HEADER_BYTES = 256;

const utf8 = new TextEncoder();

/** A client-chosen identifier header, refused when longer than we are willing to store and echo. */
export function boundedHeader(request: Request, name: string): string | null {
  const value = request.headers.get(name);
  // Every box POST carries a Producer-Id: one encoder for all of them, not one per request.
  if (value !== null && utf8.encode(value).byteLength > MAX_IDENTIFIER_HEADER_BYTES) {
    throw new ApiError("bad_request", `${name} must be at most ${MAX_IDENTIFIER_HEADER_BYTES} bytes`);
  }
  return value;
}

/** One catch-up page: large enough that a late reader needs few round trips, small enough for memory. */
export const MAX_READ_BYTES = 4 * 1024 * 1024;
