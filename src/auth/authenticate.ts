import { ApiError } from "../errors";
import { READ_ONLY_ROLES, verifyTokenUntil, type TokenClaims } from "./tokens";

export const BEARER_PROTOCOL_PREFIX = "bearer.";

/**
 * Browsers cannot set headers on a WebSocket, so a token may also come as `?token=` or as a
 * `bearer.<token>` subprotocol; everything else must use the Authorization header.
 */
export function tokenFromRequest(request: Request, allowQuery: boolean): string | null {
  const header = request.headers.get("authorization");
  if (header) {
    const match = /^Bearer\s+(.+)$/i.exec(header.trim());
    if (!match) throw new ApiError("unauthorized", "Authorization must be 'Bearer <token>'");
    return match[1];
  }
  if (!allowQuery) return null;
  const fromQuery = new URL(request.url).searchParams.get("token");
  if (fromQuery) return fromQuery;
  const protocols = request.headers.get("sec-websocket-protocol");
  if (protocols) {
    for (const p of protocols.split(",").map((s) => s.trim())) {
      if (p.startsWith(BEARER_PROTOCOL_PREFIX)) return p.slice(BEARER_PROTOCOL_PREFIX.length);
    }
  }
  return null;
}

export async function authenticate(request: Request, secret: string | undefined, allowQuery = false): Promise<TokenClaims> {
  return (await authenticateUntil(request, secret, allowQuery)).claims;
}

/**
 * As authenticate, with the moment the token stops being valid: a WebSocket outlives its
 * handshake, and what it delivers must stop when the token that opened it expires.
 */
export async function authenticateUntil(request: Request, secret: string | undefined, allowQuery = false): Promise<{ claims: TokenClaims; expiresAtMs: number }> {
  const token = tokenFromRequest(request, allowQuery);
  if (!token) throw new ApiError("unauthorized", "missing bearer token");
  return verifyTokenUntil(secret, token);
}

export function requireHouse(claims: TokenClaims): asserts claims is Extract<TokenClaims, { kind: "house" }> {
  if (claims.kind !== "house") throw new ApiError("forbidden", "this route needs a house API token");
}

export function canWrite(claims: TokenClaims): boolean {
  return claims.kind === "house" ? !READ_ONLY_ROLES.includes(claims.role) : claims.scope === "stream:write";
}

/** A stream token reaches exactly one thread; a house token every thread of its house. */
export function assertThreadAccess(claims: TokenClaims, houseId: string, threadId: string, write: boolean): void {
  if (claims.kind === "stream" && claims.threadId !== threadId) {
    throw new ApiError("forbidden", "token is scoped to another thread");
  }
  if (claims.houseId !== houseId) throw new ApiError("not_found", "thread not found");
  if (write && !canWrite(claims)) throw new ApiError("forbidden", "token does not allow writes");
}

/** A house token that may write: the common gate of the routes that change a house. */
export async function houseWriter(request: Request, secret: string | undefined) {
  const claims = await authenticate(request, secret);
  requireHouse(claims);
  if (!canWrite(claims)) throw new ApiError("forbidden", "token does not allow writes");
  return claims;
}
