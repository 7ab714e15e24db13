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

export function managedFileContent(files: ManagedFile[]): string {
  return files.map((f) => `${f.key}\t${f.path}\n`).join("");
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

/** Removes `stale` from the box; `keep` (when given) becomes the record. */
export async function removeManagedFiles(provider: SandboxProvider, ref: string, home: string, stale: ManagedFile[], keep?: ManagedFile[]): Promise<void> {
  const steps: string[] = [];
  if (stale.length > 0) steps.push(`rm -f -- ${stale.map((f) => shq(f.path)).join(" ")}`);
  if (keep) steps.push(`printf '%s' ${shq(managedFileContent(keep))} > ${shq(MANAGED_FILES)}`);
  if (steps.length === 0) return;
  const r = await provider.exec(ref, steps.join(" && "), { cwd: home });
  if (r.exitCode !== 0) throw new Error(`removing what the environment no longer has failed (exit ${r.exitCode}): ${r.output.trim().slice(-300)}`);
}
