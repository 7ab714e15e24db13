#!/usr/bin/env node
// `npm run snapshot [-- --refresh] [-- --local] [-- --environment <id>]`: creates (or with
// --refresh, re-creates) the snapshot with the harness pre-installed that box creation prefers.
// With --environment, the snapshot also has that environment's `packages` baked in; it is named
// after the environment and what it installs, and the environment is set to use it (THREADBOX_URL
// and THREADBOX_TOKEN, or the CLI's login, say where the environment lives).
// Against the local sandbox host a snapshot is only a recorded name: nothing is built, boxes run on
// the host's own toolchain. The command says so instead of pretending.
import { createHash } from "node:crypto";
import { Daytona, Image } from "@daytonaio/sdk";
import { loadSandboxModules, refuseUnknownOptions, resolveTarget } from "./sandbox-lib.mjs";
import { resolveTarget as resolveThreadbox } from "../cli/lib/config.mjs";

const argv = process.argv.slice(2);
refuseUnknownOptions(argv, "snapshot", ["--refresh", "--local"], ["--environment"]);
const envFlag = argv.indexOf("--environment");
const environmentId = envFlag >= 0 ? argv[envFlag + 1] : null;
if (envFlag >= 0 && (!environmentId || environmentId.startsWith("--"))) {
  console.error("snapshot: --environment needs an environment id");
  process.exit(2);
}
const { harnessBoxSource, harnessInstallSteps, packageBakeSteps, SYSTEM_PREFIX } = await loadSandboxModules();
const defaults = harnessBoxSource(process.env);
// The image build runs as root, so the snapshot installs into the system prefix (on PATH for every
// user); the fallback path installs into the box user's prefix instead.
const harnessSteps = harnessInstallSteps(undefined, SYSTEM_PREFIX);

let snapshot = defaults.snapshot;
let image = defaults.image;
let steps = harnessSteps;
let environmentApi = null;
if (environmentId) {
  environmentApi = environmentClient(environmentId);
  const e = await environmentApi.get();
  image = e.image ?? defaults.image;
  steps = [...harnessSteps, ...packageBakeSteps(e.packages)];
  // Named after what it holds: changing the environment's packages makes a new snapshot.
  const digest = createHash("sha256").update(JSON.stringify({ image, steps })).digest("hex").slice(0, 12);
  snapshot = `threadbox-env-${environmentId.replace(/[^A-Za-z0-9-]/g, "-").toLowerCase()}-${digest}`;
}

const target = await resolveTarget(argv);
const daytona = new Daytona({ apiUrl: target.apiUrl, apiKey: target.apiKey, target: target.target, useDeprecatedPolling: true, requestTimeoutMs: 120_000 });

let existing;
try {
  existing = await daytona.snapshot.get(snapshot);
} catch (err) {
  if (err?.statusCode !== 404) {
    console.error(`snapshot: cannot query ${target.label}: ${err?.message ?? err}`);
    process.exit(1);
  }
}
if (existing && !argv.includes("--refresh")) {
  console.log(`snapshot ${snapshot} exists (state ${existing.state}); pass --refresh to rebuild it.`);
} else {
  if (existing) {
    console.log(`snapshot: deleting ${snapshot} for refresh`);
    await daytona.snapshot.delete(existing);
  }
  const img = Image.base(image).runCommands(...steps);
  console.log(`snapshot: creating ${snapshot} from ${image} (+ ${steps.length} install step(s)) on ${target.label}`);
  const created = await daytona.snapshot.create({ name: snapshot, image: img }, { onLogs: (l) => console.log(`  ${l}`), timeout: 1800 });
  console.log(`snapshot: ${created.name} is ${created.state}`);
  if (/127\.0\.0\.1|localhost/.test(target.apiUrl)) {
    console.log("note: on the local sandbox host this is a recorded name only; no image is built. Boxes use the host's toolchain (a launch still installs missing packages).");
  }
}
if (environmentApi) {
  await environmentApi.useSnapshot(snapshot);
  console.log(`snapshot: environment ${environmentId} now creates its boxes from ${snapshot}`);
}
await target.close();

function environmentClient(id) {
  let where;
  try {
    where = resolveThreadbox({}, process.env);
  } catch (err) {
    console.error(`snapshot: ${err?.message ?? err}`);
    process.exit(2);
  }
  const url = `${where.url}/api/environments/${encodeURIComponent(id)}`;
  const call = async (init = {}) => {
    const r = await fetch(url, { ...init, headers: { authorization: `Bearer ${where.token}`, "content-type": "application/json" } });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) {
      console.error(`snapshot: environment ${id} at ${where.url}: ${r.status} ${body?.error?.message ?? ""}`);
      process.exit(1);
    }
    return body;
  };
  return {
    get: () => call(),
    useSnapshot: (name) => call({ method: "PATCH", body: JSON.stringify({ snapshot: name }) }),
  };
}
