// Follows a thread over its WebSocket (`/api/threads/:id/subscribe`, token in the `bearer.<token>`
// subprotocol next to the `threadbox` one the server selects, never in the URL), reconnecting from
// the last offset seen after a drop, so no entry is missed or shown twice. A drop the socket is
// never told of (a network gone, a laptop asleep) shows as a ping left unanswered.
import WebSocket from "ws";
import { notThreadbox, refusedToken, requestTimeoutMs } from "./api.mjs";
import { CliError } from "./errors.mjs";

const RECONNECT_MIN_MS = 250;
const RECONNECT_MAX_MS = 5_000;
const PING_EVERY_MS = 15_000;
const CLOSE_TIMEOUT_MS = 500;
/** The close the server sends once the token that opened the socket has expired (see the subscribe route). */
const TOKEN_EXPIRED = 4001;

/**
 * @param {{ url: string, token: string }} target
 * @param {string} threadId
 * @param {{ offset?: string, onEntry: (entry: any) => void | Promise<void>, onReconnecting?: (delayMs: number) => void, pingEveryMs?: number }} opts
 * @returns {{ done: Promise<void>, close(): void, lastOffset(): string }}
 *   `done` resolves after close(), rejects when the server refuses the subscription.
 */
export function subscribe(target, threadId, opts) {
  let offset = opts.offset ?? "-1";
  let socket = null;
  let closed = false;
  let attempt = 0;
  let queue = Promise.resolve();
  let settle;
  const done = new Promise((resolve, reject) => { settle = { resolve, reject }; });

  const wsUrl = () => {
    const u = new URL(`${target.url}/api/threads/${encodeURIComponent(threadId)}/subscribe`);
    u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
    u.searchParams.set("offset", offset);
    return u.toString();
  };

  const fail = (err) => {
    closed = true;
    settle.reject(err);
  };

  // "now" is pinned to the thread's tail before the first connect: asked again at a reconnect it
  // would skip whatever was appended while the connection was down.
  const pinNow = async () => {
    const r = await fetch(`${target.url}/api/stream/thread-${encodeURIComponent(threadId)}`, {
      method: "HEAD", headers: { authorization: `Bearer ${target.token}` },
      // unanswered, it is asked again like a handshake nobody answers
      signal: AbortSignal.timeout(requestTimeoutMs()),
    });
    const tail = r.headers.get("stream-next-offset");
    if (r.ok && tail) offset = tail;
    else if (r.ok) throw notThreadbox(target.url, `the thread's stream answered ${r.status} without its offset`);
    else if (r.status === 401) throw refusedToken(target, "");
    else if (r.status >= 400 && r.status < 500) throw new CliError(r.status === 404 ? "not_found" : `http_${r.status}`, r.status === 404 ? "thread not found" : `the thread's tail could not be read (${r.status})`, { status: r.status });
    else throw new Error(`HEAD ${r.status}`);
  };

  const connect = () => {
    if (closed) return;
    if (offset === "now") {
      pinNow().then(connect, (err) => (err instanceof CliError ? fail(err) : retry()));
      return;
    }
    // The server never echoes the token, so a protocol it can select is offered with it; without one
    // the handshake selects nothing and the client refuses the socket.
    // A handshake nobody answers (the network went while reconnecting) would wait for ever.
    // Once close frames have gone both ways the socket is done, however long the server (wrangler
    // dev: 10 s) keeps the TCP connection after it: a 4001 or 1013 is acted on at once.
    const ws = new WebSocket(wsUrl(), ["threadbox", `bearer.${target.token}`], { handshakeTimeout: 2 * (opts.pingEveryMs ?? PING_EVERY_MS), closeTimeout: CLOSE_TIMEOUT_MS });
    socket = ws;
    // The server answers "ping" with a pong; a link that says nothing for a whole interval after
    // one is dead, even though no close ever comes. Its socket is dropped and a new one asked for.
    let heard = true;
    let pinger = null;
    ws.on("open", () => {
      attempt = 0;
      pinger = setInterval(() => {
        if (!heard) {
          clearInterval(pinger);
          ws.terminate();
          return;
        }
        heard = false;
        ws.send("ping", () => {});
      }, opts.pingEveryMs ?? PING_EVERY_MS);
      pinger.unref?.();
    });
    ws.on("message", (data) => {
      heard = true;
      let entry;
      try {
        entry = JSON.parse(String(data));
      } catch {
        return; // not an entry
      }
      if (typeof entry !== "object" || entry === null || typeof entry.payload !== "object") return; // a pong, or not an entry either
      if (typeof entry.offset === "string" && entry.offset) offset = entry.offset;
      // one at a time, in order, even when a handler awaits
      queue = queue.then(() => (closed ? undefined : opts.onEntry(entry))).catch(fail);
    });
    ws.on("unexpected-response", (_req, res) => {
      // The server answered the upgrade with an HTTP error: a bad token or thread will not get better by retrying.
      let body = "";
      res.on("data", (d) => (body += d));
      res.on("end", () => {
        let e;
        try { e = JSON.parse(body).error; } catch { e = null; }
        const status = res.statusCode ?? 0;
        if (status === 401 && e?.code === "unauthorized") {
          fail(refusedToken(target, e.message ?? ""));
          ws.terminate();
        } else if (status >= 400 && status < 500 && typeof e?.code === "string") {
          fail(new CliError(e.code, e.message ?? "", { status, details: e.details }));
          ws.terminate();
        } else if (status >= 400 && status < 500) {
          // Threadbox refuses with its JSON error: a page (another server now at that URL, a proxy's
          // login form) is not the message, and asking again will not make it threadbox.
          fail(notThreadbox(target.url, `the WebSocket upgrade was answered ${status} ${res.headers["content-type"] ?? "without a content type"}`));
          ws.terminate();
        } else if (status >= 200 && status < 400) {
          // A page or a redirect instead of a WebSocket: not a threadbox server there, and asking again will not make it one.
          const where = status >= 300 && res.headers.location ? ` to ${res.headers.location}` : "";
          fail(notThreadbox(target.url, `the WebSocket upgrade was answered ${status}${where} ${res.headers["content-type"] ?? ""}`.trimEnd()));
          ws.terminate();
        } else {
          ws.terminate();
          retry();
        }
      });
    });
    ws.on("error", () => { /* a close follows; retry there */ });
    ws.on("close", (code, reason) => {
      clearInterval(pinger);
      if (socket !== ws) return;
      // Reconnecting with the same token would only be refused: the user has to sign in again.
      // What arrived before the close is shown first.
      if (code === TOKEN_EXPIRED) queue.then(() => fail(refusedToken(target, String(reason) || "token expired")));
      else retry();
    });
  };

  const retry = () => {
    if (closed) return;
    socket = null;
    const delay = Math.min(RECONNECT_MAX_MS, RECONNECT_MIN_MS * 2 ** attempt++);
    opts.onReconnecting?.(delay);
    setTimeout(connect, delay);
  };

  connect();
  return {
    done,
    lastOffset: () => offset,
    close() {
      if (closed) return;
      closed = true;
      const s = socket;
      socket = null;
      s?.close();
      queue.then(() => settle.resolve());
    },
  };
}
