import { errorMessage, logEvent } from "./domain/log-event";
/** Stable error codes: clients branch on `code`, never on `message`. */
export const ERROR_STATUS = {
  bad_request: 400,
  invalid_json: 400,
  validation_failed: 400,
  invalid_offset: 400,
  unauthorized: 401,
  forbidden: 403,
  stale_producer_epoch: 403,
  run_ended: 403,
  not_found: 404,
  gone: 410,
  method_not_allowed: 405,
  conflict: 409,
  stream_closed: 409,
  sequence_conflict: 409,
  producer_sequence_gap: 409,
  content_type_mismatch: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  upgrade_required: 426,
  provider_unavailable: 502,
  command_timeout: 504,
  internal: 500,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

const DETAILS_SEPARATOR = "\u0000";

export class ApiError extends Error {
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    readonly publicMessage: string,
    readonly details?: unknown,
    readonly headers?: Record<string, string>,
  ) {
    // Actor RPC keeps only an error's message, so the message carries everything needed to rebuild it.
    super(`${code}: ${publicMessage}${DETAILS_SEPARATOR}${JSON.stringify({ details, headers })}`);
    this.status = ERROR_STATUS[code];
  }

  static fromMessage(message: string): ApiError | null {
    const m = /^([a-z_]+): ([\s\S]*)$/.exec(message);
    if (!m || !(m[1] in ERROR_STATUS)) return null;
    const [text, extra] = m[2].split(DETAILS_SEPARATOR);
    let parsed: { details?: unknown; headers?: Record<string, string> } = {};
    try {
      parsed = extra ? JSON.parse(extra) : {};
    } catch {
      parsed = {};
    }
    return new ApiError(m[1] as ErrorCode, text, parsed.details, parsed.headers);
  }
}

export const SECURITY_HEADERS: Record<string, string> = {
  "x-content-type-options": "nosniff",
  "cross-origin-resource-policy": "cross-origin",
  // Every answer is a house's own data, fetched with its token: no browser or proxy cache keeps it
  // (a response that means otherwise, an SSE stream's no-cache, says so itself).
  "cache-control": "no-store",
};

export function errorResponse(err: unknown): Response {
  const apiError =
    err instanceof ApiError ? err : new ApiError("internal", "internal error");
  if (!(err instanceof ApiError)) logEvent("unhandled_error", { error: errorMessage(err), stack: err instanceof Error ? err.stack : undefined }, "error");
  const body: Record<string, unknown> = { error: { code: apiError.code, message: apiError.publicMessage } };
  if (apiError.details !== undefined) (body.error as Record<string, unknown>).details = apiError.details;
  return new Response(JSON.stringify(body), {
    status: apiError.status,
    headers: { "content-type": "application/json", ...SECURITY_HEADERS, ...apiError.headers },
  });
}

export function json(data: unknown, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(data), {
    status,
    headers: { "content-type": "application/json", ...SECURITY_HEADERS, ...headers },
  });
}
