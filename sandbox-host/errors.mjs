/** An error that maps to one HTTP response in Daytona's ErrorResponse shape. */
export class HostError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function errorBody(status, message, { code, source, method, path } = {}) {
  return {
    statusCode: status,
    message,
    ...(code ? { code } : {}),
    source,
    method,
    path,
    timestamp: new Date().toISOString(),
  };
}
