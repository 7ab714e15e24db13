// The box's record of the environment's files, updated by launches and prunes that run at once,
// on a real box of the local host (the Daytona SDK against it).
import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSandboxHost, type SandboxHost } from "../../sandbox-host/server.mjs";
import { createDaytonaProvider, type DaytonaProvider } from "../../src/sandbox/daytona-provider";
import { MANAGED_FILES, readManagedFiles, updateManagedFiles } from "../../src/workspace/managed-files";
import { tempDirs } from "../support/temp-dirs";

const tempDir = tempDirs();
const KEY = "managed-files-test-key";
let host: SandboxHost;
let provider: DaytonaProvider;

beforeAll(async () => {
  host = await startSandboxHost({ port: 0, apiKey: KEY });
  provider = createDaytonaProvider({ apiUrl: host.apiUrl, apiKey: KEY, target: "local" });
});
afterAll(async () => {
  await host?.close();
});

/** A PATH with what a minimal box has, and no `flock`. */
function pathWithoutFlock(): string {
  const bin = tempDir("no-flock-bin-");
  const hostPath = (process.env.PATH ?? "").split(path.delimiter);
  for (const tool of ["bash", "sh", "mkdir", "rmdir", "rm", "mv", "cat", "grep", "sort", "sleep", "ls"]) {
    const found = hostPath.map((d) => path.join(d, tool)).find((p) => fs.existsSync(p));
    if (found) fs.symlinkSync(found, path.join(bin, tool));
  }
  return bin;
}

async function concurrentAdds(env: Record<string, string>) {
  const box = await provider.create({ labels: { house: "house-managed", thread: "t1" }, ephemeral: true, env });
  try {
    const home = await provider.homeDir(box.ref);
    if (env.PATH) expect((await provider.exec(box.ref, "command -v flock || echo none", { cwd: home })).output.trim()).toBe("none");
    const n = 16;
    await Promise.all(Array.from({ length: n }, (_, i) => updateManagedFiles(provider, box.ref, home, [], [{ key: `file:f${i}.txt`, path: `work/f${i}.txt` }])));
    const recorded = (await readManagedFiles(provider, box.ref, home)).map((f) => f.key).sort();
    expect(recorded).toEqual(Array.from({ length: n }, (_, i) => `file:f${i}.txt`).sort());
    // Nothing of the lock is left for the next update to wait on.
    expect((await provider.exec(box.ref, `ls -a .threadbox`, { cwd: home })).output.split("\n").filter((l) => l.startsWith("environment-files.lock.d"))).toEqual([]);
    return { box, home };
  } catch (err) {
    await provider.delete(box.ref, { wait: true }).catch(() => {});
    throw err;
  }
}

describe("the record of the environment's files", () => {
  it("keeps every line when updates run at once on a box without flock", async () => {
    const { box } = await concurrentAdds({ PATH: pathWithoutFlock() });
    await provider.delete(box.ref, { wait: true });
  }, 60_000);

  it("and on a box with flock", async () => {
    const { box } = await concurrentAdds({});
    await provider.delete(box.ref, { wait: true });
  }, 60_000);

  it("an update killed while it held the lock (no flock) does not block the next one for ever", async () => {
    const box = await provider.create({ labels: { house: "house-managed", thread: "t2" }, ephemeral: true, env: { PATH: pathWithoutFlock() } });
    try {
      const home = await provider.homeDir(box.ref);
      // What a killed update leaves: the lock taken, never given back.
      await provider.exec(box.ref, `mkdir -p ${MANAGED_FILES}.lock.d`, { cwd: home });
      const started = Date.now();
      await updateManagedFiles(provider, box.ref, home, [], [{ key: "file:a.txt", path: "work/a.txt" }]);
      expect(Date.now() - started).toBeLessThan(30_000);
      expect((await readManagedFiles(provider, box.ref, home)).map((f) => f.key)).toEqual(["file:a.txt"]);
    } finally {
      await provider.delete(box.ref, { wait: true });
    }
  }, 60_000);
});
