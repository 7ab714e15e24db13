/**
 * Credentials a stored repository URL may hold. A URL is refused with them now (box-config.ts),
 * but an environment stored before that was refused keeps its URL as it was, and the box clones
 * with that URL: what shows it (an environment's GET, a launch entry, a failed clone's words)
 * shows it without them.
 */

const REDACTED = "[redacted]";

/**
 * `scheme://`, the user info (up to the authority's last `@`, as a URL parser reads it: a password
 * may hold one), the rest of the authority and path, the query, the fragment.
 */
const URL_PARTS = /^([A-Za-z][A-Za-z0-9+.-]*:\/\/)(?:([^/?#]*)@)?([^?#]*)(?:\?([^#]*))?(?:#(.*))?$/s;

type Parts = { scheme: string; user?: string; password?: string; rest: string; query?: string[]; fragment?: string };

function partsOf(url: string): Parts | null {
  const m = URL_PARTS.exec(url);
  if (!m) return null;
  const [, scheme, userinfo, rest, query, fragment] = m;
  const colon = userinfo?.indexOf(":") ?? -1;
  return {
    scheme, rest,
    ...(userinfo !== undefined ? { user: colon < 0 ? userinfo : userinfo.slice(0, colon) } : {}),
    ...(userinfo !== undefined && colon >= 0 ? { password: userinfo.slice(colon + 1) } : {}),
    ...(query !== undefined ? { query: query.split("&") } : {}),
    ...(fragment !== undefined ? { fragment } : {}),
  };
}

/** An ssh URL's user (`ssh://git@host/…`) is the account the key logs in as; any other URL's may be a token. */
const userIsSecret = (p: Parts) => p.user !== undefined && p.user !== "" && p.scheme.toLowerCase() !== "ssh://";

/** A query parameter's value (a bare parameter is all value: `?<token>`). */
const valueOf = (param: string) => (param.includes("=") ? param.slice(param.indexOf("=") + 1) : param);

/** `name=[redacted]`, or `[redacted]` for a bare one; an empty one stays as it is. */
function shownParam(q: string): string {
  const eq = q.indexOf("=");
  if (eq < 0) return q === "" ? q : REDACTED;
  return `${q.slice(0, eq + 1)}${eq + 1 < q.length ? REDACTED : ""}`;
}

/** `url` as it may be shown: a user (but an ssh one), password, query value and fragment each `[redacted]`. */
export function shownRepositoryUrl(url: string): string {
  const p = partsOf(url);
  if (!p) return url;
  const user = p.user === undefined ? "" : `${userIsSecret(p) ? REDACTED : p.user}${p.password !== undefined ? `:${REDACTED}` : ""}@`;
  const query = p.query === undefined ? "" : `?${p.query.map(shownParam).join("&")}`;
  const fragment = p.fragment === undefined ? "" : `#${p.fragment ? REDACTED : ""}`;
  return `${p.scheme}${user}${p.rest}${query}${fragment}`;
}

/** What of `url` is a credential, as given and percent-decoded: text quoting the URL (git's words) is redacted by these. */
export function repositoryUrlSecrets(url: string): string[] {
  const p = partsOf(url);
  if (!p) return [];
  const raw = [
    ...(userIsSecret(p) ? [p.user!] : []),
    ...(p.password ? [p.password] : []),
    ...(p.query ?? []).map(valueOf).filter((v) => v !== ""),
    ...(p.fragment ? [p.fragment] : []),
  ];
  const decoded = raw.map((v) => {
    try {
      return decodeURIComponent(v.replace(/\+/g, " "));
    } catch {
      return v;
    }
  });
  return [...new Set([...raw, ...decoded])];
}

/** `url` without what `repositoryUrlSecrets` would take from it (an ssh URL keeps its user). */
function withoutCredentials(url: string): string {
  const p = partsOf(url);
  if (!p) return url;
  const user = p.user !== undefined && !userIsSecret(p) && p.user !== "" ? `${p.user}@` : "";
  return `${p.scheme}${user}${p.rest}`;
}

/**
 * A repository list sent back as an environment's GET showed it: a URL equal to what is shown of
 * a stored one with credentials stands for that stored URL, which a client cannot send (it is
 * refused) and cannot read (it is shown redacted). `kept` maps a given index to the stored URL
 * (the one at the same index first, else the one stored URL shown that way); `check` is the given
 * URL in a form today's validation takes in its place. Anything else sent stays as sent, and a
 * credential or `[redacted]` in it is refused as before.
 */
export function keptRepositoryUrls(given: readonly (string | undefined)[], stored: readonly string[]): { kept: Map<number, string>; check: (string | undefined)[] } {
  const redacted = stored.map((url, i) => ({ url, i, shown: shownRepositoryUrl(url) })).filter((s) => s.shown !== s.url);
  const kept = new Map<number, string>();
  const check = given.map((url, i) => {
    const same = url === undefined ? [] : redacted.filter((s) => s.shown === url);
    const urls = new Set(same.map((s) => s.url));
    const storedUrl = same.find((s) => s.i === i)?.url ?? (urls.size === 1 ? same[0].url : undefined);
    if (storedUrl === undefined) return url;
    kept.set(i, storedUrl);
    return withoutCredentials(storedUrl);
  });
  return { kept, check };
}
