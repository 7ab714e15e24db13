import type { z } from "zod";
import { ApiError } from "../errors";
import { formatZodError } from "../entries/schema";
import { parseJsonBytes } from "../entries/json-limits";
import { assertUtf8Charset, readBoundedBody } from "./bounded-body";

export const MAX_JSON_BODY_BYTES = 1024 * 1024;

function assertJsonContentType(request: Request): void {
  const header = request.headers.get("content-type");
  const ct = (header ?? "").split(";")[0].trim().toLowerCase();
  if (ct !== "application/json") throw new ApiError("unsupported_media_type", "Content-Type must be application/json");
  assertUtf8Charset(header);
}

/** Reads a JSON request body with a size cap; every failure is a client error, never a 500. */
export async function readJson(request: Request, limit = MAX_JSON_BODY_BYTES): Promise<unknown> {
  assertJsonContentType(request);
  return parseJsonBytes(await readBoundedBody(request, limit));
}

export async function readBody<T extends z.ZodType>(request: Request, schema: T): Promise<z.infer<T>> {
  return parseBody(schema, await readJson(request));
}

/**
 * For routes whose every field is optional: a POST that sends no body at all means `{}`, as stop
 * and interrupt take it, whether or not it names a type (many clients send Content-Type:
 * application/json on every request). A body without a type, or of another type, is still a 415.
 */
export async function readOptionalBody<T extends z.ZodType>(request: Request, schema: T): Promise<z.infer<T>> {
  const typed = request.headers.has("content-type");
  if (typed) assertJsonContentType(request);
  // An empty body: none at all, Content-Length: 0, or chunked with no chunks.
  const bytes = request.body === null ? new Uint8Array(0) : await readBoundedBody(request, MAX_JSON_BODY_BYTES);
  if (bytes.byteLength === 0) return parseBody(schema, {});
  if (!typed) throw new ApiError("unsupported_media_type", "Content-Type must be application/json");
  return parseBody(schema, parseJsonBytes(bytes));
}

function parseBody<T extends z.ZodType>(schema: T, raw: unknown): z.infer<T> {
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw new ApiError("validation_failed", "invalid request body", formatZodError(parsed.error));
  return parsed.data;
}
