/**
 * What an environment wrote into a box (its files, pi skills and extensions, MCP and pi config),
 * recorded in the box, so that a box that outlives a run (a shared box, one a resume reuses) loses
 * what the environment no longer has: a sensitive file taken out of the environment would stay
 * readable there, unredacted, and a removed extension would still be loaded.
 */
import type { Environment } from "../environments";
import type { SandboxProvider } from "../sandbox/provider";
import { BOX_DIR } from "../domain/box-layout";
import { shq } from "../domain/shell";

/** One `key<TAB>path` a line, the path HOME-relative. */
export const MANAGED_FILES = `${BOX_DIR}/environment-files`;

/** `key` names what in the environment the file comes from (`file:<path>`, `skill:<name>`, ...). */
export type ManagedFile = { key: string; path: string };

/** One naming for the launch that records what it writes and for the prune that compares with the environment. */
export const managedKey = {
  file: (path: string) => `file:${path}`,
  skill: (name: string) => `skill:${name}`,
  extension: (name: string) => `extension:${name}`,
  mcp: (harness: "claude-code" | "codex") => `mcp:${harness}`,
  piModels: "pi:models",
  piSettings: "pi:settings",
} as const;

/** The keys of what the environment puts into boxes now. */
export function managedKeys(e: Pick<Environment, "files" | "plugins" | "piModels" | "piSettings">): Set<string> {
  const keys = new Set<string>();
  for (const f of e.files ?? []) keys.add(managedKey.file(f.path));
  for (const s of e.plugins?.skills ?? []) keys.add(managedKey.skill(s.name));
  for (const x of e.plugins?.extensions ?? []) keys.add(managedKey.extension(x.name));
  if (Object.keys(e.plugins?.mcpServers ?? {}).length > 0) {
    keys.add(managedKey.mcp("claude-code"));
    keys.add(managedKey.mcp("codex"));
  }
  if (e.piModels) keys.add(managedKey.piModels);
  if (e.piSettings) keys.add(managedKey.piSettings);
  return keys;
}

/** A file's line in the record, without its newline. */
const recordLine = (f: ManagedFile) => `${f.key}\t${f.path}`;

export function managedFileContent(files: ManagedFile[]): string {
  return files.map((f) => `${recordLine(f)}\n`).join("");
}

/**
 * The directories a managed file brought into the box by its own name, deepest first: an
 * environment file `a/b/c.txt` makes `a/b` and `a` inside the working directory it went to, and a
 * skill has a directory of its own. The working directory itself and the directories the other
 * managed files go to (pi's, codex's) are the launch's or the harness's, never a file's.
 */
export function createdDirs(f: ManagedFile): string[] {
  const colon = f.key.indexOf(":");
  const kind = f.key.slice(0, colon);
  const name = f.key.slice(colon + 1);
  let own: string | null = null;
  if (kind === "file") own = name;
  else if (kind === "skill") {
    const at = f.path.lastIndexOf(`/${name}/`);
    if (at >= 0) own = f.path.slice(at + 1);
  }
  // Only a path that ends in the part the key names, at a segment boundary.
  if (own === null || !f.path.endsWith(own) || (f.path.length > own.length && f.path[f.path.length - own.length - 1] !== "/")) return [];
  const base = f.path.slice(0, f.path.length - own.length);
  const segments = own.split("/").slice(0, -1);
  return segments.map((_, i) => base + segments.slice(0, segments.length - i).join("/"));
}

/** A path the box may name here: HOME-relative, inside HOME (the record is in the box, where a run can write it). */
const safePath = (p: string) => p !== "" && !p.startsWith("/") && !p.split("/").some((s) => s === "" || s === "." || s === "..");

export async function readManagedFiles(provider: SandboxProvider, ref: string, home: string): Promise<ManagedFile[]> {
  const r = await provider.exec(ref, `cat ${shq(MANAGED_FILES)} 2>/dev/null || true`, { cwd: home });
  return r.output.split("\n").flatMap((line) => {
    const tab = line.indexOf("\t");
    if (tab <= 0) return [];
    const f = { key: line.slice(0, tab), path: line.slice(tab + 1) };
    return safePath(f.path) ? [f] : [];
  });
}

/**
 * How long a box without `flock` waits on the record's lock before it counts the lock as left by
 * an update that was killed while holding it (an update takes milliseconds).
 */
export const RECORD_LOCK_STALE_SECONDS = 10;

/**
 * Takes the record's lock for the rest of the command: `flock` where the box has it; else a
 * directory, which only one `mkdir` can create, removed when the command's shell exits.
 */
function recordLock(staleSeconds: number): string {
  const dir = shq(`${MANAGED_FILES}.lock.d`);
  const polls = Math.max(1, Math.round(staleSeconds * 20));
  // A stale lock is moved aside before it is removed, so that of two waiters breaking it at once
  // only one does, and the other does not remove the lock the first then takes.
  // A box where the directory cannot be made at all (a read-only HOME) fails the update instead of waiting for ever.
  const mkdirLock = `n=0; b=0; until mkdir ${dir} 2>/dev/null; do n=$((n+1)); if [ "$n" -gt ${polls} ]; then`
    + ` [ "$b" -lt 3 ] || { echo "cannot take the lock ${dir}" >&2; exit 1; }; n=0; b=$((b+1)); mv ${dir} ${dir}.$$ 2>/dev/null && rm -rf ${dir}.$$; fi;`
    + ` sleep 0.05 2>/dev/null || sleep 1; done; trap "rmdir ${dir} 2>/dev/null" EXIT`;
  return `if command -v flock >/dev/null 2>&1; then exec 9>>${shq(`${MANAGED_FILES}.lock`)} && flock 9; else ${mkdirLock}; fi`;
}

/**
 * Removes `stale` from the box and from the record, and adds `add` to the record, in one command
 * under the record's lock. Launches on a shared box run at once with each other and
 * with an environment's prune: each changes the record only by what it removes and adds, so none
 * drops a line another wrote meanwhile (a file left out of the record would never be removed).
 * The directories the stale files made (createdDirs) go with them, each only once it is empty:
 * whatever else is in one (a user's file, a run's output, another managed file) keeps it.
 * `lockStaleSeconds` is for tests, which cannot wait out the real limit.
 */
export async function updateManagedFiles(
  provider: SandboxProvider, ref: string, home: string, stale: ManagedFile[], add: ManagedFile[] = [],
  { lockStaleSeconds = RECORD_LOCK_STALE_SECONDS }: { lockStaleSeconds?: number } = {},
): Promise<void> {
  if (stale.length === 0 && add.length === 0) return;
  const record = shq(MANAGED_FILES);
  const steps = [`mkdir -p ${shq(BOX_DIR)}`, recordLock(lockStaleSeconds)];
  if (stale.length > 0) steps.push(`rm -f -- ${stale.map((f) => shq(f.path)).join(" ")}`);
  // Deepest first, so that a directory emptied by removing the one inside it goes too.
  const dirs = [...new Set(stale.flatMap(createdDirs))].sort((a, b) => b.split("/").length - a.split("/").length);
  if (dirs.length > 0) steps.push(`{ rmdir -- ${dirs.map(shq).join(" ")} 2>/dev/null || true; }`);
  const kept = stale.length > 0 ? `grep -vxF ${stale.map((f) => `-e ${shq(recordLine(f))}`).join(" ")} ${record}` : `cat ${record}`;
  steps.push(`{ ${kept} 2>/dev/null; printf '%s' ${shq(managedFileContent(add))}; } | sort -u > ${record}.$$`, `mv -f ${record}.$$ ${record}`);
  const r = await provider.exec(ref, steps.join(" && "), { cwd: home });
  if (r.exitCode !== 0) throw new Error(`updating the environment's files in the box failed (exit ${r.exitCode}): ${r.output.trim().slice(-300)}`);
}
