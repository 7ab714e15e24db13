import type { z } from "zod";
import { ApiError } from "../errors";
import { formatZodError } from "../entries/schema";

/**
 * `?offset=-1&offset=0` has no single meaning (URLSearchParams.get takes the first, a proxy may
 * take the last): every route refuses a repeated query parameter instead of guessing.
 */
export function hasRepeatedQuery(url: URL): boolean {
  const keys = [...url.searchParams.keys()];
  return new Set(keys).size !== keys.length;
}

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
  if (!parsed.success) throw new ApiError("validation_failed", summary, formatZodError(parsed.error));
  return parsed.data;
}
