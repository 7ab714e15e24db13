// Sync-back of a readwrite folder, with the real tar and gzip of this machine standing in for a box.
import { execSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { environmentFilesWithin, packChangedFolders, type FolderBox } from "../../src/workspace/folder-pack";
import { digestCommand } from "../../src/workspace/folders";
import type { SandboxProvider } from "../../src/sandbox/provider";
import { tempDirs } from "../support/temp-dirs";

const tempDir = tempDirs();

/** A "box" whose home is a local directory: exec runs the command there, download reads a file. */
function localBox(): FolderBox {
  const home = tempDir("tb-folder-box-");
  const provider = {
    async exec(_ref: string, command: string, opts: { cwd?: string } = {}) {
      try {
        return { exitCode: 0, output: execSync(command, { cwd: opts.cwd ?? home, shell: "/bin/bash", stdio: "pipe" }).toString() };
      } catch (err) {
        const e = err as { status?: number; stdout?: Buffer; stderr?: Buffer };
        return { exitCode: e.status ?? 1, output: `${e.stdout ?? ""}${e.stderr ?? ""}` };
      }
    },
    async download(_ref: string, path: string) {
      return new Uint8Array(readFileSync(join(home, path)));
    },
  } as unknown as SandboxProvider;
  return { provider, ref: "local", home };
}

describe("readwrite folder sync-back", () => {
  it("stores a gzipped archive and counts its stored size: many small files fit though their plain tar would not", async () => {
    const box = localBox();
    const dir = join(box.home, "work", "many");
    mkdirSync(dir, { recursive: true });
    for (let i = 0; i < 3000; i++) writeFileSync(join(dir, `f${i}.txt`), `${i}\n`);
    const digest = (await box.provider.exec("local", digestCommand("work/many", [], "d.tar"), { cwd: box.home })).output.trim();
    writeFileSync(join(dir, "f0.txt"), "changed\n");
    // 3000 files take 3000 header and 3000 data blocks of 512 bytes: about 3 MiB as a plain tar.
    const maxBytes = 1024 * 1024;
    const [r] = await packChangedFolders(box, [{ source: "many", path: "work/many", access: "readwrite", exclude: [], digest }], "run-1", maxBytes);
    expect(r.outcome).toBe("synced");
    if (r.outcome !== "synced") return;
    expect(r.archive.byteLength).toBeLessThan(maxBytes);
    expect([r.archive[0], r.archive[1]]).toEqual([0x1f, 0x8b]);
    const out = tempDir("tb-folder-out-");
    writeFileSync(join(out, "v.tar.gz"), r.archive);
    execSync("mkdir x && tar -xzf v.tar.gz -C x", { cwd: out });
    expect(readFileSync(join(out, "x", "f0.txt"), "utf8")).toBe("changed\n");
    expect(readFileSync(join(out, "x", "f2999.txt"), "utf8")).toBe("2999\n");
  });

  it("the environment's own files written into the folder (a sensitive one too) are not the folder's: no new version, not in the archive", async () => {
    const box = localBox();
    const dir = join(box.home, "notes");
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "todo.txt"), "one\n");
    const files = [{ path: "notes/.creds", content: "secret", sensitive: true }, { path: "notes/cfg [1].txt", content: "x", sensitive: false }, { path: "other/a.txt", content: "y", sensitive: false }];
    const exclude = environmentFilesWithin({ files }, "notes");
    expect(exclude).toEqual(["./.creds", "./cfg \\[1].txt"]);
    const digest = (await box.provider.exec("local", digestCommand("notes", exclude, "d.tar"), { cwd: box.home })).output.trim();
    // The launch writes the environment's files after the folders are in.
    writeFileSync(join(dir, ".creds"), "secret");
    writeFileSync(join(dir, "cfg [1].txt"), "x");
    const folder = { source: "notes", path: "notes", access: "readwrite" as const, exclude, digest };
    expect((await packChangedFolders(box, [folder], "run-e", 1 << 20))[0].outcome).toBe("unchanged");
    writeFileSync(join(dir, "todo.txt"), "one\ntwo\n");
    const [r] = await packChangedFolders(box, [folder], "run-e", 1 << 20);
    expect(r.outcome).toBe("synced");
    if (r.outcome !== "synced") return;
    const out = tempDir("tb-folder-out-");
    writeFileSync(join(out, "v.tar.gz"), r.archive);
    expect(execSync("tar -tzf v.tar.gz", { cwd: out }).toString().split("\n").filter(Boolean).sort()).toEqual(["./", "./todo.txt"]);
  });

  it("the same contents pack to the same bytes (no name or time in the gzip header)", async () => {
    const box = localBox();
    mkdirSync(join(box.home, "w"), { recursive: true });
    writeFileSync(join(box.home, "w", "a.txt"), "a\n");
    const pack = async (run: string) => {
      const [r] = await packChangedFolders(box, [{ source: "w", path: "w", access: "readwrite", exclude: [], digest: "0".repeat(64) }], run, 1 << 20);
      return r.outcome === "synced" ? Buffer.from(r.archive).toString("hex") : "";
    };
    const first = await pack("run-a");
    await new Promise((r) => setTimeout(r, 1100));
    expect(await pack("run-b")).toBe(first);
  });
});
