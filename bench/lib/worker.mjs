// The bench starts workers with the shared helper, under bench-only secrets.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT, freePort, nodePath, startWorker } from "../../scripts/lib/wrangler-dev.mjs";

export { ROOT, freePort, nodePath };

/** @param {{ vars?: Record<string,string>, persistTo?: string, logLevel?: string, configPath?: string, readyPath?: string }} opts */
export async function startBenchWorker(opts = {}) {
  const worker = await startWorker({
    ...opts,
    persistTo: opts.persistTo ?? mkdtempSync(join(tmpdir(), "threadbox-bench-")),
    vars: { THREADBOX_ADMIN_SECRET: "bench-admin-secret", THREADBOX_TOKEN_SECRET: "bench-token-secret-0123456789abcdef", ...opts.vars },
  });
  const mint = worker.mintHouseToken;
  worker.mintHouseToken = (houseId = "house-bench", subject = "user-bench", role = "owner") => mint(houseId, subject, role);
  return worker;
}
