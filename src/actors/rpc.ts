import { ApiError, type ErrorCode } from "../errors";

/**
 * What an actor's RPC method returns. A client mistake (an ApiError) travels as a value, so the
 * callee does not log it as an uncaught exception and the caller gets the typed error back.
 * Anything else is a bug and still throws.
 */
export type RpcResult<T> =
  | { ok: true; value: T }
  | { ok: false; error: { code: ErrorCode; message: string; details?: unknown; headers?: Record<string, string> } };

export async function settle<T>(fn: () => T | Promise<T>): Promise<RpcResult<T>> {
  try {
    return { ok: true, value: await fn() };
  } catch (err) {
    if (err instanceof ApiError) {
      return { ok: false, error: { code: err.code, message: err.publicMessage, details: err.details, headers: err.headers } };
    }
    throw err;
  }
}

export async function unwrapRpc<T>(call: Promise<RpcResult<T>> | RpcResult<T>): Promise<T> {
  const r = await call;
  if (r.ok) return r.value;
  throw new ApiError(r.error.code, r.error.message, r.error.details, r.error.headers);
}
