import { PI_PACKAGE, PI_PREFIX, PI_VERSION, npmInstallCommand } from "../domain/pi-install";

// Snapshot-first box creation: the snapshot has the harness pre-installed; without it a box is
// built from the fallback image and the same install steps run at create time (slower, same result).

/** Name of the snapshot `npm run snapshot` creates and `create()` prefers. Env: THREADBOX_SNAPSHOT. */
export const DEFAULT_HARNESS_SNAPSHOT = "threadbox-harness-v1";
/** Base image used when the snapshot is missing (and as the snapshot's own base). */
export const DEFAULT_FALLBACK_IMAGE = "node:22-bookworm-slim";
/** pi version the harness pins. */
export const DEFAULT_PI_VERSION = PI_VERSION;

/**
 * Shell steps that install the default harness into a box: by default as the box user into the
 * prefix the launch checks first (so it finds pi there and installs nothing); `npm run snapshot`
 * passes the system prefix for its image build.
 */
export function harnessInstallSteps(piVersion = DEFAULT_PI_VERSION, prefix = PI_PREFIX): string[] {
  return [npmInstallCommand(`${PI_PACKAGE}@${piVersion}`, prefix)];
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
