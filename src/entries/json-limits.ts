import { ApiError } from "../errors";

/** Stateless (no streaming decode), so one serves every call that decodes stored or posted JSON. */
export const UTF8_DECODER = new TextDecoder();
/** For what a client posts: JSON is UTF-8 (RFC 8259), and bytes that are not are refused, not stored. */
const STRICT_UTF8_DECODER = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });

/**
 * Entries are JSON that every reader parses, clones across actor RPC and serializes again; past a
 * few hundred levels each of those can exhaust the stack. One documented limit keeps them safe.
 */
export const MAX_JSON_DEPTH = 64;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_ARRAY = 0x5b;
const OPEN_OBJECT = 0x7b;
const CLOSE_ARRAY = 0x5d;
const CLOSE_OBJECT = 0x7d;

/**
 * Whether JSON text nests arrays/objects deeper than `limit`, decided on the UTF-8 bytes before
 * any parse (a scan never recurses). Multi-byte UTF-8 never contains these ASCII bytes. Strings
 * are skipped with a native search for their closing quote: readers scan every stored entry.
 */
export function jsonNestsDeeperThan(bytes: Uint8Array, limit = MAX_JSON_DEPTH): boolean {
  return scanJsonValues(bytes, limit, false).tooDeep;
}

/** Index of the quote that ends the string opened at `open` (one not escaped by a backslash), or -1. */
function closingQuote(bytes: Uint8Array, open: number): number {
  let at = open;
  for (;;) {
    at = bytes.indexOf(QUOTE, at + 1);
    if (at < 0) return -1;
    let backslashes = 0;
    for (let k = at - 1; k > open && bytes[k] === BACKSLASH; k--) backslashes++;
    if (backslashes % 2 === 0) return at;
  }
}

const COMMA = 0x2c;
const isJsonWhitespace = (b: number) => b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0d;

/**
 * One scan of JSON text a client posted, before it is parsed: whether it nests deeper than `limit`,
 * and the bytes of each top-level value (the elements of a top-level array, else the whole value,
 * without surrounding whitespace). The values are right only for text JSON.parse then accepts.
 * Storing them spares a serialize per value; they are views into `bytes`, not copies (SQLite
 * copies what it binds). `values` is null (the caller re-serializes) for text with line breaks or a
 * byte-order mark, so what is stored stays one compact line, and when `split` is false (the depth only).
 */
export function scanJsonValues(bytes: Uint8Array, limit = MAX_JSON_DEPTH, split = true): { tooDeep: boolean; values: Uint8Array[] | null } {
  let values: Uint8Array[] | null = !split || bytes.indexOf(0x0a) >= 0 || bytes.indexOf(0x0d) >= 0 || bytes[0] === 0xef ? null : [];
  let start = 0;
  let end = bytes.length;
  while (start < end && isJsonWhitespace(bytes[start])) start++;
  while (end > start && isJsonWhitespace(bytes[end - 1])) end--;
  const isArray = bytes[start] === OPEN_ARRAY && bytes[end - 1] === CLOSE_ARRAY;
  if (!isArray && values) values.push(bytes.subarray(start, end));
  const push = (from: number, to: number) => {
    while (to > from && isJsonWhitespace(bytes[to - 1])) to--;
    values!.push(bytes.subarray(from, to));
  };
  let depth = 0;
  let valueStart = -1;
  for (let i = start; i < end; i++) {
    const b = bytes[i];
    // Inside the top-level array, between its elements.
    if (isArray && values && depth === 1 && i < end - 1) {
      if (b === COMMA) {
        if (valueStart < 0) values = null;
        else push(valueStart, i);
        valueStart = -1;
        continue;
      }
      if (isJsonWhitespace(b)) continue;
      if (valueStart < 0) valueStart = i;
    }
    if (b === QUOTE) {
      const close = closingQuote(bytes, i);
      if (close < 0) return { tooDeep: false, values: null }; // unterminated: the parse refuses it
      i = close;
    } else if (b === OPEN_ARRAY || b === OPEN_OBJECT) {
      if (++depth > limit) return { tooDeep: true, values: null };
    } else if (b === CLOSE_ARRAY || b === CLOSE_OBJECT) {
      depth--;
    }
  }
  if (isArray && values && valueStart >= 0) push(valueStart, end - 1);
  return { tooDeep: false, values };
}

export const TOO_DEEP_MARKER = `[nested deeper than ${MAX_JSON_DEPTH} levels]`;

/**
 * A copy of `value` whose arrays/objects below `limit` levels are replaced by a marker string.
 * Recursion stops at `limit`, so it is safe on any input JSON.parse accepted.
 */
export function pruneDeepJson(value: unknown, limit = MAX_JSON_DEPTH, depth = 0): unknown {
  if (value === null || typeof value !== "object") return value;
  if (depth >= limit) return TOO_DEEP_MARKER;
  if (Array.isArray(value)) return value.map((v) => pruneDeepJson(v, limit, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = pruneDeepJson(v, limit, depth + 1);
  return out;
}

/** Parses JSON bytes that passed the size check; too deep or malformed is the client's 400. */
export function parseJsonBytes(bytes: Uint8Array): unknown {
  if (bytes.byteLength === 0) throw new ApiError("invalid_json", "body is empty");
  if (jsonNestsDeeperThan(bytes)) throw tooDeep();
  return parseJsonText(bytes);
}

/**
 * Parses JSON bytes whose depth was checked already (`scanJsonValues`): a scan of each posted
 * body is enough. Not UTF-8 or malformed is the client's 400.
 */
export function parseCheckedJson(bytes: Uint8Array, scan: { tooDeep: boolean }): unknown {
  if (bytes.byteLength === 0) throw new ApiError("invalid_json", "body is empty");
  if (scan.tooDeep) throw tooDeep();
  return parseJsonText(bytes);
}

function tooDeep(): ApiError {
  return new ApiError("validation_failed", `JSON nests deeper than ${MAX_JSON_DEPTH} levels`, [
    { path: "", message: `at most ${MAX_JSON_DEPTH} levels of arrays and objects` },
  ]);
}

function parseJsonText(bytes: Uint8Array): unknown {
  let text: string;
  try {
    text = STRICT_UTF8_DECODER.decode(bytes);
  } catch {
    throw new ApiError("invalid_json", "body is not valid UTF-8");
  }
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError("invalid_json", "body is not valid JSON");
  }
}
