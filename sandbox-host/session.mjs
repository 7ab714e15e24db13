// A session is one persistent bash: commands run one after another, and `cd`/`export`
// carry over, as in Daytona. Each command's output goes to a log file whose chunks are
// prefixed with \x01\x01\x01 (stdout) or \x02\x02\x02 (stderr), the toolbox's framing.
import { spawn } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { HostError } from "./errors.mjs";
import { exitCodeOf, hostBinary, killGroup } from "./proc.mjs";

export const STDOUT_PREFIX = Buffer.from([1, 1, 1]);
export const STDERR_PREFIX = Buffer.from([2, 2, 2]);

class SessionCommand {
  constructor(session, command) {
    this.id = randomUUID();
    this.command = command;
    this.exitCode = undefined;
    this.token = Buffer.from(`__SBH_END_${randomBytes(8).toString("hex")}__`);
    this.logPath = path.join(session.dir, `${this.id}.log`);
    fs.writeFileSync(this.logPath, "");
    this.listeners = new Set();
    this.pending = { stdout: Buffer.alloc(0), stderr: Buffer.alloc(0) };
    this.streamDone = { stdout: false, stderr: false };
    this.waiters = [];
  }

  get done() {
    return this.exitCode !== undefined;
  }

  append(kind, data) {
    if (data.length === 0) return;
    const framed = Buffer.concat([kind === "stdout" ? STDOUT_PREFIX : STDERR_PREFIX, data]);
    // Synchronous so a follower that reads the file and then subscribes in one tick sees no gap.
    fs.appendFileSync(this.logPath, framed);
    for (const l of this.listeners) l(framed);
  }

  /** Feeds raw shell output; returns true once this stream has shown the end token. */
  feed(kind, chunk) {
    const buf = Buffer.concat([this.pending[kind], chunk]);
    const idx = buf.indexOf(this.token);
    if (idx >= 0) {
      this.append(kind, buf.subarray(0, idx));
      const after = buf.subarray(idx + this.token.length).toString("utf8");
      const m = /^:(-?\d+)/.exec(after);
      if (m) this.codeFromToken = Number(m[1]);
      this.pending[kind] = Buffer.alloc(0);
      this.streamDone[kind] = true;
      const nl = buf.indexOf(0x0a, idx);
      return { done: true, rest: nl >= 0 ? buf.subarray(nl + 1) : Buffer.alloc(0) };
    }
    // Hold back only a tail that could be the start of the token split across chunks,
    // so ordinary output streams through at once.
    const keep = tokenPrefixTail(buf, this.token);
    this.append(kind, buf.subarray(0, buf.length - keep));
    this.pending[kind] = buf.subarray(buf.length - keep);
    return { done: false };
  }

  finish(exitCode) {
    if (this.done) return;
    for (const kind of ["stdout", "stderr"]) {
      if (this.pending[kind].length) this.append(kind, this.pending[kind]);
      this.pending[kind] = Buffer.alloc(0);
    }
    this.exitCode = exitCode;
    for (const l of this.listeners) l(null);
    this.listeners.clear();
    for (const w of this.waiters) w();
    this.waiters = [];
  }

  wait() {
    return this.done ? Promise.resolve() : new Promise((r) => this.waiters.push(r));
  }

  /** Returns the full framed log so far and subscribes to what follows (null = ended). */
  follow(onFrame) {
    const existing = fs.readFileSync(this.logPath);
    if (!this.done) this.listeners.add(onFrame);
    return { existing, unsubscribe: () => this.listeners.delete(onFrame) };
  }

  logs() {
    return demux(fs.readFileSync(this.logPath));
  }

  info() {
    return { id: this.id, command: this.command, ...(this.done ? { exitCode: this.exitCode } : {}) };
  }
}

export class Session {
  constructor(box, id, dir) {
    this.box = box;
    this.id = id;
    this.dir = dir;
    fs.mkdirSync(dir, { recursive: true });
    this.commands = new Map();
    this.queue = [];
    this.ended = false;
    const [file, args] = box.egress ? box.egress.wrap(null, path.join(box.dir, "tmp")) : [hostBinary("bash"), ["--noprofile", "--norc"]];
    this.shell = spawn(file, args, {
      cwd: box.home,
      env: box.env(),
      detached: true,
      stdio: ["pipe", "pipe", "pipe"],
    });
    box.track(this.shell);
    this.shell.stdin.on("error", () => {});
    this.shell.stdout.on("data", (c) => this.onOutput("stdout", c));
    this.shell.stderr.on("data", (c) => this.onOutput("stderr", c));
    this.shell.on("exit", (code, signal) => this.onShellExit(exitCodeOf(code, signal)));
  }

  onOutput(kind, chunk) {
    let data = chunk;
    while (data.length) {
      // The two pipes are read independently: the next command's stdout can arrive before
      // this command's stderr token, so each stream feeds the first command still open on it.
      const cur = this.queue.find((c) => !c.streamDone[kind]);
      if (!cur) return; // output of a backgrounded job between commands: nobody to attribute it to
      const r = cur.feed(kind, data);
      if (!r.done) return;
      data = r.rest;
      if (cur.streamDone.stdout && cur.streamDone.stderr) {
        this.queue.splice(this.queue.indexOf(cur), 1);
        cur.finish(cur.codeFromToken ?? 0);
      }
    }
  }

  onShellExit(code) {
    // `exit N` inside a command ends the session shell, as in Daytona: that command gets N.
    this.ended = true;
    for (const c of this.queue) c.finish(code);
    this.queue = [];
  }

  exec(command) {
    if (this.ended) throw new HostError(410, `session ${this.id} has ended`, "SESSION_ENDED");
    if (typeof command !== "string" || !command.trim()) throw new HostError(400, "command is required");
    const cmd = new SessionCommand(this, command);
    this.commands.set(cmd.id, cmd);
    this.queue.push(cmd);
    const t = cmd.token.toString();
    // stdin is /dev/null for the command so it cannot swallow the commands queued after it.
    const script =
      `{ ${command}\n} < /dev/null\n` +
      `__sbh_ec=$?\n` +
      `printf '%s:%d\\n' '${t}' "$__sbh_ec"\n` +
      `printf '%s:%d\\n' '${t}' "$__sbh_ec" >&2\n`;
    this.shell.stdin.write(script);
    return cmd;
  }

  command(commandId) {
    const c = this.commands.get(commandId);
    if (!c) throw new HostError(404, `command ${commandId} not found`, "PROCESS_NOT_FOUND");
    return c;
  }

  info() {
    return { sessionId: this.id, commands: [...this.commands.values()].map((c) => c.info()) };
  }

  kill() {
    killGroup(this.shell.pid, "SIGKILL");
    this.onShellExit(137);
  }
}

function tokenPrefixTail(buf, token) {
  for (let k = Math.min(buf.length, token.length - 1); k > 0; k--) {
    if (buf.subarray(buf.length - k).equals(token.subarray(0, k))) return k;
  }
  return 0;
}

/** Splits a framed log into the combined, stdout and stderr texts. */
export function demux(buf) {
  const out = [];
  const err = [];
  const all = [];
  let kind = null;
  let start = 0;
  const flush = (end) => {
    if (end > start && kind) {
      const part = buf.subarray(start, end);
      all.push(part);
      (kind === "stdout" ? out : err).push(part);
    }
  };
  for (let i = 0; i + 2 < buf.length; ) {
    const b = buf[i];
    if ((b === 1 || b === 2) && buf[i + 1] === b && buf[i + 2] === b) {
      flush(i);
      kind = b === 1 ? "stdout" : "stderr";
      i += 3;
      start = i;
    } else i++;
  }
  flush(buf.length);
  const s = (parts) => Buffer.concat(parts).toString("utf8");
  return { output: s(all), stdout: s(out), stderr: s(err) };
}
