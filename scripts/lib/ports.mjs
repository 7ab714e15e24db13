// Port checks for the start scripts: say which port is taken and which to use instead, before a
// server fails on it with a raw EADDRINUSE; and refuse a port or host variable that cannot work
// with one line naming it, not a Node stack trace.
import { createServer } from "node:net";

export const PORT_RANGE = "1 to 65535";

/** A port number from its text (surrounding blanks allowed), or null if it is not one. */
export function parsePort(raw) {
  const t = String(raw).trim();
  if (!/^\d+$/.test(t)) return null;
  const n = Number(t);
  return n >= 1 && n <= 65535 ? n : null;
}

/**
 * The port in environment variable `name`: `fallback` when it is unset or blank. Anything else that
 * is not a port number ends the process (code 1) with one line naming the variable, the range it
 * takes and the value it got.
 */
export function envPort(name, fallback, command) {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === "") return fallback;
  const port = parsePort(raw);
  if (port === null) {
    console.error(`${command}: ${name} must be a port number from ${PORT_RANGE}, got ${JSON.stringify(raw)}`);
    process.exit(1);
  }
  return port;
}

/** Tries to listen on host:port: null when that works, else the error (EADDRINUSE when taken). */
export function probePort(port, host = "127.0.0.1") {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once("error", (err) => resolve(err));
    srv.listen(port, host, () => srv.close(() => resolve(null)));
  });
}

/** Whether host:port cannot be listened on (taken, or any other bind error). */
export async function portInUse(port, host = "127.0.0.1") {
  return (await probePort(port, host)) !== null;
}

/** The first free port after `port` (a suggestion for the user; it may be taken by the time they use it). */
export async function nextFreePort(port, host = "127.0.0.1", exclude = []) {
  for (let p = port + 1; p < Math.min(port + 200, 65536); p++) {
    if (!exclude.includes(p) && !(await portInUse(p, host))) return p;
  }
  return null;
}

const UNRESOLVABLE = new Set(["ENOTFOUND", "EAI_AGAIN", "EAI_FAIL", "EAI_NONAME", "EAI_NODATA"]);

/** Why listening failed for a reason other than a taken port, naming the variable to change. */
function cannotListenMessage(err, p, command, host, hostEnvVar) {
  const setHost = hostEnvVar ? `set ${hostEnvVar} to an address of this machine (e.g. 127.0.0.1 or 0.0.0.0)` : "";
  const named = hostEnvVar ? `${hostEnvVar}=${host}` : host;
  let why;
  if (UNRESOLVABLE.has(err.code)) why = `${named} cannot be resolved${setHost && `; ${setHost}`}`;
  else if (err.code === "EADDRNOTAVAIL") why = `${named} is not an address of this machine${setHost && `; ${setHost}`}`;
  else if (err.code === "EACCES") why = `port ${p.port} needs privileges here; pick one of 1024 or above with ${p.envVar}`;
  else why = `check ${[hostEnvVar, p.envVar].filter(Boolean).join(" and ")}`;
  return `${command}: cannot listen on ${host} port ${p.port} (${p.what}): ${err.code ?? err.message}: ${why}`;
}

/**
 * Checks every `{port, envVar, what}`; returns one message naming each taken port and a
 * command line that picks free ones, or null when all are free. A failure other than a taken
 * port (a host that is not this machine's, a privileged port) is named as what it is, with the
 * variable to change (`hostEnvVar` for the host, when the user sets it).
 */
export async function busyPortsMessage(ports, command, host = "127.0.0.1", hostEnvVar = undefined) {
  const busy = [];
  for (const p of ports) {
    const err = await probePort(p.port, host);
    if (err === null) continue;
    if (err.code !== "EADDRINUSE") return cannotListenMessage(err, p, command, host, hostEnvVar);
    busy.push(p);
  }
  if (busy.length === 0) return null;
  const taken = ports.map((p) => p.port);
  const picks = [];
  for (const p of busy) {
    const free = await nextFreePort(p.port, host, [...taken, ...picks.map((x) => x.port)]);
    if (free) picks.push({ envVar: p.envVar, port: free });
  }
  const lines = busy.map((p) => `  port ${p.port} (${p.what}) is already in use on ${host}`);
  // The line to copy keeps what the user set on the command line (`PORT=… HOST=… npm run dev`):
  // without it, the copied line would start on the defaults of the ports that were free.
  const kept = [
    ...ports.filter((p) => !busy.includes(p) && process.env[p.envVar]?.trim()).map((p) => ({ envVar: p.envVar, port: p.port })),
    ...(hostEnvVar && process.env[hostEnvVar]?.trim() ? [{ envVar: hostEnvVar, port: host }] : []),
  ];
  const hint = picks.length === busy.length
    ? `Stop whatever uses it (another \`${command}\`?) or pick another port:\n  ${[...kept, ...picks].map((p) => `${p.envVar}=${p.port}`).join(" ")} ${command}`
    : `Stop whatever uses it or pick a free port with ${busy.map((p) => p.envVar).join(" / ")}.`;
  return `${command}: cannot start\n${lines.join("\n")}\n${hint}`;
}
