// `npx wrangler deploy` works on a fresh clone after `npm ci`: wrangler itself builds the
// box-side bundles (the [build] command in wrangler.toml); no npm pre-script is needed.
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { freshTree } from "../support/fresh-tree";
import { nodePath, startWorker } from "../../scripts/lib/wrangler-dev.mjs";

const tree = freshTree();
const devTree = freshTree();
afterAll(() => { tree.remove(); devTree.remove(); });

function wrangler(args: string[], cwd: string): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [join(cwd, "node_modules", "wrangler", "bin", "wrangler.js"), ...args], {
      cwd,
      // Wrangler's default log level ("log"), as a user runs it: the test runner's own WRANGLER_LOG is quieter.
      env: { ...process.env, PATH: nodePath(), WRANGLER_SEND_METRICS: "false", CI: "true", NO_COLOR: "1", WRANGLER_LOG: "log" },
      maxBuffer: 16 * 1024 * 1024,
    }, (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === "number" ? err.code : 1) : 0, output: `${stdout}${stderr}` }));
  });
}

describe("deploy build from a fresh clone", () => {
  it("wrangler deploy --dry-run builds the runner bundles itself and bundles the worker", async () => {
    expect(existsSync(join(tree.dir, "src", "runner", "bundles.generated.ts"))).toBe(false);
    expect(existsSync(join(tree.dir, "dist"))).toBe(false);

    const out = join(tree.dir, "out");
    const r = await wrangler(["deploy", "--dry-run", "--outdir", out], tree.dir);
    expect(r.output).toContain("[custom build]");
    expect(r.code, r.output).toBe(0);

    const bundle = readFileSync(join(out, "worker.js"), "utf8");
    // The box-side runner and mirror travel inside the worker, ready to upload to a box.
    expect(bundle).toContain("dist/runner/runner.mjs");
    expect(bundle).toContain("dist/runner/mirror.mjs");
    expect(existsSync(join(tree.dir, "src", "runner", "bundles.generated.ts"))).toBe(true);
    // The in-memory test provider is not part of what gets deployed.
    expect(bundle).not.toContain("TestSandboxProvider");

    const size = /Total Upload: ([\d.]+ KiB) \/ gzip: ([\d.]+ KiB)/.exec(r.output);
    expect(size, r.output).not.toBeNull();
    console.log(`deploy bundle: ${size![1]} (gzip ${size![2]})`);
  }, 180_000);

  it("a bare wrangler dev builds them too and serves the API", async () => {
    expect(existsSync(join(devTree.dir, "src", "runner", "bundles.generated.ts"))).toBe(false);
    const worker = await startWorker({ cwd: devTree.dir });
    try {
      const token = await worker.mintHouseToken("house-fresh", "user-fresh");
      const r = await fetch(`${worker.url}/api/threads`, {
        method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: "{}",
      });
      expect(r.status).toBe(201);
    } finally {
      await worker.stop();
    }
  }, 180_000);
});
