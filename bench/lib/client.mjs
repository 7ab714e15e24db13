// One thin Durable Streams client used for BOTH servers, so the only difference is the server.
import { now, sleep } from "./stats.mjs";

export class Target {
  /**
   * @param {{ label: string, url: string, token?: string, threads: boolean }} o
   * threads: true = threadbox (threads via POST /api/threads, WebSocket subscriptions);
   *          false = reference (a "thread" is a plain stream named thread-<n>).
   */
  constructor(o) {
    this.label = o.label;
    this.url = o.url;
    this.token = o.token;
    this.hasThreads = o.threads;
    this.streamBase = `${o.url}/v1/stream`;
  }

  h(extra = {}) {
    return { authorization: `Bearer ${this.token ?? "none"}`, ...extra };
  }

  streamUrl(name) {
    return `${this.streamBase}/${name}`;
  }

  async createStream(name) {
    const r = await fetch(this.streamUrl(name), { method: "PUT", headers: this.h({ "content-type": "application/json" }) });
    await r.arrayBuffer();
    if (r.status !== 201 && r.status !== 200) throw new Error(`${this.label}: create ${name} -> ${r.status}`);
    return name;
  }

  /** A thread: a real thread on threadbox, a plain stream on the reference. Returns the stream name. */
  async createThread(n) {
    if (!this.hasThreads) return this.createStream(`thread-bench-${n}-${Date.now()}`);
    const r = await fetch(`${this.url}/api/threads`, {
      method: "POST", headers: this.h({ "content-type": "application/json" }), body: JSON.stringify({ title: `bench ${n}` }),
    });
    const body = await r.json();
    if (r.status !== 201) throw new Error(`${this.label}: create thread -> ${r.status} ${JSON.stringify(body)}`);
    return `thread-${body.id}`;
  }

  /** POST a JSON body (string). Returns the latency in ms. Throws on a non-2xx. */
  async append(name, body) {
    const t0 = now();
    const r = await fetch(this.streamUrl(name), { method: "POST", headers: this.h({ "content-type": "application/json" }), body });
    const text = await r.text();
    if (r.status < 200 || r.status > 299) throw new Error(`${this.label}: append ${name} -> ${r.status} ${text.slice(0, 200)}`);
    return now() - t0;
  }

  async tail(name) {
    const r = await fetch(this.streamUrl(name), { method: "HEAD", headers: this.h() });
    if (r.status !== 200) throw new Error(`${this.label}: HEAD ${name} -> ${r.status}`);
    return r.headers.get("stream-next-offset");
  }

  /** Catch-up read from `offset` until Stream-Up-To-Date. */
  async catchUp(name, offset = "-1", maxPages = 100_000) {
    let entries = 0, bytes = 0, pages = 0;
    for (; pages < maxPages; ) {
      const r = await fetch(`${this.streamUrl(name)}?offset=${encodeURIComponent(offset)}`, { headers: this.h() });
      const buf = await r.arrayBuffer();
      if (r.status !== 200) throw new Error(`${this.label}: read ${name} -> ${r.status}`);
      pages++;
      bytes += buf.byteLength;
      entries += JSON.parse(Buffer.from(buf).toString("utf8")).length;
      offset = r.headers.get("stream-next-offset");
      if (r.headers.get("stream-up-to-date") === "true") break;
    }
    return { entries, bytes, pages };
  }

  /** Long-poll loop; calls onMessage(msg) per message until signal aborts. Resolves when stopped. */
  async longPoll(name, offset, onMessage, signal) {
    let cursor = null;
    for (let i = 0; i < 1_000_000 && !signal.aborted; i++) {
      let r;
      try {
        const q = `offset=${encodeURIComponent(offset)}&live=long-poll${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`;
        let text;
        ({ response: r, text } = await fetchUntil(signal, `${this.streamUrl(name)}?${q}`, { headers: this.h() }));
        if (r.status === 200) for (const m of JSON.parse(text)) onMessage(m);
        else if (r.status !== 204) throw new Error(`${this.label}: long-poll -> ${r.status} ${text.slice(0, 200)}`);
      } catch (err) {
        if (signal.aborted) return;
        throw err;
      }
      offset = r.headers.get("stream-next-offset") ?? offset;
      cursor = r.headers.get("stream-cursor");
    }
  }

  /** SSE loop; onOpen() once the response headers arrive. */
  async sse(name, offset, onMessage, signal, onOpen) {
    let r;
    try {
      r = await fetch(`${this.streamUrl(name)}?offset=${encodeURIComponent(offset)}&live=sse`, { headers: this.h({ accept: "text/event-stream" }), signal });
      if (r.status !== 200) throw new Error(`${this.label}: sse -> ${r.status} ${await r.text()}`);
      onOpen?.();
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (let i = 0; i < 10_000_000; i++) {
        const { done, value } = await reader.read();
        if (done) return;
        buf += dec.decode(value, { stream: true });
        buf = buf.replace(/\r\n/g, "\n");
        let at;
        while ((at = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, at);
          buf = buf.slice(at + 2);
          let event = "message";
          const data = [];
          for (const line of block.split("\n")) {
            if (line.startsWith("event:")) event = line.slice(6).trim();
            else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
          }
          if (event === "data") for (const m of JSON.parse(data.join("\n"))) onMessage(m);
        }
      }
    } catch (err) {
      if (signal.aborted) return;
      throw err;
    }
  }

  /** threadbox only: WebSocket subscription from `now`. Resolves with the socket once open. */
  async subscribe(threadStream, onMessage) {
    const id = threadStream.replace(/^thread-/, "");
    const wsUrl = `${this.url.replace(/^http/, "ws")}/api/threads/${id}/subscribe?offset=now&token=${encodeURIComponent(this.token)}`;
    const ws = new WebSocket(wsUrl);
    await new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error("websocket open timeout")), 15_000);
      ws.addEventListener("open", () => { clearTimeout(t); resolve(); });
      ws.addEventListener("error", (e) => { clearTimeout(t); reject(new Error(`websocket error ${e.message ?? ""}`)); });
    });
    ws.addEventListener("message", (ev) => {
      const msg = JSON.parse(typeof ev.data === "string" ? ev.data : Buffer.from(ev.data).toString("utf8"));
      if (msg.payload) onMessage(msg);
    });
    return ws;
  }
}

/**
 * fetch + body text, aborted when `signal` is. A signal per request: undici keeps its abort
 * listener on a signal until the Request is garbage-collected, so a loop that passes one shared
 * signal collects thousands of listeners and every new fetch pays for walking them.
 */
export async function fetchUntil(signal, url, init = {}) {
  const one = new AbortController();
  const stop = () => one.abort();
  signal.addEventListener("abort", stop, { once: true });
  try {
    const response = await fetch(url, { ...init, signal: one.signal });
    return { response, text: await response.text() };
  } finally {
    signal.removeEventListener("abort", stop);
  }
}

export { now, sleep };
