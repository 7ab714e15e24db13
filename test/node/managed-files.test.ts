// The box's record of the environment's files, updated by launches and prunes that run at once,
// on a real box of the local host (the Daytona SDK against it).
import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSandboxHost, type SandboxHost } from "../../sandbox-host/server.mjs";
import { createDaytonaProvider, type DaytonaProvider } from "../../src/sandbox/daytona-provider";
import { createdDirs, MANAGED_FILES, readManagedFiles, updateManagedFiles, type ManagedFile } from "../../src/workspace/managed-files";
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
      // A short limit: the real one (RECORD_LOCK_STALE_SECONDS) is only waited out, not changed.
      await updateManagedFiles(provider, box.ref, home, [], [{ key: "file:a.txt", path: "work/a.txt" }], { lockStaleSeconds: 0.5 });
      expect((await readManagedFiles(provider, box.ref, home)).map((f) => f.key)).toEqual(["file:a.txt"]);
    } finally {
      await provider.delete(box.ref, { wait: true });
    }
  }, 60_000);

  it("a file taken out of the environment takes the directories it made with it, each once nothing else is in it", async () => {
    const box = await provider.create({ labels: { house: "house-managed", thread: "t3" }, ephemeral: true, env: {} });
    try {
      const home = await provider.homeDir(box.ref);
      const file = (rel: string, cwd = "work"): ManagedFile => ({ key: `file:${rel}`, path: `${cwd}/${rel}` });
      const alone = file("conf/deep/a.json");
      const besideUsers = file("shared/b.json");
      const inRepo = file("src/c.json", "work/repo");
      const besideEmptyDir = file("cache/d.json");
      const skill: ManagedFile = { key: "skill:lint", path: ".threadbox/pi-agent/skills/lint/SKILL.md" };
      const kept = file("conf2/keep.json");
      const managed = [alone, besideUsers, inRepo, besideEmptyDir, skill, kept];
      await provider.upload(box.ref, [
        ...managed.map((f) => ({ path: f.path, content: "{}" })),
        // Not the environment's: a user's file, a file of the cloned repository.
        { path: "work/shared/notes.txt", content: "mine" },
        { path: "work/repo/src/main.ts", content: "code" },
      ]);
      await provider.exec(box.ref, "mkdir -p work/cache/made-by-a-run", { cwd: home });
      await updateManagedFiles(provider, box.ref, home, [], managed);
      // What PATCH files: null, plugins: null prunes from the shared box.
      await updateManagedFiles(provider, box.ref, home, managed.filter((f) => f !== kept));
      const tree = (await provider.exec(box.ref, "find work .threadbox/pi-agent | sort", { cwd: home })).output.trim().split("\n");
      expect(tree).toEqual([
        ".threadbox/pi-agent",
        ".threadbox/pi-agent/skills",
        "work",
        "work/cache",
        "work/cache/made-by-a-run",
        "work/conf2",
        "work/conf2/keep.json",
        "work/repo",
        "work/repo/src",
        "work/repo/src/main.ts",
        "work/shared",
        "work/shared/notes.txt",
      ]);
      expect((await readManagedFiles(provider, box.ref, home)).map((f) => f.key)).toEqual([kept.key]);
    } finally {
      await provider.delete(box.ref, { wait: true });
    }
  }, 60_000);

  it("the directories a managed file made are those its own name holds, under where it was put", () => {
    expect(createdDirs({ key: "file:a/b/c.txt", path: "work/repo/a/b/c.txt" })).toEqual(["work/repo/a/b", "work/repo/a"]);
    expect(createdDirs({ key: "file:c.txt", path: "work/c.txt" })).toEqual([]);
    expect(createdDirs({ key: "skill:lint", path: ".threadbox/pi-agent/skills/lint/SKILL.md" })).toEqual([".threadbox/pi-agent/skills/lint"]);
    expect(createdDirs({ key: "extension:x", path: ".threadbox/pi-agent/extensions/x.ts" })).toEqual([]);
    // A record line whose path does not end in the name its key gives (the box can write the record).
    expect(createdDirs({ key: "file:b/c.txt", path: "work/ab/c.txt" })).toEqual([]);
  });
});
