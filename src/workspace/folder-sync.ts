import type { Env } from "../env";
import type { Environment } from "../environments";
import type { SandboxProvider } from "../sandbox/provider";
import type { FolderVersion } from "../actors/house/house-actor";
import type { Entry } from "../entries/schema";
import { houseStub, sandboxStub } from "../actors/stubs";
import { providerFor } from "../sandbox/providers";
import { errorMessage, logEvent } from "../domain/log-event";
import { readArchive, storeFolderVersion } from "./folder-store";
import { unwrapRpc } from "../actors/rpc";
import { runDir } from "../domain/box-layout";
import { shq } from "../domain/shell";
import { digestCommand, extractCommand, folderMaxBytes, folderSource, packCommand, sniffArchive, type CopiedFolder } from "./folders";

export type FolderBox = { provider: SandboxProvider; ref: string; home: string };

/**
 * Copies the environment's folders into the working directory `cwd` (replacing what a shared box
 * held there) and returns what went in; readwrite ones carry the digest sync-back compares with.
 */
export async function copyFoldersIn(env: Env, box: FolderBox, houseId: string, environment: Environment, cwd: string, runId: string, maxBytes: number): Promise<CopiedFolder[]> {
  const copied: CopiedFolder[] = [];
  for (const [i, spec] of (environment.folders ?? []).entries()) {
    const source = folderSource(spec.source);
    let stream: string;
    let version: number | undefined;
    if (source.kind === "upload") {
      const v = await unwrapRpc(houseStub(env, houseId).getFolderVersion(environment.id, source.name, null)) as FolderVersion | null;
      if (!v) throw new Error(`folder ${source.name} has no uploaded version (POST /api/environments/${environment.id}/folders?name=${source.name})`);
      stream = v.stream;
      version = v.version;
    } else {
      stream = source.stream;
    }
    let bytes: Uint8Array;
    try {
      ({ bytes } = await readArchive(env, houseId, stream, maxBytes));
    } catch (err) {
      throw new Error(`folder ${spec.source}: ${err instanceof Error ? err.message : String(err)}`);
    }
    const format = sniffArchive(bytes);
    if (!format) throw new Error(`folder ${spec.source} is not a tar, tar.gz or zip archive`);
    const archive = `${runDir(runId)}/folders/${i}.${format}`;
    await box.provider.upload(box.ref, [{ path: archive, content: bytes }]);
    const dest = `${cwd}/${spec.path}`;
    const out = await box.provider.exec(box.ref, `${extractCommand(archive, dest, format)} && rm -f ${shq(archive)}`, { cwd: box.home, timeoutSec: 600 });
    if (out.exitCode !== 0) throw new Error(`unpacking folder ${spec.source} into ${spec.path} failed (exit ${out.exitCode}): ${out.output.trim().slice(-300)}`);
    const entry: CopiedFolder = { source: spec.source, path: dest, access: spec.access, exclude: spec.exclude, ...(version !== undefined ? { version } : {}) };
    if (spec.access === "readwrite") entry.digest = await folderDigest(box, dest, spec.exclude, `${runDir(runId)}/folders/${i}.digest.tar`);
    copied.push(entry);
  }
  return copied;
}

async function folderDigest(box: FolderBox, dir: string, exclude: string[], scratch: string): Promise<string> {
  const out = await box.provider.exec(box.ref, digestCommand(dir, exclude, scratch), { cwd: box.home, timeoutSec: 600 });
  const digest = out.output.trim().split("\n").pop() ?? "";
  if (out.exitCode !== 0 || !/^[0-9a-f]{64}$/.test(digest)) throw new Error(`reading folder ${dir} failed (exit ${out.exitCode}): ${out.output.trim().slice(-300)}`);
  return digest;
}

export type SyncedFolder = { folder: string; path: string; outcome: "unchanged" } | { folder: string; path: string; outcome: "synced"; archive: Uint8Array; baseVersion?: number };

/**
 * After the run: each readwrite folder whose contents changed is packed (without its `exclude`
 * globs) and handed back for storage as the folder's next version.
 */
export async function packChangedFolders(box: FolderBox, folders: CopiedFolder[], runId: string, maxBytes: number): Promise<SyncedFolder[]> {
  const out: SyncedFolder[] = [];
  for (const [i, f] of folders.entries()) {
    if (f.access !== "readwrite") continue;
    const scratch = `${runDir(runId)}/folders/${i}.sync.tar`;
    const digest = await folderDigest(box, f.path, f.exclude, scratch);
    if (digest === f.digest) {
      out.push({ folder: f.source, path: f.path, outcome: "unchanged" });
      continue;
    }
    const packed = await box.provider.exec(box.ref, `mkdir -p ${shq(`${runDir(runId)}/folders`)} && ${packCommand(f.path, f.exclude, scratch)} && wc -c < ${shq(scratch)}`, { cwd: box.home, timeoutSec: 600 });
    if (packed.exitCode !== 0) throw new Error(`packing folder ${f.source} failed (exit ${packed.exitCode}): ${packed.output.trim().slice(-300)}`);
    const size = Number(packed.output.trim().split("\n").pop());
    if (size > maxBytes) throw new Error(`folder ${f.source} packs to ${size} bytes, more than the ${maxBytes} a folder may hold`);
    const archive = await box.provider.download(box.ref, scratch);
    await box.provider.exec(box.ref, `rm -f ${shq(scratch)}`, { cwd: box.home });
    out.push({ folder: f.source, path: f.path, outcome: "synced", archive, ...(f.version !== undefined ? { baseVersion: f.version } : {}) });
  }
  return out;
}

export type FolderSyncTarget = { houseId: string; threadId: string; environmentId: string; boxId: string; runId: string; folders: CopiedFolder[] };

/**
 * The run is over and its box not yet released: readwrite folders the run changed become new
 * versions, each listed on the thread as an `artifact.folder` entry. A failure is listed too
 * (the box may be gone); it is not retried, since the box is released right after.
 */
export async function syncFoldersAfterRun(env: Env, t: FolderSyncTarget, append: (entry: Entry) => void, nowMs: () => number): Promise<void> {
  const entry = (suffix: string, payload: Record<string, unknown>): Entry => ({
    id: `${t.threadId}:artifacts:${t.runId}:${suffix}`, ts: nowMs(), authorId: "threadbox", payload: { type: "artifact.folder", runId: t.runId, ...payload },
  });
  try {
    const environment = (await unwrapRpc(houseStub(env, t.houseId).getEnvironment(t.environmentId))) as Environment | null;
    if (!environment) throw new Error(`environment ${t.environmentId} no longer exists`);
    const view = await unwrapRpc(sandboxStub(env, t.boxId).view(t.houseId));
    const provider = providerFor(env, view.provider);
    const box: FolderBox = { provider, ref: view.providerRef, home: await provider.homeDir(view.providerRef) };
    const results = await packChangedFolders(box, t.folders, t.runId, folderMaxBytes(env));
    for (const [i, r] of results.entries()) {
      if (r.outcome === "unchanged") {
        append(entry(`folder:${i}`, { folder: r.folder, path: r.path, status: "unchanged" }));
        continue;
      }
      const v = await storeFolderVersion(env, t.houseId, t.environmentId, r.folder, r.archive, { createdBy: "threadbox", threadId: t.threadId, runId: t.runId });
      append(entry(`folder:${i}`, {
        folder: r.folder, path: r.path, status: "synced", version: v.version, bytes: v.bytes, sha256: v.sha256,
        ...(r.baseVersion !== undefined ? { baseVersion: r.baseVersion } : {}),
        download: `/api/environments/${t.environmentId}/folders/${r.folder}?version=${v.version}`,
      }));
    }
  } catch (err) {
    logEvent("folder_sync_failed", { threadId: t.threadId, runId: t.runId, error: errorMessage(err) }, "warn");
    append(entry("folders-failed", { status: "failed", folders: t.folders.filter((f) => f.access === "readwrite").map((f) => f.source), error: errorMessage(err).slice(0, 500) }));
  }
}

/** The readwrite folders a run's launch copied in, from its launched entry. */
export function readwriteFolders(launched: Entry | null): CopiedFolder[] {
  const folders = launched?.payload.folders;
  if (!Array.isArray(folders)) return [];
  return (folders as CopiedFolder[]).filter((f) => f.access === "readwrite");
}
