// When a timeline entry was posted, in the reader's locale and time zone.

const TIME = { hour: "2-digit", minute: "2-digit", second: "2-digit" } as const;

/**
 * Today's entries show the time of day only; any other day's show their date too (and the year
 * when it is not this year): a thread read days later would otherwise give "09:05" for both.
 */
export function entryTime(ts: number, now = Date.now(), locale?: string): string {
  const d = new Date(ts);
  const n = new Date(now);
  if (d.getFullYear() === n.getFullYear() && d.getMonth() === n.getMonth() && d.getDate() === n.getDate()) {
    return d.toLocaleTimeString(locale, TIME);
  }
  return d.toLocaleString(locale, { ...(d.getFullYear() === n.getFullYear() ? {} : { year: "numeric" }), month: "short", day: "numeric", ...TIME });
}

/** The whole date and time, for a tooltip. */
export function fullTime(ts: number, locale?: string): string {
  return new Date(ts).toLocaleString(locale, { dateStyle: "full", timeStyle: "medium" });
}
