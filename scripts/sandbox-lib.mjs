// Shared by scripts/smoke.mjs and scripts/snapshot.mjs: loads the TypeScript sandbox modules
// by bundling them with esbuild (already a devDependency) into .tmp/, since plain node cannot
// import extension-less TS imports.
import { build } from "esbuild";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { readVarsFile } from "./lib/vars-file.mjs";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

export async function loadSandboxModules() {
  const outfile = path.join(root, ".tmp", "sandbox-scripts.mjs");
  await build({
    stdin: {
      contents: `export * from "./src/sandbox/daytona-provider.ts";\nexport * from "./src/sandbox/provider.ts";\nexport * from "./src/sandbox/snapshot.ts";\nexport * from "./src/workspace/packages.ts";\nexport { SYSTEM_PREFIX } from "./src/domain/pi-install.ts";\n`,
      resolveDir: root,
      loader: "ts",
    },
    bundle: true,
    platform: "node",
    format: "esm",
    packages: "external",
    outfile,
    logLevel: "error",
  });
  return import(pathToFileURL(outfile).href + `?t=${Date.now()}`);
}

/**
 * Refuses an option the script does not take (exit 2, naming the ones it does): a typo such as
 * `--enviroment` would otherwise be dropped and the script go on doing something else.
 * @param {string[]} argv @param {string[]} flags @param {string[]} withValue options followed by a value
 */
export function refuseUnknownOptions(argv, command, flags, withValue = []) {
  for (let i = 0; i < argv.length; i++) {
    if (withValue.includes(argv[i])) { i++; continue; }
    if (flags.includes(argv[i])) continue;
    const takes = [...flags, ...withValue.map((o) => `${o} <value>`)].join(", ");
    console.error(`${command}: unknown argument ${argv[i]} (it takes ${takes})`);
    process.exit(2);
  }
}

/**
 * DAYTONA_* from the environment, else from `.dev.vars` (the file `npm run dev` and wrangler
 * read); `--local` starts an in-process sandbox host instead.
 */
export async function resolveTarget(argv) {
  if (argv.includes("--local")) {
    const { startSandboxHost } = await import("../sandbox-host/server.mjs");
    const apiKey = "local-" + Math.random().toString(36).slice(2);
    const host = await startSandboxHost({ port: 0, apiKey });
    return { apiUrl: host.apiUrl, apiKey, target: "local", close: () => host.close(), label: `in-process local host ${host.apiUrl}` };
  }
  const file = readVarsFile(path.join(root, ".dev.vars"));
  const pick = (name) => process.env[name] || file[name] || undefined;
  const apiUrl = pick("DAYTONA_API_URL");
  const apiKey = pick("DAYTONA_API_KEY");
  if (!apiUrl || !apiKey) {
    console.error("DAYTONA_API_URL and DAYTONA_API_KEY must be set, in the environment or in .dev.vars (or pass --local to use an in-process local host).");
    console.error("For the local host: npm run sandbox-host, then DAYTONA_API_URL=http://127.0.0.1:3986/api DAYTONA_API_KEY=$SANDBOX_HOST_API_KEY");
    process.exit(2);
  }
  const from = process.env.DAYTONA_API_URL ? "environment" : ".dev.vars";
  return { apiUrl, apiKey, target: pick("DAYTONA_TARGET"), close: async () => {}, label: `${apiUrl} (from ${from})` };
}
