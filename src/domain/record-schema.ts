import { z } from "zod";

/**
 * `z.record`, except that a `__proto__` key is refused at its path. zod drops that key silently
 * (it guards against prototype pollution), so a map entry a client sent would vanish with a 2xx.
 */
export function recordSchema<K extends z.core.$ZodRecordKey, V extends z.ZodType>(key: K, value: V) {
  return z.preprocess((input, ctx) => {
    if (input !== null && typeof input === "object" && Object.hasOwn(input, "__proto__")) {
      ctx.addIssue({ code: "custom", message: "__proto__ is not an allowed key", path: ["__proto__"], input });
    }
    return input;
  }, z.record(key, value));
}
