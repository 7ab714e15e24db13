// The house token: pasted on the sign-in page or handed over as `#token=<token>` in the URL
// (the dev script prints such a link). Kept in localStorage; the fragment is removed from the
// address bar at once so it does not linger in history or screenshots.
const KEY = "threadbox.token";

export type Claims = { houseId?: string; subject?: string; role?: string; exp?: number };

/**
 * Takes a `#token=` link's token off the address bar. With no token stored it is kept (a first
 * sign-in), as is the one already stored. Another stored token is not replaced: anyone can send a
 * link carrying a token of their own house, and landing there unawares, one would type secrets
 * into it. The link's token is returned instead, for the user to confirm.
 */
export function takeTokenFromLocation(loc: Location, hist: History, store: Storage): string | null {
  const params = new URLSearchParams(loc.hash.replace(/^#/, ""));
  const token = params.get("token")?.trim();
  if (!token) return null;
  params.delete("token");
  const rest = params.toString();
  hist.replaceState(null, "", loc.pathname + loc.search + (rest ? `#${rest}` : ""));
  const stored = store.getItem(KEY);
  if (stored && stored !== token) return token;
  store.setItem(KEY, token);
  return null;
}

/**
 * What the sign-in box holds, as a token: the token itself, or the whole sign-in link
 * (`http://HOST:PORT/#token=…`), which is what `npm run dev` prints most prominently.
 */
export function tokenFromInput(text: string): string {
  const t = text.trim();
  const hash = t.indexOf("#");
  if (hash < 0) return t;
  return new URLSearchParams(t.slice(hash + 1)).get("token")?.trim() || t;
}

export const loadToken = (store: Storage): string | null => store.getItem(KEY);
export const saveToken = (store: Storage, token: string): void => store.setItem(KEY, token.trim());
export const clearToken = (store: Storage): void => store.removeItem(KEY);

/**
 * Roles that may only read: a copy of src/auth/tokens.ts READ_ONLY_ROLES (that module brings jose and
 * zod with it), which web-lib.test.ts compares with the server's list.
 * The UI offers such a token no writes; the server refuses them anyway.
 */
export const READ_ONLY_ROLES: readonly string[] = ["reader", "viewer"];

export const isReadOnly = (claims: Claims): boolean => claims.role !== undefined && READ_ONLY_ROLES.includes(claims.role);

/** Reads a JWT's claims for display only; the server is the one that verifies it. */
export function readClaims(token: string): Claims {
  try {
    const part = token.split(".")[1] ?? "";
    const json = atob(part.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(part.length / 4) * 4, "="));
    const c = JSON.parse(json);
    return { houseId: c.houseId ?? c.house, subject: c.sub, role: c.role, exp: c.exp };
  } catch {
    return {};
  }
}
