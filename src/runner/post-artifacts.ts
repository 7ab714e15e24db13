/**
 * Posts a run's artifacts to its thread: `artifact.files` always, `artifact.diff` for a git
 * checkout. A diff larger than the inline bound goes whole to the house's plain stream
 * `thread-<id>/artifacts/<runId>/diff` (a run's stream token may write there) and the entry
 * carries its head and the stream's name.
 */
import type { Artifacts } from "./artifacts";
import type { WireEntry } from "./stream-writer";

export const MAX_INLINE_DIFF_BYTES = 64 * 1024;
/** `git status` of a run that left many files: cut like the diff, so the entry stays well under a post's limit. */
const MAX_INLINE_STATUS_BYTES = 64 * 1024;
/** A diff beyond this is cut even in its stream. */
export const MAX_STREAM_DIFF_BYTES = 8 * 1024 * 1024;
const STREAM_CHUNK_BYTES = 512 * 1024;

export const artifactStreamName = (threadId: string, runId: string) => `thread-${threadId}/artifacts/${runId}/diff`;

export function artifactEntries(a: Artifacts, o: { threadId: string; runId: string; authorId?: string; diffStream?: string }): WireEntry[] {
  const base = (suffix: string) => ({ id: `${o.threadId}:artifacts:${o.runId}:${suffix}`, ts: Date.now(), ...(o.authorId ? { authorId: o.authorId } : {}) });
  const out: WireEntry[] = [];
  if (a.git) {
    const inline = a.git.diffBytes <= MAX_INLINE_DIFF_BYTES;
    out.push({
      ...base("diff"),
      payload: {
        type: "artifact.diff", runId: o.runId, base: a.git.base, status: cutLines(a.git.status, MAX_INLINE_STATUS_BYTES),
        diff: inline ? a.git.diff : cutUtf8(a.git.diff, MAX_INLINE_DIFF_BYTES), truncated: !inline, bytes: a.git.diffBytes,
        ...(o.diffStream && !inline ? { stream: o.diffStream } : {}),
      },
    });
  }
  out.push({ ...base("files"), payload: { type: "artifact.files", runId: o.runId, files: a.files, truncated: a.filesTruncated } });
  return out;
}

/** A status of more lines than an entry holds is cut at a line, and says how many it left out. */
function cutLines(text: string, maxBytes: number): string {
  if (Buffer.byteLength(text) <= maxBytes) return text;
  const head = cutUtf8(text, maxBytes);
  const kept = head.slice(0, head.lastIndexOf("\n") + 1);
  const left = text.slice(kept.length).split("\n").filter(Boolean).length;
  return `${kept}… ${left} more line(s)\n`;
}

export function cutUtf8(text: string, maxBytes: number): string {
  const buf = Buffer.from(text, "utf8");
  if (buf.length <= maxBytes) return text;
  // Back off to a character boundary so the cut never splits a multi-byte sequence.
  let end = maxBytes;
  while (end > 0 && (buf[end] & 0xc0) === 0x80) end--;
  return buf.subarray(0, end).toString("utf8");
}

/** Writes the whole diff to its plain stream; false when that failed (the entry then keeps only the head). */
export async function writeDiffStream(streamBase: string, name: string, token: string, diff: string, timeoutMs: number): Promise<boolean> {
  const url = `${streamBase.replace(/\/+$/, "")}/${name}`;
  const headers = { authorization: `Bearer ${token}`, "content-type": "text/plain" };
  const signal = AbortSignal.timeout(timeoutMs);
  try {
    const put = await fetch(url, { method: "PUT", headers, signal });
    if (put.status !== 201 && put.status !== 200) return false;
    const body = Buffer.from(cutUtf8(diff, MAX_STREAM_DIFF_BYTES), "utf8");
    let at = 0;
    while (at < body.length) {
      let end = Math.min(body.length, at + STREAM_CHUNK_BYTES);
      while (end < body.length && (body[end] & 0xc0) === 0x80) end--;
      const r = await fetch(url, { method: "POST", headers, body: body.subarray(at, end), signal });
      if (r.status >= 300) return false;
      at = end;
    }
    return true;
  } catch {
    return false;
  }
}
