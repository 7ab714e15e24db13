/**
 * A model API's base URL as an error names it: scheme, host and path. Its user info and query may
 * hold credentials (`https://user:key@host/v1`, `?api-key=`), which the reader of a thread or a
 * box's failure must not see; a value that is not a URL is shown as configured.
 */
export function shownEndpoint(url: string): string {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}${u.pathname}`;
  } catch {
    return url;
  }
}
