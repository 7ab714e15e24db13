// The local sandbox host, driven by the REAL @daytonaio/sdk, plus every endpoint it implements
// checked against Daytona's OpenAPI schemas.
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { Daytona } from "@daytonaio/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSandboxHost, type SandboxHost } from "../../sandbox-host/server.mjs";
import { loadValidators } from "./sandbox-openapi";
import { ROOT, freePort } from "../../scripts/lib/wrangler-dev.mjs";
import { tempDirs } from "../support/temp-dirs";

const tempDir = tempDirs();

const KEY = "test-host-key";
let host: SandboxHost;
let daytona: Daytona;
const v = loadValidators();

beforeAll(async () => {
  host = await startSandboxHost({ port: 0, apiKey: KEY });
  daytona = new Daytona({ apiUrl: host.apiUrl, apiKey: KEY, target: "local", useDeprecatedPolling: true, requestTimeoutMs: 20_000 });
});
afterAll(async () => {
  await host?.close();
});

function makeRepo(): string {
  const dir = tempDir("sbh-repo-");
  const git = (...args: string[]) => execFileSync("git", args, { cwd: dir, env: { ...process.env, GIT_AUTHOR_NAME: "t", GIT_AUTHOR_EMAIL: "t@t", GIT_COMMITTER_NAME: "t", GIT_COMMITTER_EMAIL: "t@t" } });
  git("init", "-q", "-b", "main");
  fs.writeFileSync(path.join(dir, "README.md"), "hello repo\n");
  git("add", ".");
  git("commit", "-q", "-m", "init");
  return dir;
}

describe("real SDK against the local host", () => {
  it("create -> exec -> files -> clone -> detached logs -> list -> delete -> 404", async () => {
    const labels = { "threadbox.house": `h-${Date.now()}`, "threadbox.thread": "t1" };
    const sb = await daytona.create({ labels, envVars: { GREETING: "hi" }, autoStopInterval: 4380, autoDeleteInterval: -1 }, { timeout: 20 });
    expect(sb.state).toBe("started");

    const r = await sb.process.executeCommand(`bash -c 'echo $GREETING $DAYTONA_SANDBOX_ID; echo oops >&2; exit 7'`);
    expect(r.exitCode).toBe(7);
    expect(r.result).toContain(`hi ${sb.id}`);
    expect(r.result).toContain("oops");

    const home = await sb.getUserHomeDir();
    const pwd = await sb.process.executeCommand("pwd");
    expect(pwd.result.trim()).toBe(home);

    const bytes = new Uint8Array(256).map((_, i) => i);
    await sb.fs.uploadFiles([{ source: Buffer.from(bytes), destination: "up/bin.dat" }]);
    const back = await sb.fs.downloadFile("up/bin.dat");
    expect(new Uint8Array(back)).toEqual(bytes);
    await sb.fs.createFolder("made/here", "755");
    expect((await sb.process.executeCommand("test -d made/here && echo yes")).result.trim()).toBe("yes");

    const repo = makeRepo();
    await sb.git.clone(`file://${repo}`, "work/repo");
    expect((await sb.process.executeCommand("cat work/repo/README.md")).result).toBe("hello repo\n");
    await sb.git.clone(repo, "work/repo2");
    expect((await sb.process.executeCommand("git -C work/repo2 log --oneline | wc -l")).result.trim()).toBe("1");

    await sb.process.createSession("runner");
    const cmd = await sb.process.executeSessionCommand("runner", {
      command: `for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.15; done; exit 3`,
      runAsync: true,
    });
    expect(cmd.cmdId).toBeTruthy();
    const seen: { kind: string; text: string; at: number }[] = [];
    const t0 = Date.now();
    await sb.process.getSessionCommandLogs(
      "runner",
      cmd.cmdId!,
      (s) => seen.push({ kind: "out", text: s, at: Date.now() - t0 }),
      (s) => seen.push({ kind: "err", text: s, at: Date.now() - t0 }),
    );
    const out = seen.filter((s) => s.kind === "out").map((s) => s.text).join("");
    const err = seen.filter((s) => s.kind === "err").map((s) => s.text).join("");
    expect(out).toBe("out1\nout2\nout3\n");
    expect(err).toBe("err1\nerr2\nerr3\n");
    // Live: the first line arrived well before the command finished.
    expect(seen[0].at).toBeLessThan(seen[seen.length - 1].at);
    const done = await sb.process.getSessionCommand("runner", cmd.cmdId!);
    // `exit 3` inside a session command ends the session shell (as on Daytona): exit code 3.
    expect(done.exitCode).toBe(3);
    const logs = await sb.process.getSessionCommandLogs("runner", cmd.cmdId!);
    expect(logs.stdout).toBe("out1\nout2\nout3\n");
    expect(logs.stderr).toBe("err1\nerr2\nerr3\n");

    // Sessions keep shell state between commands.
    await sb.process.createSession("shell");
    await sb.process.executeSessionCommand("shell", { command: "mkdir -p d && cd d && export X=42" });
    const st = await sb.process.executeSessionCommand("shell", { command: "echo $X $(basename $PWD)" });
    expect(st.stdout).toBe("42 d\n");
    expect(st.exitCode).toBe(0);

    const listed: string[] = [];
    for await (const s of daytona.list({ labels })) listed.push(s.id);
    expect(listed).toEqual([sb.id]);
    const none: string[] = [];
    for await (const s of daytona.list({ labels: { "threadbox.house": "nobody" } })) none.push(s.id);
    expect(none).toEqual([]);

    await sb.delete(30, true);
    await expect(daytona.get(sb.id)).rejects.toMatchObject({ statusCode: 404 });
  });

  it("a box deleted while it is still being created is gone for good: no directory comes back, and its state never turns started", async () => {
    // The SDK (or a client cleaning up after a create that timed out) may delete a box before the
    // host has provisioned it; provisioning must not recreate what the delete removed.
    const root = tempDir("sbh-race-");
    const own = await startSandboxHost({ port: 0, apiKey: KEY, root });
    try {
      const headers = { authorization: `Bearer ${KEY}`, "content-type": "application/json" };
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) {
        const made = (await (await fetch(`${own.apiUrl}/sandbox`, { method: "POST", headers, body: "{}" })).json()) as { id: string; state: string };
        expect(made.state).toBe("creating");
        const del = await fetch(`${own.apiUrl}/sandbox/${made.id}`, { method: "DELETE", headers });
        expect(del.status).toBe(200);
        ids.push(made.id);
      }
      await new Promise((r) => setTimeout(r, 300));
      expect(fs.readdirSync(path.join(root, "boxes"))).toEqual([]);
      for (const id of ids) expect((await fetch(`${own.apiUrl}/sandbox/${id}`, { headers })).status).toBe(404);
    } finally {
      await own.close();
    }
  });

  it("a snapshot name that is not one path component (../x, a/b) is a 400: nothing is written outside the snapshots directory", async () => {
    const root = tempDir("sbh-snap-");
    const own = await startSandboxHost({ port: 0, apiKey: KEY, root });
    try {
      const headers = { authorization: `Bearer ${KEY}`, "content-type": "application/json" };
      for (const name of ["../evil", "../boxes", "team/harness:1", "..", "x".repeat(300)]) {
        const r = await fetch(`${own.apiUrl}/snapshots`, { method: "POST", headers, body: JSON.stringify({ name }) });
        expect([name.slice(0, 20), r.status]).toEqual([name.slice(0, 20), 400]);
      }
      expect(fs.existsSync(path.join(root, "evil.json"))).toBe(false);
      expect(fs.existsSync(path.join(root, "boxes.json"))).toBe(false);
      const ok = await fetch(`${own.apiUrl}/snapshots`, { method: "POST", headers, body: JSON.stringify({ name: "threadbox-harness:1.2" }) });
      expect(ok.status).toBe(200);
    } finally {
      await own.close();
    }
  });

  it("an upload over the host's body limit is answered 413, not a reset connection; the box goes on working", async () => {
    const own = await startSandboxHost({ port: 0, apiKey: KEY, maxBodyBytes: 1024 * 1024 });
    try {
      const sdk = new Daytona({ apiUrl: own.apiUrl, apiKey: KEY, target: "local", useDeprecatedPolling: true, requestTimeoutMs: 20_000 });
      const sb = await sdk.create({ autoDeleteInterval: -1 }, { timeout: 20 });
      const form = new FormData();
      form.append("files[0].path", "big.bin");
      form.append("files[0].file", new Blob([new Uint8Array(4 * 1024 * 1024)]), "big.bin");
      const r = await fetch(`${own.url}/toolbox/${sb.id}/files/bulk-upload`, { method: "POST", headers: { authorization: `Bearer ${KEY}` }, body: form });
      expect(r.status).toBe(413);
      v.toolbox("ErrorResponse", await r.json());
      await expect(sb.fs.uploadFile(Buffer.alloc(2 * 1024 * 1024), "big2.bin")).rejects.toMatchObject({ statusCode: 413 });
      expect((await sb.process.executeCommand("ls")).result).toBe("");
      await sb.delete();
    } finally {
      await own.close();
    }
  });

  it("a host started on the root of one that died removes the box directories it left, and ends their processes: no box owns them any more", async () => {
    const root = tempDir("sbh-root-");
    fs.mkdirSync(path.join(root, "boxes", "dead-box", "home"), { recursive: true });
    fs.writeFileSync(path.join(root, "boxes", "dead-box", "home", "left.txt"), "from a host that was killed");
    fs.mkdirSync(path.join(root, "volumes", "vol-1"), { recursive: true });
    // A process of that box, still running after its host was killed (a runner, say), marked as the dead host marked it.
    const orphan = spawn("sleep", ["60"], { detached: true, stdio: "ignore", env: { ...process.env, SANDBOX_HOST_BOX: "deadhost0001/dead-box" } });
    const bystander = spawn("sleep", ["60"], { detached: true, stdio: "ignore", env: { ...process.env, SANDBOX_HOST_BOX: "deadhost0001/other-box" } });
    const gone = new Promise((r) => orphan.on("exit", r));
    const again = await startSandboxHost({ port: 0, apiKey: KEY, root });
    try {
      await gone;
      expect(bystander.exitCode).toBeNull(); // a box whose directory is not there is not this host's to end
      expect(fs.readdirSync(path.join(root, "boxes"))).toEqual([]);
      expect(fs.existsSync(path.join(root, "volumes", "vol-1"))).toBe(true);
    } finally {
      bystander.kill("SIGKILL");
      await again.close();
    }
  });

  it("a box whose env sets PATH still runs commands: its PATH decides what they find, not whether the shell starts", async () => {
    // An environment's `env` may set PATH; it used to make every command a 500 "spawn bash ENOENT".
    const sb = await daytona.create({ envVars: { PATH: "/opt/none/bin" }, autoDeleteInterval: -1 }, { timeout: 20 });
    try {
      const r = await sb.process.executeCommand("echo \"path=$PATH\"; ls");
      expect(r.result).toContain("path=/opt/none/bin");
      expect(r.result).toMatch(/ls: command not found/);
      expect(r.exitCode).toBe(127);
      // A command no process can take is the caller's mistake: 400, not a 500.
      await expect(sb.process.executeCommand("echo a\u0000b")).rejects.toMatchObject({ statusCode: 400 });
      await sb.process.createSession("s");
      const s = await sb.process.executeSessionCommand("s", { command: "echo \"p=$PATH\"" });
      expect(s.exitCode).toBe(0);
      expect(s.output ?? s.stdout).toContain("p=/opt/none/bin");
      // A closed network's set-up runs on the host's tools, then the command on the box's PATH.
      const closed = await daytona.create({ envVars: { PATH: "/opt/none/bin" }, networkBlockAll: true, autoDeleteInterval: -1 }, { timeout: 20 });
      const c = await closed.process.executeCommand("echo \"closed=$PATH\"");
      expect({ exitCode: c.exitCode, out: c.result.trim() }).toEqual({ exitCode: 0, out: "closed=/opt/none/bin" });
      await closed.delete(30, true);
    } finally {
      await sb.delete(30, true);
    }
  });

  it("a box is not inside the git checkout its host directory happens to sit in", async () => {
    // `npm run dev` keeps boxes under the project's .wrangler/: git in a box must not find the
    // project's repository, or a run's diff artifact would be the developer's working tree.
    const outer = makeRepo();
    const nested = await startSandboxHost({ port: 0, apiKey: KEY, root: path.join(outer, ".boxes") });
    try {
      const client = new Daytona({ apiUrl: nested.apiUrl, apiKey: KEY, target: "local", useDeprecatedPolling: true, requestTimeoutMs: 20_000 });
      const sb = await client.create({ autoDeleteInterval: -1 }, { timeout: 20 });
      const outside = await sb.process.executeCommand("git rev-parse --show-toplevel");
      expect(outside.exitCode).not.toBe(0);
      expect(outside.result).toMatch(/not a git repository/);
      // A repository made in the box is still found, from its subdirectories too.
      await sb.process.executeCommand("git init -q proj && mkdir -p proj/sub");
      const inside = await sb.process.executeCommand("git rev-parse --show-toplevel", "proj/sub");
      expect(inside.exitCode).toBe(0);
      expect(inside.result.trim()).toBe(`${await sb.getUserHomeDir()}/proj`);
      await sb.delete(30, true);
    } finally {
      await nested.close();
    }
  });
});

describe("a host on a temp root of its own leaves nothing behind", () => {
  const SERVER = path.join(ROOT, "sandbox-host", "server.mjs");
  const MAIN = path.join(ROOT, "sandbox-host", "main.mjs");
  const alive = (pid: number) => { try { process.kill(pid, 0); return true; } catch { return false; } };
  /** A started box with a process of its own left running in the background; resolves to that pid. */
  const boxWithProcess = async (apiUrl: string, url: string, key: string) => {
    const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" };
    const get = async (p: string, init: RequestInit = {}): Promise<any> => (await fetch(p, { headers, ...init })).json();
    const box = await get(`${apiUrl}/sandbox`, { method: "POST", body: "{}" });
    while ((await get(`${apiUrl}/sandbox/${box.id}`)).state !== "started") await new Promise((r) => setTimeout(r, 20));
    const r = await get(`${url}/toolbox/${box.id}/process/execute`, { method: "POST", body: JSON.stringify({ command: "sleep 300 >/dev/null 2>&1 & echo $!" }) });
    return Number(r.result.trim());
  };
  const gone = async (pid: number) => {
    for (const t0 = Date.now(); alive(pid) && Date.now() - t0 < 15_000;) await new Promise((r) => setTimeout(r, 20));
    return !alive(pid);
  };

  it("a script that exits without close() (process.exit on an error path): the root and the box's processes go with it", async () => {
    const tmp = tempDir("sbh-exit-");
    const code = `
      import { startSandboxHost } from ${JSON.stringify(SERVER)};
      const host = await startSandboxHost({ port: 0, apiKey: "k" });
      console.log(JSON.stringify({ url: host.url, apiUrl: host.apiUrl, root: host.root }));
      process.stdin.once("data", () => process.exit(3));`;
    const child = spawn(process.execPath, ["--input-type=module", "-e", code], { env: { ...process.env, TMPDIR: tmp }, stdio: ["pipe", "pipe", "inherit"] });
    const exited = new Promise((r) => child.on("exit", (c, signal) => r(c ?? signal)));
    const started = JSON.parse(await new Promise<string>((resolve) => child.stdout.once("data", (d) => resolve(String(d)))));
    expect(started.root.startsWith(tmp)).toBe(true);
    const pid = await boxWithProcess(started.apiUrl, started.url, "k");
    child.stdin.write("exit\n");
    expect(await exited).toBe(3);
    expect(await gone(pid)).toBe(true);
    expect(fs.existsSync(started.root)).toBe(false);
  });

  it("a host started on the root of one that was killed removes its closed-network boxes' sockets too (they are in a temp dir of their own)", async () => {
    const tmp = tempDir("sbh-sock-");
    const root = tempDir("sbh-sock-root-");
    const code = `
      import { startSandboxHost } from ${JSON.stringify(SERVER)};
      const host = await startSandboxHost({ port: 0, apiKey: "k", root: ${JSON.stringify(root)} });
      console.log(JSON.stringify({ apiUrl: host.apiUrl }));`;
    const child = spawn(process.execPath, ["--input-type=module", "-e", code], { env: { ...process.env, TMPDIR: tmp }, stdio: ["ignore", "pipe", "inherit"] });
    const exited = new Promise((r) => child.on("exit", r));
    const { apiUrl } = JSON.parse(await new Promise<string>((resolve) => child.stdout.once("data", (d) => resolve(String(d)))));
    const headers = { authorization: "Bearer k", "content-type": "application/json" };
    const box = (await (await fetch(`${apiUrl}/sandbox`, { method: "POST", headers, body: JSON.stringify({ networkBlockAll: true, domainAllowList: "127.0.0.1:9" }) })).json()) as { id: string };
    let state = "";
    while (state !== "started" && state !== "error") {
      state = ((await (await fetch(`${apiUrl}/sandbox/${box.id}`, { headers })).json()) as { state: string }).state;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(state).toBe("started");
    const sockets = () => fs.readdirSync(tmp).filter((f) => f.startsWith("tbx-egress-"));
    expect(sockets()).toHaveLength(1);
    child.kill("SIGKILL");
    await exited;
    const again = await startSandboxHost({ port: 0, apiKey: KEY, root });
    try {
      expect(sockets()).toEqual([]);
    } finally {
      await again.close();
    }
  });

  it("a client that resets its connection after a refused WebSocket upgrade (the SDK's socket.io channel, as its process exits) does not end the host", async () => {
    const port = await freePort();
    const child = spawn(process.execPath, [MAIN], {
      env: { ...process.env, TMPDIR: tempDir("sbh-rst-"), SANDBOX_HOST_PORT: String(port), SANDBOX_HOST_API_KEY: "k", SANDBOX_HOST_ROOT: "" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (d) => { stderr += d; });
    const exited = new Promise<number | string | null>((r) => child.on("exit", (code, signal) => r(code ?? signal)));
    try {
      let out = "";
      await new Promise<void>((resolve) => child.stdout.on("data", (d) => { out += d; if (out.includes("boxes under")) resolve(); }));
      const socket = net.connect(port, "127.0.0.1");
      socket.on("error", () => {});
      socket.write("GET /api/socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
      const answer = await new Promise<string>((resolve) => socket.once("data", (d) => resolve(String(d))));
      expect(answer.split("\r\n")[0]).toBe("HTTP/1.1 404 Not Found");
      const closed = new Promise((r) => socket.on("close", r));
      socket.resetAndDestroy();
      await closed;
      // The host still serves: a box is made and runs a command.
      const sdk = new Daytona({ apiUrl: `http://127.0.0.1:${port}/api`, apiKey: "k", target: "local", useDeprecatedPolling: true, requestTimeoutMs: 20_000 });
      const sb = await sdk.create({ autoDeleteInterval: -1 }, { timeout: 20 });
      expect((await sb.process.executeCommand("echo up")).result).toBe("up\n");
      await sb.delete();
      expect(child.exitCode, stderr).toBe(null);
    } finally {
      child.kill("SIGTERM");
      await exited;
    }
  });

  it("npm run sandbox-host without SANDBOX_HOST_ROOT, ended by SIGHUP (its terminal closed): the root and the box's processes go", async () => {
    const tmp = tempDir("sbh-hup-");
    const port = await freePort();
    const child = spawn(process.execPath, [MAIN], {
      env: { ...process.env, TMPDIR: tmp, SANDBOX_HOST_PORT: String(port), SANDBOX_HOST_API_KEY: "k", SANDBOX_HOST_ROOT: "" },
      stdio: ["ignore", "pipe", "inherit"],
    });
    const exited = new Promise((r) => child.on("exit", (code, signal) => r(code ?? signal)));
    let out = "";
    await new Promise<void>((resolve) => child.stdout.on("data", (d) => { out += d; if (out.includes("boxes under")) resolve(); }));
    const root = /boxes under (\S+)/.exec(out)![1];
    expect(root.startsWith(tmp)).toBe(true);
    const pid = await boxWithProcess(`http://127.0.0.1:${port}/api`, `http://127.0.0.1:${port}`, "k");
    child.kill("SIGHUP");
    await exited;
    expect(await gone(pid)).toBe(true);
    expect(fs.existsSync(root)).toBe(false);
  });
});

describe("host responses match Daytona's OpenAPI schemas", () => {
  const call = async (method: string, p: string, body?: unknown, headers: Record<string, string> = {}) => {
    const res = await fetch(`${host.url}${p}`, {
      method,
      headers: { authorization: `Bearer ${KEY}`, ...(body !== undefined && !(body instanceof FormData) ? { "content-type": "application/json" } : {}), ...headers },
      body: body === undefined ? undefined : body instanceof FormData ? body : JSON.stringify(body),
    });
    const text = await res.text();
    let json: unknown;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch {
      json = undefined;
    }
    return { status: res.status, json, text, headers: res.headers };
  };
  /** Validates against the schema the spec declares for this route and status. */
  const expectSpec = (spec: "api" | "toolbox", route: string, method: string, r: { status: number; json: unknown }) => {
    const name = v.declared(spec, route, method, r.status);
    expect(name, `${method} ${route} ${r.status} has a declared schema`).toBeTruthy();
    if (Array.isArray(r.json)) for (const item of r.json) v[spec](name!, item);
    else v[spec](name!, r.json);
  };

  it("control plane: sandbox, list, preview, proxy url, snapshots, start/stop, delete", async () => {
    const created = await call("POST", "/api/sandbox", { labels: { "threadbox.house": "schema" }, env: { A: "1" }, autoStopInterval: 0, autoDeleteInterval: -1 });
    expect(created.status).toBe(200);
    expectSpec("api", "/sandbox", "POST", created);
    const id = (created.json as { id: string }).id;
    // wait for started
    for (const t0 = Date.now(); Date.now() - t0 < 15_000;) {
      const g = await call("GET", `/api/sandbox/${id}`);
      expectSpec("api", "/sandbox/{sandboxIdOrName}", "GET", g);
      if ((g.json as { state: string }).state === "started") break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const list = await call("GET", `/api/sandbox?labels=${encodeURIComponent(JSON.stringify({ "threadbox.house": "schema" }))}`);
    expectSpec("api", "/sandbox", "GET", list);
    expect((list.json as { items: unknown[] }).items).toHaveLength(1);
    expectSpec("api", "/sandbox/{sandboxIdOrName}/ports/{port}/preview-url", "GET", await call("GET", `/api/sandbox/${id}/ports/1/preview-url`));
    expectSpec("api", "/sandbox/{sandboxId}/toolbox-proxy-url", "GET", await call("GET", `/api/sandbox/${id}/toolbox-proxy-url`));
    expectSpec("api", "/sandbox/{sandboxIdOrName}/stop", "POST", await call("POST", `/api/sandbox/${id}/stop`));
    expectSpec("api", "/sandbox/{sandboxIdOrName}/start", "POST", await call("POST", `/api/sandbox/${id}/start`));
    expectSpec("api", "/sandbox/{sandboxIdOrName}/ports/{port}/signed-preview-url", "GET", await call("GET", `/api/sandbox/${id}/ports/3000/signed-preview-url?expiresInSeconds=60`));

    const vol = await call("POST", "/api/volumes", { name: "schema-vol" });
    expectSpec("api", "/volumes", "POST", vol);
    const volId = (vol.json as { id: string }).id;
    expectSpec("api", "/volumes", "GET", await call("GET", "/api/volumes"));
    expectSpec("api", "/volumes/{volumeId}", "GET", await call("GET", `/api/volumes/${volId}`));
    expectSpec("api", "/volumes/by-name/{name}", "GET", await call("GET", "/api/volumes/by-name/schema-vol"));
    // A subpath names a prefix inside the volume, never a way out of it (to another volume, the host).
    for (const subpath of ["../..", "/etc", "a/../../x"]) {
      const out = await call("POST", "/api/sandbox", { labels: { "threadbox.house": "schema" }, volumes: [{ volumeId: volId, mountPath: "/home/daytona/m", subpath }] });
      expect([subpath, out.status]).toEqual([subpath, 400]);
    }
    expect((await call("DELETE", `/api/volumes/${volId}`)).status).toBe(200);
    expect((await call("GET", "/api/volumes/by-name/schema-vol")).status).toBe(404);

    const snap = await call("POST", "/api/snapshots", { name: "schema-snap", imageName: "node:22" });
    expectSpec("api", "/snapshots", "POST", snap);
    expectSpec("api", "/snapshots/{id}", "GET", await call("GET", "/api/snapshots/schema-snap"));
    expectSpec("api", "/snapshots", "GET", await call("GET", "/api/snapshots"));
    expect((await call("GET", "/api/snapshots/missing")).status).toBe(404);

    const del = await call("DELETE", `/api/sandbox/${id}`);
    expectSpec("api", "/sandbox/{sandboxIdOrName}", "DELETE", del);
    expect((del.json as { state: string }).state).toBe("destroying");
    for (const t0 = Date.now(); (await call("GET", `/api/sandbox/${id}`)).status !== 404 && Date.now() - t0 < 15_000;) await new Promise((r) => setTimeout(r, 20));
    expect((await call("GET", `/api/sandbox/${id}`)).status).toBe(404);
    expect((await call("GET", "/api/sandbox", undefined, { authorization: "Bearer wrong" })).status).toBe(401);
  });

  it("toolbox: info, execute, sessions, files, git, and error shapes", async () => {
    const sb = await daytona.create({ labels: { "threadbox.house": "schema2" } }, { timeout: 20 });
    const t = `/toolbox/${sb.id}`;
    expectSpec("toolbox", "/user-home-dir", "GET", await call("GET", `${t}/user-home-dir`));
    expectSpec("toolbox", "/work-dir", "GET", await call("GET", `${t}/work-dir`));
    const ver = await call("GET", `${t}/version`);
    expect(Object.values(ver.json as object).every((x) => typeof x === "string")).toBe(true);
    expectSpec("toolbox", "/process/execute", "POST", await call("POST", `${t}/process/execute`, { command: "echo hi" }));
    const to = await call("POST", `${t}/process/execute`, { command: "sleep 5", timeout: 1 });
    expect(to.status).toBe(408);
    expectSpec("toolbox", "/process/execute", "POST", to);

    expect((await call("POST", `${t}/process/session`, { sessionId: "s" })).status).toBe(201);
    expectSpec("toolbox", "/process/session", "POST", await call("POST", `${t}/process/session`, { sessionId: "s" })); // 409
    const sync = await call("POST", `${t}/process/session/s/exec`, { command: "echo a; echo b >&2" });
    expect(sync.status).toBe(200);
    expectSpec("toolbox", "/process/session/{sessionId}/exec", "POST", sync);
    const asy = await call("POST", `${t}/process/session/s/exec`, { command: "sleep 0.2; echo c", runAsync: true });
    expect(asy.status).toBe(202);
    expectSpec("toolbox", "/process/session/{sessionId}/exec", "POST", asy);
    const cid = (asy.json as { cmdId: string }).cmdId;
    const running = await call("GET", `${t}/process/session/s/command/${cid}`);
    expectSpec("toolbox", "/process/session/{sessionId}/command/{commandId}", "GET", running);
    expect((running.json as { exitCode?: number }).exitCode).toBeUndefined();
    expectSpec("toolbox", "/process/session/{sessionId}/command/{commandId}/logs", "GET", await call("GET", `${t}/process/session/s/command/${cid}/logs`));
    expectSpec("toolbox", "/process/session/{sessionId}", "GET", await call("GET", `${t}/process/session/s`));
    expectSpec("toolbox", "/process/session", "GET", await call("GET", `${t}/process/session`));
    expectSpec("toolbox", "/process/session/{sessionId}", "GET", await call("GET", `${t}/process/session/nope`)); // 404
    expect((await call("DELETE", `${t}/process/session/s`)).status).toBe(204);

    const form = new FormData();
    form.append("files[0].path", "f/one.txt");
    form.append("files[0].file", new Blob(["one"]), "f/one.txt");
    expect((await call("POST", `${t}/files/bulk-upload`, form)).status).toBe(200);
    const dl = await call("POST", `${t}/files/bulk-download`, { paths: ["f/one.txt", "f/missing.txt"] });
    expect(dl.status).toBe(200);
    expect(dl.headers.get("content-type")).toMatch(/^multipart\/form-data; boundary=/);
    const parts = await new Response(dl.text, { headers: { "content-type": dl.headers.get("content-type")! } }).formData();
    expect(await (parts.get("file") as File).text()).toBe("one");
    v.toolbox("ErrorResponse", JSON.parse(await (parts.get("error") as File).text()));
    expect((await call("POST", `${t}/files/folder?path=f/sub&mode=755`)).status).toBe(200);

    // Bad paths answer with errors, never hang.
    const outside = new FormData();
    outside.append("files[0].path", "/etc/evil.txt");
    outside.append("files[0].file", new Blob(["x"]), "evil");
    const o = await call("POST", `${t}/files/bulk-upload`, outside);
    expect(o.status).toBe(400);
    expectSpec("toolbox", "/files/bulk-upload", "POST", o);
    const escape = await call("POST", `${t}/files/folder?path=../../../escape&mode=755`);
    expectSpec("toolbox", "/files/folder", "POST", escape);
    const underFile = new FormData();
    underFile.append("files[0].path", "f/one.txt/child");
    underFile.append("files[0].file", new Blob(["x"]), "child");
    const uf = await call("POST", `${t}/files/bulk-upload`, underFile);
    expect(uf.status).toBe(400);
    v.toolbox("ErrorResponse", uf.json);
    // The box's paths as the box knows them: where the host keeps boxes is not the client's to see.
    expect((uf.json as { message: string }).message).toContain("~/f/one.txt");
    expect(JSON.stringify(uf.json)).not.toContain(host.root);
    // A link in the box to a host path that does not exist yet: a write through it would create it.
    const hostTarget = path.join(tempDir("tb-host-outside-"), "planted.txt");
    expect((await call("POST", `${t}/process/execute`, { command: `ln -s ${hostTarget} dangling && ln -s loop1 loop2 && ln -s loop2 loop1` })).status).toBe(200);
    for (const p of ["dangling", "loop1"]) {
      const through = new FormData();
      through.append("files[0].path", p);
      through.append("files[0].file", new Blob(["x"]), "x");
      const r = await call("POST", `${t}/files/bulk-upload`, through);
      expect([p, r.status]).toEqual([p, 400]);
      expectSpec("toolbox", "/files/bulk-upload", "POST", r);
    }
    expect(fs.existsSync(hostTarget)).toBe(false);
    const badCwd = await call("POST", `${t}/process/execute`, { command: "pwd", cwd: "/" });
    expect(badCwd.status).toBe(400);
    expectSpec("toolbox", "/process/execute", "POST", badCwd);

    const repo = makeRepo();
    expect((await call("POST", `${t}/git/clone`, { url: repo, path: "r" })).status).toBe(200);
    const again = await call("POST", `${t}/git/clone`, { url: repo, path: "r" });
    expect(again.status).toBe(400);
    expect((again.json as { message: string }).message).toContain("destination path '~/r' already exists");
    expect(JSON.stringify(again.json)).not.toContain(host.root);
    const missingCwd = await call("POST", `${t}/process/execute`, { command: "pwd", cwd: `${(((await call("GET", `${t}/user-home-dir`)).json) as { dir: string }).dir}/nowhere` });
    expect([missingCwd.status, (missingCwd.json as { message: string }).message]).toEqual([404, "file ~/nowhere not found"]);
    const bad = await call("POST", `${t}/git/clone`, { url: "/nonexistent/repo", path: "r2" });
    expect(bad.status).toBe(404);
    expectSpec("toolbox", "/git/clone", "POST", bad);
    expect((await call("GET", `${t}/user-home-dir`, undefined, { authorization: "Bearer nope" })).status).toBe(401);
    const preview = await call("GET", `/api/sandbox/${sb.id}/ports/1/preview-url`);
    const token = (preview.json as { token: string }).token;
    const viaToken = await fetch(`${host.url}${t}/user-home-dir?DAYTONA_SANDBOX_AUTH_KEY=${token}`);
    expect(viaToken.status).toBe(200);
    await sb.delete();
  });

  it("bad input is a 400 in Daytona's error shape, never a 500: a JSON body that is not an object, a broken %-escape, labels that are not an object, a bad mode", async () => {
    const sb = await daytona.create({ labels: { "threadbox.house": "schema3" } }, { timeout: 20 });
    const t = `/toolbox/${sb.id}`;
    try {
      expect((await call("POST", `${t}/process/session`, { sessionId: "s" })).status).toBe(201);
      const cases: [string, string, unknown][] = [
        ["POST", `${t}/process/execute`, null],
        ["POST", `${t}/process/execute`, "echo hi"],
        ["POST", `${t}/git/clone`, null],
        ["POST", `${t}/process/session`, null],
        ["POST", `${t}/process/session/s/exec`, null],
        ["POST", `${t}/files/bulk-download`, null],
        ["POST", `${t}/files/folder?path=d&mode=zz`, undefined],
        ["POST", "/api/sandbox", [1]],
        ["GET", "/api/sandbox?labels=null", undefined],
        ["GET", "/api/sandbox?labels=%5B1%5D", undefined],
        ["GET", '/api/sandbox?labels={"a":1}', undefined],
        ["GET", "/api/sandbox/%E0%A4%A", undefined],
        ["GET", `${t}/process/session/%E0%A4%A`, undefined],
      ];
      for (const [method, p, body] of cases) {
        const r = await call(method, p, body);
        expect([method, p, r.status]).toEqual([method, p, 400]);
        v.toolbox("ErrorResponse", r.json);
      }
      // A long timeout is a long timeout (a delay past setTimeout's 2^31-1 ms used to fire at once).
      const long = await call("POST", `${t}/process/execute`, { command: "echo hi", timeout: 3_000_000 });
      expect([long.status, long.json]).toEqual([200, { exitCode: 0, result: "hi\n" }]);
    } finally {
      await sb.delete();
    }
  });
});
