// npm run conformance: start the worker under wrangler dev, run the official Durable Streams
// conformance suite against it, stop the worker. Extra args go to vitest.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { ROOT, nodePath, startWorker } from "./lib/wrangler-dev.mjs";

const longPollMs = process.env.CONFORMANCE_LONG_POLL_MS ?? "2000";
const worker = await startWorker({ vars: { LONG_POLL_TIMEOUT_MS: longPollMs } });
// Ctrl-C reaches vitest but not wrangler, which has a process group of its own: without this it
// would run on, and its state dir stay, after this script is gone.
process.once("SIGINT", () => void worker.stop().finally(() => process.exit(130)));
let code = 1;
try {
  const token = await worker.mintHouseToken("conformance", "conformance-suite", "owner");
  console.log(`conformance: worker at ${worker.url}`);
  code = await new Promise((resolve) => {
    const child = spawn(process.execPath, [
      join(ROOT, "node_modules", "vitest", "vitest.mjs"), "run", "--config", "test/conformance/vitest.config.ts",
      ...process.argv.slice(2),
    ], {
      cwd: ROOT,
      stdio: "inherit",
      env: { ...process.env, PATH: nodePath(), CONFORMANCE_BASE_URL: worker.url, CONFORMANCE_TOKEN: token, CONFORMANCE_LONG_POLL_MS: longPollMs },
    });
    child.on("exit", (c) => resolve(c ?? 1));
  });
} finally {
  await worker.stop();
}
process.exit(code);
