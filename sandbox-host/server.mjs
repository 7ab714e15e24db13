// Local Daytona-compatible sandbox host: the slice of Daytona's control-plane API
// (`/api/sandbox…`, `/api/snapshots…`) and toolbox API (`/toolbox/<id>/…`) that threadbox
// uses, served on loopback so the real @daytonaio/sdk works against it unchanged.
//
// Clients must use polling mode (`useDeprecatedPolling: true`): the socket.io event
// channel is not implemented, and `/api/socket.io/` answers 404.
import http from "node:http";
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Box, egressDirOf } from "./box.mjs";
import { HostError, errorBody } from "./errors.mjs";
import { acceptWebSocket } from "./ws.mjs";
import { canIsolateNetwork, egressPolicy, removeRecordedSocketDir } from "./egress.mjs";
import { findPidsOfBox, killGroup } from "./proc.mjs";

const MAX_BODY = 512 * 1024 * 1024;

/**
 * Starts the host. `port: 0` picks a free port. `root` holds one directory per box
 * (a fresh temp dir when omitted, removed again on close).
 * @returns {Promise<{url: string, apiUrl: string, port: number, root: string, close(): Promise<void>}>}
 */
export async function startSandboxHost({ port = 0, apiKey, root, host = "127.0.0.1", publicUrl, log = () => {}, maxBodyBytes = MAX_BODY } = {}) {
  if (!apiKey) throw new Error("startSandboxHost: apiKey is required");
  const ownRoot = !root;
  const rootDir = root ?? fs.mkdtempSync(path.join(os.tmpdir(), "sandbox-host-"));
  fs.mkdirSync(path.join(rootDir, "boxes"), { recursive: true });
  // Boxes live only as long as the host process: a box directory left by one that died (killed,
  // crashed) belongs to no box any more, and the host answers 404 for it, so it goes now.
  // Volumes and snapshots are recorded on disk and stay.
  // Its processes go with it: a runner left running would keep writing to its thread from a
  // directory that no longer exists.
  for (const stale of fs.readdirSync(path.join(rootDir, "boxes"))) {
    for (const pid of findPidsOfBox(stale)) killGroup(pid, "SIGKILL");
    removeRecordedSocketDir(egressDirOf(path.join(rootDir, "boxes", stale)));
    fs.rmSync(path.join(rootDir, "boxes", stale), { recursive: true, force: true });
  }
  fs.mkdirSync(path.join(rootDir, "volumes"), { recursive: true });
  const hostId = randomBytes(6).toString("hex");
  const boxes = new Map();
  const snapshots = new Map();
  /** Volumes: storage that outlives boxes, a directory each under the root; by id. */
  const volumes = new Map();
  /** Signed preview links: token -> { boxId, port, expiresAtMs }. */
  const previews = new Map();
  let baseUrl = "";
  // A temp root is this process's alone and no later host starts on it to clear what is left:
  // when the process ends without close() (process.exit on a script's error path, an uncaught
  // exception), it goes, and first the boxes' processes, which would run on in a deleted directory.
  const removeOwnRoot = () => {
    for (const b of boxes.values()) {
      b.egress?.close();
      for (const c of b.children) killGroup(c.pid, "SIGKILL");
      for (const pid of findPidsOfBox(b.id)) killGroup(pid, "SIGKILL");
    }
    fs.rmSync(rootDir, { recursive: true, force: true, maxRetries: 3 });
  };
  if (ownRoot) process.on("exit", removeOwnRoot);

  const server = http.createServer((req, res) => {
    handle(req, res).catch((err) => sendError(res, req, err));
  });
  // Upgraded sockets (a followed command's log) are no longer the HTTP server's connections:
  // closeAllConnections() leaves them open, and server.close() would wait for each followed
  // command to end before the host stops and kills its boxes.
  const upgraded = new Set();
  server.on("upgrade", (req, socket, head) => {
    upgraded.add(socket);
    socket.on("close", () => upgraded.delete(socket));
    // A client may reset the connection at any point, also after a refused upgrade (the SDK's
    // socket.io channel, which this host answers 404, when its process exits): an 'error' with
    // no listener would end the host and every box on it.
    socket.on("error", () => socket.destroy());
    try {
      handleUpgrade(req, socket, head);
    } catch (err) {
      const status = err instanceof HostError ? err.status : 500;
      socket.end(`HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
    }
  });

  const api = {
    isAuthorized(req, url, box) {
      if (req.headers.authorization === `Bearer ${apiKey}`) return true;
      // Workers/browsers cannot set headers on a WebSocket: Daytona accepts the preview token as a query param.
      const t = url.searchParams.get("DAYTONA_SANDBOX_AUTH_KEY") ?? req.headers["x-daytona-preview-token"];
      return !!box && !!t && t === box.token;
    },
  };

  async function handle(req, res) {
    const url = new URL(req.url, "http://local");
    const raw = url.pathname.split("/").filter(Boolean);
    // A preview's path is the app's to read, undecoded: it may use escapes this host cannot decode.
    if (raw[0] === "proxy" && raw[1]) return proxyPreview(req, res, url, raw[1]);
    const parts = pathParts(url);
    if (parts[0] === "api") return handleApi(req, res, url, parts.slice(1));
    if (parts[0] === "toolbox" && parts[1]) {
      const box = boxes.get(parts[1]);
      if (!api.isAuthorized(req, url, box)) throw new HostError(401, "Unauthorized");
      if (!box) throw new HostError(404, `sandbox ${parts[1]} not found`);
      return await handleToolbox(req, res, url, box, parts.slice(2)).catch((err) => {
        if (typeof err?.message === "string") err.message = box.hideHostPaths(err.message);
        throw err;
      });
    }
    if (url.pathname === "/health") return sendJson(res, 200, { ok: true });
    throw new HostError(404, `no route for ${req.method} ${url.pathname}`);
  }

  /** A path's segments decoded; a malformed escape is the client's error (400), not the host's. */
  function signPreview(box, url, rawPort) {
    const port = Number(rawPort);
    if (!/^\d+$/.test(rawPort) || port < 1 || port > 65535) throw new HostError(400, "port must be an integer from 1 to 65535");
    const rawTtl = url.searchParams.get("expiresInSeconds");
    const ttl = rawTtl === null ? 60 : Number(rawTtl);
    if (!Number.isInteger(ttl) || ttl < 1 || ttl > 86_400) throw new HostError(400, "expiresInSeconds must be an integer from 1 to 86400");
    if (box.state !== "started") throw new HostError(409, `sandbox is ${box.state}`, "CONFLICT");
    // Each process of such a box has a network of its own: nothing it serves is on the host's
    // loopback, where a link would reach whatever else listens on that port (another box's server).
    if (box.egress) throw new HostError(409, "this host cannot open a port of a box whose network is closed (egress deny or an allow-list): each of its processes has a network of its own", "CONFLICT");
    const token = randomBytes(16).toString("hex");
    previews.set(token, { boxId: box.id, port, expiresAtMs: Date.now() + ttl * 1000 });
    const base = (publicUrl ?? baseUrl).replace(/\/+$/, "");
    return { sandboxId: box.id, port, token, url: `${base}/proxy/${port}-${token}/` };
  }

  /**
   * `/proxy/<port>-<token>/<path>`: forwards to the port inside the box. Boxes here are processes
   * on the host's network, so the port is the host's loopback port; the token decides which
   * box and port a URL may reach, and for how long.
   */
  function proxyPreview(req, res, url, key) {
    const m = /^(\d{1,5})-([0-9a-f]{32})$/.exec(key);
    const link = m ? previews.get(m[2]) : undefined;
    if (!m || !link || link.port !== Number(m[1])) throw new HostError(404, "no such preview link");
    if (Date.now() >= link.expiresAtMs) {
      previews.delete(m[2]);
      throw new HostError(410, "preview link expired");
    }
    const box = boxes.get(link.boxId);
    if (!box || box.state !== "started") throw new HostError(404, "the box behind this preview link is gone");
    const prefix = `/proxy/${key}`;
    const rest = url.pathname.slice(prefix.length) || "/";
    const headers = { ...req.headers, host: `127.0.0.1:${link.port}`, "x-forwarded-prefix": prefix };
    const upstream = http.request({ host: "127.0.0.1", port: link.port, method: req.method, path: rest + url.search, headers }, (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.pipe(res);
    });
    upstream.on("error", (err) => {
      if (res.headersSent) return res.destroy();
      sendJson(res, 502, errorBody(502, `nothing answers on port ${link.port} in the box (${err.code ?? err.message})`, { source: "DAYTONA_PROXY" }));
    });
    req.pipe(upstream);
  }

  function findBox(idOrName) {
    const b = boxes.get(idOrName);
    if (b) return b;
    for (const box of boxes.values()) if (box.spec.name === idOrName) return box;
    throw new HostError(404, `Sandbox with ID or name ${idOrName} not found`);
  }

  async function handleApi(req, res, url, p) {
    if (!api.isAuthorized(req, url, null)) throw new HostError(401, "Unauthorized");
    const m = req.method;
    if (p[0] === "sandbox") {
      if (p.length === 1 && m === "POST") return sendJson(res, 200, createBox(await readObject(req, maxBodyBytes)).dto());
      if (p.length === 1 && m === "GET") return sendJson(res, 200, listBoxes(url));
      const box = findBox(p[1]);
      if (p.length === 2 && m === "GET") return sendJson(res, 200, box.dto());
      if (p.length === 2 && m === "DELETE") return sendJson(res, 200, deleteBox(box));
      if (p.length === 3 && p[2] === "toolbox-proxy-url" && m === "GET") return sendJson(res, 200, { url: `${baseUrl}/toolbox` });
      if (p.length === 3 && p[2] === "start" && m === "POST") return sendJson(res, 200, startBox(box));
      if (p.length === 3 && p[2] === "stop" && m === "POST") return sendJson(res, 200, await stopBox(box));
      if (p.length === 5 && p[2] === "ports" && p[4] === "signed-preview-url" && m === "GET") return sendJson(res, 200, signPreview(box, url, p[3]));
      if (p.length === 5 && p[2] === "ports" && p[4] === "preview-url" && m === "GET") {
        return sendJson(res, 200, { sandboxId: box.id, url: `${baseUrl}/toolbox/${box.id}`, token: box.token });
      }
    }
    if (p[0] === "volumes") return handleVolumes(req, res, m, p.slice(1));
    if (p[0] === "snapshots") {
      if (p.length === 1 && m === "POST") return sendJson(res, 200, createSnapshot(await readJson(req, maxBodyBytes)));
      if (p.length === 1 && m === "GET") {
        const items = [...snapshots.values()];
        return sendJson(res, 200, { items, total: items.length, page: 1, totalPages: 1 });
      }
      const snap = snapshots.get(p[1]) ?? [...snapshots.values()].find((s) => s.id === p[1]);
      if (!snap) throw new HostError(404, `Snapshot ${p[1]} not found`);
      if (p.length === 2 && m === "GET") return sendJson(res, 200, snap);
      if (p.length === 2 && m === "DELETE") {
        snapshots.delete(snap.name);
        return sendEmpty(res, 200);
      }
    }
    throw new HostError(404, `no route for ${m} /api/${p.join("/")}`);
  }

  /** Daytona's volume API: create, list, get by name, delete (never while a box mounts it). */
  async function handleVolumes(req, res, m, p) {
    if (p.length === 0 && m === "POST") {
      const body = await readJson(req, maxBodyBytes);
      if (!body || typeof body.name !== "string" || !/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/.test(body.name)) throw new HostError(400, "name must be 1-100 chars of [A-Za-z0-9._-]");
      if ([...volumes.values()].some((v) => v.name === body.name)) throw new HostError(409, `Volume with name ${body.name} already exists`);
      const now = new Date().toISOString();
      const v = { id: randomBytes(8).toString("hex"), name: body.name, organizationId: "local", state: "ready", createdAt: now, updatedAt: now, lastUsedAt: null, errorReason: null };
      fs.mkdirSync(path.join(rootDir, "volumes", v.id), { recursive: true });
      // Its record sits next to its directory: a host restarted on the same root knows it again.
      fs.writeFileSync(path.join(rootDir, "volumes", `${v.id}.json`), JSON.stringify(v, null, 2));
      volumes.set(v.id, v);
      log(`volume ${v.name} (${v.id}) created`);
      return sendJson(res, 200, v);
    }
    if (p.length === 0 && m === "GET") return sendJson(res, 200, [...volumes.values()]);
    if (p.length === 2 && p[0] === "by-name" && m === "GET") {
      const v = [...volumes.values()].find((x) => x.name === p[1]);
      if (!v) throw new HostError(404, `Volume with name ${p[1]} not found`);
      return sendJson(res, 200, v);
    }
    if (p.length === 1 && m === "GET") {
      const v = volumes.get(p[0]);
      if (!v) throw new HostError(404, `Volume ${p[0]} not found`);
      return sendJson(res, 200, v);
    }
    if (p.length === 1 && m === "DELETE") {
      const v = volumes.get(p[0]);
      if (!v) throw new HostError(404, `Volume ${p[0]} not found`);
      if ([...boxes.values()].some((b) => b.state !== "destroyed" && (b.spec.volumes ?? []).some((x) => x.volumeId === v.id))) {
        throw new HostError(409, `Volume ${v.name} is in use by a sandbox`);
      }
      volumes.delete(v.id);
      fs.rmSync(path.join(rootDir, "volumes", `${v.id}.json`), { force: true });
      fs.rmSync(path.join(rootDir, "volumes", v.id), { recursive: true, force: true });
      return sendEmpty(res, 200);
    }
    throw new HostError(404, `no route for ${m} /api/volumes/${p.join("/")}`);
  }

  /** Where a volume mount lands in a local box: Daytona's home is /home/daytona, ours is the box's home. */
  function volumeMounts(body) {
    const list = body.volumes ?? [];
    if (!Array.isArray(list)) throw new HostError(400, "volumes must be an array");
    return list.map((m) => {
      const v = volumes.get(m?.volumeId);
      if (!v) throw new HostError(400, `Volume ${m?.volumeId} not found`);
      const mp = String(m.mountPath ?? "");
      if (!mp.startsWith("/home/daytona/") || mp.split("/").includes("..")) throw new HostError(400, `mountPath ${mp}: this host mounts volumes under /home/daytona/ only`);
      const sub = m.subpath ?? "";
      // A prefix inside the volume: never its parent, another volume or the host.
      if (typeof sub !== "string" || sub.startsWith("/") || sub.split("/").includes("..")) throw new HostError(400, `subpath ${sub}: a path inside the volume`);
      return { hostDir: path.join(rootDir, "volumes", v.id, sub), homePath: mp.slice("/home/daytona/".length) };
    });
  }

  function createBox(body) {
    if (!body || typeof body !== "object") throw new HostError(400, "body must be a JSON object");
    for (const k of ["env", "labels"]) {
      const v = body[k];
      if (v !== undefined && (typeof v !== "object" || v === null || Object.values(v).some((x) => typeof x !== "string"))) {
        throw new HostError(400, `${k} must be an object of strings`);
      }
    }
    if (body.name && [...boxes.values()].some((b) => b.spec.name === body.name)) {
      throw new HostError(409, `Sandbox with name ${body.name} already exists`);
    }
    let snapshotDir;
    if (body.snapshot) {
      const snap = snapshots.get(body.snapshot);
      if (!snap) throw new HostError(400, `Snapshot ${body.snapshot} not found. Did you add it through the Daytona Dashboard?`);
      snapshotDir = path.join(rootDir, "snapshots", snap.name);
    }
    const mounts = volumeMounts(body);
    const egress = egressPolicy(body);
    if (egress && !canIsolateNetwork()) throw new HostError(400, "this host cannot close a box's network here (unshare -rn is not permitted); create the box with an open network");
    const box = new Box({ hostId, root: rootDir, spec: body, toolboxProxyUrl: `${baseUrl}/toolbox`, snapshotDir, mounts });
    box.egressPolicy = egress;
    boxes.set(box.id, box);
    log(`create ${box.id} labels=${JSON.stringify(body.labels ?? {})}`);
    setTimeout(() => void box.provision(), 10);
    return box;
  }

  function listBoxes(url) {
    let want = {};
    const raw = url.searchParams.get("labels");
    if (raw) {
      try {
        want = JSON.parse(raw);
      } catch {
        throw new HostError(400, "labels must be a JSON object");
      }
      if (!isObject(want) || Object.values(want).some((x) => typeof x !== "string")) throw new HostError(400, "labels must be a JSON object of strings");
    }
    const states = url.searchParams.getAll("states").flatMap((s) => s.split(","));
    const items = [...boxes.values()]
      .filter((b) => Object.entries(want).every(([k, v]) => b.spec.labels?.[k] === v))
      .filter((b) => states.length === 0 || states.includes(b.state))
      .map((b) => b.dto({ full: false }));
    return { items, nextCursor: null };
  }

  function deleteBox(box) {
    // A second delete while the first is still tearing down is a state conflict, as on Daytona.
    if (box.state === "destroying") throw new HostError(409, "Sandbox state change in progress");
    box.setState("destroying");
    const dto = box.dto();
    log(`delete ${box.id}`);
    box
      .destroy()
      .catch((err) => log(`delete ${box.id} failed: ${err?.message}`))
      .finally(() => {
        box.setState("destroyed");
        boxes.delete(box.id);
      });
    return dto;
  }

  function startBox(box) {
    if (box.state === "stopped") box.setState("started");
    return box.dto();
  }

  async function stopBox(box) {
    if (box.state !== "started") throw new HostError(409, `Sandbox is ${box.state}`);
    box.setState("stopping");
    await box.killAll();
    box.sessions.clear();
    box.setState("stopped");
    return box.dto();
  }

  /**
   * A local snapshot is a recorded name: nothing is built from the image or Dockerfile (boxes run on
   * the host's own toolchain). If `<root>/snapshots/<name>/` exists its files seed each new box's HOME.
   */
  function createSnapshot(body) {
    if (!body?.name || typeof body.name !== "string") throw new HostError(400, "name is required");
    // The name is a file and a directory under <root>/snapshots/: one that is not a single path
    // component would be read and written elsewhere (`../boxes` would seed a box with every other box).
    if (body.name.length > 200 || /[/\\\0]/.test(body.name) || body.name === "." || body.name === "..") {
      throw new HostError(400, "this host takes snapshot names without /, \\ or NUL, other than . and ..");
    }
    const now = new Date().toISOString();
    const snap = {
      id: snapshots.get(body.name)?.id ?? randomBytes(8).toString("hex"),
      organizationId: "local",
      general: false,
      name: body.name,
      imageName: body.imageName ?? "",
      state: "active",
      size: null,
      entrypoint: body.entrypoint ?? null,
      cpu: body.cpu ?? 1,
      gpu: body.gpu ?? 0,
      mem: body.memory ?? 1,
      disk: body.disk ?? 1,
      errorReason: null,
      createdAt: now,
      updatedAt: now,
      lastUsedAt: null,
      sourceSandboxId: null,
      ...(body.buildInfo ? { buildInfo: { dockerfileContent: body.buildInfo.dockerfileContent ?? "", contextHashes: body.buildInfo.contextHashes ?? [], createdAt: now, updatedAt: now, snapshotRef: body.name } } : {}),
    };
    snapshots.set(body.name, snap);
    fs.mkdirSync(path.join(rootDir, "snapshots"), { recursive: true });
    fs.writeFileSync(path.join(rootDir, "snapshots", `${body.name}.json`), JSON.stringify(snap, null, 2));
    return snap;
  }

  // Volumes, like their contents, survive a restart on the same root.
  for (const f of fs.readdirSync(path.join(rootDir, "volumes"))) {
    if (!f.endsWith(".json")) continue;
    const v = JSON.parse(fs.readFileSync(path.join(rootDir, "volumes", f), "utf8"));
    if (fs.existsSync(path.join(rootDir, "volumes", v.id))) volumes.set(v.id, v);
  }

  // Snapshots recorded by earlier runs against the same root survive restarts.
  try {
    for (const f of fs.readdirSync(path.join(rootDir, "snapshots"))) {
      if (!f.endsWith(".json")) continue;
      const s = JSON.parse(fs.readFileSync(path.join(rootDir, "snapshots", f), "utf8"));
      snapshots.set(s.name, s);
    }
  } catch {
    /* none yet */
  }

  async function handleToolbox(req, res, url, box, p) {
    const m = req.method;
    const route = `${m} /${p.join("/")}`;
    const q = url.searchParams;
    if (route === "GET /user-home-dir") return sendJson(res, 200, { dir: box.home });
    if (route === "GET /work-dir") return sendJson(res, 200, { dir: box.home });
    if (route === "GET /version") return sendJson(res, 200, { version: "local-sandbox-host" });
    if (route === "POST /process/execute") return sendJson(res, 200, await box.execute(await readObject(req, maxBodyBytes)));
    if (route === "POST /git/clone") {
      await box.clone(await readObject(req, maxBodyBytes));
      return sendEmpty(res, 200);
    }
    if (route === "POST /files/folder") {
      const dir = box.resolve(q.get("path"));
      const rawMode = q.get("mode") || "755";
      if (!/^[0-7]{1,4}$/.test(rawMode)) throw new HostError(400, "mode must be an octal permission such as 755", "BAD_REQUEST");
      const mode = parseInt(rawMode, 8);
      fsCall(() => fs.mkdirSync(dir, { recursive: true, mode }));
      return sendEmpty(res, 200);
    }
    if (route === "POST /files/bulk-upload") return uploadFiles(req, res, box);
    if (route === "POST /files/bulk-download") return downloadFiles(req, res, box);
    if (p[0] === "process" && p[1] === "session") {
      box.assertRunning();
      if (p.length === 2 && m === "POST") {
        box.createSession((await readObject(req, maxBodyBytes)).sessionId);
        return sendEmpty(res, 201);
      }
      if (p.length === 2 && m === "GET") return sendJson(res, 200, [...box.sessions.values()].map((s) => s.info()));
      const s = box.session(p[2]);
      if (p.length === 3 && m === "GET") return sendJson(res, 200, s.info());
      if (p.length === 3 && m === "DELETE") {
        box.deleteSession(p[2]);
        return sendEmpty(res, 204);
      }
      if (p.length === 4 && p[3] === "exec" && m === "POST") {
        const body = await readObject(req, maxBodyBytes);
        const cmd = s.exec(body.command);
        if (body.runAsync || body.async) return sendJson(res, 202, { cmdId: cmd.id });
        await cmd.wait();
        const l = cmd.logs();
        return sendJson(res, 200, { cmdId: cmd.id, exitCode: cmd.exitCode, output: l.output, stdout: l.stdout, stderr: l.stderr });
      }
      if (p[3] === "command" && p[4]) {
        const cmd = s.command(p[4]);
        if (p.length === 5 && m === "GET") return sendJson(res, 200, cmd.info());
        if (p.length === 6 && p[5] === "logs" && m === "GET") return sendJson(res, 200, cmd.logs());
      }
    }
    throw new HostError(404, `no route for ${route}`);
  }

  /** The most a followed command's log puts in one WebSocket frame. */
  const LOG_FRAME_BYTES = 16 * 1024;

  function handleUpgrade(req, socket, head) {
    const url = new URL(req.url, "http://local");
    const p = pathParts(url);
    // /toolbox/<id>/process/session/<sid>/command/<cid>/logs?follow=true
    if (!(p[0] === "toolbox" && p[2] === "process" && p[3] === "session" && p[5] === "command" && p[7] === "logs" && p.length === 8)) {
      throw new HostError(404, "no websocket route");
    }
    const box = boxes.get(p[1]);
    if (!api.isAuthorized(req, url, box)) throw new HostError(401, "Unauthorized");
    if (!box) throw new HostError(404, "sandbox not found");
    const cmd = box.session(p[4]).command(p[6]);
    const ws = acceptWebSocket(req, socket, head);
    if (!ws) return;
    // In frames of a bounded size, as a daemon reading the log sends them: the SDK's demuxer
    // spreads each frame into an argument list, and a log of megabytes in one frame overflows its stack.
    const send = (data) => {
      for (let at = 0; at < data.length; at += LOG_FRAME_BYTES) ws.sendBinary(data.subarray(at, at + LOG_FRAME_BYTES));
    };
    const { existing, unsubscribe } = cmd.follow((frame) => {
      if (frame === null) ws.close(1000, "command finished");
      else send(frame);
    });
    if (existing.length) send(existing);
    if (cmd.done) ws.close(1000, "command finished");
    ws.onClose(unsubscribe);
  }

  async function uploadFiles(req, res, box) {
    const raw = await readBody(req, maxBodyBytes);
    let form;
    try {
      form = await new Request("http://local/", {
        method: "POST",
        headers: { "content-type": req.headers["content-type"] ?? "" },
        body: raw,
      }).formData();
    } catch (err) {
      throw new HostError(400, `invalid multipart body: ${err.message}`);
    }
    const files = [];
    for (let i = 0; form.has(`files[${i}].path`); i++) {
      const file = form.get(`files[${i}].file`);
      if (!file || typeof file === "string") throw new HostError(400, `files[${i}].file is missing`);
      files.push({ dest: box.resolve(String(form.get(`files[${i}].path`))), file });
    }
    if (files.length === 0) throw new HostError(400, "no files in upload");
    for (const { dest, file } of files) {
      const data = Buffer.from(await file.arrayBuffer());
      fsCall(() => {
        fs.mkdirSync(path.dirname(dest), { recursive: true });
        fs.writeFileSync(dest, data);
      });
    }
    return sendEmpty(res, 200);
  }

  async function downloadFiles(req, res, box) {
    const body = await readObject(req, maxBodyBytes);
    if (!Array.isArray(body?.paths) || body.paths.length === 0) throw new HostError(400, "paths is required");
    const boundary = `sbh${randomBytes(12).toString("hex")}`;
    const chunks = [];
    for (const src of body.paths) {
      const name = String(src).replace(/"/g, "%22");
      let data;
      let error;
      try {
        const abs = box.resolve(String(src));
        data = fsCall(() => fs.readFileSync(abs));
      } catch (err) {
        const status = err instanceof HostError ? err.status : 500;
        // Name the box path, not the host path, in the message.
        const message = err.fsCode === "ENOENT" ? `file ${src} not found` : box.hideHostPaths(err.message);
        error = errorBody(status, message, { code: err.code, source: "DAYTONA_DAEMON", method: "POST", path: "/files/bulk-download" });
      }
      const field = error ? "error" : "file";
      const payload = error ? Buffer.from(JSON.stringify(error)) : data;
      chunks.push(
        Buffer.from(
          `--${boundary}\r\nContent-Disposition: form-data; name="${field}"; filename="${name}"\r\n` +
            `Content-Type: ${error ? "application/json" : "application/octet-stream"}\r\nContent-Length: ${payload.length}\r\n\r\n`,
        ),
        payload,
        Buffer.from("\r\n"),
      );
    }
    chunks.push(Buffer.from(`--${boundary}--\r\n`));
    const out = Buffer.concat(chunks);
    res.writeHead(200, { "content-type": `multipart/form-data; boundary=${boundary}`, "content-length": out.length });
    res.end(out);
  }

  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve());
  });
  const actualPort = server.address().port;
  baseUrl = `http://${host}:${actualPort}`;

  return {
    url: baseUrl,
    apiUrl: `${baseUrl}/api`,
    port: actualPort,
    root: rootDir,
    boxes,
    async close() {
      server.closeAllConnections?.();
      for (const socket of upgraded) socket.destroy();
      await new Promise((r) => server.close(() => r()));
      await Promise.all([...boxes.values()].map((b) => b.destroy().catch(() => {})));
      boxes.clear();
      if (ownRoot) {
        process.off("exit", removeOwnRoot);
        fs.rmSync(rootDir, { recursive: true, force: true });
      }
    },
  };
}

/** Turns fs errors into toolbox error codes instead of 500s (or hangs). */
function fsCall(fn) {
  try {
    return fn();
  } catch (err) {
    if (err instanceof HostError) throw err;
    const map = {
      ENOENT: [404, "FILE_NOT_FOUND"],
      EACCES: [403, "FILE_ACCESS_DENIED"],
      EPERM: [403, "FILE_ACCESS_DENIED"],
      EROFS: [403, "FILE_ACCESS_DENIED"],
      ENOTDIR: [400, "BAD_REQUEST"],
      EISDIR: [400, "BAD_REQUEST"],
      EEXIST: [400, "BAD_REQUEST"],
    };
    const [status, code] = map[err.code] ?? [500, "INTERNAL_SERVER_ERROR"];
    const e = new HostError(status, err.message, code);
    e.fsCode = err.code;
    throw e;
  }
}

function readBody(req, limit) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    const onData = (c) => {
      size += c.length;
      if (size > limit) {
        // The client hears why (413) instead of a reset connection: what it still sends is
        // read and dropped.
        req.off("data", onData);
        chunks.length = 0;
        req.resume();
        reject(new HostError(413, `request body larger than ${limit} bytes`));
        return;
      }
      chunks.push(c);
    };
    req.on("data", onData);
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

async function readJson(req, limit) {
  const raw = await readBody(req, limit);
  if (raw.length === 0) return {};
  try {
    return JSON.parse(raw.toString("utf8"));
  } catch {
    throw new HostError(400, "invalid JSON body");
  }
}

/** A request body that must be a JSON object (an empty body is `{}`). */
async function readObject(req, limit) {
  const body = await readJson(req, limit);
  if (!isObject(body)) throw new HostError(400, "body must be a JSON object", "BAD_REQUEST");
  return body;
}

function isObject(v) {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The URL's path segments, decoded; a broken %-escape is the client's 400. */
function pathParts(url) {
  try {
    return url.pathname.split("/").filter(Boolean).map(decodeURIComponent);
  } catch {
    throw new HostError(400, "malformed %-escape in the path", "BAD_REQUEST");
  }
}

function sendJson(res, status, body) {
  const data = Buffer.from(JSON.stringify(body));
  res.writeHead(status, { "content-type": "application/json; charset=utf-8", "content-length": data.length });
  res.end(data);
}

function sendEmpty(res, status) {
  res.writeHead(status, { "content-length": 0 });
  res.end();
}

function sendError(res, req, err) {
  const status = err instanceof HostError ? err.status : 500;
  const source = req.url.startsWith("/toolbox") ? "DAYTONA_DAEMON" : "DAYTONA_API";
  if (res.headersSent) {
    res.destroy();
    return;
  }
  sendJson(res, status, errorBody(status, err?.message ?? String(err), { code: err?.code, source, method: req.method, path: req.url.split("?")[0] }));
}
