import { z } from "zod";
import { ApiError } from "../errors";
import { entryInputSchema, formatZodError, isHeartbeat, type Entry, type EntryWithOffset } from "../entries/schema";
import type { NewMessage, StoredMessage } from "../streams/log";
import { formatOffset } from "../streams/protocol";

export const MAX_ENTRIES_PER_POST = 1000;

export type PreparedEntries = { messages: NewMessage[]; entries: Entry[]; heartbeats: number };

/**
 * Validates a write of one envelope or an array of envelopes and fills in what the writer may omit.
 * The whole write is rejected if any entry is invalid, so a bad request changes nothing.
 */
export function prepareEntries(raw: unknown, defaultAuthor: string | undefined, nowMs: number): PreparedEntries {
  const list = Array.isArray(raw) ? raw : [raw];
  if (list.length === 0) throw new ApiError("bad_request", "empty arrays are not allowed");
  if (list.length > MAX_ENTRIES_PER_POST) throw new ApiError("payload_too_large", `at most ${MAX_ENTRIES_PER_POST} entries per write`);
  const parsed = z.array(entryInputSchema).safeParse(list);
  if (!parsed.success) throw new ApiError("validation_failed", "invalid entry", formatZodError(parsed.error));
  const enc = new TextEncoder();
  const out: PreparedEntries = { messages: [], entries: [], heartbeats: 0 };
  const seen = new Set<string>();
  for (const input of parsed.data) {
    if (isHeartbeat(input)) {
      out.heartbeats += 1;
      continue;
    }
    const id = input.id ?? crypto.randomUUID();
    if (seen.has(id)) continue; // the same id twice in one write is still one entry
    seen.add(id);
    const entry: Entry = { id, ts: input.ts ?? nowMs, payload: input.payload as Entry["payload"] };
    const author = input.authorId ?? defaultAuthor;
    if (author) entry.authorId = author;
    out.entries.push(entry);
    out.messages.push({ data: enc.encode(JSON.stringify(entry)), entryId: id });
  }
  return out;
}

export function parseJsonBody(body: Uint8Array): unknown {
  try {
    return JSON.parse(new TextDecoder().decode(body));
  } catch {
    throw new ApiError("invalid_json", "body is not valid JSON");
  }
}

export function toEntryWithOffset(m: StoredMessage): EntryWithOffset {
  const entry = JSON.parse(new TextDecoder().decode(m.data)) as Entry;
  return { offset: formatOffset(m.seq), ...entry };
}
