// npm test (after its `pretest` build): every phase in turn, each announced with its number and
// timed, stopping at the first that fails. Phases: the vitest projects (workerd tests and Node
// tests with real processes), the Durable Streams conformance suite against wrangler dev.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { ROOT } from "./lib/wrangler-dev.mjs";

const node = process.execPath;
const PHASES = [
  { name: "vitest: workerd tests and Node tests (real wrangler dev, sandbox host, pi)", argv: [node, join(ROOT, "node_modules", "vitest", "vitest.mjs"), "run", ...process.argv.slice(2)] },
  { name: "Durable Streams conformance suite", argv: [node, join(ROOT, "scripts", "conformance.mjs")] },
];

const seconds = (ms) => `${(ms / 1000).toFixed(1)} s`;
const run = (argv) => new Promise((resolve) => {
  const child = spawn(argv[0], argv.slice(1), { cwd: ROOT, stdio: "inherit" });
  child.on("exit", (code, signal) => resolve(code ?? (signal ? 1 : 0)));
});

const started = Date.now();
for (const [i, phase] of PHASES.entries()) {
  console.log(`\n▶ [${i + 1}/${PHASES.length}] ${phase.name}`);
  const t0 = Date.now();
  const code = await run(phase.argv);
  if (code !== 0) {
    console.log(`✗ [${i + 1}/${PHASES.length}] ${phase.name} failed (exit ${code}) after ${seconds(Date.now() - t0)}`);
    process.exit(code);
  }
  console.log(`✓ [${i + 1}/${PHASES.length}] ${phase.name} (${seconds(Date.now() - t0)})`);
}
console.log(`\nall ${PHASES.length} phases passed in ${seconds(Date.now() - started)}`);
