import { PI_PACKAGE, PI_VERSION } from "../domain/pi-install";

// Snapshot-first box creation: the snapshot has the harness pre-installed; without it a box is
// built from the fallback image and the same install steps run at create time (slower, same result).

/** Name of the snapshot `npm run snapshot` creates and `create()` prefers. Env: THREADBOX_SNAPSHOT. */
export const DEFAULT_HARNESS_SNAPSHOT = "threadbox-harness-v1";
/** Base image used when the snapshot is missing (and as the snapshot's own base). */
export const DEFAULT_FALLBACK_IMAGE = "node:22-bookworm-slim";
/** pi version the harness pins. */
export const DEFAULT_PI_VERSION = PI_VERSION;

/** Shell steps that install the default harness into a box (run as the box user, HOME-relative prefix). */
export function harnessInstallSteps(piVersion = DEFAULT_PI_VERSION): string[] {
  // `scripts/snapshot.mjs` rewrites this prefix to /usr/local for the snapshot image.
  return [`npm install -g --prefix "$HOME/.local" ${PI_PACKAGE}@${piVersion}`];
}

export interface SnapshotChoice {
  snapshot: string;
  image: string;
  installSteps: string[];
}

/** What `SandboxProvider.create` should be given for a harness box. */
export function harnessBoxSource(env: { THREADBOX_SNAPSHOT?: string; THREADBOX_FALLBACK_IMAGE?: string } = {}): SnapshotChoice {
  return {
    snapshot: env.THREADBOX_SNAPSHOT || DEFAULT_HARNESS_SNAPSHOT,
    image: env.THREADBOX_FALLBACK_IMAGE || DEFAULT_FALLBACK_IMAGE,
    installSteps: harnessInstallSteps(),
  };
}
