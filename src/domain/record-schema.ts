import { z } from "zod";

/**
 * `z.record`, except that a `__proto__` key is refused at its path. zod drops that key silently
 * (it guards against prototype pollution), so a map entry a client sent would vanish with a 2xx.
 * A key its schema refuses is refused with that schema's message (what a key must look like),
 * where zod would say only "Invalid key in record".
 */
export function recordSchema<K extends z.core.$ZodRecordKey, V extends z.ZodType>(key: K, value: V) {
  return z.preprocess((input, ctx) => {
    if (input !== null && typeof input === "object" && Object.hasOwn(input, "__proto__")) {
      ctx.addIssue({ code: "custom", message: "__proto__ is not an allowed key", path: ["__proto__"], input });
    }
    return input;
  }, z.record(key, value, { error: (iss) => (iss.code === "invalid_key" ? iss.issues?.[0]?.message : undefined) }));
}
