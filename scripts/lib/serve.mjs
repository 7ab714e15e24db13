// `npm run serve`: threadbox on plain workerd, one process on one machine. The deploy bundle
// (`wrangler deploy --dry-run --outdir`) is what runs; this module turns wrangler.toml into a
// workerd config (Durable Objects in SQLite files on local disk, their alarms, vars, secrets,
// static assets when wrangler.toml has [assets]) and starts the workerd binary wrangler installs.
import { execFile, spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, extname, isAbsolute, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { ROOT, nodePath, waitForHttp } from "./wrangler-dev.mjs";
import { parseVars } from "./vars-file.mjs";
import { alive, readPidFile, removePidFileOf } from "./pid-file.mjs";

/** The workerd binary of the installed wrangler (the one `wrangler dev` runs). */
export function workerdBinary(cwd = ROOT) {
  const requireFromWrangler = createRequire(join(cwd, "node_modules", "wrangler", "package.json"));
  return requireFromWrangler("workerd").default;
}

/**
 * What the workerd config needs from wrangler.toml, read by wrangler itself in a child process
 * (read-project-config.mjs says why).
 * @returns {Promise<{ name: string, compatibilityDate: string, compatibilityFlags: string[], vars: Record<string, unknown>,
 *   durableObjects: { binding: string, className: string, sql: boolean }[],
 *   assets: { directory: string, binding?: string, htmlHandling: string, notFoundHandling: string, runWorkerFirst: boolean | string[] } | null }>}
 */
export function readProjectConfig(configPath) {
  return new Promise((resolvePromise, reject) => {
    execFile(process.execPath, [join(dirname(fileURLToPath(import.meta.url)), "read-project-config.mjs"), resolve(configPath)], {
      env: { ...process.env, PATH: nodePath(), WRANGLER_SEND_METRICS: "false", NO_COLOR: "1" },
      maxBuffer: 16 * 1024 * 1024,
    }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`reading ${configPath} failed:\n${stderr || err.message}`));
      try {
        resolvePromise(JSON.parse(stdout.trim().split("\n").at(-1)));
      } catch {
        reject(new Error(`reading ${configPath} printed no config:\n${stdout}${stderr}`));
      }
    });
  });
}

const MODULE_TYPES = { ".js": "esModule", ".mjs": "esModule", ".cjs": "commonJsModule", ".wasm": "wasm", ".txt": "text", ".bin": "data", ".json": "json" };

/**
 * Bundles the worker exactly as a deploy would (wrangler runs the [build] command first).
 * @returns {Promise<{ dir: string, modules: {name: string, type: string}[], uploadKiB?: number, gzipKiB?: number }>}
 */
export function buildBundle({ cwd = ROOT, configPath = join(cwd, "wrangler.toml"), outdir }) {
  rmSync(outdir, { recursive: true, force: true });
  return new Promise((resolvePromise, reject) => {
    execFile(process.execPath, [join(cwd, "node_modules", "wrangler", "bin", "wrangler.js"), "deploy", "--dry-run", "--outdir", outdir, "--config", configPath], {
      cwd,
      env: {
        ...process.env, PATH: nodePath(), WRANGLER_SEND_METRICS: "false", CI: "true", NO_COLOR: "1",
        WRANGLER_LOG: atLeastLog(process.env.WRANGLER_LOG),
      },
      maxBuffer: 16 * 1024 * 1024,
    }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`wrangler deploy --dry-run failed:\n${stdout}${stderr}`));
      const size = /Total Upload: ([\d.]+) KiB \/ gzip: ([\d.]+) KiB/.exec(stdout);
      try {
        resolvePromise({ ...scanBundle(outdir), uploadKiB: size ? Number(size[1]) : undefined, gzipKiB: size ? Number(size[2]) : undefined });
      } catch (e) {
        reject(e);
      }
    });
  });
}

/**
 * The bundle size is a line at wrangler's default level ("log", above "info"): a quieter inherited
 * WRANGLER_LOG would hide it; "debug" is kept.
 */
function atLeastLog(level) {
  return ["log", "debug"].includes(String(level ?? "").toLowerCase()) ? level : "log";
}

/** The modules of a built bundle directory, the entry module first (workerd's main module). */
export function scanBundle(dir) {
  if (!existsSync(dir)) throw new Error(`no bundle in ${dir}: build it first (npm run serve without --no-build)`);
  const files = readdirSync(dir, { recursive: true }).map(String)
    .filter((f) => MODULE_TYPES[extname(f)] && !f.endsWith(".map"));
  const entry = files.find((f) => !f.includes("/") && MODULE_TYPES[extname(f)] === "esModule");
  if (!entry) throw new Error(`no entry module in ${dir}: ${files.join(", ")}`);
  const modules = [entry, ...files.filter((f) => f !== entry)].map((name) => ({ name, type: MODULE_TYPES[extname(name)] }));
  return { dir, modules };
}

/** A capnp text literal. */
function str(s) {
  return `"${String(s).replace(/[\\"]/g, (c) => `\\${c}`).replace(/[\x00-\x1f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`)}"`;
}

/** Which addresses the worker may fetch (workerd network classes): THREADBOX_OUTBOUND narrows it. */
export const DEFAULT_OUTBOUND = ["public", "private", "local"];

/** THREADBOX_OUTBOUND as a list of workerd network classes; an unknown one is refused. */
export function parseOutbound(value) {
  if (value === undefined || value.trim() === "") return DEFAULT_OUTBOUND;
  const known = ["public", "private", "local", "network", "unix", "unix-abstract"];
  const list = value.split(",").map((x) => x.trim()).filter(Boolean);
  const bad = list.filter((x) => !known.includes(x));
  if (bad.length) throw new Error(`THREADBOX_OUTBOUND: unknown ${bad.join(", ")} (use ${known.join(", ")})`);
  return list;
}

/**
 * The workerd config. Every var and secret is bound `fromEnvironment`, so the config file holds
 * names only; their values reach workerd in its process environment.
 * @param {{ project: Awaited<ReturnType<typeof readProjectConfig>>, bundle: {dir: string, modules: {name: string, type: string}[]},
 *           configDir: string, stateDir: string, address: string, bindingNames: string[], assetsWorkerPath?: string }} o
 */
export function generateConfig(o) {
  const { project, bundle } = o;
  const rel = (p) => relative(o.configDir, p) || ".";
  const modules = bundle.modules.map((m) => `(name = ${str(m.name)}, ${m.type} = embed ${str(rel(join(bundle.dir, m.name)))})`);
  const bindings = [
    ...o.bindingNames.map((n) => `(name = ${str(n)}, fromEnvironment = ${str(n)})`),
    ...Object.entries(project.vars).filter(([k, v]) => typeof v !== "string" && !o.bindingNames.includes(k))
      .map(([k, v]) => `(name = ${str(k)}, json = ${str(JSON.stringify(v))})`),
    ...project.durableObjects.map((d) => `(name = ${str(d.binding)}, durableObjectNamespace = ${str(d.className)})`),
  ];
  const classes = [...new Map(project.durableObjects.map((d) => [d.className, d])).values()];
  const namespaces = classes.map((d) =>
    // uniqueKey names the directory of the class's SQLite files: keep it stable across versions.
    `(className = ${str(d.className)}, uniqueKey = ${str(`${project.name}-${d.className}`)}${d.sql ? ", enableSql = true" : ""})`);

  const services = [
    `(name = "main", worker = .mainWorker)`,
    `(name = "do-storage", disk = (path = ${str(o.stateDir)}, writable = true))`,
    // The worker's outbound fetches (the sandbox provider, bots' models, webhooks). workerd's own
    // default reaches public addresses only, which would cut a self-hosted threadbox off from a
    // sandbox host or model server on the same machine or network.
    `(name = "internet", network = (allow = [${(o.outbound ?? DEFAULT_OUTBOUND).map(str).join(", ")}], tlsOptions = (trustBrowserCas = true)))`,
  ];
  let entryService = "main";
  const assets = project.assets;
  if (assets) {
    if (assets.binding) bindings.push(`(name = ${str(assets.binding)}, service = "assets")`);
    const settings = JSON.stringify({ htmlHandling: assets.htmlHandling, notFoundHandling: assets.notFoundHandling, runWorkerFirst: assets.runWorkerFirst });
    const assetsWorker = (withWorker) => `(
    modules = [(name = "assets-worker.js", esModule = embed ${str(rel(o.assetsWorkerPath))})],
    compatibilityDate = ${str(project.compatibilityDate)},
    bindings = [
      (name = "FILES", service = "asset-files"),
      (name = "SETTINGS", json = ${str(settings)}),${withWorker ? `\n      (name = "WORKER", service = "main"),` : ""}
    ],
  )`;
    services.push(
      `(name = "asset-files", disk = (path = ${str(assets.directory)}, writable = false))`,
      // What the worker's assets binding fetches: files only.
      `(name = "assets", worker = ${assetsWorker(false)})`,
      // What the socket serves: an asset when one matches, else the worker (Workers Static Assets routing).
      `(name = "router", worker = ${assetsWorker(true)})`,
    );
    entryService = "router";
  }

  return `# Generated by npm run serve (scripts/lib/serve.mjs) from wrangler.toml; do not edit.
using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    ${services.join(",\n    ")},
  ],
  sockets = [
    # Behind a TLS reverse proxy, X-Forwarded-Proto makes request URLs (and Location headers) https.
    (name = "http", address = ${str(o.address)}, http = (forwardedProtoHeader = "X-Forwarded-Proto"), service = ${str(entryService)}),
  ],
);

const mainWorker :Workerd.Worker = (
  modules = [
    ${modules.join(",\n    ")},
  ],
  compatibilityDate = ${str(project.compatibilityDate)},
  compatibilityFlags = [${project.compatibilityFlags.map(str).join(", ")}],
  bindings = [
    ${bindings.join(",\n    ")},
  ],
  durableObjectNamespaces = [
    ${namespaces.join(",\n    ")},
  ],
  durableObjectStorage = (localDisk = "do-storage"),
);
`;
}

/** Fresh random secrets for a new vars file: never the example's development values. */
export function createVarsFile(path, examplePath, urls) {
  const secret = () => randomBytes(32).toString("base64url");
  const text = readFileSync(examplePath, "utf8")
    .replace(/^THREADBOX_ADMIN_SECRET=.*$/m, `THREADBOX_ADMIN_SECRET=${secret()}`)
    .replace(/^THREADBOX_TOKEN_SECRET=.*$/m, `THREADBOX_TOKEN_SECRET=${secret()}`)
    .replace(/^THREADBOX_STREAM_URL=.*$/m, `THREADBOX_STREAM_URL=${urls.streamUrl}`)
    .replace(/^DAYTONA_API_URL=.*$/m, `DAYTONA_API_URL=${urls.daytonaApiUrl}`);
  writeFileSync(path, `# npm run serve reads this file (secrets: keep it out of git); created with fresh random secrets.\n${text}`, { mode: 0o600 });
  chmodSync(path, 0o600);
}

/**
 * Whether git would take `path` into a commit (`git add -A`): inside a work tree and not ignored
 * (tracked counts as not ignored). False outside a work tree, or where git is not installed.
 */
export function gitWouldTrack(path) {
  const r = spawnSync("git", ["check-ignore", "-q", "--", path], { cwd: dirname(path), stdio: "ignore" });
  return r.status === 1;
}

/**
 * The URLs a created vars file starts with: boxes of a local sandbox host (processes on this
 * machine) write to this server on the port it listens on, and the worker reaches that host on
 * the port `npm run sandbox-host` listens on. A wildcard HOST is reached on loopback.
 */
export function localUrls({ host, port, sandboxHostPort }) {
  const reachable = ["0.0.0.0", "::", "[::]"].includes(host) ? "127.0.0.1" : host;
  const hostPart = reachable.includes(":") && !reachable.startsWith("[") ? `[${reachable}]` : reachable;
  return { streamUrl: `http://${hostPart}:${port}/api/stream`, daytonaApiUrl: `http://127.0.0.1:${sandboxHostPort}/api` };
}

/** Where a running server notes its workerd's pid, in the state directory it serves. */
export function statePidFile(stateDir) {
  return join(stateDir, ".workerd.pid");
}

/**
 * Why `stateDir` cannot be served now (a workerd still serves it), or null. Two processes on one state directory
 * would each hold their own copy of an actor over the same SQLite files; and a workerd outlives an
 * `npm run serve` killed alone (kill -9 of its pid), serving on. A pid file left by one that died
 * names a process that is gone, or one that is no workerd (its pid reused): neither counts.
 */
export function stateDirInUse(stateDir) {
  const pid = workerdServing(stateDir);
  return pid === null ? null
    : `the state directory ${stateDir} is in use by workerd (pid ${pid}): another npm run serve, or one left serving when its npm run serve was killed alone; stop it (kill ${pid}) first, or set THREADBOX_STATE_DIR to another directory`;
}

/** The pid of a workerd still serving `stateDir`, or null. */
export function workerdServing(stateDir) {
  const pid = readPidFile(statePidFile(stateDir));
  if (pid === null || pid <= 0 || !alive(pid)) return null;
  let command = "";
  try {
    command = readFileSync(`/proc/${pid}/cmdline`, "utf8");
  } catch {
    // No procfs (macOS): ps says what runs under that pid.
    command = spawnSync("ps", ["-p", String(pid), "-o", "command="], { encoding: "utf8" }).stdout ?? "";
  }
  return command.includes("workerd") ? pid : null;
}

/**
 * `mkdir -p`, one directory at a time. Node's own recursive mkdir never returns for a path it
 * cannot make under /proc (mkdir answers ENOENT there although the parent exists, and Node walks
 * up and down again for ever): here the first directory that cannot be made throws.
 */
export function makeDir(path) {
  const missing = [];
  for (let p = resolve(path); !existsSync(p); p = dirname(p)) {
    missing.unshift(p);
    if (dirname(p) === p) break;
  }
  for (const dir of missing) {
    try {
      mkdirSync(dir);
    } catch (err) {
      if (err?.code !== "EEXIST" || !statSync(dir).isDirectory()) throw err;
    }
  }
  if (!statSync(path).isDirectory()) throw Object.assign(new Error(`ENOTDIR: not a directory, ${path}`), { code: "ENOTDIR" });
}

/**
 * Everything the worker is given: wrangler.toml [vars], overridden and extended by the vars file
 * (the same rule `wrangler dev` applies to .dev.vars). Strings only; JSON vars stay in the config.
 */
export function bindingValues(project, varsFileText) {
  const values = {};
  for (const [k, v] of Object.entries(project.vars)) if (typeof v === "string") values[k] = v;
  return { ...values, ...parseVars(varsFileText) };
}

/**
 * Builds (unless `bundle` is given), writes the config and starts workerd.
 * @param {{ cwd?: string, configPath?: string, port: number, host?: string, stateDir: string, buildDir: string, varsFileText: string,
 *           bundle?: Awaited<ReturnType<typeof buildBundle>>, stdio?: "inherit" | "pipe", workerdArgs?: string[] }} o
 * `configPath` is the wrangler config to run (default: the project's wrangler.toml).
 * `workerdArgs` go to `workerd serve` after the config (e.g. `--inspector-addr=127.0.0.1:9229` to profile).
 */
export async function startServe(o) {
  const cwd = o.cwd ?? ROOT;
  const configPath = o.configPath ?? join(cwd, "wrangler.toml");
  const project = await readProjectConfig(configPath);
  makeDir(o.buildDir);
  // wrangler's [build] command may be what creates the assets directory, so check it afterwards.
  const bundle = o.bundle ?? (await buildBundle({ cwd, configPath, outdir: join(o.buildDir, "bundle") }));
  if (project.assets && !existsSync(project.assets.directory)) {
    throw new Error(`the [assets] directory of wrangler.toml, ${project.assets.directory}, does not exist: build the web UI first`);
  }
  const stateDir = isAbsolute(o.stateDir) ? o.stateDir : resolve(cwd, o.stateDir);
  makeDir(stateDir);
  const values = bindingValues(project, o.varsFileText);
  let assetsWorkerPath;
  if (project.assets) {
    assetsWorkerPath = join(o.buildDir, "assets-worker.js");
    copyFileSync(join(dirname(fileURLToPath(import.meta.url)), "assets-worker.js"), assetsWorkerPath);
  }
  const host = o.host ?? "127.0.0.1";
  const config = generateConfig({
    project, bundle, configDir: o.buildDir, stateDir, assetsWorkerPath,
    address: `${host.includes(":") ? `[${host}]` : host}:${o.port}`,
    bindingNames: Object.keys(values),
    outbound: o.outbound,
  });
  const configFile = join(o.buildDir, "workerd.capnp");
  writeFileSync(configFile, config);

  const pidFile = statePidFile(stateDir);
  const inUse = stateDirInUse(stateDir);
  if (inUse) throw new Error(inUse);
  const child = spawn(workerdBinary(cwd), ["serve", configFile, ...(o.workerdArgs ?? [])], {
    cwd: o.buildDir,
    env: { ...process.env, ...values },
    stdio: o.stdio === "inherit" ? "inherit" : ["ignore", "pipe", "pipe"],
  });
  if (child.pid) writeFileSync(pidFile, `${child.pid}\n`);
  let output = "";
  child.stdout?.on("data", (d) => { output = (output + d).slice(-20_000); });
  child.stderr?.on("data", (d) => { output = (output + d).slice(-20_000); });
  const exited = new Promise((r) => child.on("exit", (code, signal) => r(code ?? signal)));
  const url = `http://${host.includes(":") ? `[${host}]` : host}:${o.port}`;
  await Promise.race([
    waitForHttp(`${url}/health`, 60_000),
    exited.then((code) => { throw new Error(`workerd exited (${code}) before serving:\n${output}`); }),
  ]).catch((err) => { child.kill("SIGKILL"); throw err; });
  return {
    url,
    pid: child.pid,
    child,
    exited,
    bundle,
    configFile,
    stateDir,
    output: () => output,
    async stop(signal = "SIGTERM") {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill(signal);
      const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(timer);
      removePidFileOf(pidFile, child.pid);
    },
  };
}
