// npm run serve [-- --no-build]: threadbox on this machine on plain workerd, no wrangler at run
// time. Builds the deploy bundle, writes .serve/build/workerd.capnp and runs workerd in the
// foreground. PORT (default 8787), HOST (default 127.0.0.1), THREADBOX_STATE_DIR (default
// .serve/state), THREADBOX_VARS_FILE (default .serve.vars; created with fresh secrets if missing),
// THREADBOX_OUTBOUND (what the worker may fetch; default public,private,local).
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { ROOT } from "./lib/wrangler-dev.mjs";
import { busyPortsMessage, envPort } from "./lib/ports.mjs";
import { stopWhenNpmRunEnds } from "./lib/npm-run-watch.mjs";
import { parseVars } from "./lib/vars-file.mjs";
import { createVarsFile, gitWouldTrack, localUrls, makeDir, parseOutbound, scanBundle, startServe, stateDirInUse } from "./lib/serve.mjs";

const port = envPort("PORT", 8787, "npm run serve");
const host = process.env.HOST?.trim() || "127.0.0.1";
// Only for a vars file created here: where `npm run sandbox-host` listens.
const sandboxHostPort = envPort("SANDBOX_HOST_PORT", 3986, "npm run serve");
const stateDir = resolve(ROOT, process.env.THREADBOX_STATE_DIR ?? join(".serve", "state"));
const varsFile = resolve(ROOT, process.env.THREADBOX_VARS_FILE ?? ".serve.vars");
const buildDir = join(ROOT, ".serve", "build");
const noBuild = process.argv.includes("--no-build");

function fail(message) {
  console.error(`npm run serve: ${message}`);
  process.exit(1);
}

// A typo (`--nobuild`) would otherwise be dropped, and the bundle built after all.
const unknown = process.argv.slice(2).find((a) => a !== "--no-build");
if (unknown !== undefined) fail(`unknown argument ${unknown} (it takes --no-build)`);

// Before the port: a workerd left serving this state (its npm run serve killed alone) holds the
// port too, and "port in use" alone would not say what to stop.
const inUse = stateDirInUse(stateDir);
if (inUse) fail(inUse);

const busy = await busyPortsMessage([{ port, envVar: "PORT", what: "threadbox" }], "npm run serve", host, "HOST");
if (busy) {
  console.error(busy);
  process.exit(1);
}

// A vars file that cannot be made or read (its directory missing, a directory in its place) is
// the user's setting to fix: said in one line, not as a stack trace.
const varsProblem = (err) => `${err?.code ?? err?.message ?? err}: THREADBOX_VARS_FILE must name a file in a directory that exists; unset, it is .serve.vars`;
if (!existsSync(varsFile)) {
  const urls = localUrls({ host, port, sandboxHostPort });
  try {
    createVarsFile(varsFile, join(ROOT, ".dev.vars.example"), urls);
  } catch (err) {
    fail(`cannot create the vars file ${varsFile} (${varsProblem(err)})`);
  }
  console.log(`created ${varsFile} with fresh random secrets; boxes write to ${urls.streamUrl}, and DAYTONA_API_URL is ${urls.daytonaApiUrl} (npm run sandbox-host): set DAYTONA_* and THREADBOX_STREAM_URL there for other boxes`);
}
let varsFileText;
try {
  varsFileText = readFileSync(varsFile, "utf8");
} catch (err) {
  fail(`cannot read the vars file ${varsFile} (${varsProblem(err)})`);
}
// .serve.vars and .serve/ are gitignored; a file or directory named elsewhere in the clone is not,
// and one `git add -A` would commit the secrets or every house's data.
if (gitWouldTrack(varsFile)) console.warn(`warning: git does not ignore the vars file ${varsFile}, which holds the secrets: add it to .gitignore, or set THREADBOX_VARS_FILE to a file outside the repository`);
const vars = parseVars(varsFileText);
if (!vars.THREADBOX_ADMIN_SECRET || vars.THREADBOX_ADMIN_SECRET.length < 16) fail(`THREADBOX_ADMIN_SECRET in ${varsFile} must be at least 16 characters`);
if (!vars.THREADBOX_TOKEN_SECRET || vars.THREADBOX_TOKEN_SECRET.length < 16) fail(`THREADBOX_TOKEN_SECRET in ${varsFile} must be at least 16 characters`);
const example = parseVars(readFileSync(join(ROOT, ".dev.vars.example"), "utf8"));
for (const name of ["THREADBOX_ADMIN_SECRET", "THREADBOX_TOKEN_SECRET"]) {
  if (vars[name] === example[name]) console.warn(`warning: ${name} in ${varsFile} is the public development value; set a secret one`);
}

// Before the build, which takes a while: a state directory that cannot be made is the user's setting.
try {
  makeDir(stateDir);
} catch (err) {
  fail(`cannot create the state directory ${stateDir} (${err?.code ?? err?.message ?? err}): THREADBOX_STATE_DIR must name a directory that exists or can be created; unset, it is .serve/state`);
}

if (gitWouldTrack(stateDir)) console.warn(`warning: git does not ignore the state directory ${stateDir}, which holds every thread's data: add it to .gitignore, or set THREADBOX_STATE_DIR to a directory outside the repository`);

let outbound;
try {
  outbound = parseOutbound(process.env.THREADBOX_OUTBOUND);
} catch (err) {
  fail(err.message);
}

let server;
try {
  server = await startServe({
    port, host, stateDir, buildDir, varsFileText, stdio: "inherit", outbound,
    bundle: noBuild ? scanBundle(join(buildDir, "bundle")) : undefined,
  });
} catch (err) {
  fail(err.message);
}

const size = server.bundle.uploadKiB ? `, bundle ${server.bundle.uploadKiB} KiB (gzip ${server.bundle.gzipKiB} KiB)` : "";
console.log(`
threadbox is serving on plain workerd (pid ${server.pid}${size})
  url         ${server.url}
  state       ${server.stateDir}
  vars        ${varsFile}
  config      ${server.configFile}

Mint a house token with THREADBOX_ADMIN_SECRET from ${varsFile}:
  ${adminSecretLine(varsFile, varsFileText, vars.THREADBOX_ADMIN_SECRET)}
  curl -s -X POST ${server.url}/api/admin/tokens -H "authorization: Bearer $THREADBOX_ADMIN_SECRET" \\
       -H 'content-type: application/json' -d '{"houseId":"my-house","subject":"me","role":"owner"}'
then sign in with the token it answers: open ${server.url}/#token=<token>, or npx threadbox login '${server.url}/#token=<token>'
`);

/**
 * The shell line that sets THREADBOX_ADMIN_SECRET, so the printed commands run as they are (no
 * shell has the variable yet), reading the file rather than echoing the secret to the terminal.
 * A value the file quotes or writes with `export` is not one sed can take verbatim: then only where it is.
 */
function adminSecretLine(file, text, value) {
  const lines = text.split(/\r?\n/).filter((l) => /^\s*(?:export\s+)?THREADBOX_ADMIN_SECRET\s*=/.test(l));
  if (lines.at(-1) !== `THREADBOX_ADMIN_SECRET=${value}` || text.includes("\r")) return `export THREADBOX_ADMIN_SECRET=…   # its value in ${file}`;
  const quoted = `'${file.replace(/'/g, `'\\''`)}'`;
  return `export THREADBOX_ADMIN_SECRET="$(sed -n 's/^THREADBOX_ADMIN_SECRET=//p' ${quoted} | tail -n 1)"`;
}

let stopping = false;
async function stop() {
  if (stopping) return;
  stopping = true;
  await server.stop();
  process.exit(0);
}
process.on("SIGINT", stop);
process.on("SIGTERM", stop);
stopWhenNpmRunEnds("serve");
server.exited.then((code) => {
  if (stopping) return;
  console.error(`workerd exited (${code})`);
  process.exit(typeof code === "number" && code !== 0 ? code : 1);
});
