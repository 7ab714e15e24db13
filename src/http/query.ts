import { ApiError } from "../errors";

/**
 * `?offset=-1&offset=0` has no single meaning (URLSearchParams.get takes the first, a proxy may
 * take the last): every route refuses a repeated query parameter instead of guessing.
 */
export function assertNoRepeatedQuery(url: URL): void {
  const seen = new Set<string>();
  for (const key of url.searchParams.keys()) {
    if (seen.has(key)) {
      throw new ApiError(key === "offset" ? "invalid_offset" : "bad_request", `query parameter ${key} is given more than once`);
    }
    seen.add(key);
  }
}
