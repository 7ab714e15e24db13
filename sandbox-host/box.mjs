// One local "box": a directory used as HOME/workdir plus the processes started in it.
// Isolation is by directory and process group only (not by kernel): a development host.
import { gitCredentialEnv } from "../src/domain/git-credentials.mjs";
import { spawn } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { EgressBridge } from "./egress.mjs";
import { HostError } from "./errors.mjs";
import { Session } from "./session.mjs";
import { BOX_MARKER_VAR, HOST_PATH, exitCodeOf, findMarkedPids, hostBinary, killGroup } from "./proc.mjs";

export { BOX_MARKER_VAR };

/** Where a box's egress bridge keeps its files (its sockets are elsewhere, see EgressBridge). */
export const egressDirOf = (boxDir) => path.join(boxDir, "meta", "egress");


export class Box {
  constructor({ hostId, root, spec, toolboxProxyUrl, snapshotDir, mounts = [] }) {
    this.id = randomUUID();
    this.hostId = hostId;
    this.marker = `${hostId}/${this.id}`;
    this.root = root;
    this.dir = path.join(root, "boxes", this.id);
    this.home = path.join(this.dir, "home");
    this.meta = path.join(this.dir, "meta");
    this.spec = spec;
    this.token = randomBytes(16).toString("hex");
    this.toolboxProxyUrl = toolboxProxyUrl;
    this.snapshotDir = snapshotDir;
    /** Volumes: a link at `homePath` to a host directory that outlives the box. */
    this.mounts = mounts;
    /** A closed network with bridges to the allowed loopback ports, or null (open). */
    this.egress = null;
    this.state = "creating";
    this.errorReason = undefined;
    this.createdAt = new Date().toISOString();
    this.updatedAt = this.createdAt;
    this.sessions = new Map();
    this.children = new Set();
    this.destroyed = false;
    /** The provisioning under way, if it has begun. */
    this.provisioning = undefined;
  }

  /** Runs after the create response is sent, so SDK clients really poll `creating -> started`. */
  provision() {
    // A box deleted before its turn came is not made at all.
    if (this.destroyed) return Promise.resolve();
    this.provisioning = this.provisionNow();
    return this.provisioning;
  }

  async provisionNow() {
    try {
      fs.mkdirSync(this.home, { recursive: true });
      fs.mkdirSync(path.join(this.meta, "sessions"), { recursive: true });
      fs.mkdirSync(path.join(this.dir, "tmp"), { recursive: true });
      if (this.snapshotDir && fs.existsSync(this.snapshotDir)) {
        fs.cpSync(this.snapshotDir, this.home, { recursive: true });
      }
      if (this.egressPolicy) {
        this.egress = new EgressBridge(egressDirOf(this.dir), this.egressPolicy);
        await this.egress.start();
      }
      for (const m of this.mounts) {
        fs.mkdirSync(m.hostDir, { recursive: true });
        const at = path.join(this.home, m.homePath);
        fs.mkdirSync(path.dirname(at), { recursive: true });
        fs.rmSync(at, { recursive: true, force: true });
        fs.symlinkSync(m.hostDir, at);
      }
      // A delete that came meanwhile decides: it waits for this and removes what was made.
      if (this.destroyed) return;
      this.setState("started");
    } catch (err) {
      if (this.destroyed) return;
      this.errorReason = this.hideHostPaths(String(err?.message ?? err));
      this.setState("error");
    }
  }

  /**
   * A message as the box's client may see it: the host's paths of the box's files put as the box
   * knows them (HOME as `~`, a volume as its mount), any other path under the host's root hidden.
   * The host's directory layout, and where on the machine it keeps boxes, is none of the client's.
   */
  hideHostPaths(text) {
    const pairs = [
      ...this.mounts.map((m) => [m.hostDir, `~/${m.homePath}`]),
      [this.home, "~"],
      [path.join(this.dir, "tmp"), "$TMPDIR"],
      [this.dir, "<box>"],
      [this.root, "<host>"],
    ];
    // Symlinked temp dirs (macOS /var -> /private/var): messages may give either spelling.
    const all = pairs.flatMap(([host, shown]) => {
      let real = host;
      try {
        real = fs.realpathSync(host);
      } catch {
        /* not there (any more) */
      }
      return real === host ? [[host, shown]] : [[host, shown], [real, shown]];
    });
    all.sort((a, b) => b[0].length - a[0].length);
    let out = text;
    // Whole path components only: a root of /srv/sbh says nothing of /srv/sbh2.
    const escape = (p) => p.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    for (const [host, shown] of all) if (host.length > 1) out = out.replace(new RegExp(`${escape(host)}(?![^/\\s'"\`:;,)\\]])`, "g"), () => shown);
    return out;
  }

  setState(state) {
    this.state = state;
    this.updatedAt = new Date().toISOString();
  }

  /** The environment every box process gets; the host's own env (and its API key) never leaks in. */
  env(extra = {}) {
    const env = {
      PATH: HOST_PATH,
      LANG: process.env.LANG ?? "C.UTF-8",
      HOME: this.home,
      USER: "daytona",
      SHELL: "/bin/bash",
      TMPDIR: path.join(this.dir, "tmp"),
      DAYTONA_SANDBOX_ID: this.id,
      DAYTONA_SANDBOX_USER: "daytona",
      // A box is its own machine: git must not walk up out of it into a checkout the host
      // directory happens to sit in (npm run dev keeps boxes inside the project's .wrangler/).
      GIT_CEILING_DIRECTORIES: this.dir,
      ...(this.spec.outboundProxyUrl
        ? { HTTP_PROXY: this.spec.outboundProxyUrl, HTTPS_PROXY: this.spec.outboundProxyUrl }
        : {}),
      ...(this.spec.env ?? {}),
      ...extra,
    };
    env[BOX_MARKER_VAR] = this.marker;
    return env;
  }

  /**
   * Maps a box path to a host path. Relative and `~` paths are HOME-relative; absolute paths
   * must stay inside the box directory (symlinks included), so a box cannot write the host.
   */
  resolve(p, { mustExist = false } = {}) {
    if (typeof p !== "string" || p === "") throw new HostError(400, "path is required", "BAD_REQUEST");
    let abs;
    if (p === "~") abs = this.home;
    else if (p.startsWith("~/")) abs = path.join(this.home, p.slice(2));
    else if (path.isAbsolute(p)) abs = path.normalize(p);
    else abs = path.resolve(this.home, p);
    const real = realpathOfNearest(abs);
    const base = fs.realpathSync(this.dir);
    const inside = (dir) => real === dir || real.startsWith(dir + path.sep);
    // A mounted volume is part of the box, wherever it lives on the host.
    const inVolume = this.mounts.some((m) => fs.existsSync(m.hostDir) && inside(fs.realpathSync(m.hostDir)));
    if (!inside(base) && !inVolume) {
      throw new HostError(400, `path ${p} is outside the sandbox`, "BAD_REQUEST");
    }
    if (mustExist && !fs.existsSync(abs)) throw new HostError(404, `file ${p} not found`, "FILE_NOT_FOUND");
    return abs;
  }

  assertRunning() {
    if (this.state !== "started") throw new HostError(409, `sandbox is ${this.state}`, "CONFLICT");
  }

  /** One-shot command: stdout+stderr combined, returns when the stdio pipes close (like Daytona). */
  execute({ command, cwd, envs, timeout }) {
    this.assertRunning();
    if (typeof command !== "string" || !command) throw new HostError(400, "command is required");
    if (command.includes("\0")) throw new HostError(400, "command cannot contain a NUL byte", "BAD_REQUEST");
    if (timeout !== undefined && timeout !== null && !(typeof timeout === "number" && timeout >= 0)) throw new HostError(400, "timeout must be a number of seconds", "BAD_REQUEST");
    const dir = cwd ? this.resolve(cwd, { mustExist: true }) : this.home;
    return new Promise((resolve, reject) => {
      const [file, args] = this.egress ? this.egress.wrap(command, path.join(this.dir, "tmp")) : [hostBinary("bash"), ["-c", command]];
      const child = spawn(file, args, {
        cwd: dir,
        env: this.env(envs ?? {}),
        detached: true,
        stdio: ["ignore", "pipe", "pipe"],
      });
      this.track(child);
      const chunks = [];
      child.stdout.on("data", (c) => chunks.push(c));
      child.stderr.on("data", (c) => chunks.push(c));
      let timer;
      let timedOut = false;
      if (timeout && timeout > 0) {
        // setTimeout fires at once for a delay past 2^31-1 ms (about 24.8 days): cap it there.
        timer = setTimeout(() => {
          timedOut = true;
          killGroup(child.pid, "SIGKILL");
        }, Math.min(timeout * 1000, 2 ** 31 - 1));
      }
      child.on("error", (err) => {
        clearTimeout(timer);
        reject(new HostError(500, `spawn failed: ${err.message}`));
      });
      child.on("close", (code, signal) => {
        clearTimeout(timer);
        if (timedOut) {
          reject(new HostError(408, `command timed out after ${timeout}s`, "PROCESS_EXECUTION_TIMEOUT"));
          return;
        }
        resolve({ exitCode: exitCodeOf(code, signal), result: Buffer.concat(chunks).toString("utf8") });
      });
    });
  }

  /** git clone as a box process, so credentials helpers and HOME are the box's. */
  async clone({ url, path: dest, branch, commit_id: commitId, depth, username, password }) {
    this.assertRunning();
    if (!url) throw new HostError(400, "url is required");
    const target = this.resolve(dest);
    const q = (s) => `'${String(s).replace(/'/g, `'\\''`)}'`;
    let cmd = `git clone --quiet`;
    if (branch) cmd += ` --branch ${q(branch)}`;
    if (depth) cmd += ` --depth ${Number(depth)}`;
    cmd += ` -- ${q(url)} ${q(target)}`;
    if (commitId) cmd += ` && git -C ${q(target)} checkout --quiet ${q(commitId)}`;
    // Like Daytona's clone: the credentials authenticate this clone only and are not kept in the
    // checkout; they travel in the environment, never on the command line.
    const envs = password ? gitCredentialEnv(username || "x-access-token", password) : { GIT_TERMINAL_PROMPT: "0" };
    const r = await this.execute({ command: cmd, timeout: 600, envs });
    if (r.exitCode !== 0) {
      const notFound = /not found|does not exist|does not appear to be a git repository/i.test(r.result);
      throw new HostError(notFound ? 404 : 400, `git clone failed: ${r.result.trim()}`, notFound ? "GIT_REPO_NOT_FOUND" : "GIT_TRANSPORT_FAILED");
    }
  }

  createSession(sessionId) {
    this.assertRunning();
    if (!sessionId || typeof sessionId !== "string" || !/^[\w.-]+$/.test(sessionId)) {
      throw new HostError(400, "sessionId must match [A-Za-z0-9_.-]+");
    }
    if (this.sessions.has(sessionId)) throw new HostError(409, `session ${sessionId} already exists`);
    const s = new Session(this, sessionId, path.join(this.meta, "sessions", sessionId));
    this.sessions.set(sessionId, s);
    return s;
  }

  session(sessionId) {
    const s = this.sessions.get(sessionId);
    if (!s) throw new HostError(404, `session ${sessionId} not found`, "PROCESS_NOT_FOUND");
    return s;
  }

  deleteSession(sessionId) {
    const s = this.session(sessionId);
    s.kill();
    this.sessions.delete(sessionId);
  }

  track(child) {
    this.children.add(child);
    child.on("exit", () => this.children.delete(child));
  }

  /** Kills every process of the box: known groups first, then anything carrying the marker. */
  async killAll() {
    for (const s of this.sessions.values()) s.kill();
    for (const c of this.children) killGroup(c.pid, "SIGKILL");
    for (let round = 0; round < 20; round++) {
      const pids = findMarkedPids(this.marker);
      if (pids.length === 0) return;
      for (const pid of pids) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          /* already gone */
        }
      }
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  async destroy() {
    this.destroyed = true;
    // A provisioning still under way would make the directory again after it is removed.
    await this.provisioning;
    await this.killAll();
    this.egress?.close();
    fs.rmSync(this.dir, { recursive: true, force: true, maxRetries: 3 });
  }

  dto({ full = true } = {}) {
    const s = this.spec;
    const base = {
      id: this.id,
      organizationId: "local",
      name: s.name || this.id,
      target: s.target || "local",
      snapshot: s.snapshot,
      user: s.user || "daytona",
      public: !!s.public,
      networkBlockAll: !!s.networkBlockAll,
      ...(s.networkAllowList ? { networkAllowList: s.networkAllowList } : {}),
      ...(s.domainAllowList ? { domainAllowList: s.domainAllowList } : {}),
      ...(s.volumes ? { volumes: s.volumes } : {}),
      cpu: s.cpu ?? 1,
      gpu: s.gpu ?? 0,
      memory: s.memory ?? 1,
      disk: s.disk ?? 1,
      labels: s.labels ?? {},
      state: this.state,
      desiredState: this.state === "destroying" ? "destroyed" : this.state === "stopped" ? "stopped" : "started",
      ...(this.errorReason ? { errorReason: this.errorReason, recoverable: false } : {}),
      autoStopInterval: s.autoStopInterval ?? 15,
      autoArchiveInterval: s.autoArchiveInterval ?? 10080,
      autoDeleteInterval: s.autoDeleteInterval ?? -1,
      createdAt: this.createdAt,
      updatedAt: this.updatedAt,
      daemonVersion: "local-sandbox-host",
      toolboxProxyUrl: this.toolboxProxyUrl,
    };
    if (!full) return base;
    return {
      ...base,
      env: s.env ?? {},
      ...(s.outboundProxyUrl ? { outboundProxyUrl: s.outboundProxyUrl } : {}),
      volumes: [],
      ...(s.buildInfo ? { buildInfo: { dockerfileContent: s.buildInfo.dockerfileContent ?? "", contextHashes: s.buildInfo.contextHashes ?? [], createdAt: this.createdAt, updatedAt: this.updatedAt, snapshotRef: "" } } : {}),
    };
  }
}

/**
 * Where `abs` really lands: the real path of its nearest existing ancestor plus the rest. A link
 * whose target does not exist yet is followed all the same (a write through it creates the target).
 */
function realpathOfNearest(abs, hops = 0) {
  let cur = abs;
  const rest = [];
  for (;;) {
    try {
      return path.join(fs.realpathSync(cur), ...[...rest].reverse());
    } catch {
      if (isSymlink(cur)) {
        if (hops >= 40) throw new HostError(400, "too many levels of symbolic links", "BAD_REQUEST");
        const target = path.resolve(path.dirname(cur), fs.readlinkSync(cur));
        return realpathOfNearest(path.join(target, ...[...rest].reverse()), hops + 1);
      }
      const parent = path.dirname(cur);
      if (parent === cur) return abs;
      rest.push(path.basename(cur));
      cur = parent;
    }
  }
}

function isSymlink(p) {
  try {
    return fs.lstatSync(p).isSymbolicLink();
  } catch {
    return false;
  }
}
