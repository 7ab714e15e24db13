/**
 * How the stream token reaches box code: through a file its reader removes at once, never through
 * an environment variable. A process's exec-time environment stays readable in /proc/<pid>/environ
 * to every process of the same user for as long as the process lives (deleting the variable from
 * `process.env` does not change that block), and the harness's tools — so the model — run as that
 * user. A token in the runner's or pi's environment could be read by any command the model runs
 * and used to post to the thread in the run's name.
 *
 *   launch:  uploads the token to .threadbox/runs/<run>/stream-token-<attempt>, names it in
 *            THREADBOX_STREAM_TOKEN_FILE (HOME-relative)
 *   runner:  takeStreamToken() reads and removes it (and stale siblings of its run)
 *   mirror:  the runner hands it a fresh file (handOverToken()) that the mirror takes the same way
 *
 * Renewed tokens (token-keeper.ts) stay in the memory of the process that renewed them.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { basename, dirname, isAbsolute, join } from "node:path";
import { BOX_ENV, STREAM_TOKEN_FILE_PREFIX } from "../domain/box-layout";

/**
 * Reads the token from the file THREADBOX_STREAM_TOKEN_FILE names, removes the file and the
 * variable (so no child is pointed at it). Undefined when there is none (or it is empty/gone).
 * A file that cannot be removed throws: the token must not stay where the run's commands see it.
 */
export function takeStreamToken(env: Record<string, string | undefined>): string | undefined {
  const given = env[BOX_ENV.streamTokenFile];
  delete env[BOX_ENV.streamTokenFile];
  if (!given) return undefined;
  const path = isAbsolute(given) ? given : join(homedir(), given);
  let token: string | undefined;
  try {
    token = readFileSync(path, "utf8").trim() || undefined;
  } catch {
    token = undefined;
  }
  rmSync(path, { force: true });
  return token;
}

/**
 * Removes the other token files in the directory of a launch's token file: those of launch
 * attempts that uploaded one but never started this run's runner. Only a run's own directory
 * holds them (one runner per run).
 */
export function removeStaleTokenFiles(givenPath: string | undefined): void {
  if (!givenPath || !basename(givenPath).startsWith(STREAM_TOKEN_FILE_PREFIX)) return;
  const dir = dirname(isAbsolute(givenPath) ? givenPath : join(homedir(), givenPath));
  let names: string[] = [];
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const n of names) if (n.startsWith(STREAM_TOKEN_FILE_PREFIX)) rmSync(join(dir, n), { force: true });
}

/**
 * A file holding `token` for a child process to take (the mirror inside pi): mode 0600 in a fresh
 * 0700 directory. `remove()` deletes it if the child did not (it failed before reading it).
 */
export function handOverToken(token: string): { path: string; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), "threadbox-"));
  const path = join(dir, "stream-token");
  writeFileSync(path, token, { mode: 0o600, flag: "wx" });
  let removed = false;
  return {
    path,
    remove() {
      if (removed) return;
      removed = true;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
