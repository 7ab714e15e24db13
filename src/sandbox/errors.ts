// Typed provider errors with stable codes, so actors decide on `code`, never on SDK classes or messages.

export type ProviderErrorCode = "not_found" | "conflict" | "unauthorized" | "unavailable" | "bad_request" | "timeout";

export class ProviderError extends Error {
  readonly code: ProviderErrorCode;
  readonly status?: number;
  /**
   * A create that failed without an answer (timed out, cut off after it was sent) may still be
   * carried out by the provider: the name of the box that may yet appear, and was not there to
   * delete when the create gave up. Whoever called the create has it deleted once it appears.
   */
  lateBoxName?: string;
  /**
   * The provider refused to create a box with the settings it was given (an image, snapshot or
   * egress it does not take): the environment's settings are at fault, not the provider.
   */
  createRefused?: boolean;
  constructor(code: ProviderErrorCode, message: string, opts: { status?: number; cause?: unknown; lateBoxName?: string } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = "ProviderError";
    this.code = code;
    this.status = opts.status;
    if (opts.lateBoxName !== undefined) this.lateBoxName = opts.lateBoxName;
  }
}

export function isProviderError(err: unknown, code?: ProviderErrorCode): err is ProviderError {
  return err instanceof ProviderError && (code === undefined || err.code === code);
}

/** HTTP status -> code. Anything we cannot attribute to the request is `unavailable` (retryable). */
export function codeForStatus(status: number | undefined): ProviderErrorCode {
  if (status === undefined) return "unavailable";
  if (status === 404 || status === 410) return "not_found";
  if (status === 409) return "conflict";
  if (status === 401 || status === 403) return "unauthorized";
  if (status === 408 || status === 504) return "timeout";
  if (status >= 400 && status < 500 && status !== 429) return "bad_request";
  return "unavailable";
}

/** A routing miss ("no route for GET …", "Cannot GET …", "Route GET:/… not found") or an HTML page. */
const ROUTING_MISS = /\bno route\b|\bcannot (get|post|put|patch|delete|head)\b|\broute (get|post|put|patch|delete|head)\b|<html|<title>/i;
/** The provider saying which of its things is missing: "Sandbox with ID or name … not found", "file … not found". */
const THING_MISSING = /\b(sandbox|snapshot|volume|session|command|process|file|directory|path|repository)\b.*\b(not found|does not exist)\b|no such file/i;

/**
 * The toolbox daemon's own codes for a missing thing (`GIT_REPO_NOT_FOUND`, `FILE_NOT_FOUND`, …):
 * a router or proxy answering a wrong URL never sends them (the bare `NOT_FOUND` says no more than
 * the status does).
 */
const DAEMON_MISSING_CODE = /^[A-Z]+(_[A-Z]+)*_NOT_FOUND$/;

function namesWhatIsMissing(message: string, code: unknown): boolean {
  if (typeof code === "string" && code !== "NOT_FOUND" && DAEMON_MISSING_CODE.test(code)) return true;
  return !ROUTING_MISS.test(message) && THING_MISSING.test(message);
}

/**
 * Maps whatever the Daytona SDK (or fetch) threw to a ProviderError. Duck-typed on `statusCode`
 * and the class name so it works for the SDK's ESM and CJS builds alike.
 */
export function toProviderError(err: unknown, what: string): ProviderError {
  if (err instanceof ProviderError) return err;
  const e = err as { name?: string; message?: string; statusCode?: number; status?: number; code?: unknown; constructor?: { name?: string } };
  const name = e?.constructor?.name ?? e?.name ?? "";
  const status = typeof e?.statusCode === "number" ? e.statusCode : typeof e?.status === "number" ? e.status : undefined;
  const msg = `${what}: ${e?.message ?? String(err)}`;
  if (status === undefined && /Timeout/.test(name) && !/Connection/.test(name)) return new ProviderError("timeout", msg, { cause: err });
  if (status === undefined && /timeout|timed out|aborted/i.test(e?.message ?? "") && !/ECONNREFUSED/.test(e?.message ?? "")) {
    return new ProviderError("timeout", msg, { cause: err });
  }
  if (status === undefined && /NotFound/.test(name)) return new ProviderError("not_found", msg, { cause: err });
  if (status === undefined && /Authentication|Authorization|Forbidden/.test(name)) return new ProviderError("unauthorized", msg, { cause: err });
  // "Gone" must come from the provider's own answer about the thing asked for ("Sandbox with ID
  // or name … not found"): a wrong DAYTONA_API_URL, a proxy or a load balancer answers every
  // path 404, and reading that as gone would orphan live boxes and count deletes as done.
  if ((status === 404 || status === 410) && !namesWhatIsMissing(e?.message ?? "", e?.code)) {
    return new ProviderError("unavailable", `${msg} (a 404 that names nothing missing: is DAYTONA_API_URL the API's base URL, ending in /api?)`, { status, cause: err });
  }
  return new ProviderError(codeForStatus(status), msg, { status, cause: err });
}
