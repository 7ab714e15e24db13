// Shared by scripts/smoke.mjs and scripts/snapshot.mjs: loads the TypeScript sandbox modules
// by bundling them with esbuild (already a devDependency) into .tmp/, since plain node cannot
// import extension-less TS imports.
import { build } from "esbuild";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { readVarsFile } from "./lib/vars-file.mjs";
import { runningDevSandboxHost } from "./lib/dev-sandbox-host.mjs";

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

const LOOPBACK = new Set(["127.0.0.1", "localhost", "[::1]"]);

function isLoopbackUrl(url) {
  try {
    return LOOPBACK.has(new URL(url).hostname);
  } catch {
    return false;
  }
}

/**
 * Which provider to check, and where that was read. The shell's DAYTONA_API_URL wins. Else, when
 * .dev.vars names a local host (or none), the host of an npm run dev running in this checkout:
 * that dev's worker uses the host it started, on its SANDBOX_HOST_PORT, never .dev.vars's
 * DAYTONA_*, so .dev.vars's port may be another dev's or nobody's. Else .dev.vars. Pure.
 * @param {{ env: Record<string, string | undefined>, file: Record<string, string>, devHost: { pid: number, apiUrl: string, apiKey: string } | null }} o
 */
export function chooseTarget({ env, file, devHost }) {
  const pick = (name) => env[name] || file[name] || undefined;
  const target = pick("DAYTONA_TARGET");
  if (env.DAYTONA_API_URL) return { apiUrl: env.DAYTONA_API_URL, apiKey: pick("DAYTONA_API_KEY"), target, from: "from environment" };
  const fileUrl = file.DAYTONA_API_URL;
  const local = !fileUrl || isLoopbackUrl(fileUrl);
  if (devHost && local) {
    const differs = fileUrl && fileUrl !== devHost.apiUrl ? `; not .dev.vars's ${fileUrl}` : "";
    return { apiUrl: devHost.apiUrl, apiKey: devHost.apiKey, target, from: `the sandbox host of the running npm run dev, pid ${devHost.pid}${differs}` };
  }
  const none = fileUrl && local ? "; no npm run dev of this checkout is running" : "";
  return { apiUrl: fileUrl, apiKey: pick("DAYTONA_API_KEY"), target, from: `from .dev.vars${none}` };
}

/**
 * DAYTONA_* from the environment, else the running npm run dev's sandbox host or `.dev.vars`
 * (chooseTarget); `--local` starts an in-process sandbox host instead.
 */
export async function resolveTarget(argv) {
  if (argv.includes("--local")) {
    const { startSandboxHost } = await import("../sandbox-host/server.mjs");
    const apiKey = "local-" + Math.random().toString(36).slice(2);
    const host = await startSandboxHost({ port: 0, apiKey });
    return { apiUrl: host.apiUrl, apiKey, target: "local", close: () => host.close(), label: `in-process local host ${host.apiUrl}` };
  }
  const { apiUrl, apiKey, target, from } = chooseTarget({ env: process.env, file: readVarsFile(path.join(root, ".dev.vars")), devHost: runningDevSandboxHost(root) });
  if (!apiUrl || !apiKey) {
    console.error("DAYTONA_API_URL and DAYTONA_API_KEY must be set, in the environment or in .dev.vars (or pass --local to use an in-process local host).");
    console.error("For the local host: npm run sandbox-host, then DAYTONA_API_URL=http://127.0.0.1:3986/api DAYTONA_API_KEY=$SANDBOX_HOST_API_KEY");
    process.exit(2);
  }
  return { apiUrl, apiKey, target, close: async () => {}, label: `${apiUrl} (${from})` };
}
