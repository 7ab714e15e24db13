/**
 * Packed runs: a plain JSON stream stores the messages of one append that have no entry ids as
 * few `messages` rows, not one row each. SQLite's cost is per row (a B-tree insert and its index
 * upkeep), so a 1,000-message append into one row per message spent most of its time there.
 *
 * A packed row's `seq` is the seq of its LAST message, so `seq > after` still finds every row that
 * holds a message after `after`, and `max(seq)` is still the tail. Its `data` is the messages' bytes
 * joined by `,` (what a JSON read's body holds between its brackets, so whole rows concatenate into a
 * body as they are), and its `lens` the byte length of each message, as little-endian uint32s.
 * A row with `lens` null is one message, as every row was before.
 */
import type { StoredMessage } from "./log";

/** Most bytes of joined messages in one packed row: small enough to read whole for one message. */
export const RUN_MAX_BYTES = 64 * 1024;
/** Most messages in one packed row (bounds its `lens`). */
export const RUN_MAX_MESSAGES = 4096;

/** How many consecutive messages go in each row, in order: greedy up to the limits, at least one each. */
export function runLengths(messages: readonly { data: Uint8Array }[]): number[] {
  const out: number[] = [];
  let count = 0;
  let bytes = 0;
  for (const m of messages) {
    const size = m.data.byteLength;
    if (count > 0 && (bytes + 1 + size > RUN_MAX_BYTES || count >= RUN_MAX_MESSAGES)) {
      out.push(count);
      count = 0;
      bytes = 0;
    }
    bytes += count > 0 ? 1 + size : size;
    count += 1;
  }
  if (count > 0) out.push(count);
  return out;
}

/** How many statements storing these messages as packed runs takes. */
export function runStatements(messages: readonly { data: Uint8Array }[]): number {
  return runLengths(messages).length;
}

const COMMA = 0x2c;

/** One packed row's `data` and `lens` for these messages (two or more). */
export function packRun(messages: readonly { data: Uint8Array }[]): { data: Uint8Array; lens: Uint8Array } {
  let total = messages.length - 1;
  for (const m of messages) total += m.data.byteLength;
  const data = new Uint8Array(total);
  const lens = new Uint8Array(messages.length * 4);
  const view = new DataView(lens.buffer);
  let at = 0;
  messages.forEach((m, k) => {
    if (k > 0) data[at++] = COMMA;
    data.set(m.data, at);
    at += m.data.byteLength;
    view.setUint32(k * 4, m.data.byteLength, true);
  });
  return { data, lens };
}

/** Number of messages in a packed row. */
export function runCount(lens: ArrayBuffer): number {
  return lens.byteLength / 4;
}

/** Byte offset in a packed row's `data` where its message at `index` (0-based) starts. */
export function runOffset(lens: ArrayBuffer, index: number): number {
  const view = new DataView(lens);
  let at = 0;
  for (let k = 0; k < index; k++) at += view.getUint32(k * 4, true) + 1;
  return at;
}

/** The messages of a packed row whose seq is in (afterSeq, uptoSeq], in order. */
export function unpackRun(lastSeq: number, data: ArrayBuffer, lens: ArrayBuffer, afterSeq: number, uptoSeq: number): StoredMessage[] {
  const view = new DataView(lens);
  const count = runCount(lens);
  const firstSeq = lastSeq - count + 1;
  const out: StoredMessage[] = [];
  let at = 0;
  for (let k = 0; k < count; k++) {
    const size = view.getUint32(k * 4, true);
    const seq = firstSeq + k;
    if (seq > uptoSeq) break;
    if (seq > afterSeq) out.push({ seq, data: new Uint8Array(data, at, size), entryId: null });
    at += size + 1;
  }
  return out;
}
