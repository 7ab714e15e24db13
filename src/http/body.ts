import type { z } from "zod";
import { ApiError } from "../errors";
import { formatZodError } from "../entries/schema";
import { MAX_JSON_DEPTH, jsonNestsDeeperThan } from "../entries/json-depth";
import { assertUtf8Charset, readBoundedBody } from "./bounded-body";

export const MAX_JSON_BODY_BYTES = 1024 * 1024;

/** Parses JSON bytes that passed the size check; too deep or malformed is the client's 400. */
export function parseJsonBytes(bytes: Uint8Array): unknown {
  if (bytes.byteLength === 0) throw new ApiError("invalid_json", "body is empty");
  if (jsonNestsDeeperThan(bytes)) {
    throw new ApiError("validation_failed", `JSON nests deeper than ${MAX_JSON_DEPTH} levels`, [{ path: "", message: `at most ${MAX_JSON_DEPTH} levels of arrays and objects` }]);
  }
  try {
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    throw new ApiError("invalid_json", "body is not valid JSON");
  }
}

/** Reads a JSON request body with a size cap; every failure is a client error, never a 500. */
export async function readJson(request: Request, limit = MAX_JSON_BODY_BYTES): Promise<unknown> {
  const header = request.headers.get("content-type");
  const ct = (header ?? "").split(";")[0].trim().toLowerCase();
  if (ct !== "application/json") throw new ApiError("unsupported_media_type", "Content-Type must be application/json");
  assertUtf8Charset(header);
  return parseJsonBytes(await readBoundedBody(request, limit));
}

export async function readBody<T extends z.ZodType>(request: Request, schema: T): Promise<z.infer<T>> {
  const raw = await readJson(request);
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw new ApiError("validation_failed", "invalid request body", formatZodError(parsed.error));
  return parsed.data;
}
