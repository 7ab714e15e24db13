import { z } from "zod";

export { THREAD_STATUSES, RUN_SIGNAL_STATUSES, type ThreadStatus, type RunSignalStatus } from "../domain/statuses";
import { MAX_REASON_LENGTH, RUN_SIGNAL_STATUSES, STATUS_CHANGED } from "../domain/statuses";

export { MAX_ENTRY_ID_LENGTH } from "../domain/entry-ids";
import { MAX_ENTRY_ID_LENGTH } from "../domain/entry-ids";

/**
 * Text someone acts on — a run's task, a message to a run, a chat that may wake bots or steer an
 * agent: one of nothing but whitespace says nothing and would still start a run or a turn.
 */
export function nonBlankText(max: number, what: string) {
  return z.string().max(max).refine((s) => s.trim() !== "", `${what} is empty or only whitespace`);
}

const chatPayload = z.object({
  type: z.literal("chat"),
  text: nonBlankText(1_000_000, "a chat's text"),
  mentions: z.array(z.string().max(200)).max(100).optional(),
}).passthrough();

const statusChangedPayload = z.object({
  type: z.literal(STATUS_CHANGED),
  status: z.enum(RUN_SIGNAL_STATUSES),
  reason: z.string().max(MAX_REASON_LENGTH).optional(),
  boxId: z.string().max(200).optional(),
}).passthrough();

const openPayload = z.object({
  type: z.string().regex(/^(pi|signal|artifact)\.[A-Za-z0-9_.-]{1,100}$/, "payload.type must be chat, pi.*, signal.* or artifact.*"),
}).passthrough();

type PayloadBranch = typeof chatPayload | typeof statusChangedPayload | typeof openPayload;

/** The one schema a payload is held to, chosen by its `type`: its errors are about that kind. */
function branchFor(type: unknown): PayloadBranch {
  if (type === "chat") return chatPayload;
  if (type === STATUS_CHANGED) return statusChangedPayload;
  return openPayload;
}

export const payloadSchema = z.custom<z.infer<PayloadBranch>>((v) => typeof v === "object" && v !== null && !Array.isArray(v), "payload must be an object")
  .transform((v, ctx) => {
    const r = branchFor((v as { type?: unknown }).type).safeParse(v);
    if (r.success) return r.data;
    for (const issue of r.error.issues) ctx.addIssue({ ...issue, code: "custom", message: issue.message } as never);
    return z.NEVER;
  });
export type Payload = z.infer<typeof payloadSchema> & { type: string; [k: string]: unknown };

/** The last millisecond a JavaScript Date holds (year 275760): every reader turns `ts` into one. */
export const MAX_DATE_MS = 8.64e15;

/**
 * `ts` is stored as epoch milliseconds (an integer); a writer may send that or an ISO-8601
 * date-time with a zone (`2026-11-22T04:00:00Z`, `...+02:00`), converted on write.
 */
export const entryTsSchema = z.union([
  z.number().int().nonnegative().max(MAX_DATE_MS, "a time a Date can hold (at most 8.64e15 ms)"),
  z.iso.datetime({ offset: true }).transform((s) => Date.parse(s)).pipe(z.number().int().nonnegative().max(MAX_DATE_MS)),
], { error: "ts is epoch milliseconds (an integer from 0 to 8.64e15) or an ISO-8601 date-time with a zone, such as 2026-11-22T04:00:00Z" });

/** Reserved for entries the control plane writes itself; never accepted from a client. */
export const SYSTEM_AUTHOR = "threadbox";

/** What a writer sends: `id` and `ts` are optional; the thread fills them in. */
export const entryInputSchema = z.object({
  id: z.string().min(1).max(MAX_ENTRY_ID_LENGTH).optional(),
  ts: entryTsSchema.optional(),
  authorId: z.string().min(1).max(200).optional(),
  payload: payloadSchema,
}); // unknown envelope fields (e.g. the `offset` of an entry read back) are dropped, never stored
export type EntryInput = z.infer<typeof entryInputSchema>;

export type Entry = { id: string; ts: number; authorId?: string; payload: Payload };
export type EntryWithOffset = Entry & { offset: string };

export function isHeartbeat(input: { payload: { type: string } }): boolean {
  return input.payload.type === "signal.heartbeat";
}

export function formatZodError(error: z.ZodError): { path: string; message: string }[] {
  // An unknown field is reported at its own path (`extra: unknown field`), not at its object's.
  const issues = error.issues.flatMap((i) => i.code === "unrecognized_keys"
    ? i.keys.map((k) => ({ path: [...i.path, k].join("."), message: "unknown field" }))
    : [{ path: i.path.join("."), message: i.message }]);
  return issues.slice(0, 20);
}
