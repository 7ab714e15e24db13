// Minimal server side of RFC 6455, enough for the toolbox log stream: the host
// only pushes frames and answers close/ping. Written by hand because the host
// must run on plain Node 22 with no packages.
import { createHash } from "node:crypto";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/**
 * Completes the upgrade handshake on a raw socket and returns a tiny socket API.
 * Echoes the first offered subprotocol: browsers/workerd reject a reply that
 * names a protocol they did not offer, and Node's `ws` rejects one it never asked for.
 */
export function acceptWebSocket(req, socket, head) {
  const key = req.headers["sec-websocket-key"];
  if (!key) {
    socket.end("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n");
    return null;
  }
  const accept = createHash("sha1").update(key + GUID).digest("base64");
  const offered = String(req.headers["sec-websocket-protocol"] ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  const lines = [
    "HTTP/1.1 101 Switching Protocols",
    "Upgrade: websocket",
    "Connection: Upgrade",
    `Sec-WebSocket-Accept: ${accept}`,
  ];
  if (offered.length) lines.push(`Sec-WebSocket-Protocol: ${offered[0]}`);
  socket.write(lines.join("\r\n") + "\r\n\r\n");
  socket.setNoDelay(true);

  let closed = false;
  const listeners = new Set();
  let buf = head && head.length ? Buffer.from(head) : Buffer.alloc(0);

  const writeFrame = (opcode, payload) => {
    if (closed || socket.destroyed) return;
    const len = payload.length;
    let header;
    if (len < 126) {
      header = Buffer.from([0x80 | opcode, len]);
    } else if (len < 65536) {
      header = Buffer.alloc(4);
      header[0] = 0x80 | opcode;
      header[1] = 126;
      header.writeUInt16BE(len, 2);
    } else {
      header = Buffer.alloc(10);
      header[0] = 0x80 | opcode;
      header[1] = 127;
      header.writeBigUInt64BE(BigInt(len), 2);
    }
    socket.write(Buffer.concat([header, payload]));
  };

  const api = {
    get closed() {
      return closed;
    },
    sendBinary(data) {
      writeFrame(0x2, Buffer.from(data));
    },
    sendText(text) {
      writeFrame(0x1, Buffer.from(text, "utf8"));
    },
    close(code = 1000, reason = "") {
      if (closed) return;
      const r = Buffer.from(reason, "utf8");
      const p = Buffer.alloc(2 + r.length);
      p.writeUInt16BE(code, 0);
      r.copy(p, 2);
      writeFrame(0x8, p);
      closed = true;
      // Give the peer a moment to read the close frame before the TCP close.
      setTimeout(() => socket.end(), 50).unref?.();
      for (const l of listeners) l();
    },
    onClose(fn) {
      listeners.add(fn);
    },
  };

  // Parse client frames only to honour close and ping; data frames are ignored.
  const parse = () => {
    while (buf.length >= 2) {
      const opcode = buf[0] & 0x0f;
      const masked = (buf[1] & 0x80) !== 0;
      let len = buf[1] & 0x7f;
      let off = 2;
      if (len === 126) {
        if (buf.length < 4) return;
        len = buf.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (buf.length < 10) return;
        len = Number(buf.readBigUInt64BE(2));
        off = 10;
      }
      const maskLen = masked ? 4 : 0;
      if (buf.length < off + maskLen + len) return;
      const mask = masked ? buf.subarray(off, off + 4) : null;
      const payload = Buffer.from(buf.subarray(off + maskLen, off + maskLen + len));
      if (mask) for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i % 4];
      buf = buf.subarray(off + maskLen + len);
      if (opcode === 0x8) {
        if (!closed) api.close(payload.length >= 2 ? payload.readUInt16BE(0) : 1000);
        return;
      }
      if (opcode === 0x9) writeFrame(0xa, payload);
    }
  };
  socket.on("data", (chunk) => {
    buf = Buffer.concat([buf, chunk]);
    parse();
  });
  const gone = () => {
    if (closed) return;
    closed = true;
    for (const l of listeners) l();
  };
  socket.on("close", gone);
  socket.on("error", gone);
  if (buf.length) parse();
  return api;
}
