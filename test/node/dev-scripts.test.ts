// The start scripts as a newcomer meets them: `npm run dev` on a taken port, wrangler's local
// tracing off by default, and `npm run smoke` reading the same .dev.vars as `npm run dev` (or the host a running one started).
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { freshTree } from "../support/fresh-tree";
import { ROOT, freePort, nodePath } from "../../scripts/lib/wrangler-dev.mjs";
import { startSandboxHost } from "../../sandbox-host/server.mjs";
import { chooseTarget } from "../../scripts/sandbox-lib.mjs";

const tree = freshTree();
afterAll(() => tree.remove());

/** The script's environment without anything a developer's shell may carry into it. */
function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, PATH: nodePath(), WRANGLER_SEND_METRICS: "false", NO_COLOR: "1", ...extra };
  for (const k of ["DAYTONA_API_URL", "DAYTONA_API_KEY", "DAYTONA_TARGET", "X_LOCAL_EXPLORER", "X_LOCAL_OBSERVABILITY", "SANDBOX_HOST_ROOT"]) {
    if (!(k in extra)) delete env[k];
  }
  return env;
}

function run(script: string, env: Record<string, string>, args: string[] = []) {
  const child = spawn(process.execPath, [join(tree.dir, "scripts", script), ...args], { cwd: tree.dir, env: cleanEnv(env), detached: true });
  let output = "";
  child.stdout!.on("data", (d) => { output += d; });
  child.stderr!.on("data", (d) => { output += d; });
  const exited = new Promise<number>((resolve) => child.on("exit", (code) => resolve(code ?? -1)));
  return { child, exited, output: () => output };
}

function occupy(): Promise<{ server: Server; port: number }> {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => resolve({ server, port: (server.address() as { port: number }).port }));
  });
}

async function until(what: string, check: () => boolean, child: ChildProcess, exited: Promise<number>): Promise<void> {
  let done = false;
  const ended = exited.then((code) => { if (!done) throw new Error(`${what}: exited with ${code}`); });
  ended.catch(() => {});
  while (!check()) {
    if (child.exitCode !== null) await ended;
    await new Promise((r) => setTimeout(r, 100));
  }
  done = true;
}

async function stopGroup(child: ChildProcess, exited: Promise<number>) {
  try { process.kill(-child.pid!, "SIGINT"); } catch { /* gone */ }
  const timer = setTimeout(() => { try { process.kill(-child.pid!, "SIGKILL"); } catch { /* gone */ } }, 10_000);
  await exited;
  clearTimeout(timer);
}

describe("npm run dev", () => {
  it("on a busy worker port says which port and how to pick another, without a stack trace", async () => {
    const busy = await occupy();
    try {
      const dev = run("dev.mjs", { PORT: String(busy.port), SANDBOX_HOST_PORT: String(await freePort()), DEMO_MODEL_PORT: String(await freePort()) });
      expect(await dev.exited).toBe(1);
      const out = dev.output();
      expect(out).toContain(`port ${busy.port} (the worker) is already in use`);
      expect(out).toMatch(new RegExp(`PORT=\\d+ npm run dev`));
      expect(out).not.toMatch(/EADDRINUSE|\n\s+at /);
    } finally {
      busy.server.close();
    }
  }, 60_000);

  it("creates .dev.vars, where provider and model keys go, readable by its owner alone", async () => {
    const devVars = join(tree.dir, ".dev.vars");
    rmSync(devVars, { force: true });
    const dev = run("dev.mjs", { PORT: String(await freePort()), SANDBOX_HOST_PORT: String(await freePort()), DEMO_MODEL_PORT: String(await freePort()) });
    try {
      await until("created .dev.vars", () => dev.output().includes("created .dev.vars from .dev.vars.example"), dev.child, dev.exited);
      expect((statSync(devVars).mode & 0o777).toString(8)).toBe("600");
    } finally {
      await stopGroup(dev.child, dev.exited);
      rmSync(devVars, { force: true });
    }
  }, 60_000);

  it("on a busy sandbox host port names that one and SANDBOX_HOST_PORT", async () => {
    const busy = await occupy();
    try {
      const dev = run("dev.mjs", { PORT: String(await freePort()), SANDBOX_HOST_PORT: String(busy.port), DEMO_MODEL_PORT: String(await freePort()) });
      expect(await dev.exited).toBe(1);
      const out = dev.output();
      expect(out).toContain(`port ${busy.port} (the local sandbox host) is already in use`);
      expect(out).toMatch(/SANDBOX_HOST_PORT=\d+ npm run dev/);
      expect(out).not.toMatch(/EADDRINUSE|\n\s+at /);
    } finally {
      busy.server.close();
    }
  }, 60_000);

  it("with every port of a running dev taken, the hint moves all three, the demo model's included", async () => {
    const taken = [await occupy(), await occupy(), await occupy()];
    try {
      const [worker, sandbox, model] = taken.map((t) => String(t.port));
      const dev = run("dev.mjs", { PORT: worker, SANDBOX_HOST_PORT: sandbox, DEMO_MODEL_PORT: model });
      expect(await dev.exited).toBe(1);
      const out = dev.output();
      expect(out).toContain(`port ${model} (the demo model) is already in use`);
      expect(out).toMatch(/PORT=\d+ SANDBOX_HOST_PORT=\d+ DEMO_MODEL_PORT=\d+ npm run dev/);
    } finally {
      for (const t of taken) t.server.close();
    }
  }, 60_000);

  it("with a secret in .dev.vars the worker refuses (under 16 characters) stops at once, naming it, with no sign-in link", async () => {
    const example = readFileSync(join(tree.dir, ".dev.vars.example"), "utf8");
    try {
      for (const name of ["THREADBOX_ADMIN_SECRET", "THREADBOX_TOKEN_SECRET"]) {
        writeFileSync(join(tree.dir, ".dev.vars"), example.replace(new RegExp(`^${name}=.*$`, "m"), `${name}=short`));
        const dev = run("dev.mjs", { PORT: String(await freePort()), SANDBOX_HOST_PORT: String(await freePort()), DEMO_MODEL_PORT: String(await freePort()) });
        const banner = until("npm run dev", () => dev.output().includes("threadbox is running"), dev.child, dev.exited).then(() => "banner", () => "exited");
        const first = await Promise.race([dev.exited.then(() => "exited"), banner]);
        if (first === "banner") await stopGroup(dev.child, dev.exited);
        expect(dev.output()).toContain(`npm run dev: ${name} in .dev.vars must be at least 16 characters`);
        expect(dev.output()).not.toContain("#token=undefined");
        expect([first, await dev.exited]).toEqual(["exited", 1]);
      }
    } finally {
      rmSync(join(tree.dir, ".dev.vars"), { force: true });
    }
  }, 240_000);

  async function explorerAnswer(extra: Record<string, string>): Promise<{ status: number; body: string; appPage: string }> {
    const port = await freePort();
    const dev = run("dev.mjs", { PORT: String(port), SANDBOX_HOST_PORT: String(await freePort()), DEMO_MODEL_PORT: String(await freePort()), ...extra });
    try {
      await until("npm run dev", () => dev.output().includes("threadbox is running"), dev.child, dev.exited);
      const r = await fetch(`http://127.0.0.1:${port}/cdn-cgi/local/explorer/`);
      const appPage = await (await fetch(`http://127.0.0.1:${port}/`)).text();
      return { status: r.status, body: await r.text(), appPage };
    } finally {
      await stopGroup(dev.child, dev.exited);
    }
  }

  it("runs wrangler without its local explorer and tracing, unless asked for them", async () => {
    // Off, the explorer's path is only another app route: the UI's single-page fallback answers it.
    const off = await explorerAnswer({});
    expect(off.body).not.toContain("Local Explorer");
    expect(off.appPage).toContain("<html");
    expect([off.status, off.body]).toEqual([200, off.appPage]);
    const on = await explorerAnswer({ X_LOCAL_EXPLORER: "true" });
    expect(on.status).toBe(200);
    expect(on.body).toContain("Local Explorer");
  }, 240_000);
});

describe("npm run dev's sign-in link, once the banner has scrolled away", () => {
  it("is in .wrangler/sign-in-link (owner-only, ignored by git), replaced on every start, and the banner says so", async () => {
    const linkFile = join(tree.dir, ".wrangler", "sign-in-link");
    // what a previous run left, on another port, with a looser mode
    mkdirSync(join(tree.dir, ".wrangler"), { recursive: true });
    writeFileSync(linkFile, "http://127.0.0.1:1/#token=stale\n", { mode: 0o644 });
    const port = await freePort();
    const dev = run("dev.mjs", { PORT: String(port), SANDBOX_HOST_PORT: String(await freePort()), DEMO_MODEL_PORT: String(await freePort()) });
    try {
      await until("npm run dev", () => dev.output().includes("threadbox is running"), dev.child, dev.exited);
      const printed = /web\s+(\S+)/.exec(dev.output())![1]!;
      expect(printed).toMatch(new RegExp(`^http://127\\.0\\.0\\.1:${port}/#token=\\S+$`));
      expect(readFileSync(linkFile, "utf8")).toBe(`${printed}\n`);
      expect(statSync(linkFile).mode & 0o777).toBe(0o600);
      expect(dev.output()).toContain("cat .wrangler/sign-in-link");
      // the link in the file signs in
      const token = new URL(readFileSync(linkFile, "utf8").trim()).hash.slice("#token=".length);
      const r = await fetch(`http://127.0.0.1:${port}/api/threads?limit=1`, { headers: { authorization: `Bearer ${token}` } });
      expect(r.status).toBe(200);
    } finally {
      await stopGroup(dev.child, dev.exited);
    }
    // a token must never land in a file git would pick up
    expect(execFileSync("git", ["check-ignore", ".wrangler/sign-in-link"], { cwd: ROOT, encoding: "utf8" }).trim()).toBe(".wrangler/sign-in-link");
  }, 240_000);
});

describe("npm run dev with a real provider key in .dev.vars", () => {
  it("keeps that key off every command line and still runs boxes on the local host", async () => {
    const realKey = "dtn_real-daytona-key-not-for-ps";
    writeFileSync(join(tree.dir, ".dev.vars"), `${readFileSync(join(tree.dir, ".dev.vars.example"), "utf8")}\nDAYTONA_API_KEY=${realKey}\n`);
    const port = await freePort();
    const dev = run("dev.mjs", { PORT: String(port), SANDBOX_HOST_PORT: String(await freePort()), DEMO_MODEL_PORT: String(await freePort()) });
    try {
      await until("npm run dev", () => dev.output().includes("threadbox is running"), dev.child, dev.exited);
      // every process npm run dev started is in its process group (it was spawned detached), or
      // in the one its wrangler dev runs in
      const groups = [String(dev.child.pid), readFileSync(join(tree.dir, ".wrangler", "dev.pid"), "utf8").trim()];
      const group = readdirSync("/proc").filter((p) => /^\d+$/.test(p)).filter((p) => {
        try { return groups.includes(readFileSync(`/proc/${p}/stat`, "utf8").split(") ")[1]!.split(" ")[2]!); } catch { return false; }
      });
      const cmdlines = group.map((p) => { try { return readFileSync(`/proc/${p}/cmdline`, "utf8").replace(/\0/g, " "); } catch { return ""; } });
      expect(cmdlines.some((c) => c.includes("wrangler"))).toBe(true);
      expect(cmdlines.filter((c) => c.includes(realKey))).toEqual([]);
      // the worker and the local host still agree on the host's key: a command runs on a box
      const token = /THREADBOX_TOKEN=(\S+)/.exec(dev.output())![1];
      const r = await fetch(`http://127.0.0.1:${port}/api/environments/env_demo/exec`, {
        method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: JSON.stringify({ command: "echo on-the-local-host" }),
      });
      expect([r.status, ((await r.json()) as { output?: string }).output?.trim()]).toEqual([200, "on-the-local-host"]);
    } finally {
      await stopGroup(dev.child, dev.exited);
      rmSync(join(tree.dir, ".dev.vars"), { force: true });
    }
  }, 240_000);
});

describe("npm run dev killed with kill -9", () => {
  async function health(port: number): Promise<boolean> {
    return fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(2000) }).then((r) => r.ok, () => false);
  }
  async function waitFor(what: string, check: () => Promise<boolean>, ms: number) {
    const deadline = Date.now() + ms;
    while (!(await check())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  async function ports() {
    return { PORT: String(await freePort()), SANDBOX_HOST_PORT: String(await freePort()), DEMO_MODEL_PORT: String(await freePort()) };
  }

  it("takes its wrangler dev and workerd with it, so a restart on the same ports serves again", async () => {
    const env = await ports();
    const port = Number(env.PORT);
    const first = run("dev.mjs", env);
    await until("npm run dev", () => first.output().includes("threadbox is running"), first.child, first.exited);
    // A wrangler slow to go: it takes the SIGTERM only once the tether's SIGKILL comes, seconds after
    // the port has closed (what a loaded machine does to a wrangler shutting down).
    const pgid = Number(readFileSync(join(tree.dir, ".wrangler", "dev.pid"), "utf8").trim());
    const slow = execFileSync("ps", ["-o", "pid=,args=", "-g", String(pgid)], { encoding: "utf8" }).split("\n")
      .map((l) => /^\s*(\d+)\s+(.*)$/.exec(l)).filter((m) => m && Number(m[1]) !== pgid && /wrangler/.test(m[2]) && !/workerd/.test(m[2]));
    expect(slow.length).toBeGreaterThan(0);
    for (const m of slow) process.kill(Number(m![1]), "SIGSTOP");
    // the script's own process alone, as `kill -9 <pid of node scripts/dev.mjs>` does
    process.kill(first.child.pid!, "SIGKILL");
    await first.exited;
    let second: ReturnType<typeof run> | undefined;
    try {
      await waitFor("the worker to stop answering once npm run dev is gone", async () => !(await health(port)), 20_000);
      // Started again at once, as a user would, while that wrangler is still on its way out.
      second = run("dev.mjs", env);
      await until("npm run dev, started again", () => second!.output().includes("threadbox is running"), second.child, second.exited);
      expect(await health(port)).toBe(true);
    } finally {
      if (second) await stopGroup(second.child, second.exited);
      await stopGroup(first.child, first.exited);
    }
  }, 240_000);

  it("with its wrangler dev left running, a restart names that process group instead of a busy port", async () => {
    const env = await ports();
    const port = Number(env.PORT);
    const first = run("dev.mjs", env);
    await until("npm run dev", () => first.output().includes("threadbox is running"), first.child, first.exited);
    const pgid = Number(readFileSync(join(tree.dir, ".wrangler", "dev.pid"), "utf8").trim());
    // npm run dev and the tether that would stop wrangler, both killed at once: wrangler serves on.
    // The tether first: killed second, it could see npm run dev's pipe close and stop the group.
    process.kill(pgid, "SIGKILL");
    process.kill(first.child.pid!, "SIGKILL");
    await first.exited;
    try {
      expect(await health(port)).toBe(true);
      for (const again of [env, { ...env, PORT: String(await freePort()) }]) {
        const second = run("dev.mjs", again);
        expect([await second.exited, second.output()]).toEqual([1,
          `npm run dev: a wrangler dev of this checkout still serves .wrangler/state (process group ${pgid}): another npm run dev, or one left running when its npm run dev was killed; stop it (kill -- -${pgid}) first\n`]);
      }
    } finally {
      try { process.kill(-pgid, "SIGKILL"); } catch { /* gone */ }
    }
    await waitFor("the left wrangler dev to go", async () => !(await health(port)), 20_000);
    const third = run("dev.mjs", env);
    try {
      await until("npm run dev, started again", () => third.output().includes("threadbox is running"), third.child, third.exited);
    } finally {
      await stopGroup(third.child, third.exited);
    }
  }, 240_000);
});

describe("npm run smoke and npm run snapshot", () => {
  it("refuse an argument they do not take (a typo) instead of dropping it and going on", async () => {
    for (const [script, args, line] of [
      ["smoke.mjs", ["--locl"], "smoke: unknown argument --locl (it takes --local)\n"],
      ["snapshot.mjs", ["--enviroment", "env_x"], "snapshot: unknown argument --enviroment (it takes --refresh, --local, --environment <value>)\n"],
    ] as const) {
      const r = run(script, {}, [...args]);
      expect({ script, code: await r.exited, output: r.output() }).toEqual({ script, code: 2, output: line });
    }
  });
});

describe("npm run smoke", () => {
  it("reads the provider from .dev.vars, as npm run dev does", async () => {
    const key = "smoke-dev-vars-key";
    const host = await startSandboxHost({ port: 0, apiKey: key });
    try {
      writeFileSync(join(tree.dir, ".dev.vars"), `# the local host\nDAYTONA_API_URL=${host.apiUrl}\nDAYTONA_API_KEY="${key}"\nDAYTONA_TARGET=local\n`);
      const smoke = run("smoke.mjs", {});
      const code = await smoke.exited;
      expect(smoke.output()).toContain(`provider ${host.apiUrl} (from .dev.vars; no npm run dev of this checkout is running)`);
      expect(smoke.output()).toContain("VERDICT: PASS");
      expect(code).toBe(0);

      // The key really comes from the file: a wrong one fails at the first call.
      writeFileSync(join(tree.dir, ".dev.vars"), `DAYTONA_API_URL=${host.apiUrl}\nDAYTONA_API_KEY=wrong-key\n`);
      const wrong = run("smoke.mjs", {});
      expect(await wrong.exited).toBe(1);
      expect(wrong.output()).toMatch(/FAIL\s+credentials/);

      // The environment still wins over the file.
      const fromEnv = run("smoke.mjs", { DAYTONA_API_URL: host.apiUrl, DAYTONA_API_KEY: key });
      expect(await fromEnv.exited).toBe(0);
      expect(fromEnv.output()).toContain("(from environment)");
    } finally {
      await host.close();
    }
  }, 120_000);

  it("takes a running npm run dev's host only over a local host .dev.vars names: a real provider there, or the shell's, is checked as configured", () => {
    const devHost = { pid: 4242, apiUrl: "http://127.0.0.1:3996/api", apiKey: "dev-key" };
    const local = { DAYTONA_API_URL: "http://127.0.0.1:3986/api", DAYTONA_API_KEY: "dev-sandbox-key", DAYTONA_TARGET: "local" };
    const real = { DAYTONA_API_URL: "https://app.daytona.io/api", DAYTONA_API_KEY: "dtn_real", DAYTONA_TARGET: "us" };
    expect(chooseTarget({ env: {}, file: local, devHost })).toEqual({
      apiUrl: devHost.apiUrl, apiKey: "dev-key", target: "local", from: "the sandbox host of the running npm run dev, pid 4242; not .dev.vars's http://127.0.0.1:3986/api",
    });
    expect(chooseTarget({ env: {}, file: {}, devHost })).toMatchObject({ apiUrl: devHost.apiUrl, from: "the sandbox host of the running npm run dev, pid 4242" });
    expect(chooseTarget({ env: {}, file: real, devHost })).toEqual({ apiUrl: real.DAYTONA_API_URL, apiKey: "dtn_real", target: "us", from: "from .dev.vars" });
    expect(chooseTarget({ env: { DAYTONA_API_URL: "http://127.0.0.1:1/api", DAYTONA_API_KEY: "k" }, file: local, devHost }))
      .toEqual({ apiUrl: "http://127.0.0.1:1/api", apiKey: "k", target: "local", from: "from environment" });
    expect(chooseTarget({ env: {}, file: local, devHost: null })).toMatchObject({ apiUrl: local.DAYTONA_API_URL, from: "from .dev.vars; no npm run dev of this checkout is running" });
  });

  it("alongside an npm run dev on another SANDBOX_HOST_PORT checks the host that dev runs, not .dev.vars's port", async () => {
    rmSync(join(tree.dir, ".dev.vars"), { force: true });
    const sandboxPort = await freePort();
    const hostKey = "smoke-beside-dev-key";
    const dev = run("dev.mjs", { PORT: String(await freePort()), SANDBOX_HOST_PORT: String(sandboxPort), DEMO_MODEL_PORT: String(await freePort()), SANDBOX_HOST_API_KEY: hostKey });
    try {
      await until("npm run dev", () => dev.output().includes("threadbox is running"), dev.child, dev.exited);
      // Where dev notes its host: it holds the host's key, so its owner's alone.
      const record = join(tree.dir, ".wrangler", "dev-sandbox-host.json");
      expect(statSync(record).mode & 0o777).toBe(0o600);
      // .dev.vars, as npm run dev created it, still names the default port 3986.
      expect(readFileSync(join(tree.dir, ".dev.vars"), "utf8")).toContain("DAYTONA_API_URL=http://127.0.0.1:3986/api");
      const smoke = run("smoke.mjs", {});
      const code = await smoke.exited;
      expect(smoke.output()).toContain(`smoke: provider http://127.0.0.1:${sandboxPort}/api (the sandbox host of the running npm run dev, pid ${dev.child.pid}; not .dev.vars's http://127.0.0.1:3986/api)`);
      expect(smoke.output()).toContain("VERDICT: PASS");
      expect(code).toBe(0);
      // npm run snapshot picks its provider the same way.
      const snapshot = run("snapshot.mjs", {});
      expect(await snapshot.exited).toBe(0);
      expect(snapshot.output()).toContain(` on http://127.0.0.1:${sandboxPort}/api (the sandbox host of the running npm run dev, pid ${dev.child.pid};`);
      // The shell's DAYTONA_API_URL still wins over it.
      const fromEnv = run("smoke.mjs", { DAYTONA_API_URL: `http://127.0.0.1:${sandboxPort}/api`, DAYTONA_API_KEY: "wrong-key" });
      expect(await fromEnv.exited).toBe(1);
      expect(fromEnv.output()).toContain("(from environment)");
    } finally {
      await stopGroup(dev.child, dev.exited);
    }
    // Once that dev is gone (its note with it), .dev.vars again, saying no npm run dev runs.
    expect(readdirSync(join(tree.dir, ".wrangler"))).not.toContain("dev-sandbox-host.json");
    const after = run("smoke.mjs", {});
    await after.exited;
    expect(after.output()).toContain("smoke: provider http://127.0.0.1:3986/api (from .dev.vars; no npm run dev of this checkout is running)");
    rmSync(join(tree.dir, ".dev.vars"), { force: true });
  }, 240_000);
});
