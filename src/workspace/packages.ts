import { z } from "zod";
import { shq } from "../domain/shell";

/**
 * `packages: {apt?, npm?, pip?}`: what a box of the environment needs besides the harness.
 * Names are checked against each manager's own grammar (a version pin allowed), which also keeps
 * them free of shell metacharacters: they end up in an install command line.
 */

/** Debian package, optionally `=version`. */
const aptName = z.string().regex(/^[a-z0-9][a-z0-9+.-]{0,99}(=[A-Za-z0-9.+:~-]{1,100})?$/, "an apt package name, optionally =version");
/** npm package, optionally scoped, optionally `@version` (exact or semver range without spaces). */
const npmName = z.string().regex(/^(@[a-z0-9][a-z0-9._-]{0,100}\/)?[a-z0-9][a-z0-9._-]{0,213}(@[A-Za-z0-9.^~<>=*+_-]{1,100})?$/, "an npm package name, optionally @version");
/** PyPI project, optionally with extras and one version specifier. */
const pipName = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}(\[[A-Za-z0-9._,-]{1,100}\])?((==|>=|<=|~=|!=|>|<)[A-Za-z0-9.*+!-]{1,100})?$/, "a pip requirement: name[extras]==version");

export const packagesSchema = z.object({
  apt: z.array(aptName).max(100).optional(),
  npm: z.array(npmName).max(100).optional(),
  pip: z.array(pipName).max(100).optional(),
}).strict();
export type PackagesSpec = z.infer<typeof packagesSchema>;

export type PackageManager = "apt" | "npm" | "pip";

/** A package's bare name (what a manager reports as installed), without version or extras. */
export function bareName(manager: PackageManager, spec: string): string {
  if (manager === "apt") return spec.split("=")[0];
  if (manager === "npm") return spec.replace(/^(@[^/]+\/)?([^@]+).*$/, "$1$2");
  return spec.split(/[[=<>~!]/)[0];
}

/**
 * One shell command per manager that installs only what the box lacks and prints, one a line,
 * `manager:spec` for each package it installed (the launch entry records them). A box built from
 * a snapshot that already has them installs nothing.
 */
export function packageInstallCommands(p: PackagesSpec | undefined): { manager: PackageManager; command: string }[] {
  const out: { manager: PackageManager; command: string }[] = [];
  const each = (manager: PackageManager, specs: string[] | undefined, check: (name: string) => string, install: string) => {
    if (!specs?.length) return;
    const steps = specs.map((s) => `if ! ${check(bareName(manager, s))} >/dev/null 2>&1; then missing="$missing ${s}"; fi`);
    out.push({
      manager,
      command: [
        // `$missing` is split into words unquoted: a range (`pkg@1.*`) or extras (`pkg[x]`) would
        // otherwise be a glob, replaced by any file of the box that it matches.
        `set -f`,
        `missing=""`,
        ...steps,
        `if [ -n "$missing" ]; then ${install} $missing >&2 || exit 1; for m in $missing; do echo "${manager}:$m"; done; fi`,
      ].join("; "),
    });
  };
  const sudo = `$( [ "$(id -u)" = 0 ] || echo sudo )`;
  each("apt", p?.apt, (n) => `dpkg -s ${n}`, `${sudo} apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive ${sudo} apt-get install -y -qq`);
  each("npm", p?.npm, (n) => `npm ls -g --depth=0 ${n}`, `npm install -g --no-audit --no-fund`);
  each("pip", p?.pip, (n) => `python3 -m pip show ${n}`, `python3 -m pip install --user -q`);
  return out;
}

/** Every package the spec names, `manager:spec`, in the order the install commands take them. */
export function packageList(p: PackagesSpec | undefined): string[] {
  return (["apt", "npm", "pip"] as const).flatMap((m) => (p?.[m] ?? []).map((spec) => `${m}:${spec}`));
}

/** What the install commands printed: the packages they installed, `manager:spec`. */
export function parseInstalled(stdout: string): string[] {
  return stdout.split("\n").map((l) => l.trim()).filter((l) => /^(apt|npm|pip):\S+$/.test(l));
}

/**
 * The same packages as image build steps for a snapshot (`npm run snapshot -- --environment`):
 * the build runs as root, so npm installs into /usr/local and pip system-wide.
 */
export function packageBakeSteps(p: PackagesSpec | undefined): string[] {
  const steps: string[] = [];
  // A range (`requests<3`, `pkg@>=1`) would otherwise be a redirection, extras a glob. Plain names
  // stay as they were: the snapshot's name is a digest of these steps.
  const words = (specs: string[]) => specs.map((s) => (/^[A-Za-z0-9@._\/:=+^~-]+$/.test(s) ? s : shq(s))).join(" ");
  if (p?.apt?.length) steps.push(`apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${words(p.apt)} && rm -rf /var/lib/apt/lists/*`);
  if (p?.npm?.length) steps.push(`npm install -g --prefix /usr/local --no-audit --no-fund ${words(p.npm)}`);
  if (p?.pip?.length) steps.push(`python3 -m pip install --no-cache-dir --break-system-packages ${words(p.pip)}`);
  return steps;
}
