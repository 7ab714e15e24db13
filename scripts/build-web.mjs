// Build the web UI (web/) into web/dist, which the worker serves as static assets.
//
// wrangler runs this through `npm run build` (its [build] command) before every `wrangler dev`
// and deploy, and several test processes may start wrangler at once. So the build is skipped
// when its inputs have not changed since the last one, and a new build is written beside
// web/dist and swapped in by rename: a concurrent wrangler never serves half a build.
import { build } from "vite";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(fileURLToPath(new URL(".", import.meta.url)), "..");
const web = join(root, "web");
const dist = join(web, "dist");
const stampPath = join(web, ".build-hash");

function inputs(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (path === dist || name === "node_modules" || name.startsWith(".")) return [];
    return statSync(path).isDirectory() ? inputs(path) : [path];
  });
}

/** Files outside web/ that its sources import by a relative path (pure modules shared with the worker). */
function sharedSources(files) {
  const out = new Set();
  for (const file of files) {
    if (!/\.(ts|tsx)$/.test(file)) continue;
    for (const [, spec] of readFileSync(file, "utf8").matchAll(/from\s+"(\.{1,2}\/[^"]+)"/g)) {
      const path = join(dirname(file), spec);
      if (relative(web, path).startsWith("..")) out.add(existsSync(`${path}.ts`) ? `${path}.ts` : path);
    }
  }
  return [...out];
}

const webFiles = inputs(web);
const hash = createHash("sha256");
for (const file of [...webFiles, ...sharedSources(webFiles), join(root, "package-lock.json")].sort()) {
  hash.update(relative(root, file)).update("\0").update(readFileSync(file)).update("\0");
}
const digest = hash.digest("hex");
if (existsSync(join(dist, "index.html")) && existsSync(stampPath) && readFileSync(stampPath, "utf8") === digest) {
  console.log("web/dist is up to date");
  process.exit(0);
}

const staging = join(web, `.dist-${process.pid}`);
await build({ configFile: join(web, "vite.config.ts"), build: { outDir: staging, emptyOutDir: true } });
const old = join(web, `.dist-old-${process.pid}`);
try {
  renameSync(dist, old);
} catch (err) {
  if (err.code !== "ENOENT") throw err;
}
try {
  renameSync(staging, dist);
} catch (err) {
  // Another build swapped its (identical) output in first.
  if (err.code !== "ENOTEMPTY" && err.code !== "EEXIST") throw err;
}
rmSync(old, { recursive: true, force: true });
rmSync(staging, { recursive: true, force: true });
writeFileSync(stampPath, digest);
console.log("built web/dist");
