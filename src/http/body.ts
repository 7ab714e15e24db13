import type { z } from "zod";
import { ApiError } from "../errors";
import { formatZodError } from "../entries/schema";

export const MAX_JSON_BODY_BYTES = 1024 * 1024;

/** Reads a JSON request body with a size cap; every failure is a client error, never a 500. */
export async function readJson(request: Request, limit = MAX_JSON_BODY_BYTES): Promise<unknown> {
  const ct = (request.headers.get("content-type") ?? "").split(";")[0].trim().toLowerCase();
  if (ct !== "application/json") throw new ApiError("unsupported_media_type", "Content-Type must be application/json");
  const declared = Number(request.headers.get("content-length") ?? "0");
  if (declared > limit) throw new ApiError("payload_too_large", `body is larger than ${limit} bytes`);
  const buf = await request.arrayBuffer();
  if (buf.byteLength > limit) throw new ApiError("payload_too_large", `body is larger than ${limit} bytes`);
  if (buf.byteLength === 0) throw new ApiError("invalid_json", "body is empty");
  try {
    return JSON.parse(new TextDecoder().decode(buf));
  } catch {
    throw new ApiError("invalid_json", "body is not valid JSON");
  }
}

export async function readBody<T extends z.ZodType>(request: Request, schema: T): Promise<z.infer<T>> {
  const raw = await readJson(request);
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw new ApiError("validation_failed", "invalid request body", formatZodError(parsed.error));
  return parsed.data;
}
