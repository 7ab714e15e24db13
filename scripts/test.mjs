// npm test (after its `pretest` build): the vitest projects (workerd tests and Node tests with real
// processes) and the Durable Streams conformance suite against wrangler dev, each phase announced
// with its number and timed.
//
// Without arguments the phases run in two lanes at once: the Node tests in one, the workerd tests
// then the conformance suite in the other. A Node test file mostly waits on the processes it
// started (a third of a core on average), so queueing the lanes one after the other left the
// machine idle for minutes. Node files still run one at a time, and the other lane runs 10 nicer,
// so the Node tests, which start processes and time outages, get the CPU first as when they ran
// alone. The Node lane prints as it goes; the other lane's output is held and printed whole as each
// of its phases ends, so lines never interleave. After a failure no further phase starts.
//
// With arguments (`npm test -- <vitest args>`) the phases run in turn, stopping at the first that
// fails: vitest with those arguments, then the conformance suite.
import { spawn } from "node:child_process";
import { getPriority, setPriority } from "node:os";
import { join } from "node:path";
import { ROOT } from "./lib/wrangler-dev.mjs";

const node = process.execPath;
const vitest = (...args) => [node, join(ROOT, "node_modules", "vitest", "vitest.mjs"), "run", ...args];
const conformance = [node, join(ROOT, "scripts", "conformance.mjs")];
const args = process.argv.slice(2);

const seconds = (ms) => `${(ms / 1000).toFixed(1)} s`;

/** Runs argv; `held` keeps its output and hands it back instead of printing it as it comes. */
const run = (argv, held) => new Promise((resolve) => {
  // Held output is piped, not a terminal: keep vitest's colours when ours is one.
  const env = held && process.stdout.isTTY ? { ...process.env, FORCE_COLOR: "1" } : process.env;
  const child = spawn(argv[0], argv.slice(1), { cwd: ROOT, env, stdio: held ? ["ignore", "pipe", "pipe"] : "inherit" });
  // Set before the child has started anything of its own, so its processes (workerd, wrangler) inherit it.
  if (held) try { setPriority(child.pid, Math.min(19, getPriority() + 10)); } catch { /* already gone: its exit says why */ }
  const out = [];
  child.stdout?.on("data", (d) => out.push(d));
  child.stderr?.on("data", (d) => out.push(d));
  child.on("close", (code, signal) => resolve({ code: code ?? (signal ? 1 : 0), output: Buffer.concat(out) }));
});

const lanes = args.length > 0
  ? [[{ name: "vitest: workerd tests and Node tests (real wrangler dev, sandbox host, pi)", argv: vitest(...args) },
      { name: "Durable Streams conformance suite", argv: conformance }]]
  : [[{ name: "vitest: Node tests (real wrangler dev, sandbox host, pi), one file at a time", argv: vitest("--project", "node") }],
     [{ name: "vitest: workerd tests", argv: vitest("--project", "workers"), held: true },
      { name: "Durable Streams conformance suite", argv: conformance, held: true }]];
const total = lanes.flat().length;
lanes.flat().forEach((phase, i) => { phase.number = `[${i + 1}/${total}]`; });

let failed = 0;
async function runLane(phases) {
  for (const phase of phases) {
    if (failed) return;
    console.log(`\n▶ ${phase.number} ${phase.name}${phase.held ? " (its output follows when it ends)" : ""}`);
    const t0 = Date.now();
    const { code, output } = await run(phase.argv, phase.held);
    if (phase.held) {
      console.log(`\n── ${phase.number} ${phase.name}: its output ──`);
      process.stdout.write(output);
    }
    if (code !== 0) {
      console.log(`✗ ${phase.number} ${phase.name} failed (exit ${code}) after ${seconds(Date.now() - t0)}`);
      failed ||= code;
      return;
    }
    console.log(`✓ ${phase.number} ${phase.name} (${seconds(Date.now() - t0)})`);
  }
}

const started = Date.now();
await Promise.all(lanes.map(runLane));
if (failed) process.exit(failed);
console.log(`\nall ${total} phases passed in ${seconds(Date.now() - started)}`);
