// globalSetup for the workers project: a control server (Node) through which a test in workerd
// starts its own scripted model server (test/support/model-server.ts), scripts it and reads what
// it was sent. One model server per test keeps scripts of parallel test files apart.
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import type { TestProject } from "vitest/node";
import { startModelServer, type ModelServer } from "../support/model-server";

declare module "vitest" {
  export interface ProvidedContext {
    modelControlUrl: string;
  }
}

function readJson(req: IncomingMessage): Promise<any> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const raw = Buffer.concat(chunks).toString("utf8");
      resolve(raw ? JSON.parse(raw) : {});
    });
    req.on("error", reject);
  });
}

export default async function setup(project: TestProject) {
  const servers = new Map<string, ModelServer>();
  let next = 0;
  const control = createServer(async (req, res) => {
    try {
      const url = new URL(req.url ?? "/", "http://x");
      const parts = url.pathname.split("/").filter(Boolean); // servers[/:id[/push|/requests]]
      let out: unknown;
      if (req.method === "POST" && parts.length === 1 && parts[0] === "servers") {
        const body = await readJson(req);
        const server = await startModelServer(body.script ?? [], { fallback: body.fallback });
        const id = String(++next);
        servers.set(id, server);
        out = { id, baseUrl: server.baseUrl };
      } else {
        const server = servers.get(parts[1] ?? "");
        if (!server) throw new Error("no such model server");
        if (req.method === "POST" && parts[2] === "push") {
          server.push(...((await readJson(req)).steps ?? []));
          out = { ok: true };
        } else if (req.method === "GET" && parts[2] === "requests") {
          out = { requests: server.requests.map((r) => ({ headers: r.headers, body: r.body })) };
        } else {
          throw new Error("no such route");
        }
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(out));
    } catch (err) {
      res.writeHead(400, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: (err as Error).message }));
    }
  });
  await new Promise<void>((r) => control.listen(0, "127.0.0.1", () => r()));
  project.provide("modelControlUrl", `http://127.0.0.1:${(control.address() as AddressInfo).port}`);
  return async () => {
    await Promise.all([...servers.values()].map((s) => s.close()));
    await new Promise<void>((r) => control.close(() => r()));
  };
}
