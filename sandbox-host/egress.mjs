// Egress for local boxes. A box created with `networkBlockAll` (or a `domainAllowList`) runs every
// process in a network namespace of its own (`unshare -rn`: a user and a network namespace, so no
// privileges are needed) where only loopback exists. The loopback host:port entries of its
// allow-list (the thread stream's address) are bridged through a unix socket per port: inside,
// a small forwarder listens on 127.0.0.1:<port>; outside, the host connects the socket to the
// real 127.0.0.1:<port>. Anything else is unreachable. Allow-list entries that are not loopback
// host:port pairs cannot be enforced here and are refused at create, never ignored.
import net from "node:net";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { spawnSync } from "node:child_process";
import { HostError } from "./errors.mjs";
import { HOST_PATH, hostBinary } from "./proc.mjs";

const FORWARDER = `const net = require("net");
const [port, sock, ready] = process.argv.slice(2);
net.createServer((c) => {
  const u = net.connect(sock);
  c.pipe(u); u.pipe(c);
  c.on("error", () => u.destroy()); u.on("error", () => c.destroy());
}).listen(Number(port), "127.0.0.1", () => require("fs").writeFileSync(ready, ""));
`;

/** What a box's create request asks for: `null` when its network is open. */
export function egressPolicy(spec) {
  const list = String(spec.domainAllowList ?? "").split(",").map((s) => s.trim()).filter(Boolean);
  if (spec.networkBlockAll !== true && list.length === 0) return null;
  const ports = [];
  for (const entry of list) {
    const m = /^(127\.0\.0\.1|localhost):(\d{1,5})$/.exec(entry);
    if (!m && entry.startsWith("*.")) {
      throw new HostError(400, `this host enforces egress by loopback host:port only; it cannot allow ${entry}: a wildcard domain is enforced by Daytona alone (use an open network, or Daytona)`);
    }
    if (!m) throw new HostError(400, `this host enforces egress by loopback host:port only; it cannot allow ${entry} (use an open network, or Daytona)`);
    if (Number(m[2]) < 1 || Number(m[2]) > 65535) throw new HostError(400, `this host cannot allow ${entry}: a port is 1 to 65535`);
    ports.push(Number(m[2]));
  }
  return { ports };
}

let unshareWorks;
/** Whether this machine lets an unprivileged process make a network namespace. */
export function canIsolateNetwork() {
  unshareWorks ??= spawnSync("unshare", ["-rn", "true"], { stdio: "ignore" }).status === 0;
  return unshareWorks;
}

const SOCKET_DIR_PREFIX = "tbx-egress-";
/** The file in a box's egress dir that names its socket dir, for a host started after this one died. */
const SOCKET_DIR_RECORD = "socket-dir";

/**
 * Where a box's sockets go: a unix socket path has at most 107 bytes, and one under the box's own
 * directory (the host's root, a box id, then the socket's name) runs past that for a checkout a
 * few directories deep; Node then binds a cut-short path, which every port of the box shares.
 */
function shortSocketDir() {
  const base = os.tmpdir().length <= 40 ? os.tmpdir() : "/tmp";
  return fs.mkdtempSync(path.join(base, SOCKET_DIR_PREFIX));
}

/**
 * Removes the socket dir a box of a host that died recorded (`dir`: that box's egress dir). The
 * sockets are outside the box's directory, so removing that leaves them behind. Only a dir of
 * the name shortSocketDir gives is removed, whatever the record says.
 */
export function removeRecordedSocketDir(dir) {
  let recorded;
  try {
    recorded = fs.readFileSync(path.join(dir, SOCKET_DIR_RECORD), "utf8");
  } catch {
    return;
  }
  if (!path.isAbsolute(recorded) || !new RegExp(`^${SOCKET_DIR_PREFIX}[A-Za-z0-9]{6}$`).test(path.basename(recorded))) return;
  fs.rmSync(recorded, { recursive: true, force: true });
}

/** The host side of a denied box's bridges: one unix socket per allowed port. */
export class EgressBridge {
  constructor(dir, policy) {
    this.dir = dir;
    this.policy = policy;
    this.servers = [];
    this.forwarder = path.join(dir, "egress-forwarder.cjs");
    this.socketDir = null;
  }

  async start() {
    fs.mkdirSync(this.dir, { recursive: true });
    fs.writeFileSync(this.forwarder, FORWARDER);
    if (!this.socketDir) {
      this.socketDir = shortSocketDir();
      fs.writeFileSync(path.join(this.dir, SOCKET_DIR_RECORD), this.socketDir);
    }
    for (const port of this.policy.ports) {
      const sock = this.socketPath(port);
      fs.rmSync(sock, { force: true });
      const server = net.createServer((c) => {
        const t = net.connect(port, "127.0.0.1");
        c.pipe(t); t.pipe(c);
        c.on("error", () => t.destroy());
        t.on("error", () => c.destroy());
      });
      await new Promise((resolve, reject) => server.once("error", reject).listen(sock, resolve));
      this.servers.push(server);
    }
  }

  socketPath(port) {
    return path.join(this.socketDir, `egress-${port}.sock`);
  }

  /**
   * `bash -c command` inside the box's network: the command (or an interactive shell when
   * `command` is null) runs after the forwarders listen, and they go when it ends.
   */
  wrap(command, tmpDir) {
    // The set-up runs on the host's PATH; the command gets the box's own back.
    const bash = hostBinary("bash");
    const lines = ['__box_path="$PATH"', `PATH=${q(HOST_PATH)}`, "ip link set lo up 2>/dev/null"];
    for (const port of this.policy.ports) {
      const ready = `${tmpDir}/egress-ready-$$-${port}`;
      lines.push(`${q(process.execPath)} ${q(this.forwarder)} ${port} ${q(this.socketPath(port))} "${ready}" &`);
      lines.push(`for _ in $(seq 200); do [ -e "${ready}" ] && break; sleep 0.01; done`);
    }
    if (command === null) lines.push(`PATH="$__box_path" exec ${q(bash)} --noprofile --norc`);
    else lines.push(`PATH="$__box_path" ${q(bash)} -c ${q(command)}`, "rc=$?", "kill $(jobs -p) 2>/dev/null", "exit $rc");
    return [hostBinary("unshare"), ["-rn", bash, "-c", lines.join("\n")]];
  }

  close() {
    for (const s of this.servers) s.close();
    this.servers = [];
    if (this.socketDir) fs.rmSync(this.socketDir, { recursive: true, force: true });
    this.socketDir = null;
  }
}

function q(s) {
  return `'${String(s).replace(/'/g, `'\\''`)}'`;
}
