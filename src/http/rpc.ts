import { ApiError } from "../errors";

/** Errors thrown inside an actor arrive as plain Errors; rebuild the typed error from the message. */
export async function unwrapRpc<T>(call: Promise<T>): Promise<T> {
  try {
    return await call;
  } catch (err) {
    if (err instanceof ApiError) throw err;
    const rebuilt = err instanceof Error ? ApiError.fromMessage(err.message) : null;
    throw rebuilt ?? err;
  }
}
