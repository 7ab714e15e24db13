// scripts/lib/wrangler-dev.mjs: a worker's --persist-to dir (wrangler dev's state, megabytes and more)
// goes when the worker stops; the suite and the bench used to leave one behind per start.
import { existsSync, readdirSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { startWorker } from "../../scripts/lib/wrangler-dev.mjs";
import { tempDirs } from "../support/temp-dirs";

const tempDir = tempDirs();

describe("startWorker's state dir", () => {
  it("is removed by stop(); stop({ keepState: true }) keeps it for a restart on it, whose stop() removes it", async () => {
    const first = await startWorker();
    const dir = first.persistTo;
    await first.mintHouseToken(); // state on disk, as every test's worker has
    expect(readdirSync(dir).length).toBeGreaterThan(0);
    await first.stop({ keepState: true });
    expect(existsSync(dir)).toBe(true);
    const again = await startWorker({ port: first.port, persistTo: dir, vars: first.vars });
    await again.stop();
    expect(existsSync(dir)).toBe(false);
  }, 180_000);

  it("a dir the caller gives is the caller's: stop() leaves it", async () => {
    const dir = tempDir("tb-persist-");
    const worker = await startWorker({ persistTo: dir });
    await worker.stop();
    expect(existsSync(dir)).toBe(true);
  }, 180_000);
});
