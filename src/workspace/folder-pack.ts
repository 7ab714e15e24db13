/**
 * A readwrite folder in a box, before and after a run: its digest, and its changed contents packed
 * for storage. Box commands only (the provider), nothing of the actors.
 */
import type { Environment } from "../environments";
import type { SandboxProvider } from "../sandbox/provider";
import { runDir } from "../domain/box-layout";
import { shq } from "../domain/shell";
import { digestCommand, type CopiedFolder } from "./folders";

/** `redact`: what the box's words in a failure must not show (the environment's secrets, sensitive files). */
export type FolderBox = { provider: SandboxProvider; ref: string; home: string; redact?: (text: string) => string };

/** The last `max` characters of a command's output, redacted before the cut. */
function lastWordsOf(box: FolderBox, output: string, max: number): string {
  return (box.redact ?? ((t: string) => t))(output.trim()).slice(-max);
}

/** Exclude patterns (tar member names, globs escaped) for the environment's files that land inside `folderPath`. */
export function environmentFilesWithin(environment: Pick<Environment, "files">, folderPath: string): string[] {
  const prefix = `${folderPath.replace(/\/+$/, "")}/`;
  return (environment.files ?? [])
    .filter((f) => f.path.startsWith(prefix) && f.path.length > prefix.length)
    .map((f) => `./${f.path.slice(prefix.length).replace(/[*?[\\]/g, (c) => `\\${c}`)}`);
}

/** The paths (relative to the folder) of the environment's files that land inside `folderPath`. */
export function environmentFilePathsWithin(environment: Pick<Environment, "files">, folderPath: string): string[] {
  const prefix = `${folderPath.replace(/\/+$/, "")}/`;
  return (environment.files ?? []).filter((f) => f.path.startsWith(prefix) && f.path.length > prefix.length).map((f) => f.path.slice(prefix.length));
}

export async function folderDigest(box: FolderBox, dir: string, exclude: string[], scratch: string, shadow?: string): Promise<string> {
  return runForDigest(box, dir, `mkdir -p ${shq(dirOf(scratch))} && ${digestCommand(dir, exclude, scratch, { shadow })}`);
}

/** Runs a command that prints the folder's digest last. */
async function runForDigest(box: FolderBox, dir: string, command: string): Promise<string> {
  const out = await box.provider.exec(box.ref, command, { cwd: box.home, timeoutSec: 600 });
  const digest = out.output.trim().split("\n").pop() ?? "";
  if (out.exitCode !== 0 || !/^[0-9a-f]{64}$/.test(digest)) throw new Error(`reading folder ${dir} failed (exit ${out.exitCode}): ${lastWordsOf(box, out.output, 300)}`);
  return digest;
}

const dirOf = (path: string) => path.slice(0, path.lastIndexOf("/")) || ".";

export type SyncedFolder = { folder: string; path: string; outcome: "unchanged" } | { folder: string; path: string; outcome: "synced"; archive: Uint8Array; digest: string; baseVersion?: number };

/**
 * After the run: each readwrite folder whose contents changed is packed (without its `exclude`
 * globs) and handed back for storage as the folder's next version.
 */
export async function packChangedFolders(box: FolderBox, folders: CopiedFolder[], runId: string, maxBytes: number): Promise<SyncedFolder[]> {
  const out: SyncedFolder[] = [];
  for (const [i, f] of folders.entries()) {
    if (f.access !== "readwrite") continue;
    // One tar of the folder: its digest says whether it changed, and gzipped it is what is stored.
    const tar = `${runDir(runId)}/folders/${i}.sync.tar`;
    const scratch = `${tar}.gz`;
    const digest = await runForDigest(box, f.path, `mkdir -p ${shq(dirOf(tar))} && ${digestCommand(f.path, f.exclude, tar, { keepTar: true, shadow: f.shadow })}`);
    if (digest === f.digest) {
      await box.provider.exec(box.ref, `rm -f ${shq(tar)}`, { cwd: box.home });
      out.push({ folder: f.source, path: f.path, outcome: "unchanged" });
      continue;
    }
    // Gzipped without a name or time (`-n`); what counts against the limit is what is stored, as
    // for an upload (many small files take 512-byte tar blocks each, which gzip takes back).
    const packed = await box.provider.exec(box.ref, `gzip -n -c ${shq(tar)} > ${shq(scratch)} && rm -f ${shq(tar)} && wc -c < ${shq(scratch)}`, { cwd: box.home, timeoutSec: 600 });
    if (packed.exitCode !== 0) throw new Error(`packing folder ${f.source} failed (exit ${packed.exitCode}): ${lastWordsOf(box, packed.output, 300)}`);
    const size = Number(packed.output.trim().split("\n").pop());
    if (size > maxBytes) throw new Error(`folder ${f.source} packs to ${size} bytes, more than the ${maxBytes} a folder may hold`);
    const archive = await box.provider.download(box.ref, scratch);
    await box.provider.exec(box.ref, `rm -f ${shq(scratch)}`, { cwd: box.home });
    out.push({ folder: f.source, path: f.path, outcome: "synced", archive, digest, ...(f.version !== undefined ? { baseVersion: f.version } : {}) });
  }
  return out;
}

