#!/usr/bin/env node
// `npm run snapshot [-- --refresh] [-- --local]`: creates (or with --refresh, re-creates) the
// snapshot with the harness pre-installed that box creation prefers.
// Against the local sandbox host a snapshot is only a recorded name: nothing is built, boxes run on
// the host's own toolchain. The command says so instead of pretending.
import { Daytona, Image } from "@daytonaio/sdk";
import { loadSandboxModules, resolveTarget } from "./sandbox-lib.mjs";

const argv = process.argv.slice(2);
const target = await resolveTarget(argv);
const { harnessBoxSource } = await loadSandboxModules();
const { snapshot, image, installSteps } = harnessBoxSource(process.env);
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
  await target.close();
  process.exit(0);
}
if (existing) {
  console.log(`snapshot: deleting ${snapshot} for refresh`);
  await daytona.snapshot.delete(existing);
}
// The image build runs as root, so the snapshot installs into /usr/local (on PATH for every user);
// the fallback path installs into the box user's $HOME/.local instead.
const img = Image.base(image).runCommands(...installSteps.map((s) => s.replace('"$HOME/.local"', "/usr/local")));
console.log(`snapshot: creating ${snapshot} from ${image} (+ ${installSteps.length} install step(s)) on ${target.label}`);
const created = await daytona.snapshot.create({ name: snapshot, image: img }, { onLogs: (l) => console.log(`  ${l}`), timeout: 1800 });
console.log(`snapshot: ${created.name} is ${created.state}`);
if (/127\.0\.0\.1|localhost/.test(target.apiUrl)) {
  console.log("note: on the local sandbox host this is a recorded name only; no image is built. Boxes use the host's toolchain.");
}
await target.close();
