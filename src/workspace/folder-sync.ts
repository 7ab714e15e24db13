import type { Env } from "../env";
import type { Environment } from "../environments";
import type { FolderVersion } from "../actors/house/house-actor";
import type { Entry } from "../entries/schema";
import { houseStub, sandboxStub } from "../actors/stubs";
import { providerFor } from "../sandbox/providers";
import { errorMessage, logEvent } from "../domain/log-event";
import { readArchive, storeFolderVersion } from "./folder-store";
import { unwrapRpc } from "../actors/rpc";
import { runDir } from "../domain/box-layout";
import { shq } from "../domain/shell";
import { extractCommand, folderMaxBytes, folderSource, shadowCommand, sniffArchive, type CopiedFolder } from "./folders";
import { environmentFilePathsWithin, environmentFilesWithin, folderDigest, packChangedFolders, type FolderBox } from "./folder-pack";
import { boxSecretForms, lastWords, redactorFor } from "./output-redaction";

export { packChangedFolders, type FolderBox, type SyncedFolder } from "./folder-pack";


/**
 * Copies the environment's folders into the working directory `cwd` (replacing what a shared box
 * held there) and returns what went in; readwrite ones carry the digest sync-back compares with.
 */
export async function copyFoldersIn(env: Env, given: FolderBox, houseId: string, environment: Environment, cwd: string, runId: string, maxBytes: number): Promise<CopiedFolder[]> {
  const box: FolderBox = { ...given, redact: redactorFor(boxSecretForms(environment)) };
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
    if (out.exitCode !== 0) throw new Error(`unpacking folder ${spec.source} into ${spec.path} failed (exit ${out.exitCode}): ${lastWords(out.output, 300, environment)}`);
    // The environment's files are written after the folders: one inside a readwrite folder is the
    // environment's (a sensitive one included), not the folder's, and must not go back into it.
    const exclude = [...spec.exclude, ...environmentFilesWithin(environment, spec.path)];
    const entry: CopiedFolder = { source: spec.source, path: dest, access: spec.access, exclude, ...(version !== undefined ? { version } : {}) };
    if (spec.access === "readwrite") {
      // What the folder itself holds where the environment's files will go stays part of it.
      const shadowed = environmentFilePathsWithin(environment, spec.path);
      if (shadowed.length > 0) {
        entry.shadow = `${runDir(runId)}/folders/${i}.shadow`;
        const kept = await box.provider.exec(box.ref, shadowCommand(dest, shadowed, entry.shadow), { cwd: box.home, timeoutSec: 600 });
        if (kept.exitCode !== 0) throw new Error(`keeping folder ${spec.source}'s own files aside failed (exit ${kept.exitCode}): ${lastWords(kept.output, 300, environment)}`);
      }
      entry.digest = await folderDigest(box, dest, exclude, `${runDir(runId)}/folders/${i}.digest.tar`, entry.shadow);
    }
    copied.push(entry);
  }
  return copied;
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
  // The box's words in a failure may quote what it holds of the environment's secrets and sensitive files.
  let redact = (text: string) => text;
  try {
    const environment = (await unwrapRpc(houseStub(env, t.houseId).getEnvironment(t.environmentId))) as Environment | null;
    if (!environment) throw new Error(`environment ${t.environmentId} no longer exists`);
    redact = redactorFor(boxSecretForms(environment));
    const view = await unwrapRpc(sandboxStub(env, t.boxId).view(t.houseId));
    const provider = providerFor(env, view.provider);
    const box: FolderBox = { provider, ref: view.providerRef, home: await provider.homeDir(view.providerRef), redact };
    const results = await packChangedFolders(box, t.folders, t.runId, folderMaxBytes(env));
    for (const [i, r] of results.entries()) {
      if (r.outcome === "unchanged") {
        append(entry(`folder:${i}`, { folder: r.folder, path: r.path, status: "unchanged" }));
        continue;
      }
      const v = await storeFolderVersion(env, t.houseId, t.environmentId, r.folder, r.archive, { createdBy: "threadbox", threadId: t.threadId, runId: t.runId });
      append(entry(`folder:${i}`, {
        // `digest`: the folder as this version holds it, for a resume on this box to compare with.
        folder: r.folder, path: r.path, status: "synced", version: v.version, bytes: v.bytes, sha256: v.sha256, digest: r.digest,
        ...(r.baseVersion !== undefined ? { baseVersion: r.baseVersion } : {}),
        download: `/api/environments/${t.environmentId}/folders/${r.folder}?version=${v.version}`,
      }));
    }
  } catch (err) {
    const message = redact(errorMessage(err));
    logEvent("folder_sync_failed", { threadId: t.threadId, runId: t.runId, error: message }, "warn");
    append(entry("folders-failed", { status: "failed", folders: t.folders.filter((f) => f.access === "readwrite").map((f) => f.source), error: message.slice(0, 500) }));
  }
}

/** The readwrite folders a run's launch copied in, from its launched entry. */
export function readwriteFolders(launched: Entry | null): CopiedFolder[] {
  const folders = launched?.payload.folders;
  if (!Array.isArray(folders)) return [];
  return (folders as CopiedFolder[]).filter((f) => f.access === "readwrite");
}
