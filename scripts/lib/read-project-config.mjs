// Prints what `npm run serve` needs from a wrangler config, as JSON, read by wrangler itself.
// Run as its own process (see readProjectConfig in serve.mjs): wrangler's modules take ~130 MB of
// heap, which the process that starts the server (npm run serve's supervisor, the bench client)
// should not carry, or its garbage collector pauses show up in what it measures.
import { dirname, resolve } from "node:path";

const configPath = process.argv[2];
const wrangler = await import("wrangler");
const c = wrangler.unstable_readConfig({ config: configPath });
const sqlite = wrangler.unstable_getDurableObjectClassNameToUseSQLiteMap(c.migrations);
const durableObjects = (c.durable_objects?.bindings ?? []).map((b) => {
  if (b.script_name) throw new Error(`durable object binding ${b.name}: script_name (another worker) is not supported by npm run serve`);
  return { binding: b.name, className: b.class_name, sql: sqlite.get(b.class_name) === true };
});
const assets = c.assets?.directory
  ? {
    directory: resolve(dirname(configPath), c.assets.directory),
    binding: c.assets.binding,
    htmlHandling: c.assets.html_handling ?? "auto-trailing-slash",
    notFoundHandling: c.assets.not_found_handling ?? "none",
    runWorkerFirst: c.assets.run_worker_first ?? false,
  }
  : null;
// On a line of its own and last: wrangler may have logged something before it.
process.stdout.write("\n" + JSON.stringify({
  name: c.name,
  compatibilityDate: c.compatibility_date,
  compatibilityFlags: c.compatibility_flags ?? [],
  vars: c.vars ?? {},
  durableObjects,
  assets,
}) + "\n");
