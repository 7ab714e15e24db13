// The npm registry reachable here lacks some other-platform builds (darwin/windows binaries of
// workerd, deno, msgpackr-extract) at the versions our tools pin, so `npm install` cannot write
// them into package-lock.json and `npm ci` then refuses the lock as out of sync. This adds an
// os/cpu-constrained entry for each such optional dependency; npm skips them on other platforms.
// Run after changing dependencies: node scripts/lock-platforms.mjs
import { readFileSync, writeFileSync } from "node:fs";

const path = new URL("../package-lock.json", import.meta.url);
const lock = JSON.parse(readFileSync(path, "utf8"));
const pkgs = lock.packages;

function platformOf(name) {
  const os = /darwin/.test(name) ? "darwin" : /win32|windows/.test(name) ? "win32" : /linux/.test(name) ? "linux"
    : /freebsd/.test(name) ? "freebsd" : /android/.test(name) ? "android" : null;
  const cpu = /arm64|aarch64/.test(name) ? "arm64" : /x64|-64\b|amd64/.test(name) ? "x64" : /-arm\b|armv7|-arm-/.test(name) ? "arm"
    : /ia32|-x86\b/.test(name) ? "ia32" : null;
  return { os, cpu };
}

let added = 0;
for (const [key, meta] of Object.entries(pkgs)) {
  for (const [dep, version] of Object.entries(meta.optionalDependencies ?? {})) {
    const nested = `${key === "" ? "" : `${key}/`}node_modules/${dep}`;
    const top = `node_modules/${dep}`;
    if (pkgs[nested] || pkgs[top]?.version === version) continue;
    const { os, cpu } = platformOf(dep);
    if (!os || (os === process.platform && (!cpu || cpu === process.arch))) continue; // only stub builds for other platforms
    const entry = { version, dev: meta.dev || undefined, optional: true, os: [os] };
    if (cpu) entry.cpu = [cpu];
    // Where a different version already sits at the top, the dependent gets its own copy.
    pkgs[pkgs[top] ? nested : top] = entry;
    added++;
  }
}
const sorted = Object.fromEntries(Object.entries(pkgs).sort(([a], [b]) => (a === "" ? -1 : b === "" ? 1 : a.localeCompare(b))));
lock.packages = sorted;
writeFileSync(path, JSON.stringify(lock, null, 2) + "\n");
console.log(`lock-platforms: added ${added} other-platform optional entries`);
