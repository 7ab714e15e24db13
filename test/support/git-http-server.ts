// Git's smart HTTP protocol over loopback (`git http-backend` as CGI), behind HTTP basic auth:
// a stand-in for a private GitHub repository that needs a token to clone and to fetch.
import { spawn } from "node:child_process";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export type GitHttpServer = {
  url: (repo: string) => string;
  /** Requests refused for missing or wrong credentials, and ones served. */
  stats: { refused: number; served: number; uploadPacks: number };
  close(): Promise<void>;
};

export async function startGitHttpServer(projectRoot: string, user: string, password: string): Promise<GitHttpServer> {
  const stats = { refused: 0, served: 0, uploadPacks: 0 };
  const expected = `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`;
  const server: Server = createServer((req, res) => {
    if (req.headers.authorization !== expected) {
      stats.refused++;
      res.writeHead(401, { "www-authenticate": 'Basic realm="git"' }).end("credentials required\n");
      return;
    }
    stats.served++;
    const url = new URL(req.url ?? "/", "http://git.local");
    if (url.pathname.endsWith("/git-upload-pack")) stats.uploadPacks++;
    const cgi = spawn("git", ["http-backend"], {
      env: {
        ...process.env, GIT_PROJECT_ROOT: projectRoot, GIT_HTTP_EXPORT_ALL: "1", REMOTE_USER: user,
        PATH_INFO: decodeURIComponent(url.pathname), QUERY_STRING: url.search.slice(1), REQUEST_METHOD: req.method ?? "GET",
        CONTENT_TYPE: req.headers["content-type"] ?? "", GIT_PROTOCOL: String(req.headers["git-protocol"] ?? ""),
        ...(req.headers["content-encoding"] ? { HTTP_CONTENT_ENCODING: String(req.headers["content-encoding"]) } : {}),
      },
    });
    req.pipe(cgi.stdin);
    let head = Buffer.alloc(0);
    let headersDone = false;
    cgi.stdout.on("data", (chunk: Buffer) => {
      if (headersDone) return void res.write(chunk);
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf("\r\n\r\n");
      if (end < 0) return;
      headersDone = true;
      let status = 200;
      for (const line of head.subarray(0, end).toString().split("\r\n")) {
        const at = line.indexOf(":");
        const k = line.slice(0, at).trim();
        const v = line.slice(at + 1).trim();
        if (k.toLowerCase() === "status") status = Number(v.split(" ")[0]);
        else res.setHeader(k, v);
      }
      res.writeHead(status);
      res.write(head.subarray(end + 4));
    });
    cgi.on("close", () => res.end());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: (repo) => `http://127.0.0.1:${port}/${repo}`,
    stats,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
