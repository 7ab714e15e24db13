import type { z } from "zod";
import { ApiError } from "../errors";
import { formatZodError } from "../entries/schema";
import { parseJsonBytes } from "../entries/json-limits";
import { assertUtf8Charset, readBoundedBody } from "./bounded-body";

export const MAX_JSON_BODY_BYTES = 1024 * 1024;

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
