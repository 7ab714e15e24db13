// npm run dev: the whole system on this machine. Starts the local Daytona-compatible sandbox
// host and the worker under `wrangler dev` (state persisted in .wrangler/state), then prints
// the URL and a dev house token. Also starts the offline demo model and seeds the dev house
// with an environment and a bot that use it (scripts/lib/seed-dev.mjs).
import { spawn } from "node:child_process";
import { chmodSync, copyFileSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { OFFLINE_WRANGLER_ENV, ROOT, localTracingEnv, nodePath, waitForHttp } from "./lib/wrangler-dev.mjs";
import { busyPortsMessage, envPort } from "./lib/ports.mjs";
import { readVarsFile } from "./lib/vars-file.mjs";
import { startSandboxHost } from "../sandbox-host/server.mjs";
import { startDemoModel } from "../dev/demo-model/server.mjs";
import { seedDevHouse } from "./lib/seed-dev.mjs";
import { DEV_PID_FILE, devInUse } from "./lib/dev-pid.mjs";
import { alive, removePidFileOf } from "./lib/pid-file.mjs";
import { SIGN_IN_LINK_FILE, devBanner, signInLink } from "./lib/dev-banner.mjs";
import { forgetDevSandboxHost, recordDevSandboxHost } from "./lib/dev-sandbox-host.mjs";
import { stopWhenNpmRunEnds } from "./lib/npm-run-watch.mjs";

const port = envPort("PORT", 8787, "npm run dev");
const sandboxPort = envPort("SANDBOX_HOST_PORT", 3986, "npm run dev");
const demoModelPort = envPort("DEMO_MODEL_PORT", 3987, "npm run dev");
// Before the ports: a wrangler dev left running holds the port too, and "port in use" alone would
// not say what to stop.
const inUse = await devInUse(ROOT);
if (inUse) {
  console.error(inUse);
  process.exit(1);
}
const busy = await busyPortsMessage([
  { port, envVar: "PORT", what: "the worker" },
  { port: sandboxPort, envVar: "SANDBOX_HOST_PORT", what: "the local sandbox host" },
  { port: demoModelPort, envVar: "DEMO_MODEL_PORT", what: "the demo model" },
], "npm run dev");
if (busy) {
  console.error(busy);
  process.exit(1);
}

const devVarsPath = join(ROOT, ".dev.vars");
if (!existsSync(devVarsPath)) {
  copyFileSync(join(ROOT, ".dev.vars.example"), devVarsPath);
  // It is where a real DAYTONA_API_KEY or model key goes next: readable by its owner alone.
  chmodSync(devVarsPath, 0o600);
  console.log("created .dev.vars from .dev.vars.example");
}
const vars = readVarsFile(devVarsPath);
// The worker refuses shorter ones (it mints nothing, and signs nothing): said here, before anything
// starts, rather than as a sign-in link holding no token.
for (const name of ["THREADBOX_ADMIN_SECRET", "THREADBOX_TOKEN_SECRET"]) {
  if ((vars[name] ?? "").length < 16) {
    console.error(`npm run dev: ${name} in .dev.vars must be at least 16 characters (.dev.vars.example has development values)`);
    process.exit(1);
  }
}
// The local host's own key, never .dev.vars's DAYTONA_API_KEY: that may be a real Daytona key (kept
// there for `npm run smoke` and `snapshot`), and this one ends up on wrangler's command line, which
// every user of the machine can read with `ps`.
const sandboxKey = process.env.SANDBOX_HOST_API_KEY ?? "dev-sandbox-key";
const sandboxRoot = process.env.SANDBOX_HOST_ROOT ?? join(ROOT, ".wrangler", "sandbox-host");
const host = await startSandboxHost({ port: sandboxPort, apiKey: sandboxKey, root: sandboxRoot });
mkdirSync(join(ROOT, ".wrangler"), { recursive: true });
recordDevSandboxHost(ROOT, { apiUrl: host.apiUrl, apiKey: sandboxKey });
const demoModel = await startDemoModel({ port: demoModelPort }).catch((err) => {
  if (err.code !== "EADDRINUSE") throw err;
  console.error(`port ${demoModelPort} (demo model) is in use: stop what holds it, or set DEMO_MODEL_PORT to a free port`);
  process.exit(1);
});
const url = `http://127.0.0.1:${port}`;

const args = [join(ROOT, "node_modules", "wrangler", "bin", "wrangler.js"), "dev", "--ip", "127.0.0.1", "--port", String(port),
  "--persist-to", join(ROOT, ".wrangler", "state"), "--show-interactive-dev-session=false",
  // The local host is the default provider; the worker reaches it and boxes reach the worker over loopback.
  "--var", `DAYTONA_API_URL:${host.apiUrl}`, "--var", `DAYTONA_API_KEY:${sandboxKey}`,
  "--var", `THREADBOX_STREAM_URL:${vars.THREADBOX_STREAM_URL?.includes("127.0.0.1:8787") ? `${url}/api/stream` : vars.THREADBOX_STREAM_URL ?? `${url}/api/stream`}`];
// wrangler and its workerd run in a group of their own under a tether holding a pipe from this
// process: if this process dies (kill -9 included) they stop too, instead of serving on without
// the sandbox host and demo model that died with it. A terminal's Ctrl-C reaches them through stop().
const wrangler = spawn(process.execPath, [join(ROOT, "scripts", "lib", "tether.mjs"), process.execPath, ...args], {
  cwd: ROOT, detached: true, stdio: ["pipe", "inherit", "inherit"],
  env: { ...localTracingEnv(), ...process.env, ...OFFLINE_WRANGLER_ENV, PATH: nodePath() },
});
const pidFile = join(ROOT, DEV_PID_FILE);
mkdirSync(join(ROOT, ".wrangler"), { recursive: true });
writeFileSync(pidFile, `${wrangler.pid}\n`);
const groupAlive = () => alive(-wrangler.pid);

let stopping = false;
async function stop(code = 0) {
  if (stopping) return;
  stopping = true;
  const exited = wrangler.exitCode !== null || wrangler.signalCode !== null ? Promise.resolve() : new Promise((r) => wrangler.once("exit", r));
  // The group, not the tether alone: a tether killed by itself would leave wrangler serving.
  try { process.kill(-wrangler.pid, "SIGTERM"); } catch { /* gone */ }
  forgetDevSandboxHost(ROOT);
  await host.close().catch(() => {});
  await demoModel.close().catch(() => {});
  await exited;
  for (let i = 0; i < 60 && groupAlive(); i++) await new Promise((r) => setTimeout(r, 100));
  if (groupAlive()) {
    try { process.kill(-wrangler.pid, "SIGKILL"); } catch { /* gone */ }
  }
  // Left in place while the group runs, so that the next start names it.
  if (!groupAlive()) removePidFileOf(pidFile, wrangler.pid);
  process.exit(code);
}
process.on("SIGINT", () => stop(0));
process.on("SIGTERM", () => stop(0));
stopWhenNpmRunEnds("dev");
wrangler.on("exit", (code) => stop(code ?? 0));

await waitForHttp(`${url}/health`, 120_000);
const minted = await fetch(`${url}/api/admin/tokens`, {
  method: "POST",
  headers: { authorization: `Bearer ${vars.THREADBOX_ADMIN_SECRET}`, "content-type": "application/json" },
  body: JSON.stringify({ houseId: "dev", subject: "dev-user", role: "owner", ttlSeconds: 30 * 24 * 3600 }),
});
const mintAnswer = await minted.json().catch(() => ({}));
if (!minted.ok || typeof mintAnswer.token !== "string") {
  console.error(`npm run dev: could not mint the dev house's token: ${minted.status} ${JSON.stringify(mintAnswer.error ?? mintAnswer)}`);
  await stop(1);
}
const { token } = mintAnswer;
const seeded = await seedDevHouse({
  url, token, demoModelBaseUrl: demoModel.baseUrl, vars, statePath: join(ROOT, ".wrangler", "seed-dev.json"),
}).catch((err) => {
  // The server works without the seed; say what went wrong and go on.
  console.error(`could not seed the dev house: ${err.message}`);
  return { environments: [], agents: [], agentsSupported: false };
});
// wrangler logs a line per request and the web UI polls, so the banner scrolls away within
// minutes: the link is also kept in a file under .wrangler/ (gitignored), readable only by its owner.
const linkFile = join(ROOT, SIGN_IN_LINK_FILE);
mkdirSync(join(ROOT, ".wrangler"), { recursive: true });
writeFileSync(linkFile, `${signInLink(url, token)}\n`, { mode: 0o600 });
chmodSync(linkFile, 0o600); // writeFileSync's mode applies only to a file it creates
console.log(devBanner({ url, token, sandboxApiUrl: host.apiUrl, sandboxRoot, demoModelBaseUrl: demoModel.baseUrl, seeded }));
