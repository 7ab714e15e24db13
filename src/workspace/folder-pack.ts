/**
 * A readwrite folder in a box, before and after a run: its digest, and its changed contents packed
 * for storage. Box commands only (the provider), nothing of the actors.
 */
import type { Environment } from "../environments";
import type { SandboxProvider } from "../sandbox/provider";
import { runDir } from "../domain/box-layout";
import { shq } from "../domain/shell";
import { digestCommand, packGzipCommand, type CopiedFolder } from "./folders";

export type FolderBox = { provider: SandboxProvider; ref: string; home: string };

/** Exclude patterns (tar member names, globs escaped) for the environment's files that land inside `folderPath`. */
export function environmentFilesWithin(environment: Pick<Environment, "files">, folderPath: string): string[] {
  const prefix = `${folderPath.replace(/\/+$/, "")}/`;
  return (environment.files ?? [])
    .filter((f) => f.path.startsWith(prefix) && f.path.length > prefix.length)
    .map((f) => `./${f.path.slice(prefix.length).replace(/[*?[\\]/g, (c) => `\\${c}`)}`);
}

export async function folderDigest(box: FolderBox, dir: string, exclude: string[], scratch: string): Promise<string> {
  const scratchDir = scratch.slice(0, scratch.lastIndexOf("/")) || ".";
  const out = await box.provider.exec(box.ref, `mkdir -p ${shq(scratchDir)} && ${digestCommand(dir, exclude, scratch)}`, { cwd: box.home, timeoutSec: 600 });
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
    const scratch = `${runDir(runId)}/folders/${i}.sync.tar.gz`;
    const digest = await folderDigest(box, f.path, f.exclude, `${runDir(runId)}/folders/${i}.sync-digest.tar`);
    if (digest === f.digest) {
      out.push({ folder: f.source, path: f.path, outcome: "unchanged" });
      continue;
    }
    const packed = await box.provider.exec(box.ref, `mkdir -p ${shq(`${runDir(runId)}/folders`)} && ${packGzipCommand(f.path, f.exclude, scratch)} && wc -c < ${shq(scratch)}`, { cwd: box.home, timeoutSec: 600 });
    if (packed.exitCode !== 0) throw new Error(`packing folder ${f.source} failed (exit ${packed.exitCode}): ${packed.output.trim().slice(-300)}`);
    const size = Number(packed.output.trim().split("\n").pop());
    if (size > maxBytes) throw new Error(`folder ${f.source} packs to ${size} bytes, more than the ${maxBytes} a folder may hold`);
    const archive = await box.provider.download(box.ref, scratch);
    await box.provider.exec(box.ref, `rm -f ${shq(scratch)}`, { cwd: box.home });
    out.push({ folder: f.source, path: f.path, outcome: "synced", archive, ...(f.version !== undefined ? { baseVersion: f.version } : {}) });
  }
  return out;
}

