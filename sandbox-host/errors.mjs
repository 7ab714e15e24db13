/** An error that maps to one HTTP response in Daytona's ErrorResponse shape. */
export class HostError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

const STATUS_CODES = {
  400: "BAD_REQUEST",
  401: "UNAUTHORIZED",
  403: "FORBIDDEN",
  404: "NOT_FOUND",
  408: "REQUEST_TIMEOUT",
  409: "CONFLICT",
  410: "GONE",
  422: "UNPROCESSABLE_ENTITY",
};

/** Daytona's ErrorResponse; `code` always from the daemon's DaemonErrorCode set. */
export function errorBody(status, message, { code, source, method, path } = {}) {
  return {
    statusCode: status,
    message,
    code: code ?? STATUS_CODES[status] ?? "INTERNAL_SERVER_ERROR",
    source,
    method,
    path,
    timestamp: new Date().toISOString(),
  };
}
