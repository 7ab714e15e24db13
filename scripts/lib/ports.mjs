// Port checks for the start scripts: say which port is taken and which to use instead, before a
// server fails on it with a raw EADDRINUSE.
import { createServer } from "node:net";

/** Whether something already listens on host:port (any other bind error counts as taken too). */
export function portInUse(port, host = "127.0.0.1") {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once("error", () => resolve(true));
    srv.listen(port, host, () => srv.close(() => resolve(false)));
  });
}

/** The first free port after `port` (a suggestion for the user; it may be taken by the time they use it). */
export async function nextFreePort(port, host = "127.0.0.1", exclude = []) {
  for (let p = port + 1; p < Math.min(port + 200, 65536); p++) {
    if (!exclude.includes(p) && !(await portInUse(p, host))) return p;
  }
  return null;
}

/**
 * Checks every `{port, envVar, what}`; returns one message naming each taken port and a
 * command line that picks free ones, or null when all are free.
 */
export async function busyPortsMessage(ports, command, host = "127.0.0.1") {
  const busy = [];
  for (const p of ports) if (await portInUse(p.port, host)) busy.push(p);
  if (busy.length === 0) return null;
  const taken = ports.map((p) => p.port);
  const picks = [];
  for (const p of busy) {
    const free = await nextFreePort(p.port, host, [...taken, ...picks.map((x) => x.port)]);
    if (free) picks.push({ envVar: p.envVar, port: free });
  }
  const lines = busy.map((p) => `  port ${p.port} (${p.what}) is already in use on ${host}`);
  const hint = picks.length === busy.length
    ? `Stop whatever uses it (another \`${command}\`?) or pick another port:\n  ${picks.map((p) => `${p.envVar}=${p.port}`).join(" ")} ${command}`
    : `Stop whatever uses it or pick a free port with ${busy.map((p) => p.envVar).join(" / ")}.`;
  return `${command}: cannot start\n${lines.join("\n")}\n${hint}`;
}
