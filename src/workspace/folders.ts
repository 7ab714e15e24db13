import { z } from "zod";
import { shq } from "../domain/shell";
import { intVar, type Env } from "../env";
import { workspacePathSchema } from "./box-config";

/**
 * Folders: a directory tree copied into the run's working directory before the harness starts,
 * from an archive the house uploaded (`POST /api/environments/:id/folders`) or a plain stream of
 * the house holding one. A `readwrite` folder whose contents the run changed comes back after the
 * run as the folder's next version.
 */

/** A folder's name within its environment; also the `source` that names it. */
export const FOLDER_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;
export const folderNameSchema = z.string().regex(FOLDER_NAME, "a folder name: letters, digits, . _ - (up to 100)");

/** `stream:<name>`: the whole content of a plain stream of the house is the archive. */
const STREAM_SOURCE = /^stream:([A-Za-z0-9][A-Za-z0-9._~:@!$&'()*+,;=/-]{0,255})$/;

/** Sync-back leaves these out (build output, dependencies); copy-in copies the whole archive. */
const excludeSchema = z.string().min(1).max(200).refine((g) => !g.includes("\0") && !g.startsWith("-"), "a glob (no leading -)");

export const folderSpecSchema = z.object({
  source: z.string().min(1).max(300).refine((s) => FOLDER_NAME.test(s) || STREAM_SOURCE.test(s), "an uploaded folder's name, or stream:<plain stream name>"),
  path: workspacePathSchema,
  access: z.enum(["read", "readwrite"]).default("read"),
  exclude: z.array(excludeSchema).max(50).default([]),
}).strict().superRefine((f, ctx) => {
  if (f.access === "readwrite" && STREAM_SOURCE.test(f.source)) {
    ctx.addIssue({ code: "custom", path: ["access"], message: "a stream source is append-only: upload the archive as a folder for readwrite access" });
  }
});
export type FolderSpec = z.infer<typeof folderSpecSchema>;

export const foldersSchema = z.array(folderSpecSchema).max(20).superRefine((list, ctx) => {
  const paths = new Set<string>();
  const rw = new Set<string>();
  for (const f of list) {
    if (paths.has(f.path)) ctx.addIssue({ code: "custom", message: `two folders are copied to ${f.path}` });
    paths.add(f.path);
    // Each folder replaces its path as it is copied in: an inner one is wiped by the outer (listed
    // after it) or packed into the outer's next version at sync-back (listed before it).
    for (const g of list) {
      if (g !== f && f.path.startsWith(`${g.path}/`)) ctx.addIssue({ code: "custom", message: `folder ${f.path} lies inside folder ${g.path}: give folders paths side by side` });
    }
    if (f.access === "readwrite") {
      // Two readwrite copies of one folder would race to be its next version.
      if (rw.has(f.source)) ctx.addIssue({ code: "custom", message: `folder ${f.source} is readwrite twice` });
      rw.add(f.source);
    }
  }
});

/** Where a folder's archive comes from. */
export type FolderSource = { kind: "upload"; name: string } | { kind: "stream"; stream: string };

export function folderSource(source: string): FolderSource {
  const m = STREAM_SOURCE.exec(source);
  return m ? { kind: "stream", stream: m[1] } : { kind: "upload", name: source };
}

export type ArchiveFormat = "tar" | "tar.gz" | "zip";

export const ARCHIVE_CONTENT_TYPES: Record<ArchiveFormat, string> = {
  tar: "application/x-tar",
  "tar.gz": "application/gzip",
  zip: "application/zip",
};

/** The format from the bytes themselves (a client's Content-Type is often just octet-stream). */
export function sniffArchive(bytes: Uint8Array): ArchiveFormat | null {
  if (bytes.length >= 4 && bytes[0] === 0x50 && bytes[1] === 0x4b && (bytes[2] === 0x03 || bytes[2] === 0x05) && (bytes[3] === 0x04 || bytes[3] === 0x06)) return "zip";
  if (bytes.length >= 2 && bytes[0] === 0x1f && bytes[1] === 0x8b) return "tar.gz";
  if (bytes.length >= 262 && String.fromCharCode(...bytes.subarray(257, 262)) === "ustar") return "tar";
  // An empty tar is only its end-of-archive blocks.
  if (bytes.length >= 1024 && bytes.length % 512 === 0 && bytes.subarray(0, 1024).every((b) => b === 0)) return "tar";
  return null;
}

/**
 * Why `bytes`, recognized as `format` by its first bytes, is not an archive that can be unpacked, or
 * null. Checked at upload, so a folder fails there, not in every run: a tar (a gzip's, once
 * unzipped) is walked header by header to its end-of-archive block, every header's checksum
 * checked and no member cut short; a zip must end with its central directory.
 */
export async function archiveProblem(bytes: Uint8Array, format: ArchiveFormat): Promise<string | null> {
  if (format === "zip") {
    // The end-of-central-directory record: 22 bytes plus a comment of at most 65535.
    const from = Math.max(0, bytes.length - 22 - 65_535);
    for (let i = bytes.length - 22; i >= from; i--) {
      if (bytes[i] === 0x50 && bytes[i + 1] === 0x4b && bytes[i + 2] === 0x05 && bytes[i + 3] === 0x06) return null;
    }
    return "the zip archive has no central directory (cut short or not a zip)";
  }
  const walk = new TarWalk();
  if (format === "tar") {
    walk.push(bytes);
    return walk.end("the tar archive");
  }
  const reader = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip")).getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      walk.push(value);
      if (walk.settled) break;
    }
  } catch {
    return "the gzip data is corrupt or cut short";
  } finally {
    await reader.cancel().catch(() => {});
  }
  return walk.end("the tar archive inside the gzip data");
}

/** A tar read as it arrives, header by header (members' data skipped), until its end-of-archive block. */
class TarWalk {
  private readonly header = new Uint8Array(512);
  private headerBytes = 0;
  private skip = 0;
  private members = 0;
  private problem: string | null = null;
  private ended = false;

  /** Decided: its end reached, or found broken. */
  get settled(): boolean {
    return this.ended || this.problem !== null;
  }

  push(chunk: Uint8Array): void {
    let i = 0;
    while (i < chunk.length && !this.settled) {
      if (this.skip > 0) {
        const n = Math.min(this.skip, chunk.length - i);
        this.skip -= n;
        i += n;
        continue;
      }
      const n = Math.min(512 - this.headerBytes, chunk.length - i);
      this.header.set(chunk.subarray(i, i + n), this.headerBytes);
      this.headerBytes += n;
      i += n;
      if (this.headerBytes === 512) {
        this.headerBytes = 0;
        this.onHeader();
      }
    }
  }

  end(what: string): string | null {
    if (this.problem) return `${what}: ${this.problem}`;
    if (this.ended) return null;
    return `${what} is cut short${this.members > 0 ? ` after ${this.members} member(s)` : ""}`;
  }

  private onHeader(): void {
    const h = this.header;
    if (h.every((b) => b === 0)) {
      this.ended = true;
      return;
    }
    if (!tarHeaderChecksumOk(h)) {
      this.problem = this.members === 0 ? "its first header is corrupt" : `header ${this.members + 1} is corrupt`;
      return;
    }
    const size = tarSize(h.subarray(124, 136));
    if (size === null) {
      this.problem = `header ${this.members + 1} has no valid size`;
      return;
    }
    this.members += 1;
    this.skip = Math.ceil(size / 512) * 512;
  }
}

/** A tar header's size field: octal digits, or (past 8 GiB) base-256 with the high bit set. */
function tarSize(f: Uint8Array): number | null {
  if (f[0] & 0x80) {
    let n = f[0] & 0x7f;
    for (let i = 1; i < f.length; i++) n = n * 256 + f[i];
    return n;
  }
  const text = String.fromCharCode(...f).replace(/\0.*$/s, "").trim();
  return /^[0-7]*$/.test(text) ? (text === "" ? 0 : parseInt(text, 8)) : null;
}

/** A tar header's checksum: the sum of its bytes with the checksum field counted as spaces. */
function tarHeaderChecksumOk(h: Uint8Array): boolean {
  const field = String.fromCharCode(...h.subarray(148, 156)).replace(/\0.*$/s, "").trim();
  if (!/^[0-7]+$/.test(field)) return false;
  let sum = 0;
  for (let i = 0; i < 512; i++) sum += i >= 148 && i < 156 ? 0x20 : h[i];
  return sum === parseInt(field, 8);
}

/**
 * Unzips as tar unpacks: file modes kept (an executable stays one) and symlinks made links. Every
 * other member goes where zipfile's own extract puts it (names with `..` or a leading `/` stay
 * inside). Links are made last, only where nothing was unpacked and only in a directory that
 * really is inside `dest`, so no member is ever written through a link.
 */
const UNZIP_PY = [
  "import os, stat, sys, zipfile",
  "z = zipfile.ZipFile(sys.argv[1]); dest = os.path.realpath(sys.argv[2]); links = []",
  "for i in z.infolist():",
  "    m = i.external_attr >> 16",
  "    if stat.S_ISLNK(m): links.append(i); continue",
  "    p = z.extract(i, dest)",
  "    if m & 0o7777 and not i.is_dir(): os.chmod(p, m & 0o7777)",
  "for i in links:",
  "    parts = [x for x in i.filename.split('/') if x not in ('', '.', '..')]",
  "    if not parts: continue",
  "    p = os.path.join(dest, *parts); d = os.path.dirname(p)",
  "    if os.path.lexists(p) or not (os.path.realpath(d) + os.sep).startswith(dest + os.sep): continue",
  "    os.makedirs(d, exist_ok=True); os.symlink(z.read(i).decode(), p)",
].join("\n");

/** Replaces `dest` with the archive's tree. zip goes through Python, which images have more often than unzip. */
export function extractCommand(archive: string, dest: string, format: ArchiveFormat): string {
  const reset = `rm -rf ${shq(dest)} && mkdir -p ${shq(dest)}`;
  if (format === "zip") return `${reset} && python3 -c ${shq(UNZIP_PY)} ${shq(archive)} ${shq(dest)}`;
  return `${reset} && tar -xf ${shq(archive)} -C ${shq(dest)} --no-same-owner`;
}

/**
 * A tar of `dir` that depends only on its contents (names sorted, times, owners and the tar's own
 * metadata fixed), so an untouched folder packs to the same bytes it did before the run.
 */
export function packCommand(dir: string, exclude: string[], out: string, shadow?: string): string {
  const excludes = exclude.map((g) => `--exclude=${shq(g)}`).join(" ");
  const fixed = "--mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu";
  const pack = `tar --sort=name ${fixed} ${excludes} -cf ${shq(out)} -C ${shq(dir)} .`;
  if (!shadow) return pack;
  // The folder's own files at the paths of the environment's files, kept aside at copy-in, go back
  // in under their names: the environment's file there is not the folder's, and neither is its absence.
  return `${pack} && if [ -d ${shq(shadow)} ]; then (cd ${shq(shadow)} && find . -type f -print0 | LC_ALL=C sort -z) | tar ${fixed} -rf ${shq(out)} -C ${shq(shadow)} --null -T -; fi`;
}

/**
 * Keeps aside the folder's own files at `paths` (relative to `dest`, where the environment's files
 * will be written), under `shadow`, for packCommand to put back.
 */
export function shadowCommand(dest: string, paths: string[], shadow: string): string {
  const steps = paths.map((p) => {
    const from = shq(`${dest}/${p}`);
    const to = shq(`${shadow}/${p}`);
    return `if [ -f ${from} ] && [ ! -L ${from} ]; then mkdir -p "$(dirname ${to})" && cp -p ${from} ${to}; fi`;
  });
  return [`rm -rf ${shq(shadow)}`, `mkdir -p ${shq(shadow)}`, ...steps].join(" && ");
}

/** The digest of what `packCommand` makes, printed alone; `keepTar` leaves the tar for a caller to store. */
export function digestCommand(dir: string, exclude: string[], scratch: string, opts: { keepTar?: boolean; shadow?: string } = {}): string {
  const digest = `${packCommand(dir, exclude, scratch, opts.shadow)} && sha256sum ${shq(scratch)} | cut -d' ' -f1`;
  return opts.keepTar ? digest : `${digest} && rm -f ${shq(scratch)}`;
}

export async function sha256Hex(bytes: Uint8Array): Promise<string> {
  const d = await crypto.subtle.digest("SHA-256", bytes);
  return Array.from(new Uint8Array(d), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** What a launch copied in, recorded on its launched entry; sync-back reads it from there. */
export type CopiedFolder = {
  source: string;
  path: string;
  access: "read" | "readwrite";
  exclude: string[];
  /** The uploaded folder's version copied in (none for a stream source). */
  version?: number;
  /** Digest of the folder as copied in (readwrite only): sync-back makes a version only when it changed. */
  digest?: string;
  /** Where the folder's own files at the environment's files' paths were kept aside (HOME-relative). */
  shadow?: string;
};

/** The default cap on an uploaded archive (and on a synced-back one). */
export const DEFAULT_FOLDER_MAX_BYTES = 16 * 1024 * 1024;

export function folderMaxBytes(env: Env): number {
  return intVar(env, "FOLDER_MAX_BYTES", DEFAULT_FOLDER_MAX_BYTES);
}
