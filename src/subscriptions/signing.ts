/**
 * Webhook signatures (Ed25519, one key per house, its public half served as a JWKS) and the
 * callback tokens that fence a wake: HMAC-signed `{sub, epoch, exp}` where `sub` names the house
 * and subscription and `epoch` the wake generation the token was minted for.
 */

const b64url = (bytes: Uint8Array) => btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
const fromB64url = (s: string) => Uint8Array.from(atob(s.replace(/-/g, "+").replace(/_/g, "/")), (c) => c.charCodeAt(0));
const enc = new TextEncoder();

export type SigningKey = { privateJwk: JsonWebKey; publicJwk: PublicJwk };
export type PublicJwk = { kty: "OKP"; crv: "Ed25519"; x: string; kid: string; use: "sig"; alg: "EdDSA" };

export async function generateSigningKey(): Promise<SigningKey> {
  const pair = (await crypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"])) as CryptoKeyPair;
  const pub = (await crypto.subtle.exportKey("jwk", pair.publicKey)) as JsonWebKey;
  const privateJwk = (await crypto.subtle.exportKey("jwk", pair.privateKey)) as JsonWebKey;
  // The key id is the RFC 7638 thumbprint of the public key.
  const thumb = new Uint8Array(await crypto.subtle.digest("SHA-256", enc.encode(JSON.stringify({ crv: "Ed25519", kty: "OKP", x: pub.x }))));
  return { privateJwk, publicJwk: { kty: "OKP", crv: "Ed25519", x: pub.x!, kid: `ds_${b64url(thumb)}`, use: "sig", alg: "EdDSA" } };
}

/** The `Webhook-Signature` header: `t=<unix seconds>,kid=<key id>,ed25519=<signature of "t.body">`. */
export async function signWebhook(key: SigningKey, body: string, nowMs: number): Promise<string> {
  const t = Math.floor(nowMs / 1000);
  const priv = await crypto.subtle.importKey("jwk", key.privateJwk, { name: "Ed25519" }, false, ["sign"]);
  const sig = new Uint8Array(await crypto.subtle.sign({ name: "Ed25519" }, priv, enc.encode(`${t}.${body}`)));
  return `t=${t},kid=${key.publicJwk.kid},ed25519=${b64url(sig)}`;
}

const TOKEN_TTL_SECONDS = 3600;

async function hmac(secret: string, data: string): Promise<string> {
  const key = await crypto.subtle.importKey("raw", enc.encode(`ds-subscription-callback:${secret}`), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  return b64url(new Uint8Array(await crypto.subtle.sign("HMAC", key, enc.encode(data))));
}

export type CallbackClaims = { house: string; sub: string; epoch: number; exp: number };

export async function mintCallbackToken(secret: string, house: string, sub: string, epoch: number, nowMs: number): Promise<string> {
  const jti = b64url(crypto.getRandomValues(new Uint8Array(8)));
  const payload = b64url(enc.encode(JSON.stringify({ house, sub, epoch, exp: Math.floor(nowMs / 1000) + TOKEN_TTL_SECONDS, jti })));
  return `${payload}.${await hmac(secret, payload)}`;
}

/** The claims a token states, unverified: only to route it to its house, which verifies it. */
export function peekCallbackToken(token: string): CallbackClaims | null {
  const [payload] = token.split(".");
  try {
    const c = JSON.parse(new TextDecoder().decode(fromB64url(payload))) as CallbackClaims;
    return typeof c.house === "string" && typeof c.sub === "string" ? c : null;
  } catch {
    return null;
  }
}

export async function verifyCallbackToken(secret: string, token: string, house: string, sub: string, nowMs: number): Promise<{ ok: true; epoch: number } | { ok: false; code: "TOKEN_INVALID" | "TOKEN_EXPIRED" }> {
  const parts = token.split(".");
  if (parts.length !== 2) return { ok: false, code: "TOKEN_INVALID" };
  const expected = await hmac(secret, parts[0]);
  // Constant-time enough for equal-length base64url strings compared in full.
  let diff = expected.length ^ parts[1].length;
  for (let i = 0; i < Math.min(expected.length, parts[1].length); i++) diff |= expected.charCodeAt(i) ^ parts[1].charCodeAt(i);
  if (diff !== 0) return { ok: false, code: "TOKEN_INVALID" };
  const c = peekCallbackToken(token);
  if (!c || c.house !== house || c.sub !== sub) return { ok: false, code: "TOKEN_INVALID" };
  if (Math.floor(nowMs / 1000) > c.exp) return { ok: false, code: "TOKEN_EXPIRED" };
  return { ok: true, epoch: c.epoch };
}
