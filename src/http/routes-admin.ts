import { z } from "zod";
import { ApiError, json } from "../errors";
import type { Env } from "../env";
import { idSchema, MIN_SECRET_LENGTH, mintHouseToken, roleSchema } from "../auth/tokens";
import { readBody } from "./body";
import { SYSTEM_AUTHOR } from "../entries/schema";
import { passesForControlPlane } from "../domain/reserved-name";

const mintSchema = z.object({
  houseId: idSchema,
  // Any letter case: an author shown as "Threadbox" would pass for the control plane's own entries.
  subject: z.string().min(1).max(200)
    .superRefine((s, ctx) => {
      if (/\p{Cc}|\p{Cf}/u.test(s) || s !== s.trim()) ctx.addIssue({ code: "custom", message: "a subject has no control or invisible characters, nor spaces at its ends" });
      else if (passesForControlPlane(s)) ctx.addIssue({ code: "custom", message: `subject ${SYSTEM_AUTHOR} is reserved for the control plane` });
    }),
  role: roleSchema.default("member"),
  ttlSeconds: z.number().int().min(60).max(365 * 24 * 3600).optional(),
}).strict();

function timingSafeEqual(a: string, b: string): boolean {
  const ea = new TextEncoder().encode(a);
  const eb = new TextEncoder().encode(b);
  let diff = ea.length ^ eb.length;
  for (let i = 0; i < Math.max(ea.length, eb.length); i++) diff |= (ea[i] ?? 0) ^ (eb[i] ?? 0);
  return diff === 0;
}

/** Only the admin secret mints house tokens; it is compared in constant time and never echoed. */
export function assertAdminSecret(request: Request, env: Env): void {
  const secret = env.THREADBOX_ADMIN_SECRET;
  // It mints any house's tokens, any role, over the open internet: a short one could be guessed.
  if (!secret || secret.length < MIN_SECRET_LENGTH) throw new ApiError("internal", `THREADBOX_ADMIN_SECRET is not configured (at least ${MIN_SECRET_LENGTH} characters)`);
  const header = request.headers.get("authorization") ?? "";
  const match = /^Bearer\s+(.+)$/i.exec(header.trim());
  if (!match) throw new ApiError("unauthorized", "missing admin bearer token");
  if (!timingSafeEqual(match[1], secret)) throw new ApiError("unauthorized", "invalid admin secret");
}

export async function mintTokenRoute(request: Request, env: Env): Promise<Response> {
  assertAdminSecret(request, env);
  const body = await readBody(request, mintSchema);
  const minted = await mintHouseToken(env.THREADBOX_TOKEN_SECRET, body.houseId, body.subject, body.role, body.ttlSeconds);
  return json({ ...minted, houseId: body.houseId, subject: body.subject, role: body.role }, 201);
}
