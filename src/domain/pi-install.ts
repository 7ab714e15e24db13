/** How pi gets into a box. The version is kept in step with package.json's devDependency. */
export const PI_PACKAGE = "@earendil-works/pi-coding-agent";
export const PI_VERSION = "0.87.1";
/** npm prefix under HOME (the box user is not root). */
export const PI_PREFIX = "$HOME/.threadbox/npm";

/** Where an image build (run as root) installs: on PATH for every user. */
export const SYSTEM_PREFIX = "/usr/local";

/** The one npm install command for a harness package, into `prefix`. */
export function npmInstallCommand(pkg: string, prefix = PI_PREFIX): string {
  return `mkdir -p "${prefix}" && npm install -g --prefix "${prefix}" --no-audit --no-fund ${pkg}`;
}

/** How a harness published on npm gets into a box: a user-level prefix. */
export function npmInstall(pkg: string, check: string): { check: string; command: string; binDir: string } {
  return {
    check: `PATH="${PI_PREFIX}/bin:$PATH" ${check}`,
    command: npmInstallCommand(pkg),
    binDir: `${PI_PREFIX}/bin`,
  };
}

/** The pi install recipe: the check that skips it when the right version is there, and the install. */
export function piInstall(version = PI_VERSION) {
  return npmInstall(`${PI_PACKAGE}@${version}`, `pi --version 2>/dev/null | grep -q '${version}'`);
}
