import { ApiError } from "../errors";

/**
 * How much of an oversize chunked upload is still read (and dropped) before the 413 goes out. A
 * client, or a proxy in between, that is still sending when the answer comes fails its own write
 * (EPIPE, a proxy's 502) and never sees the 413; past this much the connection is cut instead.
 */
export const OVERSIZE_DRAIN_BYTES = 8 * 1024 * 1024;

async function drain(reader: ReadableStreamDefaultReader<Uint8Array>, maxBytes: number): Promise<void> {
  let dropped = 0;
  try {
    while (dropped <= maxBytes) {
      const { done, value } = await reader.read();
      if (done) return;
      dropped += value.byteLength;
    }
    await reader.cancel();
  } catch {
    // the client went away: there is no one left to answer
  }
}

/**
 * Reads and drops what is left of a body a request was refused with before it was read. A Durable
 * Object that answers with its request body unread leaves the worker's pump of that body running
 * past the answer: workerd then fails it ("Can't read from request stream after response has been
 * sent"), which can cut the client's connection or fail its next request on it with a 500.
 */
export async function discardBody(request: Request): Promise<void> {
  if (!request.body || request.bodyUsed) return;
  await drain(request.body.getReader(), OVERSIZE_DRAIN_BYTES);
}

/**
 * Reads a request body, counting bytes as they arrive: a chunked upload without Content-Length is
 * cut off at `limitBytes` instead of being buffered whole first.
 */
export async function readBoundedBody(request: Request, limitBytes: number): Promise<Uint8Array> {
  try {
    return await readBody(request, limitBytes);
  } catch (err) {
    if (err instanceof ApiError) throw err;
    // Broken framing (a bad chunk size) or a client gone mid-body: the request, not the server.
    throw new ApiError("bad_request", "the request body could not be read whole (broken chunked encoding, or the connection closed)");
  }
}

async function readBody(request: Request, limitBytes: number): Promise<Uint8Array> {
  const tooLarge = () => new ApiError("payload_too_large", `body is larger than ${limitBytes} bytes`);
  const header = request.headers.get("content-length");
  const declared = Number(header ?? "0");
  if (declared > limitBytes) throw tooLarge();
  if (!request.body) return new Uint8Array(0);
  // A declared length is what the HTTP framing delivers: read it whole, in one step.
  if (header !== null && /^\d+$/.test(header)) {
    const whole = new Uint8Array(await request.arrayBuffer());
    if (whole.byteLength > limitBytes) throw tooLarge();
    return whole;
  }
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > limitBytes) {
      await drain(reader, OVERSIZE_DRAIN_BYTES);
      throw tooLarge();
    }
    chunks.push(value);
  }
  if (chunks.length === 1) return chunks[0];
  const out = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out;
}

/**
 * JSON is UTF-8 (RFC 8259). A `charset` parameter naming anything else is refused rather than
 * decoded as UTF-8 into something the client did not mean.
 */
export function assertUtf8Charset(contentType: string | null): void {
  if (!contentType) return;
  for (const param of contentType.split(";").slice(1)) {
    const [rawKey, ...rest] = param.split("=");
    if (rawKey.trim().toLowerCase() !== "charset") continue;
    const value = rest.join("=").trim().replace(/^"(.*)"$/, "$1").toLowerCase();
    if (value !== "utf-8" && value !== "utf8") {
      throw new ApiError("unsupported_media_type", `charset ${value || "(empty)"} is not supported: send UTF-8`);
    }
  }
}
