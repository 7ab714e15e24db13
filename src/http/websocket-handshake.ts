import { ApiError } from "../errors";

/** The one WebSocket protocol version there is (RFC 6455). */
export const WEBSOCKET_VERSION = "13";

/**
 * A WebSocket route takes only a handshake workerd can complete. Without a `Sec-WebSocket-Key` or
 * with another version than 13, workerd would answer the upgrade itself, in text/plain, after the
 * actor had already accepted a socket; such a request is refused here instead, in the API's shape.
 * It is one code, `upgrade_required` (426), as for a request with no upgrade at all: the client has
 * to send a WebSocket handshake it did not send, and RFC 6455 (4.4) answers an unusable version so,
 * naming the version it speaks in `Sec-WebSocket-Version`.
 */
export function assertWebSocketHandshake(headers: Headers): void {
  if (headers.get("upgrade")?.trim().toLowerCase() !== "websocket") {
    throw new ApiError("upgrade_required", "this route needs a WebSocket upgrade");
  }
  const missing = ["Sec-WebSocket-Key", "Sec-WebSocket-Version"].filter((name) => !headers.get(name)?.trim());
  const version = headers.get("sec-websocket-version")?.trim();
  if (missing.length === 0 && version === WEBSOCKET_VERSION) return;
  const reason = missing.length > 0 ? `it has no ${missing.join(" and no ")}` : `Sec-WebSocket-Version is ${JSON.stringify(version)}`;
  throw new ApiError(
    "upgrade_required",
    `this route needs a WebSocket handshake (Sec-WebSocket-Key and Sec-WebSocket-Version: ${WEBSOCKET_VERSION}); ${reason}`,
    undefined,
    { "sec-websocket-version": WEBSOCKET_VERSION },
  );
}
