// globalSetup for the workers project: runs in Node, starts the local sandbox host on a free
// port and hands its URL to miniflare bindings (see vitest.config.ts) and to tests via inject().
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import type { TestProject } from "vitest/node";
import { startSandboxHost } from "../../sandbox-host/server.mjs";

declare module "vitest" {
  export interface ProvidedContext {
    sandboxHostApiUrl: string;
    sandboxHostApiKey: string;
    sandboxHostDeadApiUrl: string;
    sandboxHostRepoPath: string;
  }
}

const API_KEY = "workers-sandbox-host-key";

/** A loopback port with nothing listening: the "host is down" case. */
async function deadPort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", () => r()));
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

export default async function setup(project: TestProject) {
  const host = await startSandboxHost({ port: 0, apiKey: API_KEY });
  const repo = fs.mkdtempSync(path.join(os.tmpdir(), "workers-repo-"));
  const env = { ...process.env, GIT_AUTHOR_NAME: "t", GIT_AUTHOR_EMAIL: "t@t", GIT_COMMITTER_NAME: "t", GIT_COMMITTER_EMAIL: "t@t" };
  execFileSync("git", ["init", "-q", "-b", "main"], { cwd: repo });
  fs.writeFileSync(path.join(repo, "hello.txt"), "from the repo\n");
  execFileSync("git", ["add", "."], { cwd: repo });
  execFileSync("git", ["commit", "-q", "-m", "init"], { cwd: repo, env });
  project.provide("sandboxHostApiUrl", host.apiUrl);
  project.provide("sandboxHostApiKey", API_KEY);
  project.provide("sandboxHostDeadApiUrl", `http://127.0.0.1:${await deadPort()}/api`);
  project.provide("sandboxHostRepoPath", repo);
  return async () => {
    await host.close();
    fs.rmSync(repo, { recursive: true, force: true });
  };
}
