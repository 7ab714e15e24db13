import { SignJWT, jwtVerify, errors as joseErrors } from "jose";
import { z } from "zod";
import { ApiError } from "../errors";
import { intVar } from "../env";

/**
 * Roles with a meaning: `reader` (and `viewer`) may only read; `bot` may not configure
 * environments. Any other role name is accepted and acts as a member.
 */
export const READ_ONLY_ROLES: readonly string[] = ["reader", "viewer"];
export const roleSchema = z.string().regex(/^[a-z][a-z0-9_-]{0,39}$/, "role is 1-40 chars of [a-z0-9_-], starting with a letter");
export type Role = string;
export const STREAM_SCOPES = ["stream:write", "stream:read"] as const;
export type StreamScope = (typeof STREAM_SCOPES)[number];

export const STREAM_TOKEN_TTL_SECONDS = 2 * 60 * 60;
/** Stream token lifetime; configurable (STREAM_TOKEN_TTL_SECONDS) so tests can watch a renewal. */
export function streamTokenTtlSeconds(env: { STREAM_TOKEN_TTL_SECONDS?: string }): number {
  return intVar(env, "STREAM_TOKEN_TTL_SECONDS", STREAM_TOKEN_TTL_SECONDS, { min: 2, max: 24 * 3600 });
}

/**
 * How long a stream token minted with `POST /api/threads/:id/tokens` can be kept alive by renewing
 * it, counted from its first minting (renewals carry that time on). Such a token may claim its own
 * thread running, so without a bound a leaked one could renew itself for good by sending
 * heartbeats. A run's token needs none: it dies with its run.
 */
export const STREAM_TOKEN_RENEWAL_SPAN_SECONDS = 24 * 60 * 60;

export const API_TOKEN_DEFAULT_TTL_SECONDS = 30 * 24 * 60 * 60;
const ISSUER = "threadbox";
/** The shortest THREADBOX_TOKEN_SECRET (and THREADBOX_ADMIN_SECRET) the worker accepts. */
export const MIN_SECRET_LENGTH = 16;

export type HouseClaims = { kind: "house"; houseId: string; subject: string; role: Role };
/**
 * `runId` is set on the token a run's box gets: only it may write that run's artifacts.
 * `firstMintedAt` (epoch seconds): when the token this one renews was first minted.
 * `notAfter` (epoch seconds): the expiry of the house token that first minted it, which neither
 * this token nor any renewal of it outlives; a run's token has none (it dies with its run).
 */
export type StreamClaims = {
  kind: "stream"; houseId: string; threadId: string; subject: string; scope: StreamScope; runId?: string; firstMintedAt: number; notAfter?: number;
};
/** What a renewal carries on from the token it renews. */
export type StreamLineage = { firstMintedAt?: number; notAfter?: number };
export type TokenClaims = HouseClaims | StreamClaims;

const idPattern = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
export const idSchema = z.string().regex(idPattern, "ids are 1-128 chars of [A-Za-z0-9._:-]");

const claimsSchema = z.discriminatedUnion("kind", [
  z.object({ kind: z.literal("house"), house: idSchema, sub: z.string().min(1).max(200), role: roleSchema }),
  z.object({ kind: z.literal("stream"), house: idSchema, thread: idSchema, sub: z.string().min(1).max(200), scope: z.enum(STREAM_SCOPES), run: idSchema.optional(), first: z.number().int().nonnegative().optional(), cap: z.number().int().nonnegative().optional() }),
]);

function keyFrom(secret: string | undefined): Uint8Array {
  if (!secret || secret.length < MIN_SECRET_LENGTH) {
    throw new ApiError("internal", "THREADBOX_TOKEN_SECRET is not configured (at least 16 characters)");
  }
  return new TextEncoder().encode(secret);
}

// Importing the HMAC key and re-verifying the same token on every request was most of the cost
// of a small append; both are cached per isolate. A cached token still expires on time.
const keyCache = new Map<string, Promise<CryptoKey>>();
const verifiedCache = new Map<string, { claims: TokenClaims; expMs: number }>();
const VERIFIED_CACHE_MAX = 2048;

function cryptoKey(secret: string | undefined): Promise<CryptoKey> {
  // Only a secret that passed keyFrom is ever cached, so a hit needs no second check.
  let key = secret === undefined ? undefined : keyCache.get(secret);
  if (!key) {
    key = crypto.subtle.importKey("raw", keyFrom(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign", "verify"]);
    keyCache.set(secret!, key);
  }
  return key;
}

export type MintedToken = { token: string; expiresAt: string };

/** `notAfter` (epoch seconds), when given, cuts the lifetime short. */
async function sign(claims: Record<string, unknown>, subject: string, ttlSeconds: number, secret: string | undefined, nowMs = Date.now(), notAfter?: number): Promise<MintedToken> {
  const iat = Math.floor(nowMs / 1000);
  const exp = notAfter === undefined ? iat + ttlSeconds : Math.min(iat + ttlSeconds, notAfter);
  const token = await new SignJWT(claims)
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .setIssuer(ISSUER)
    .setSubject(subject)
    .setIssuedAt(iat)
    .setExpirationTime(exp)
    .sign(await cryptoKey(secret));
  return { token, expiresAt: new Date(exp * 1000).toISOString() };
}

export function mintHouseToken(
  secret: string | undefined,
  houseId: string,
  subject: string,
  role: Role,
  ttlSeconds = API_TOKEN_DEFAULT_TTL_SECONDS,
  nowMs?: number,
): Promise<MintedToken> {
  return sign({ kind: "house", house: houseId, role }, subject, ttlSeconds, secret, nowMs);
}

export function mintStreamToken(
  secret: string | undefined,
  houseId: string,
  threadId: string,
  scope: StreamScope = "stream:write",
  subject = `thread:${threadId}`,
  ttlSeconds = STREAM_TOKEN_TTL_SECONDS,
  nowMs?: number,
  /**
   * Kept through every renewal: the first minting's time, and the expiry (epoch seconds) of the
   * house token that minted it, past which no token of the line lives.
   */
  { firstMintedAt, notAfter }: StreamLineage = {},
): Promise<MintedToken> {
  const claims = {
    kind: "stream", house: houseId, thread: threadId, scope,
    ...(firstMintedAt !== undefined ? { first: firstMintedAt } : {}),
    ...(notAfter !== undefined ? { cap: notAfter } : {}),
  };
  return sign(claims, subject, ttlSeconds, secret, nowMs, notAfter);
}

/** The write token of run `runId`'s box: a stream token that also names its run. */
export function mintRunToken(
  secret: string | undefined, houseId: string, threadId: string, runId: string, subject: string, ttlSeconds = STREAM_TOKEN_TTL_SECONDS, nowMs?: number,
): Promise<MintedToken> {
  return sign({ kind: "stream", house: houseId, thread: threadId, scope: "stream:write", run: runId }, subject, ttlSeconds, secret, nowMs);
}

export async function verifyToken(secret: string | undefined, token: string): Promise<TokenClaims> {
  return (await verifyTokenUntil(secret, token)).claims;
}

/** As verifyToken, with when the token expires (what a long-lived read must stop at). */
export async function verifyTokenUntil(secret: string | undefined, token: string): Promise<{ claims: TokenClaims; expiresAtMs: number }> {
  // A hit was verified under this very secret, which passed keyFrom then: the key is not needed.
  const cacheKey = `${secret}\u0000${token}`;
  const hit = verifiedCache.get(cacheKey);
  if (hit) {
    if (Date.now() < hit.expMs) return { claims: hit.claims, expiresAtMs: hit.expMs };
    verifiedCache.delete(cacheKey);
  }
  const key = await cryptoKey(secret);
  let payload: Record<string, unknown>;
  try {
    // A token that never expires is refused: every minted one carries `exp`.
    ({ payload } = await jwtVerify(token, key, { issuer: ISSUER, algorithms: ["HS256"], requiredClaims: ["exp"] }));
  } catch (err) {
    if (err instanceof joseErrors.JWTExpired) throw new ApiError("unauthorized", "token expired");
    throw new ApiError("unauthorized", "invalid token");
  }
  const parsed = claimsSchema.safeParse(payload);
  if (!parsed.success) throw new ApiError("unauthorized", "invalid token claims");
  const c = parsed.data;
  const claims: TokenClaims = c.kind === "house"
    ? { kind: "house", houseId: c.house, subject: c.sub, role: c.role }
    : {
      kind: "stream", houseId: c.house, threadId: c.thread, subject: c.sub, scope: c.scope, ...(c.run ? { runId: c.run } : {}),
      firstMintedAt: c.first ?? (typeof payload.iat === "number" ? payload.iat : 0),
      ...(c.cap !== undefined ? { notAfter: c.cap } : {}),
    };
  // jwtVerify required `exp`.
  const expiresAtMs = (payload.exp as number) * 1000;
  if (verifiedCache.size >= VERIFIED_CACHE_MAX) verifiedCache.delete(verifiedCache.keys().next().value!);
  verifiedCache.set(cacheKey, { claims, expMs: expiresAtMs });
  return { claims, expiresAtMs };
}
