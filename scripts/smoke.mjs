#!/usr/bin/env node
// `npm run smoke [-- --local]`: checks credentials, create, exec, upload, delete against the
// configured provider (DAYTONA_API_URL / DAYTONA_API_KEY / DAYTONA_TARGET) and prints a verdict.
import { loadSandboxModules, refuseUnknownOptions, resolveTarget } from "./sandbox-lib.mjs";

refuseUnknownOptions(process.argv.slice(2), "smoke", ["--local"]);
const target = await resolveTarget(process.argv.slice(2));
const { createDaytonaProvider } = await loadSandboxModules();
console.log(`smoke: provider ${target.label}${target.target ? ` (target ${target.target})` : ""}`);

const results = [];
let ref;
async function step(name, fn) {
  const t0 = Date.now();
  try {
    const detail = await fn();
    results.push({ name, ok: true });
    console.log(`  ok    ${name} (${Date.now() - t0} ms)${detail ? ` — ${detail}` : ""}`);
    return true;
  } catch (err) {
    results.push({ name, ok: false });
    console.log(`  FAIL  ${name} (${Date.now() - t0} ms) — ${err?.code ? `[${err.code}] ` : ""}${err?.message ?? err}`);
    return false;
  }
}

const provider = createDaytonaProvider({ apiUrl: target.apiUrl, apiKey: target.apiKey, target: target.target });
const house = `smoke-${Date.now()}`;
const ok =
  (await step("credentials (list sandboxes)", async () => `${(await provider.list({ "threadbox.house": house })).length} boxes`)) &&
  (await step("create", async () => {
    const box = await provider.create({ labels: { house }, ephemeral: true, timeoutSec: 180 });
    ref = box.ref;
    return `${box.ref} ${box.state}`;
  })) &&
  (await step("exec", async () => {
    const r = await provider.exec(ref, "echo smoke-ok; exit 3");
    if (r.exitCode !== 3 || !r.output.includes("smoke-ok")) throw new Error(`unexpected ${JSON.stringify(r)}`);
    return "exit code and output as expected";
  })) &&
  (await step("upload + download", async () => {
    const content = `smoke ${Date.now()}`;
    await provider.upload(ref, [{ path: "threadbox-smoke/file.txt", content }]);
    const back = new TextDecoder().decode(await provider.download(ref, "threadbox-smoke/file.txt"));
    if (back !== content) throw new Error("downloaded content differs");
    return "round trip verified";
  }));
if (ref) await step("delete", async () => {
  await provider.delete(ref, { wait: true, timeoutSec: 120 });
  if ((await provider.probe(ref)) !== "dead") throw new Error("box still reported alive after delete");
  return "gone";
});
await target.close();
const failed = results.filter((r) => !r.ok);
console.log(failed.length === 0 ? "VERDICT: PASS — the sandbox provider works" : `VERDICT: FAIL — ${failed.map((f) => f.name).join(", ")}`);
process.exit(failed.length === 0 ? 0 : 1);
