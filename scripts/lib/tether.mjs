// `node tether.mjs <command> [args…]`: runs the command in the process group this process leads
// (start it detached) for as long as whoever started it lives. That one holds this process's
// stdin; when it dies, even by kill -9, the pipe closes and the whole group is stopped: wrangler
// dev and the workerd it spawned would otherwise serve on, holding the port and the state.
import { spawn } from "node:child_process";

const [command, ...args] = process.argv.slice(2);
const child = spawn(command, args, { stdio: ["ignore", "inherit", "inherit"] });

let ending = false;
function end() {
  if (ending) return;
  ending = true;
  try { process.kill(-process.pid, "SIGTERM"); } catch { /* group gone */ }
  // What ignores SIGTERM is killed; this process goes with the group.
  setTimeout(() => { try { process.kill(-process.pid, "SIGKILL"); } catch { /* gone */ } }, 5000).unref();
}
for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"]) process.on(sig, end);
process.stdin.on("end", end);
process.stdin.on("error", end);
process.stdin.resume();
child.on("error", (err) => {
  console.error(`cannot start ${command}: ${err.message}`);
  process.exit(1);
});
child.on("exit", (code, signal) => {
  // A workerd its wrangler left behind (wrangler crashed) goes too.
  if (!ending) {
    ending = true;
    try { process.kill(-process.pid, "SIGTERM"); } catch { /* gone */ }
  }
  process.exit(code ?? (signal ? 1 : 0));
});
