import type { Env } from "../env";
import { plainStreamRequest } from "../streams/internal-request";
import { plainStreamStub } from "../actors/stubs";
import { ApiError } from "../errors";
import { houseStub } from "../actors/stubs";
import { unwrapRpc } from "../actors/rpc";
import { errorMessage, logEvent } from "../domain/log-event";
import type { FolderVersion } from "../actors/house/house-actor";
import { ARCHIVE_CONTENT_TYPES, archiveProblem, sha256Hex, sniffArchive } from "./folders";

/**
 * Archives live in plain streams of the house: an upload or a synced-back version is written once
 * (in chunks under the append limit) and read back whole. Reading through the stream protocol
 * keeps forks, expiry and deletion meaning what they mean for any other stream.
 */

const CHUNK_BYTES = 512 * 1024;

/** Creates the stream `name` holding exactly `bytes`; it must not exist yet. */
export async function writeArchive(env: Env, houseId: string, name: string, bytes: Uint8Array, contentType: string): Promise<void> {
  const stub = plainStreamStub(env, houseId, name);
  const created = await stub.fetch(plainStreamRequest(houseId, name, "PUT", { contentType, body: bytes.subarray(0, CHUNK_BYTES) }));
  if (created.status !== 201) throw new Error(`storing the archive in stream ${name} failed: ${created.status} ${await created.text()}`);
  for (let at = CHUNK_BYTES; at < bytes.byteLength; at += CHUNK_BYTES) {
    const r = await stub.fetch(plainStreamRequest(houseId, name, "POST", { contentType, body: bytes.subarray(at, at + CHUNK_BYTES) }));
    if (!r.ok) throw new Error(`storing the archive in stream ${name} failed: ${r.status} ${await r.text()}`);
    await r.body?.cancel();
  }
}

/**
 * Deletes the archive stream `name`. One already gone is fine: 404, or 410 for one deleted while a
 * fork still reads through it (the fork keeps what it forked).
 */
export async function deleteArchive(env: Env, houseId: string, name: string): Promise<void> {
  const r = await plainStreamStub(env, houseId, name).fetch(plainStreamRequest(houseId, name, "DELETE"));
  await r.body?.cancel();
  if (!r.ok && r.status !== 404 && r.status !== 410) throw new Error(`deleting the archive stream ${name} failed: ${r.status}`);
}

/** The whole content of plain stream `name`; refuses more than `maxBytes`. */
export async function readArchive(env: Env, houseId: string, name: string, maxBytes: number): Promise<{ bytes: Uint8Array; contentType: string }> {
  const stub = plainStreamStub(env, houseId, name);
  const parts: Uint8Array[] = [];
  let total = 0;
  let offset = "-1";
  let contentType = "application/octet-stream";
  for (let page = 0; page < 100_000; page++) {
    const r = await stub.fetch(plainStreamRequest(houseId, name, "GET", { search: `?offset=${encodeURIComponent(offset)}` }));
    if (r.status === 404) throw new ApiError("not_found", `stream ${name} not found`);
    if (!r.ok) throw new Error(`reading stream ${name} failed: ${r.status} ${await r.text()}`);
    contentType = r.headers.get("content-type") ?? contentType;
    const chunk = new Uint8Array(await r.arrayBuffer());
    total += chunk.byteLength;
    if (total > maxBytes) throw new ApiError("payload_too_large", `stream ${name} holds more than ${maxBytes} bytes`);
    parts.push(chunk);
    const next = r.headers.get("stream-next-offset");
    if (r.headers.get("stream-up-to-date") === "true" || !next || next === offset) break;
    offset = next;
  }
  const bytes = new Uint8Array(total);
  let at = 0;
  for (const p of parts) {
    bytes.set(p, at);
    at += p.byteLength;
  }
  return { bytes, contentType };
}

/** Stores an archive in a new plain stream of the house and records it as the folder's next version. */
export async function storeFolderVersion(
  env: Env, houseId: string, environmentId: string, name: string, bytes: Uint8Array,
  origin: { createdBy: string; threadId?: string; runId?: string },
): Promise<FolderVersion> {
  const format = sniffArchive(bytes);
  if (!format) throw new ApiError("validation_failed", "the body is not a tar, tar.gz or zip archive");
  const problem = await archiveProblem(bytes, format);
  if (problem) throw new ApiError("validation_failed", problem);
  const stream = `folders/${environmentId}/${name}/${crypto.randomUUID()}`;
  const sha256 = await sha256Hex(bytes);
  await writeArchive(env, houseId, stream, bytes, ARCHIVE_CONTENT_TYPES[format]);
  try {
    return await unwrapRpc(houseStub(env, houseId).addFolderVersion(environmentId, name, {
      name, stream, format, bytes: bytes.byteLength, sha256, createdAt: new Date().toISOString(), ...origin,
    }));
  } catch (err) {
    // No version points at the archive (e.g. the environment was deleted meanwhile): nothing may keep it.
    await deleteArchive(env, houseId, stream).catch((cleanup) =>
      logEvent("folder_archive_left_behind", { environmentId, name, stream, error: errorMessage(cleanup) }, "warn"));
    throw err;
  }
}
