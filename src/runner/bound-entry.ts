/**
 * An entry cut down to a size the thread takes. A model can write megabytes in one tool call (a
 * whole file as `write`'s argument), and its assistant message carries them twice (`raw` and the
 * `pi.tool_call`); the worker refuses a body over 1 MiB, so such an entry would be dropped whole.
 * Cut instead (its long strings shortened), it still lands, and says it was cut.
 */
import { MAX_APPEND_BYTES } from "../streams/protocol";
import type { WireEntry } from "./stream-writer";

/** Largest entry box code posts; well under the worker's append limit, so a batch of a few still fits. */
export const MAX_ENTRY_BYTES = MAX_APPEND_BYTES / 4;

const encoder = new TextEncoder();
const byteLength = (s: string) => encoder.encode(s).byteLength;

/** Strings a provider checks byte for byte when a session is replayed: cutting them breaks the replay. */
const UNCUTTABLE_KEY = /signature|encrypted/i;
/** Shorter strings are never cut: types, ids, names, paths stay whole. */
const MIN_CUT = 1024;

type Leaf = { parent: Record<string, unknown> | unknown[]; key: string | number; length: number };

function stringLeaves(value: unknown, out: Leaf[]): Leaf[] {
  if (Array.isArray(value)) {
    value.forEach((v, i) => {
      if (typeof v !== "string") stringLeaves(v, out);
      else if (v.length > MIN_CUT) out.push({ parent: value, key: i, length: v.length });
    });
  } else if (value && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) {
      if (typeof v === "string") {
        if (!UNCUTTABLE_KEY.test(k) && v.length > MIN_CUT) out.push({ parent: value as Record<string, unknown>, key: k, length: v.length });
      } else stringLeaves(v, out);
    }
  }
  return out;
}

function cutTo(text: string, keep: number): string {
  if (text.length <= keep) return text;
  let k = keep;
  if (k > 0 && /[\ud800-\udbff]/.test(text[k - 1])) k -= 1;
  return `${text.slice(0, k)}\n…[cut by threadbox: ${text.length - k} of ${text.length} characters]`;
}

/** `entry` with every cuttable payload string longer than `cap` characters cut to `cap`. */
function capped(entry: WireEntry, cap: number): WireEntry {
  const out = structuredClone(entry);
  out.payload.truncated = true;
  for (const leaf of stringLeaves(out.payload, [])) {
    if (leaf.length > cap) {
      const parent = leaf.parent as Record<string | number, string>;
      parent[leaf.key] = cutTo(parent[leaf.key], cap);
    }
  }
  return out;
}

/**
 * `entry` itself when its JSON is within `maxBytes`; else a copy with `payload.truncated: true`
 * whose long payload strings are all cut to one length, the longest that fits (so an assistant's
 * `text` and the same text in its `raw` keep the same part), each ending with a note of how much
 * was cut. Strings a provider checks when a session is replayed (signatures) are never cut.
 */
export function boundEntry(entry: WireEntry, maxBytes = MAX_ENTRY_BYTES): WireEntry {
  if (byteLength(JSON.stringify(entry)) <= maxBytes) return entry;
  const fits = (cap: number) => {
    const out = capped(entry, cap);
    return byteLength(JSON.stringify(out)) <= maxBytes ? out : undefined;
  };
  let lo = MIN_CUT;
  let hi = Math.max(MIN_CUT, ...stringLeaves(entry.payload, []).map((l) => l.length));
  let best = fits(MIN_CUT);
  if (!best) return capped(entry, MIN_CUT); // over by what cannot be cut: the worker's answer will say so
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    const out = fits(mid);
    if (out) {
      best = out;
      lo = mid;
    } else hi = mid;
  }
  return best;
}
