// What only a raw socket can send: a GET or HEAD with a body, a body whose framing breaks off
// mid-read. A client's mistake, so a plain answer or a 400, never a 500.
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startWorker } from "../../scripts/lib/wrangler-dev.mjs";
import { readBoundedBody } from "../../src/http/bounded-body";
import { ApiError } from "../../src/errors";

let worker: Awaited<ReturnType<typeof startWorker>>;
let token: string;
let threadId: string;

beforeAll(async () => {
  worker = await startWorker();
  token = await worker.mintHouseToken("house-framing", "framer", "member");
  const r = await fetch(`${worker.url}/api/threads`, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: "{}" });
  threadId = ((await r.json()) as { id: string }).id;
}, 120_000);

afterAll(async () => {
  await worker?.stop();
});

/** Sends `head` (request line and headers, CRLF-joined) and `body` as they are; resolves with the status and the rest. */
function raw(head: string[], body = ""): Promise<{ status: number; text: string }> {
  const { hostname, port } = new URL(worker.url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => {
      socket.write(`${[...head, `Host: ${hostname}:${port}`, `Authorization: Bearer ${token}`, "Connection: close"].join("\r\n")}\r\n\r\n${body}`);
    });
    let data = "";
    socket.setEncoding("utf8");
    socket.on("data", (d) => { data += d; });
    socket.on("error", reject);
    socket.on("close", () => resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(data)?.[1] ?? 0), text: data }));
  });
}

describe("HTTP framing a client got wrong", () => {
  it("a GET or HEAD with a body on a stream route is answered as if it had none", async () => {
    const get = await raw([`GET /api/stream/thread-${threadId}?offset=-1 HTTP/1.1`, "Content-Length: 1"], "x");
    expect(get.status).toBe(200);
    expect((await raw([`GET /v1/stream/no-such-stream?offset=-1 HTTP/1.1`, "Content-Length: 1"], "x")).status).toBe(404);
    expect((await raw([`HEAD /v1/stream/thread-${threadId} HTTP/1.1`, "Content-Length: 1"], "x")).status).toBe(200);
  });
});

describe("a body that breaks off while it is read", () => {
  // workerd hands the worker a body whose read fails when the chunked framing is broken (a chunk
  // size that is not hex) or the client goes away; wrangler dev's own proxy answers such a
  // request itself, so this is the worker's part, on a Request like the one workerd makes.
  it("is a 400 bad_request, with or without a declared length", async () => {
    for (const declared of [null, "100"]) {
      let sent = false;
      const body = new ReadableStream<Uint8Array>({
        pull(c) {
          if (!sent) { sent = true; c.enqueue(new TextEncoder().encode('{"payload":')); return; }
          c.error(new TypeError("Network connection lost."));
        },
      });
      const headers: Record<string, string> = { "content-type": "application/json", ...(declared ? { "content-length": declared } : {}) };
      const request = new Request("http://x/api/threads/t/entries", { method: "POST", body, headers, duplex: "half" } as RequestInit);
      const err = await readBoundedBody(request, 1024).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ApiError);
      expect({ code: (err as ApiError).code, status: (err as ApiError).status }).toEqual({ code: "bad_request", status: 400 });
    }
  });
});

describe("a write refused before its body is read", () => {
  // Answered with its body unread, such a request left workerd failing to read that body after
  // the answer ("Can't read from request stream after response has been sent"): now and then the
  // client's connection was cut mid-write, or its next request on the connection got a 500.
  it("is answered as refused, every time, and the connection stays good for the next one", async () => {
    const viewer = await worker.mintHouseToken("house-framing", "looker", "viewer");
    await fetch(`${worker.url}/api/stream/refused`, { method: "PUT", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" } });
    const body = JSON.stringify({ payload: { type: "chat", text: "x".repeat(32 * 1024) } });
    const refusals: [string, string, Record<string, string>, number][] = [
      [`/api/stream/thread-${threadId}`, viewer, {}, 403], // a token that may not write
      ["/api/stream/refused", token, { "Producer-Id": "p" }, 400], // producer headers not sent together
      ["/api/stream/refused", viewer, {}, 403],
    ];
    const wrong: string[] = [];
    for (let round = 0; round < 60; round++) {
      for (const [path, bearer, headers, status] of refusals) {
        const got = await fetch(`${worker.url}${path}`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${bearer}`, ...headers },
          body,
        }).then(async (r) => { await r.text(); return r.status; }).catch((e: { cause?: { code?: string } }) => e.cause?.code ?? String(e));
        if (got !== status) wrong.push(`${path} ${got}`);
      }
    }
    expect(wrong).toEqual([]);
  });
});
