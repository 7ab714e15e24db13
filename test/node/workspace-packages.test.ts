import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSandboxHost, type SandboxHost } from "../../sandbox-host/server.mjs";
import { createDaytonaProvider, type DaytonaProvider } from "../../src/sandbox/daytona-provider";
import { packagesSchema, packageBakeSteps, packageInstallCommands, parseInstalled, bareName } from "../../src/workspace/packages";
import { environmentInputSchema } from "../../src/environments";
import { tempDirs } from "../support/temp-dirs";

const tempDir = tempDirs();

describe("environment packages", () => {
  it("takes names with pinned versions per manager", () => {
    const p = packagesSchema.parse({ apt: ["ripgrep", "jq=1.6-2.1"], npm: ["typescript@5.6.3", "@types/node@22.0.0"], pip: ["requests==2.32.3", "uvicorn[standard]>=0.30"] });
    expect(p.npm).toEqual(["typescript@5.6.3", "@types/node@22.0.0"]);
    expect(bareName("npm", "@types/node@22.0.0")).toBe("@types/node");
    expect(bareName("pip", "uvicorn[standard]>=0.30")).toBe("uvicorn");
    expect(bareName("apt", "jq=1.6-2.1")).toBe("jq");
  });

  it("refuses names that are not a package (shell metacharacters, flags, spaces, unknown managers)", () => {
    for (const bad of [{ apt: ["jq; rm -rf /"] }, { npm: ["--prefix=/etc"] }, { pip: ["requests $(id)"] }, { apt: ["a b"] }, { brew: ["jq"] }]) {
      expect(packagesSchema.safeParse(bad).success, JSON.stringify(bad)).toBe(false);
    }
    expect(environmentInputSchema.safeParse({ name: "e", packages: { npm: ["x|y"] } }).success).toBe(false);
    expect(environmentInputSchema.parse({ name: "e", packages: { pip: ["requests==2.32.3"] } }).packages).toEqual({ pip: ["requests==2.32.3"] });
  });

  it("one install step per manager that has packages", () => {
    expect(packageInstallCommands({ apt: ["jq"], npm: [], pip: ["requests==2.32.3"] }).map((c) => c.manager)).toEqual(["apt", "pip"]);
    expect(packageInstallCommands(undefined)).toEqual([]);
  });

  it("a snapshot's install steps hand every spec to its manager as written: a range is not a shell redirection", () => {
    const dir = tempDir("tb-bake-");
    const bin = path.join(dir, "bin");
    fs.mkdirSync(bin);
    // Stand-ins for the managers that record the arguments they were given, one a line.
    for (const name of ["apt-get", "npm", "python3", "rm"]) {
      fs.writeFileSync(path.join(bin, name), `#!/bin/sh\nfor a in "$@"; do echo "$a"; done >> "${dir}/${name}.args"\n`, { mode: 0o755 });
    }
    const specs = { apt: ["jq=1.6-2.1"], npm: ["typescript@>=5.6<6", "left-pad@^1.3.0"], pip: ["uvicorn[standard]>=0.30", "requests<3"] };
    expect(packagesSchema.safeParse(specs).success).toBe(true);
    const work = path.join(dir, "work");
    fs.mkdirSync(work);
    for (const step of packageBakeSteps(specs)) {
      execFileSync("/bin/sh", ["-c", step], { cwd: work, env: { PATH: `${bin}:/usr/bin:/bin` }, stdio: "pipe" });
    }
    const args = (name: string) => fs.readFileSync(path.join(dir, `${name}.args`), "utf8").split("\n");
    expect(args("apt-get")).toContain("jq=1.6-2.1");
    expect(args("npm")).toEqual(expect.arrayContaining(["typescript@>=5.6<6", "left-pad@^1.3.0"]));
    expect(args("python3")).toEqual(expect.arrayContaining(["uvicorn[standard]>=0.30", "requests<3"]));
    // Nothing was written where the build ran: no file named after a version.
    expect(fs.readdirSync(work)).toEqual([]);
  });

  it("the install at box start hands every spec to its manager as written and reports it so: a version glob or pip extras never match files where it runs", () => {
    const dir = tempDir("tb-install-");
    const bin = path.join(dir, "bin");
    fs.mkdirSync(bin);
    // Stand-ins that find nothing installed and record what they are asked to install.
    for (const name of ["npm", "python3"]) {
      fs.writeFileSync(path.join(bin, name), `#!/bin/sh\ncase "$*" in *" ls "*|"ls "*|*"pip show"*) exit 1;; esac\nfor a in "$@"; do echo "$a"; done >> "${dir}/${name}.args"\n`, { mode: 0o755 });
    }
    const specs = { npm: ["left-pad@1.*"], pip: ["uvicorn[standard]>=0.30"] };
    expect(packagesSchema.safeParse(specs).success).toBe(true);
    // What a box's HOME may hold (an earlier run's files, a volume): names those specs would match as globs.
    const home = path.join(dir, "home");
    fs.mkdirSync(home);
    for (const f of ["left-pad@1.0-from-the-box", "uvicorns>=0.30"]) fs.writeFileSync(path.join(home, f), "");
    const printed = packageInstallCommands(specs).map((step) =>
      execFileSync("/bin/bash", ["-c", step.command], { cwd: home, env: { PATH: `${bin}:/usr/bin:/bin` }, encoding: "utf8" })).join("");
    const args = (name: string) => fs.readFileSync(path.join(dir, `${name}.args`), "utf8").split("\n");
    expect(args("npm")).toContain("left-pad@1.*");
    expect(args("python3")).toContain("uvicorn[standard]>=0.30");
    expect(parseInstalled(printed)).toEqual(["npm:left-pad@1.*", "pip:uvicorn[standard]>=0.30"]);
  });

  it("reads the installed list from what the command printed, ignoring installer noise", () => {
    expect(parseInstalled("added 1 package\nnpm:typescript@5.6.3\npip:requests==2.32.3\n")).toEqual(["npm:typescript@5.6.3", "pip:requests==2.32.3"]);
  });
});

describe("environment packages in a box (real SDK, local host)", () => {
  const KEY = "packages-test-key";
  let host: SandboxHost;
  let provider: DaytonaProvider;
  beforeAll(async () => {
    host = await startSandboxHost({ port: 0, apiKey: KEY });
    provider = createDaytonaProvider({ apiUrl: host.apiUrl, apiKey: KEY, target: "local" });
  });
  afterAll(async () => {
    await host?.close();
  });

  it("a package the box lacks is installed from the registry and reported; the next check finds it present", async () => {
    // A one-package npm registry on loopback: the packument and the tarball `npm pack` made.
    const dir = tempDir("tb-pkg-");
    fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name: "tb-local-pkg", version: "1.0.0", main: "index.js" }));
    fs.writeFileSync(path.join(dir, "index.js"), "module.exports = 'installed-from-registry';\n");
    const tgzName = execFileSync("npm", ["pack", "--silent", "--pack-destination", dir], { cwd: dir, encoding: "utf8" }).trim().split("\n").pop()!;
    const tgz = fs.readFileSync(path.join(dir, tgzName));
    const registry = http.createServer((req, res) => {
      const base = `http://127.0.0.1:${(registry.address() as { port: number }).port}`;
      if (req.url === "/tb-local-pkg") {
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify({
          name: "tb-local-pkg", "dist-tags": { latest: "1.0.0" },
          versions: { "1.0.0": { name: "tb-local-pkg", version: "1.0.0", main: "index.js", dist: {
            tarball: `${base}/tb-local-pkg/-/${tgzName}`,
            shasum: createHash("sha1").update(tgz).digest("hex"),
            integrity: `sha512-${createHash("sha512").update(tgz).digest("base64")}`,
          } } },
        }));
      } else if (req.url === `/tb-local-pkg/-/${tgzName}`) {
        res.end(tgz);
      } else {
        res.statusCode = 404;
        res.end("{}");
      }
    });
    await new Promise<void>((r) => registry.listen(0, "127.0.0.1", () => r()));
    const box = await provider.create({ labels: { house: "h-pkg", thread: "t2", environment: "e1" }, ephemeral: true });
    try {
      const home = await provider.homeDir(box.ref);
      const npmEnv = {
        npm_config_prefix: `${home}/npm-global`, npm_config_cache: `${home}/npm-cache`,
        npm_config_registry: `http://127.0.0.1:${(registry.address() as { port: number }).port}/`,
      };
      const [step] = packageInstallCommands({ npm: ["tb-local-pkg@1.0.0"] });
      const first = await provider.exec(box.ref, step.command, { timeoutSec: 120, env: npmEnv });
      expect(first.exitCode, first.output).toBe(0);
      expect(parseInstalled(first.output)).toEqual(["npm:tb-local-pkg@1.0.0"]);
      expect((await provider.exec(box.ref, "cat npm-global/lib/node_modules/tb-local-pkg/index.js")).output).toContain("installed-from-registry");
      const again = await provider.exec(box.ref, step.command, { timeoutSec: 120, env: npmEnv });
      expect(again.exitCode).toBe(0);
      expect(parseInstalled(again.output)).toEqual([]);
    } finally {
      await provider.delete(box.ref);
      registry.close();
    }
  });

  it("a package the box has is left alone; one that cannot be installed fails the step and is not reported as installed", async () => {
    const box = await provider.create({ labels: { house: "h-pkg", thread: "t1", environment: "e1" }, ephemeral: true });
    try {
      // The box's own npm global prefix, with one package already in it (what a snapshot would have).
      const home = await provider.homeDir(box.ref);
      const npmEnv = { npm_config_prefix: `${home}/npm-global` };
      await provider.upload(box.ref, [{ path: "npm-global/lib/node_modules/tb-present/package.json", content: JSON.stringify({ name: "tb-present", version: "1.0.0" }) }]);
      const [present] = packageInstallCommands({ npm: ["tb-present@1.0.0"] });
      const ok = await provider.exec(box.ref, present.command, { timeoutSec: 120, env: npmEnv });
      expect(ok.exitCode).toBe(0);
      expect(parseInstalled(ok.output)).toEqual([]);
      // Offline, npm cannot fetch it: the install fails quickly without touching the network.
      const [missing] = packageInstallCommands({ npm: ["tb-no-such-package-zz9@0.0.1"] });
      const bad = await provider.exec(box.ref, missing.command, { timeoutSec: 120, env: { ...npmEnv, npm_config_offline: "true" } });
      expect(bad.exitCode).not.toBe(0);
      expect(parseInstalled(bad.output)).toEqual([]);
    } finally {
      await provider.delete(box.ref);
    }
  });
});
