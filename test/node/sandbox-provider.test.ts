// DaytonaProvider (real SDK) against the local host in Node: the flow and the fault cases.
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startSandboxHost, type SandboxHost } from "../../sandbox-host/server.mjs";
import { BOX_MARKER_VAR, findMarkedPids } from "../../sandbox-host/proc.mjs";
import { createDaytonaProvider, type DaytonaProvider } from "../../src/sandbox/daytona-provider";
import { extractCommand, sniffArchive } from "../../src/workspace/folders";
import { LABEL_EPHEMERAL, LABEL_HOUSE, LABEL_RUN, LABEL_THREAD, ProviderError } from "../../src/sandbox/provider";
import { freePort } from "../../scripts/lib/wrangler-dev.mjs";
import { tempDirs } from "../support/temp-dirs";

const tempDir = tempDirs();

const KEY = "provider-test-key";
let host: SandboxHost;
let provider: DaytonaProvider;

beforeAll(async () => {
  host = await startSandboxHost({ port: 0, apiKey: KEY });
  provider = createDaytonaProvider({ apiUrl: host.apiUrl, apiKey: KEY, target: "local" });
});
afterAll(async () => {
  await host?.close();
});

const house = () => `house-${Math.random().toString(36).slice(2, 8)}`;

describe("DaytonaProvider pointed at a wrong base URL (no /api)", () => {
  it("never reads the host's 'no route' 404 as a box gone: probe is unknown, get and delete fail as unavailable", async () => {
    const box = await provider.create({ labels: { house: house(), thread: "t1" }, ephemeral: true });
    const wrong = createDaytonaProvider({ apiUrl: host.apiUrl.replace(/\/api$/, ""), apiKey: KEY, target: "local" });
    expect(await wrong.probe(box.ref)).toBe("unknown");
    await expect(wrong.get(box.ref)).rejects.toMatchObject({ code: "unavailable" });
    await expect(wrong.delete(box.ref)).rejects.toMatchObject({ code: "unavailable" });
    // The box is still there, and the right URL still finds it gone only once it is deleted.
    expect((await provider.get(box.ref)).state).toBe("started");
    await provider.delete(box.ref, { wait: true });
    expect(await provider.probe(box.ref)).toBe("dead");
  });
});

describe("DaytonaProvider on the local host", () => {
  it("runs the whole box lifecycle", async () => {
    const h = house();
    const box = await provider.create({ labels: { house: h, thread: "t1", environment: "e1" }, ephemeral: true, env: { TB_VAR: "v1" } });
    expect(box.state).toBe("started");
    expect(box.labels).toMatchObject({ [LABEL_HOUSE]: h, [LABEL_THREAD]: "t1", [LABEL_EPHEMERAL]: "true" });
    expect(box.source).toEqual({ kind: "default" });

    const r = await provider.exec(box.ref, "echo $TB_VAR $EXTRA; pwd; echo bad >&2; exit 4", { cwd: "sub", env: { EXTRA: "x" } }).catch((e) => e);
    // cwd must exist first
    expect(r).toBeInstanceOf(ProviderError);
    await provider.exec(box.ref, "mkdir -p sub");
    const r2 = await provider.exec(box.ref, "echo $TB_VAR $EXTRA; basename $(pwd); echo bad >&2; exit 4", { cwd: "sub", env: { EXTRA: "x" } });
    expect(r2).toEqual({ exitCode: 4, output: "v1 x\nsub\nbad\n" });

    await provider.upload(box.ref, [
      { path: "a/text.txt", content: "héllo" },
      { path: "a/bin.dat", content: new Uint8Array([0, 1, 2, 255]) },
    ]);
    expect(new TextDecoder().decode(await provider.download(box.ref, "a/text.txt"))).toBe("héllo");
    expect([...(await provider.download(box.ref, "a/bin.dat"))]).toEqual([0, 1, 2, 255]);
    await expect(provider.download(box.ref, "a/none")).rejects.toBeInstanceOf(Error);

    const repo = tempDir("prov-repo-");
    const env = { ...process.env, GIT_AUTHOR_NAME: "t", GIT_AUTHOR_EMAIL: "t@t", GIT_COMMITTER_NAME: "t", GIT_COMMITTER_EMAIL: "t@t" };
    execFileSync("git", ["init", "-q", "-b", "main"], { cwd: repo });
    fs.writeFileSync(path.join(repo, "f.txt"), "repo-file\n");
    execFileSync("git", ["add", "."], { cwd: repo });
    execFileSync("git", ["commit", "-q", "-m", "c"], { cwd: repo, env });
    await provider.clone(box.ref, { url: `file://${repo}`, path: "repo" });
    expect((await provider.exec(box.ref, "cat repo/f.txt")).output).toBe("repo-file\n");
    await expect(provider.clone(box.ref, { url: "/does/not/exist", path: "repo2" })).rejects.toMatchObject({ code: "not_found" });

    const handle = await provider.startDetached(box.ref, "for i in 1 2; do echo o$i; echo e$i >&2; sleep 0.1; done; exit 5", { cwd: "sub", env: { Z: "1" } });
    const out: string[] = [];
    const err: string[] = [];
    await provider.followDetached(handle, { onStdout: (s) => out.push(s), onStderr: (s) => err.push(s) });
    expect(out.join("")).toBe("o1\no2\n");
    expect(err.join("")).toBe("e1\ne2\n");
    expect(await provider.detachedStatus(handle)).toEqual({ running: false, exitCode: 5 });
    expect(await provider.detachedLogs(handle)).toMatchObject({ stdout: "o1\no2\n", stderr: "e1\ne2\n" });

    const long = await provider.startDetached(box.ref, "sleep 30");
    expect(await provider.detachedStatus(long)).toEqual({ running: true });
    await provider.killDetached(long);
    await provider.killDetached(long); // twice is fine

    expect((await provider.list({ [LABEL_HOUSE]: h })).map((b) => b.ref)).toEqual([box.ref]);
    expect(await provider.probe(box.ref)).toBe("live");
    await provider.delete(box.ref, { wait: true });
    await expect(provider.get(box.ref)).rejects.toMatchObject({ code: "not_found" });
    expect(await provider.probe(box.ref)).toBe("dead");
  });

  it("a preview link reaches a server started in the box; a wrong, expired or dead-box link does not", async () => {
    const box = await provider.create({ labels: { house: house() }, ephemeral: true });
    const port = await freePort(); // the OS picks it: a random one could be in use (20000-40000 overlaps the ephemeral ports)
    const server = `require("http").createServer((q, s) => s.end("served from the box " + q.url + " " + (q.headers["x-forwarded-prefix"] || ""))).listen(${port}, "127.0.0.1")`;
    await provider.startDetached(box.ref, `exec node -e ${JSON.stringify(server).replace(/\$/g, "\\$")}`);
    const link = await provider.previewLink(box.ref, port, 30);
    expect(link.url).toMatch(new RegExp(`/proxy/${port}-[0-9a-f]{32}/$`));
    expect(Date.parse(link.expiresAt)).toBeGreaterThan(Date.now());
    let body = "";
    for (const t0 = Date.now(); !body.startsWith("served") && Date.now() - t0 < 15_000;) {
      const r = await fetch(`${link.url}deep/path?x=1`);
      body = await r.text();
      if (!body.startsWith("served")) await new Promise((res) => setTimeout(res, 50));
    }
    expect(body).toBe(`served from the box /deep/path?x=1 /proxy/${port}-${link.token}`);
    // The path is the app's: one the host could not decode (Latin-1 percent-escapes) reaches it as sent.
    const latin1 = await fetch(`${link.url}caf%E9/%ZZ`);
    expect([latin1.status, await latin1.text()]).toEqual([200, `served from the box /caf%E9/%ZZ /proxy/${port}-${link.token}`]);
    // Elsewhere such a path is a client error, not the host's.
    expect((await fetch(new URL("/toolbox/caf%E9", link.url))).status).toBe(400);

    const wrong = await fetch(link.url.replace(link.token, "0".repeat(32)));
    expect(wrong.status).toBe(404);
    const otherPort = await fetch(link.url.replace(`/${port}-`, `/${port + 1}-`));
    expect(otherPort.status).toBe(404);

    const short = await provider.previewLink(box.ref, port, 1);
    await new Promise((res) => setTimeout(res, 1_100));
    expect((await fetch(short.url)).status).toBe(410);

    await expect(provider.previewLink(box.ref, 0, 30)).rejects.toMatchObject({ code: "bad_request" });
    await provider.delete(box.ref);
    expect((await fetch(link.url)).status).toBe(404);
  });

  it("execStreaming hands over output as it comes and returns the exit code; a timeout ends the command", async () => {
    const box = await provider.create({ labels: { house: house() }, ephemeral: true });
    const chunks: [string, string][] = [];
    const r = await provider.execStreaming(box.ref, "echo a; sleep 0.3; echo b >&2; exit 6", { onOutput: (s, t) => chunks.push([s, t]) });
    expect(r.exitCode).toBe(6);
    expect(r.output).toContain("a\n");
    expect(chunks.filter(([s]) => s === "stdout").map(([, t]) => t).join("")).toBe("a\n");
    expect(chunks.filter(([s]) => s === "stderr").map(([, t]) => t).join("")).toBe("b\n");
    const started = Date.now();
    await expect(provider.execStreaming(box.ref, "sleep 30", { timeoutSec: 1, onOutput: () => {} })).rejects.toMatchObject({ code: "timeout" });
    expect(Date.now() - started).toBeLessThan(10_000);
    await provider.delete(box.ref);
  });

  it("execStreaming refuses a cwd the box refuses exactly as exec does, before running anything", async () => {
    const box = await provider.create({ labels: { house: house() }, ephemeral: true });
    for (const cwd of ["nope", "/etc"]) {
      const plain = await provider.exec(box.ref, "true", { cwd }).catch((e) => e);
      expect(plain, cwd).toBeInstanceOf(ProviderError);
      const chunks: string[] = [];
      const live = await provider.execStreaming(box.ref, "echo ran > ran.txt", { cwd, onOutput: (_s, t) => chunks.push(t) }).catch((e) => e);
      expect(live, cwd).toBeInstanceOf(ProviderError);
      expect((live as ProviderError).code, cwd).toBe((plain as ProviderError).code);
      expect(chunks).toEqual([]);
    }
    expect((await provider.exec(box.ref, "ls ran.txt 2>&1 || true")).output).toMatch(/No such file/);
    await provider.delete(box.ref);
  });

  it("a command that printed megabytes before it is followed is followed to its end, all of its output handed over", async () => {
    const box = await provider.create({ labels: { house: house() }, ephemeral: true });
    const h = await provider.startDetached(box.ref, "head -c 3000000 /dev/zero | tr '\\0' x; echo; sleep 0.5; echo tail");
    // All 3 MB are in the command's log before anyone follows it.
    for (const t0 = Date.now(); (await provider.detachedLogs(h)).output.length < 3_000_001 && Date.now() - t0 < 15_000;) {
      await new Promise((r) => setTimeout(r, 50));
    }
    let stdout = "";
    await provider.followDetached(h, { onStdout: (t) => { stdout += t; } });
    expect(stdout.length).toBe(3_000_000 + "\ntail\n".length);
    expect(stdout.endsWith("x\ntail\n")).toBe(true);
    await provider.delete(box.ref);
  });

  it("starting a named detached session twice runs its command once and returns the same handle", async () => {
    const box = await provider.create({ labels: { house: house() }, ephemeral: true });
    const a = await provider.startDetached(box.ref, "echo started >> once.txt; sleep 2", { sessionId: "tb-run-r1" });
    const b = await provider.startDetached(box.ref, "echo started >> once.txt; sleep 2", { sessionId: "tb-run-r1" });
    // The first start's handle, marked as found rather than started (a retried launch cleans up after itself then).
    expect(b).toEqual({ ...a, existing: true });
    expect(a.existing).toBeUndefined();
    // The command's first line is written once its shell runs: waited for, not slept for.
    for (const t0 = Date.now(); !(await provider.exec(box.ref, "cat once.txt 2>/dev/null")).output.includes("started") && Date.now() - t0 < 15_000;) {
      await new Promise((r) => setTimeout(r, 50));
    }
    expect((await provider.exec(box.ref, "cat once.txt")).output).toBe("started\n");
    // An unnamed start always gets its own session.
    const c = await provider.startDetached(box.ref, "true");
    expect(c.sessionId).not.toBe(a.sessionId);
    await provider.delete(box.ref);
  });

  it("a volume outlives the box that wrote it: the next box mounting it finds the file", async () => {
    const name = `vol-${Math.random().toString(36).slice(2, 8)}`;
    const first = await provider.create({ labels: { house: house() }, ephemeral: true, volumes: [{ name, mountPath: "/home/daytona/memory" }] });
    await provider.exec(first.ref, "echo remembered > memory/note.txt");
    await provider.delete(first.ref);
    const second = await provider.create({ labels: { house: house() }, ephemeral: true, volumes: [{ name, mountPath: "/home/daytona/memory" }] });
    expect((await provider.exec(second.ref, "cat memory/note.txt")).output).toBe("remembered\n");
    // The SDK's file API reaches into the volume too.
    expect(new TextDecoder().decode(await provider.download(second.ref, "memory/note.txt"))).toBe("remembered\n");
    await provider.delete(second.ref);
    // A box without the volume does not see it.
    const third = await provider.create({ labels: { house: house() }, ephemeral: true });
    expect((await provider.exec(third.ref, "cat memory/note.txt")).exitCode).not.toBe(0);
    await provider.delete(third.ref);
    await expect(provider.create({ labels: { house: house() }, ephemeral: true, volumes: [{ name, mountPath: "/etc/x" }] })).rejects.toMatchObject({ code: "bad_request" });
  });

  it("a folder archive unpacks in a box whatever its format (tar, tar.gz, zip), replacing what was at its path", async () => {
    const src = tempDir("folder-src-");
    fs.mkdirSync(path.join(src, "sub"));
    fs.writeFileSync(path.join(src, "sub", "note.txt"), "from the archive\n");
    const out = tempDir("folder-archives-");
    execFileSync("tar", ["-cf", path.join(out, "a.tar"), "-C", src, "."]);
    execFileSync("tar", ["-czf", path.join(out, "a.tgz"), "-C", src, "."]);
    execFileSync("python3", ["-c", "import shutil, sys; shutil.make_archive(sys.argv[1], 'zip', sys.argv[2])", path.join(out, "a"), src]);
    const box = await provider.create({ labels: { house: house() }, ephemeral: true });
    try {
      for (const file of ["a.tar", "a.tgz", "a.zip"]) {
        const bytes = new Uint8Array(fs.readFileSync(path.join(out, file)));
        const format = sniffArchive(bytes)!;
        expect(format, file).toBe(file === "a.tar" ? "tar" : file === "a.tgz" ? "tar.gz" : "zip");
        await provider.upload(box.ref, [{ path: `in/${file}`, content: bytes }]);
        await provider.exec(box.ref, "mkdir -p work/notes && echo stale > work/notes/old.txt");
        const r = await provider.exec(box.ref, extractCommand(`in/${file}`, "work/notes", format));
        expect(r.exitCode, r.output).toBe(0);
        expect((await provider.exec(box.ref, "cat work/notes/sub/note.txt; ls work/notes")).output).toBe("from the archive\nsub\n");
      }
    } finally {
      await provider.delete(box.ref);
    }
  });

  it("a zip unpacks as a tar does: an executable stays executable, a symlink is a link, and no member is written through a link", async () => {
    const out = tempDir("folder-zip-");
    // Made as `zip -y` makes it: modes and links in the external attributes.
    execFileSync("python3", ["-c", [
      "import sys, zipfile, stat",
      "z = zipfile.ZipFile(sys.argv[1], 'w')",
      "i = zipfile.ZipInfo('run.sh'); i.external_attr = (stat.S_IFREG | 0o755) << 16; z.writestr(i, '#!/bin/sh\\necho ran\\n')",
      "i = zipfile.ZipInfo('link.sh'); i.external_attr = (stat.S_IFLNK | 0o777) << 16; z.writestr(i, 'run.sh')",
      "i = zipfile.ZipInfo('esc'); i.external_attr = (stat.S_IFLNK | 0o777) << 16; z.writestr(i, '/tmp')",
      "i = zipfile.ZipInfo('esc/planted.txt'); z.writestr(i, 'x')",
      "i = zipfile.ZipInfo('out'); i.external_attr = (stat.S_IFLNK | 0o777) << 16; z.writestr(i, '/tmp')",
      "i = zipfile.ZipInfo('out/sub/deep'); i.external_attr = (stat.S_IFLNK | 0o777) << 16; z.writestr(i, 'x')",
      "z.close()",
    ].join("\n"), path.join(out, "a.zip")]);
    const box = await provider.create({ labels: { house: house() }, ephemeral: true });
    try {
      const bytes = new Uint8Array(fs.readFileSync(path.join(out, "a.zip")));
      await provider.upload(box.ref, [{ path: "in/a.zip", content: bytes }]);
      const r = await provider.exec(box.ref, extractCommand("in/a.zip", "work/z", "zip"));
      expect(r.exitCode, r.output).toBe(0);
      expect((await provider.exec(box.ref, "cd work/z && ./run.sh && ./link.sh && readlink link.sh")).output).toBe("ran\nran\nrun.sh\n");
      // `esc` came as a link to /tmp and a file under it: the file stays inside, `esc` stays a directory.
      expect((await provider.exec(box.ref, "test -d work/z/esc && ! test -L work/z/esc && cat work/z/esc/planted.txt")).output).toBe("x");
      expect(fs.existsSync("/tmp/planted.txt")).toBe(false);
      // A link under a link to outside is not made there (nor its directories).
      expect((await provider.exec(box.ref, "readlink work/z/out")).output).toBe("/tmp\n");
      expect(fs.existsSync("/tmp/sub")).toBe(false);
    } finally {
      await provider.delete(box.ref);
    }
  });

  it("a volume and its contents survive a restart of the host on the same root", async () => {
    const root = tempDir("host-root-");
    const name = `vol-${Math.random().toString(36).slice(2, 8)}`;
    let h = await startSandboxHost({ port: 0, apiKey: KEY, root });
    try {
      let p = createDaytonaProvider({ apiUrl: h.apiUrl, apiKey: KEY, target: "local" });
      const first = await p.create({ labels: { house: house() }, ephemeral: true, volumes: [{ name, mountPath: "/home/daytona/memory" }] });
      await p.exec(first.ref, "echo kept > memory/note.txt");
      await p.delete(first.ref);
      await h.close();
      h = await startSandboxHost({ port: 0, apiKey: KEY, root });
      p = createDaytonaProvider({ apiUrl: h.apiUrl, apiKey: KEY, target: "local" });
      const second = await p.create({ labels: { house: house() }, ephemeral: true, volumes: [{ name, mountPath: "/home/daytona/memory" }] });
      expect((await p.exec(second.ref, "cat memory/note.txt")).output).toBe("kept\n");
      await p.delete(second.ref);
    } finally {
      await h.close();
    }
  });

  it("a box with its network closed still reaches its allowed ports when the host's root is a long path (a checkout's .wrangler/sandbox-host)", async () => {
    const http = await import("node:http");
    const serve = (text: string) => new Promise<import("node:http").Server>((resolve) => {
      const srv = http.createServer((_q, r) => r.end(text));
      srv.listen(0, "127.0.0.1", () => resolve(srv));
    });
    const servers = [await serve("stream-answer"), await serve("model-answer")];
    const ports = servers.map((srv) => (srv.address() as { port: number }).port);
    // As deep as /home/alice/src/github.com/alice/threadbox/.wrangler/sandbox-host: a unix socket
    // path under it (a box's dir, then its egress bridge) runs past the 107 bytes Linux allows.
    const root = path.join(tempDir("egress-root-"), "home", "alice", "src", "github.com", "alice", "threadbox", ".wrangler", "sandbox-host");
    const h = await startSandboxHost({ port: 0, apiKey: KEY, root });
    try {
      const p = createDaytonaProvider({ apiUrl: h.apiUrl, apiKey: KEY, target: "local" });
      for (let i = 0; i < 2; i++) {
        const box = await p.create({ labels: { house: house() }, ephemeral: true, egress: { blockAll: true, domainAllowList: ports.map((port) => `127.0.0.1:${port}`) } });
        const got = await p.exec(box.ref, ports.map((port) => `curl -s -m 3 http://127.0.0.1:${port}/ || echo BLOCKED; echo`).join("; "));
        expect(got.output.trim().split("\n")).toEqual(["stream-answer", "model-answer"]);
        await p.delete(box.ref);
      }
    } finally {
      await h.close();
      for (const srv of servers) srv.close();
    }
  });

  it("a preview of a box with its network closed is refused as a conflict: its ports are in namespaces of their own, and a link would reach whatever else listens on that port", async () => {
    const http = await import("node:http");
    // What a link would have reached: another server on the machine's loopback port.
    const other = await new Promise<import("node:http").Server>((resolve) => {
      const srv = http.createServer((_q, r) => r.end("someone else's server"));
      srv.listen(0, "127.0.0.1", () => resolve(srv));
    });
    const port = (other.address() as { port: number }).port;
    try {
      const closed = await provider.create({ labels: { house: house() }, ephemeral: true, egress: { blockAll: true } });
      const refused = await provider.previewLink(closed.ref, port, 60).catch((e) => e);
      expect(refused).toBeInstanceOf(ProviderError);
      expect((refused as ProviderError).code).toBe("conflict");
      expect((refused as ProviderError).message).toMatch(/network is closed/);
      await provider.delete(closed.ref);
      // A box with an open network still gets its link.
      const open = await provider.create({ labels: { house: house() }, ephemeral: true });
      expect(await (await fetch((await provider.previewLink(open.ref, port, 60)).url)).text()).toBe("someone else's server");
      await provider.delete(open.ref);
    } finally {
      other.close();
    }
  });

  it("a box with its network closed reaches only its allowed loopback port, in one-shot and session commands", async () => {
    const http = await import("node:http");
    const serve = (text: string) => new Promise<import("node:http").Server>((resolve) => {
      const srv = http.createServer((_q, r) => r.end(text));
      srv.listen(0, "127.0.0.1", () => resolve(srv));
    });
    const allowed = await serve("allowed-answer");
    const other = await serve("must-not-see");
    const portOf = (srv: import("node:http").Server) => (srv.address() as { port: number }).port;
    try {
      const box = await provider.create({ labels: { house: house() }, ephemeral: true, egress: { blockAll: true, domainAllowList: [`127.0.0.1:${portOf(allowed)}`] } });
      // What Daytona is asked for: the allow-list alone (default-deny), never networkBlockAll beside
      // it, which Daytona lets win over the list.
      const asked = await (await fetch(`${host.apiUrl}/sandbox/${box.ref}`, { headers: { authorization: `Bearer ${KEY}` } })).json() as { networkBlockAll: boolean; domainAllowList?: string };
      expect([asked.networkBlockAll, asked.domainAllowList]).toEqual([false, `127.0.0.1:${portOf(allowed)}`]);
      const fetchFrom = (port: number) => `curl -s -m 3 http://127.0.0.1:${port}/ || echo BLOCKED`;
      expect((await provider.exec(box.ref, fetchFrom(portOf(allowed)))).output).toBe("allowed-answer");
      expect((await provider.exec(box.ref, fetchFrom(portOf(other)))).output.trim()).toBe("BLOCKED");
      // Detached commands (how runners start) live in the same closed network.
      const h = await provider.startDetached(box.ref, `${fetchFrom(portOf(other))}; ${fetchFrom(portOf(allowed))}`);
      let status = await provider.detachedStatus(h);
      for (const t0 = Date.now(); status.running && Date.now() - t0 < 30_000;) {
        await new Promise((r) => setTimeout(r, 50));
        status = await provider.detachedStatus(h);
      }
      expect((await provider.detachedLogs(h)).output.trim().split("\n")).toEqual(["BLOCKED", "allowed-answer"]);
      await provider.delete(box.ref);
      // An allow-list entry this host cannot enforce is refused, not ignored.
      await expect(provider.create({ labels: { house: house() }, ephemeral: true, egress: { blockAll: true, domainAllowList: ["example.com"] } })).rejects.toMatchObject({ code: "bad_request" });
      // So is a port that does not exist (its bridge failed in every command, a stack trace in the output) or port 0 (any port).
      for (const entry of ["127.0.0.1:99999", "localhost:0"]) {
        await expect(provider.create({ labels: { house: house() }, ephemeral: true, egress: { blockAll: true, domainAllowList: [entry] } }), entry).rejects.toMatchObject({ code: "bad_request", message: expect.stringContaining(`cannot allow ${entry}`) });
      }
      // A wildcard domain, which environments accept for Daytona, is as unenforceable here.
      await expect(provider.create({ labels: { house: house() }, ephemeral: true, egress: { blockAll: true, domainAllowList: ["*.example.com", `127.0.0.1:${portOf(allowed)}`] } }))
        .rejects.toMatchObject({ code: "bad_request", message: expect.stringContaining("cannot allow *.example.com: a wildcard domain is enforced by Daytona alone") });
    } finally {
      allowed.close();
      other.close();
    }
  });

  it("the older egress form with blockAll false and a domainAllowList is an allow-list that keeps the stream reachable, as on Daytona", async () => {
    const { egressSettings } = await import("../../src/workspace/box-config");
    const serve = (text: string) => new Promise<http.Server>((resolve) => {
      const srv = http.createServer((_q, r) => r.end(text));
      srv.listen(0, "127.0.0.1", () => resolve(srv));
    });
    const listed = await serve("listed-answer");
    const stream = await serve("stream-answer");
    const other = await serve("must-not-see");
    const portOf = (srv: http.Server) => (srv.address() as { port: number }).port;
    try {
      // What a launch asks the provider for: Daytona reads a domainAllowList as the only hosts
      // reachable, whatever networkBlockAll says; the local host closes such a box too.
      const egress = egressSettings({ blockAll: false, domainAllowList: [`127.0.0.1:${portOf(listed)}`] }, `http://127.0.0.1:${portOf(stream)}/api/threads`);
      const box = await provider.create({ labels: { house: house() }, ephemeral: true, egress });
      const fetchFrom = (port: number) => `curl -s -m 3 http://127.0.0.1:${port}/ || echo BLOCKED`;
      try {
        expect((await provider.exec(box.ref, fetchFrom(portOf(listed)))).output).toBe("listed-answer");
        expect((await provider.exec(box.ref, fetchFrom(portOf(stream)))).output).toBe("stream-answer");
        expect((await provider.exec(box.ref, fetchFrom(portOf(other)))).output.trim()).toBe("BLOCKED");
      } finally {
        await provider.delete(box.ref);
      }
    } finally {
      for (const srv of [listed, stream, other]) srv.close();
    }
  });

  it("a clone at a ref with a depth checks out a branch, a tag or a commit (full or short id) that is no tip of the default branch", async () => {
    const repo = tempDir("prov-refs-");
    const git = (...args: string[]) => execFileSync("git", ["-c", "user.email=t@t", "-c", "user.name=t", ...args], { cwd: repo, encoding: "utf8" }).trim();
    git("init", "-q", "-b", "main");
    const commit = (text: string) => {
      fs.writeFileSync(path.join(repo, "f.txt"), `${text}\n`);
      git("add", "f.txt");
      git("commit", "-q", "-m", text);
      return git("rev-parse", "HEAD");
    };
    commit("one");
    git("tag", "-a", "v1", "-m", "release one");
    const two = commit("two");
    commit("three");
    git("checkout", "-q", "-b", "feature", "v1");
    commit("feature");
    git("checkout", "-q", "main");
    const box = await provider.create({ labels: { house: house(), thread: "t-refs" }, ephemeral: true });
    try {
      for (const [at, want, count] of [["feature", "feature", "1"], ["v1", "one", "1"], [two, "two", "1"], [two.slice(0, 9), "two", "2"]] as const) {
        const dest = `r-${at.slice(0, 12)}`;
        await provider.clone(box.ref, { url: `file://${repo}`, path: dest, commit: at, depth: 1 });
        const seen = (await provider.exec(box.ref, `cat f.txt && git rev-list --count HEAD && git status --porcelain | wc -l`, { cwd: dest })).output.trim().split("\n");
        // A name is fetched as deep as asked; a short id is looked up in the whole history.
        expect([at, ...seen]).toEqual([at, want, count, "0"]);
      }
      const err = (await provider.clone(box.ref, { url: `file://${repo}`, path: "r-none", commit: "no-such-ref", depth: 1 }).catch((e) => e)) as ProviderError;
      expect(err).toBeInstanceOf(ProviderError);
      expect([err.code, err.message]).toEqual(["not_found", expect.stringContaining("no commit, branch or tag no-such-ref in file://")]);
    } finally {
      await provider.delete(box.ref);
    }
  });

  it("a failed clone's words are redacted by the caller's redaction before the provider cuts them to their end", async () => {
    const secret = "tok-Q7zK9mV2rT8nB4xL6cJ1yH";
    // What the launch does with the error after: redact the whole message.
    const redact = (t: string) => t.split(secret).join("[redacted]");
    const pieces = Array.from({ length: secret.length - 3 }, (_, i) => secret.slice(i, i + 4));
    const box = await provider.create({ labels: { house: house(), thread: "t-clone-cut" }, ephemeral: true });
    try {
      // git's words end quoting the ref, longer than the words kept: the cut goes through one of
      // its secrets, at one of two places 13 characters apart (one of them leaves 4 or more).
      for (const pad of ["x", "x".repeat(14)]) {
        const at = `${pad}${`=${secret}`.repeat(60)}`;
        const err = (await provider.clone(box.ref, { url: "file:///nonexistent/cut.git", path: `cut-${pad.length}`, commit: at, redact }).catch((e) => e)) as ProviderError;
        expect(err).toBeInstanceOf(ProviderError);
        const shown = redact(err.message);
        expect(shown).toMatch(/failed \(exit 1\): .*=\[redacted\]=\[redacted\]/s);
        expect(pieces.filter((p) => shown.includes(p))).toEqual([]);
      }
    } finally {
      await provider.delete(box.ref);
    }
  });

  it("a clone of a repository that is not there fails as not found, saying git's words and not blaming DAYTONA_API_URL", async () => {
    // git says "does not appear to be a git repository" for a missing file:// or path repository;
    // the toolbox answers 404 GIT_REPO_NOT_FOUND, which names what is missing.
    const box = await provider.create({ labels: { house: house(), thread: "t-clone" }, ephemeral: true });
    try {
      const err = (await provider.clone(box.ref, { url: "file:///nonexistent/repo.git", path: "repo" }).catch((e) => e)) as ProviderError;
      expect(err).toBeInstanceOf(ProviderError);
      expect(err.message).toContain("does not appear to be a git repository");
      expect(err.message).not.toContain("DAYTONA_API_URL");
      expect(err.code).toBe("not_found");
    } finally {
      await provider.delete(box.ref);
    }
  });

  it("a create that fails after the provider made the box (it never started) leaves no box behind", async () => {
    // A box that ends in `error` while the SDK waits for `started` (or one still starting when the
    // wait times out) exists at the provider: nobody would ever know of it, or delete it.
    const snap = `broken-${Date.now()}`;
    const made = await fetch(`${host.apiUrl}/snapshots`, { method: "POST", headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" }, body: JSON.stringify({ name: snap }) });
    expect(made.status).toBe(200);
    // Its files are not a directory: every box made from it fails to provision.
    fs.writeFileSync(path.join(host.root, "snapshots", snap), "not a directory");
    const h = house();
    const err = await provider.create({ labels: { house: h, thread: "t-broken" }, ephemeral: true, snapshot: snap }).catch((e) => e);
    expect(err).toBeInstanceOf(ProviderError);
    // Why it failed, without where the host keeps its snapshots and boxes.
    expect(err.message).toContain(`<host>/snapshots/${snap}`);
    expect(err.message).not.toContain(host.root);
    expect(await provider.list({ [LABEL_HOUSE]: h })).toEqual([]);
    // Deleted already: nothing is left to look for.
    expect(err.lateBoxName).toBeUndefined();
    // A create refused because its name is taken made nothing: the box of that name is not its to delete.
    const named = await provider.create({ labels: { house: h, thread: "t-named" }, ephemeral: true, name: `named-${h}` });
    await expect(provider.create({ labels: { house: h, thread: "t-again" }, ephemeral: true, name: `named-${h}` })).rejects.toMatchObject({ code: "conflict" });
    expect((await provider.get(named.ref)).state).toBe("started");
    await provider.delete(named.ref);
  });

  it("a create the host has not answered when the wait runs out fails naming the box it may still make, which then appears under that name", async () => {
    // The host takes the create only after the client gave up on it (a provider's queue, a slow
    // restart): no box of that name exists when the create fails, and one does afterwards.
    const target = new URL(host.apiUrl);
    const held: (() => void)[] = [];
    const proxy = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const forward = () => {
          const up = http.request({ host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers }, (r) => {
            res.writeHead(r.statusCode ?? 502, r.headers);
            r.pipe(res);
          });
          up.on("error", () => res.destroy());
          up.end(Buffer.concat(chunks));
        };
        if (req.method === "POST" && /\/sandbox$/.test(req.url ?? "")) held.push(forward);
        else forward();
      });
    });
    await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", () => r()));
    try {
      const slow = createDaytonaProvider({ apiUrl: `http://127.0.0.1:${(proxy.address() as { port: number }).port}${target.pathname}`, apiKey: KEY, target: "local" });
      const h = house();
      const err = await slow.create({ labels: { house: h }, ephemeral: true, timeoutSec: 1 }).catch((e) => e);
      expect(err).toBeInstanceOf(ProviderError);
      expect(err.code).toBe("timeout");
      expect(err.lateBoxName).toMatch(/^tb-[0-9a-f-]{36}$/);
      expect(await provider.list({ [LABEL_HOUSE]: h })).toEqual([]);
      for (const f of held.splice(0)) f();
      await vi.waitFor(async () => expect((await provider.get(err.lateBoxName)).labels).toMatchObject({ [LABEL_HOUSE]: h }), { timeout: 10_000, interval: 100 });
      await provider.delete(err.lateBoxName, { wait: true });
      expect(await provider.list({ [LABEL_HOUSE]: h })).toEqual([]);
    } finally {
      proxy.closeAllConnections();
      proxy.close();
    }
  });

  it("box deleted out-of-band -> probe says dead", async () => {
    const box = await provider.create({ labels: { house: house() }, ephemeral: false });
    expect(await provider.probe(box.ref)).toBe("live");
    // Another client (not this provider instance) removes it.
    const res = await fetch(`${host.apiUrl}/sandbox/${box.ref}`, { method: "DELETE", headers: { authorization: `Bearer ${KEY}` } });
    expect(res.status).toBe(200);
    for (const t0 = Date.now(); (await provider.probe(box.ref)) !== "dead" && Date.now() - t0 < 15_000;) await new Promise((r) => setTimeout(r, 20));
    expect(await provider.probe(box.ref)).toBe("dead");
  });

  it("a box made for a run is found by its run label (what a retried launch looks for)", async () => {
    const runId = `run-${Date.now().toString(36)}`;
    const box = await provider.create({ labels: { house: house(), run: runId }, ephemeral: true });
    await provider.create({ labels: { house: house(), run: `${runId}-other` }, ephemeral: true });
    const found = await provider.list({ [LABEL_RUN]: runId });
    expect(found.map((b) => b.ref)).toEqual([box.ref]);
    expect(found[0].labels[LABEL_RUN]).toBe(runId);
  });

  it("delete twice -> no error; delete of a never-existing box -> no error", async () => {
    const box = await provider.create({ labels: { house: house() }, ephemeral: true });
    await provider.delete(box.ref);
    await provider.delete(box.ref); // 409 while destroying, or 404 after: both are success
    await provider.delete(box.ref, { wait: true });
    await provider.delete("00000000-0000-0000-0000-000000000000");
    // The deletes did what they say: the box is gone at the provider and from its listing.
    await expect(provider.get(box.ref)).rejects.toMatchObject({ code: "not_found" });
    expect(await provider.probe(box.ref)).toBe("dead");
    expect((await provider.list({ [LABEL_HOUSE]: box.labels[LABEL_HOUSE] })).map((b) => b.ref)).not.toContain(box.ref);
    expect(host.boxes.has(box.ref)).toBe(false);
  });

  it("delete kills background processes, including ones that escaped with setsid/nohup", async () => {
    const box = await provider.create({ labels: { house: house() }, ephemeral: true });
    const marker = host.boxes.get(box.ref)!.marker;
    await provider.exec(box.ref, "setsid sleep 300 > /dev/null 2>&1 < /dev/null & nohup sleep 301 > /dev/null 2>&1 &");
    await provider.startDetached(box.ref, "sleep 302");
    for (const t0 = Date.now(); findMarkedPids(marker).length < 3 && Date.now() - t0 < 15_000;) await new Promise((r) => setTimeout(r, 50));
    expect(findMarkedPids(marker).length).toBeGreaterThanOrEqual(3);
    const dir = host.boxes.get(box.ref)!.dir;
    await provider.delete(box.ref, { wait: true });
    expect(findMarkedPids(marker)).toEqual([]);
    expect(fs.existsSync(dir)).toBe(false);
    // and nothing of this box in the process table at all
    const ps = spawnSync("bash", ["-c", `grep -l "${BOX_MARKER_VAR}=${marker}" /proc/[0-9]*/environ 2>/dev/null || true`]);
    expect(ps.stdout.toString().trim()).toBe("");
  });

  it("host down -> probe says unknown, calls fail as unavailable", async () => {
    const other = await startSandboxHost({ port: 0, apiKey: KEY });
    const p = createDaytonaProvider({ apiUrl: other.apiUrl, apiKey: KEY });
    const box = await p.create({ labels: { house: house() }, ephemeral: true });
    await other.close();
    expect(await p.probe(box.ref)).toBe("unknown");
    await expect(p.get(box.ref)).rejects.toMatchObject({ code: "unavailable" });
    // A create that could not even connect reached nothing: no box of its name will ever appear.
    const err = await p.create({ labels: { house: house() }, ephemeral: true }).catch((e) => e);
    expect(err).toMatchObject({ code: "unavailable" });
    expect(err.lateBoxName).toBeUndefined();
  });

  it("a host stopped while a command's output is followed stops at once: the command ends and the follower hears of it", async () => {
    const other = await startSandboxHost({ port: 0, apiKey: KEY });
    const p = createDaytonaProvider({ apiUrl: other.apiUrl, apiKey: KEY });
    const box = await p.create({ labels: { house: house() }, ephemeral: true });
    const marker = other.boxes.get(box.ref)!.marker;
    let seen = "";
    const followed = p.execStreaming(box.ref, "echo started; sleep 30; echo finished", { timeoutSec: 60, onOutput: (_s, t) => { seen += t; } }).then(() => "answered", (e) => e);
    for (let i = 0; i < 100 && !seen.includes("started"); i++) await new Promise((r) => setTimeout(r, 50));
    expect(seen).toBe("started\n");
    const stopping = Date.now();
    await other.close();
    expect(Date.now() - stopping).toBeLessThan(5_000);
    expect(findMarkedPids(marker)).toEqual([]);
    expect(await followed).toMatchObject({ code: expect.stringMatching(/unavailable|not_found/) });
    expect(Date.now() - stopping).toBeLessThan(5_000);
    expect(seen).toBe("started\n");
  });

  it("wrong API key -> unauthorized", async () => {
    const p = createDaytonaProvider({ apiUrl: host.apiUrl, apiKey: "wrong" });
    await expect(p.list({})).rejects.toMatchObject({ code: "unauthorized" });
    expect(await p.probe("whatever")).toBe("unknown");
  });

  it("snapshot-first: uses an active snapshot, else falls back to image + install steps", async () => {
    const fallback = await provider.create({
      labels: { house: house() },
      ephemeral: true,
      snapshot: "threadbox-missing-snapshot",
      image: "node:22-bookworm",
      installSteps: ["echo installed > .harness-installed"],
    });
    expect(fallback.source).toEqual({ kind: "image", name: "node:22-bookworm" });
    expect((await provider.exec(fallback.ref, "cat .harness-installed")).output).toBe("installed\n");
    await provider.delete(fallback.ref);

    await fetch(`${host.apiUrl}/snapshots`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "threadbox-test-snap", imageName: "node:22-bookworm" }),
    });
    const fromSnap = await provider.create({ labels: { house: house() }, ephemeral: true, snapshot: "threadbox-test-snap", installSteps: ["exit 1"] });
    expect(fromSnap.source).toEqual({ kind: "snapshot", name: "threadbox-test-snap" });
    await provider.delete(fromSnap.ref);

    await expect(
      provider.create({ labels: { house: house() }, ephemeral: true, installSteps: ["echo nope; exit 9"] }),
    ).rejects.toMatchObject({ code: "bad_request" });
  });

  it("exec timeout -> timeout error", async () => {
    const box = await provider.create({ labels: { house: house() }, ephemeral: true });
    await expect(provider.exec(box.ref, "sleep 5", { timeoutSec: 1 })).rejects.toMatchObject({ code: "timeout" });
    await provider.delete(box.ref);
  });
});
