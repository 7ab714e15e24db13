import { z } from "zod";
import { ApiError } from "../errors";
import { formatZodError } from "../entries/schema";

/**
 * `?offset=-1&offset=0` has no single meaning (URLSearchParams.get takes the first, a proxy may
 * take the last): every route refuses a repeated query parameter instead of guessing.
 */
export function hasRepeatedQuery(url: URL): boolean {
  const search = url.search;
  if (!search) return false;
  // Iterating searchParams crosses into the runtime per key, on every request (a long-poll's
  // every re-poll). Keys without escapes are the text before `=` as they stand; any `%` or `+`
  // leaves the decoding to URLSearchParams.
  if (ESCAPED.test(search)) {
    const keys = [...url.searchParams.keys()];
    return new Set(keys).size !== keys.length;
  }
  const seen = new Set<string>();
  for (const pair of search.slice(1).split("&")) {
    if (pair === "") continue;
    const eq = pair.indexOf("=");
    const key = eq < 0 ? pair : pair.slice(0, eq);
    if (seen.has(key)) return true;
    seen.add(key);
  }
  return false;
}

const ESCAPED = /[%+]/;

export function assertNoRepeatedQuery(url: URL): void {
  const seen = new Set<string>();
  for (const key of url.searchParams.keys()) {
    if (seen.has(key)) {
      throw new ApiError(key === "offset" ? "invalid_offset" : "bad_request", `query parameter ${key} is given more than once`);
    }
    seen.add(key);
  }
}

/**
 * Parses a route's query string; a bad parameter is a 400 whose details name it, as a bad body
 * field's do. `summary` says what the parameters accept, for a reader of the message alone.
 */
export function parseQuery<T extends z.ZodType>(request: Request, schema: T, summary: string): z.infer<T> {
  const parsed = schema.safeParse(Object.fromEntries(new URL(request.url).searchParams));
  if (!parsed.success) {
    // A route's schema is strict: a misspelt filter (`statuss=`) is refused, not ignored with the whole list as its answer.
    const details = formatZodError(parsed.error).map((d) => d.message === "unknown field" ? { ...d, message: "unknown query parameter" } : d);
    throw new ApiError("validation_failed", summary, details);
  }
  return parsed.data;
}

/** For a route that takes no query parameters: one given is a mistake (a filter it does not have), not ignored. */
export function assertNoQuery(request: Request, route: string): void {
  parseQuery(request, z.object({}).strict(), `${route} takes no query parameters`);
}

/**
 * A whole number in a query string, written as digits only: `0x10`, `1e2`, `+5`, `1.0` and ` 5`
 * are refused, not read as 16, 100, 5, 1 and 5 the way Number() would.
 */
export function queryInt(min: number, max: number) {
  return z.string()
    .regex(/^\d{1,15}$/, `an integer from ${min} to ${max}, in digits`)
    .transform(Number)
    .pipe(z.number().int().min(min).max(max));
}
