/**
 * An entry cut down to a size the thread takes. A model can write megabytes in one tool call (a
 * whole file as `write`'s argument), and its assistant message carries them twice (`raw` and the
 * `pi.tool_call`); the worker refuses a body over 1 MiB, so such an entry would be dropped whole.
 * Cut instead, its longest strings first, it still lands, and says it was cut.
 */
import { MAX_APPEND_BYTES } from "../streams/protocol";
import type { WireEntry } from "./stream-writer";

/** Largest entry box code posts; well under the worker's append limit, so a batch of a few still fits. */
export const MAX_ENTRY_BYTES = MAX_APPEND_BYTES / 4;

const encoder = new TextEncoder();
const byteLength = (s: string) => encoder.encode(s).byteLength;

/** Strings a provider checks byte for byte when a session is replayed: cutting them breaks the replay. */
const UNCUTTABLE_KEY = /signature|encrypted/i;

type Leaf = { parent: Record<string, unknown> | unknown[]; key: string | number; length: number };

function stringLeaves(value: unknown, out: Leaf[]): Leaf[] {
  if (Array.isArray(value)) {
    value.forEach((v, i) => {
      if (typeof v === "string") out.push({ parent: value, key: i, length: v.length });
      else stringLeaves(v, out);
    });
  } else if (value && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) {
      if (typeof v === "string") {
        if (!UNCUTTABLE_KEY.test(k)) out.push({ parent: value as Record<string, unknown>, key: k, length: v.length });
      } else stringLeaves(v, out);
    }
  }
  return out;
}

/**
 * `entry` itself when its JSON is within `maxBytes`; else a copy whose longest payload strings are
 * cut (each ending with a note of how much was cut) until it is, with `payload.truncated: true`.
 */
export function boundEntry(entry: WireEntry, maxBytes = MAX_ENTRY_BYTES): WireEntry {
  let size = byteLength(JSON.stringify(entry));
  if (size <= maxBytes) return entry;
  const out = structuredClone(entry);
  out.payload.truncated = true;
  for (let round = 0; round < 64 && size > maxBytes; round++) {
    const leaves = stringLeaves(out.payload, []).sort((a, b) => b.length - a.length);
    const longest = leaves[0];
    if (!longest || longest.length < 64) break;
    const text = (longest.parent as Record<string | number, string>)[longest.key];
    // Each character cut takes at least one byte with it: cutting as many characters as there are
    // bytes over (and room for the note) brings the entry within the limit, or empties this string.
    let keep = Math.max(0, text.length - (size - maxBytes + 128));
    if (keep > 0 && /[\ud800-\udbff]/.test(text[keep - 1])) keep -= 1;
    const cut = `${text.slice(0, keep)}\n…[cut by threadbox: ${text.length - keep} of ${text.length} characters]`;
    (longest.parent as Record<string | number, string>)[longest.key] = cut;
    size = byteLength(JSON.stringify(out));
  }
  return out;
}
