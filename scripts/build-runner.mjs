// Bundle the box-side code into single files that get uploaded to a box's HOME:
//   dist/runner/runner.mjs  (node runner.mjs ...)
//   dist/runner/mirror.mjs  (pi --extension mirror.mjs)
import { build } from "esbuild";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const outdir = join(root, "dist", "runner");

const common = {
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  sourcemap: false,
  logLevel: "warning",
  // pi provides its own types only; nothing from it is bundled (type imports are erased)
  external: ["@earendil-works/pi-coding-agent"],
};

await Promise.all([
  build({ ...common, entryPoints: [join(root, "src/runner/runner.ts")], outfile: join(outdir, "runner.mjs") }),
  build({ ...common, entryPoints: [join(root, "src/runner/mirror.ts")], outfile: join(outdir, "mirror.mjs") }),
]);
console.log(`built ${join(outdir, "runner.mjs")} and ${join(outdir, "mirror.mjs")}`);
