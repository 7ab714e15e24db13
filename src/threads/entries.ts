import { z } from "zod";
import { ApiError } from "../errors";
import { entryInputSchema, formatZodError, isHeartbeat, SYSTEM_AUTHOR, type Entry, type EntryWithOffset } from "../entries/schema";
import { UTF8_DECODER, jsonNestsDeeperThan, parseJsonBytes, pruneDeepJson } from "../entries/json-limits";
import type { NewMessage, StoredMessage } from "../streams/log";
import { formatOffset } from "../streams/protocol";
import { STATUS_CHANGED } from "../domain/statuses";
import { passesForControlPlane } from "../domain/reserved-name";
import { INTERRUPT, MESSAGE_DELIVERED } from "../runner/steering";
import { runWriteRefusal, type RunStanding } from "./run-writes";
import { reachOf, type Reach } from "../dispatch/reach";

/** A command's live output (an exec with a threadId, a bot's run_command, a box's running tool call). */
const EXEC_OUTPUT = "signal.exec.output";
const TOOL_CALL = "pi.tool_call";

/** Stateless, so one serves every call. */
const UTF8_ENCODER = new TextEncoder();

export const MAX_ENTRIES_PER_POST = 1000;

/** The only house role that may write entries authored as someone else. */
export const AUTHOR_AS_OTHERS_ROLE = "admin";

/** The role of the identity a bot's tools act as (never minted for a client). */
export const BOT_ROLE = "bot";

/**
 * Who is writing: entries are authored as `subject` (the token's subject); only a writer with
 * `mayAuthorAsOthers` may name another author, and nobody may name the control plane.
 * `mayNameBox`: the writer may say which box a run it claims is on. A house writer may (it can
 * delete the house's boxes anyway); a stream token, which is what the agent in a box holds, may
 * not: the box named would be released, and an ephemeral one deleted, when that run ends.
 */
/** `runId`: the run whose box holds this token, the one writer of that run's artifacts. */
/** `isBot`: a bot's own identity (its tools write through the client path), the one writer of its live command output. */
/**
 * `mayInterrupt`: the writer may abort a running agent's turn (`signal.run.interrupt`), as
 * `POST /api/threads/:id/interrupt` lets a house writer do. A stream token may not: the agent in a
 * box holds one, and a stopped run's box (whose token lives on for hours) could otherwise abort
 * the turns of the thread's next run.
 */
/** `execId`: set only by `POST /api/environments/:id/exec` for the command it runs, the one writer of that command's output. */
/**
 * `reach`: how far the writer's token reaches (src/dispatch/reach.ts), and so how far a bot its
 * chat wakes may act; a writer that does not say is taken to reach its thread only.
 */
export type EntryWriter = { subject: string; mayAuthorAsOthers: boolean; mayNameBox: boolean; mayInterrupt?: boolean; runId?: string; isBot?: boolean; execId?: string; reach?: Reach };

export function writerFor(claims: { kind: "house"; subject: string; role: string } | { kind: "stream"; subject: string; runId?: string }): EntryWriter {
  return {
    subject: claims.subject, mayAuthorAsOthers: claims.kind === "house" && claims.role === AUTHOR_AS_OTHERS_ROLE, mayNameBox: claims.kind === "house", reach: reachOf(claims),
    ...(claims.kind === "house" ? { mayInterrupt: true } : {}),
    ...(claims.kind === "stream" && claims.runId ? { runId: claims.runId } : {}),
    ...(claims.kind === "house" && claims.role === BOT_ROLE ? { isBot: true } : {}),
  };
}

/**
 * The tool calls each writer posted on a thread (`pi.tool_call`), by the key `toolCallWriterKey`
 * gives: only the writer that posted a call may post its live output. Kept by the thread, since a
 * call's output comes long after the call (a command runs for minutes).
 */
export type ToolCallWriters = { has(callId: string, writer: string): boolean; add(callIds: Iterable<[callId: string, writer: string]>): void };

/** A run's box by its run (its token is renewed, its subject is the thread's brain); anyone else by subject. */
export function toolCallWriterKey(writer: EntryWriter): string {
  return writer.runId !== undefined ? `run:${writer.runId}` : `${writer.isBot ? "bot" : "who"}:${writer.subject}`;
}

/** The exec ids `POST /api/environments/:id/exec` mints (`exec_<hex>`): the command's card is found by it. */
export const EXEC_ROUTE_ID = /^exec_/;

/**
 * The ids a run's box writes under: `<thread>:finished:<runId>`, `<thread>:stderr:<runId>`,
 * `<thread>:delivered:<runId>:<entry>` (or `:delivered:<digest>`), the runner's
 * `<thread>:h:<runId>:<n>` and the mirror's `<thread>:m:<session>:<index>`.
 */
const RUN_BOX_ID = /^[^:]+:(finished|stderr|delivered|h|m):(.+)$/;

/** The ids a run's artifact entries are stored under (`<thread>:artifacts:<runId>:<kind>`). */
const ARTIFACT_ID = /:artifacts:([^:]*):/;

/**
 * The ids the control plane gives what it writes once and deduplicates by id: a bot's rounds,
 * answer and failure (`turn:`, `reply:`, `dispatch_error:`, named by a turn id a reader sees in
 * the thread and in GET /dispatch), its post into another thread (`post:`), a child's result
 * on its parent (`child_finished:`, `child_result:`), and a run's own entries (`prompt:`, `claim:`,
 * `box:`, `ready:`, `launched:`, `launch_failed:`, named by the run id the claim shows while the launch is
 * still under way, and `stop:`, `orphan:`, by its start time). A client that wrote one first
 * would have the control plane's entry dropped as a duplicate: the bot's answer or the child's
 * result gone, or a run's box never recorded (nothing stops or releases it) and its folders
 * never synced back.
 */
const CONTROL_PLANE_ID = /^(turn|reply|dispatch_error|post|child_finished|child_result|prompt|claim|box|ready|launched|launch_failed|stop|orphan):/;

/**
 * A run driven from outside the control plane (src/sandbox/run.ts: the caller posts the run's
 * prompt and claim, then starts the runner) writes its start under the ids a launch would, with
 * the token that names the run: the runner finds where its run begins by `prompt:<runId>`.
 */
function isRunsOwnStart(id: string, writer: EntryWriter): boolean {
  const m = /^(prompt|claim):(.+)$/.exec(id);
  return m !== null && writer.runId !== undefined && m[2] === writer.runId;
}

/**
 * Entries only the control plane writes: a thread acts on them (which box a run is on, a child's
 * result), so a client that could write them could steer another run's box or a parent's result.
 */
export const CONTROL_PLANE_TYPES: ReadonlySet<string> = new Set(["signal.thread.box_assigned", "signal.thread.child_finished", "signal.run.launched"]);

/** A 403 for an entry this writer may not write, whatever its author. */
function assertWritable(payload: { type: string; [k: string]: unknown }, writer: EntryWriter, id: string | undefined, ownsCall: (callId: string) => boolean): void {
  if (CONTROL_PLANE_TYPES.has(payload.type)) throw new ApiError("forbidden", `${payload.type} entries are written by the control plane only`);
  // A child's result on its parent: readers (the UI, the CLI) show it as the child's answer.
  if (payload.type === "chat" && payload.origin === "child_finished") throw new ApiError("forbidden", "a child's result is written by the control plane only");
  if (payload.type === STATUS_CHANGED && payload.status === "running" && payload.boxId !== undefined && !writer.mayNameBox) {
    throw new ApiError("forbidden", "a stream token may not name a box in a run's claim: only a house token may");
  }
  // A token that names a run speaks for that run alone. A stopped run's box (its token lives on
  // for hours) could otherwise end the thread's next run, or claim its own ended run again and so
  // have its token renewed for as long as it sends heartbeats.
  if (payload.type === STATUS_CHANGED && writer.runId !== undefined) {
    if (payload.runId !== writer.runId) throw new ApiError("forbidden", `this token's status changes name its own run: runId ${writer.runId}`);
    if (payload.status === "running" && id !== `claim:${writer.runId}`) throw new ApiError("forbidden", `this token claims its run once, under the id claim:${writer.runId}`);
  }
  // What a run left behind is listed as its own: nobody else may add to it, or take its ids
  // first (the runner's entry would then be dropped as a duplicate).
  if (payload.type.startsWith("artifact.") && (writer.runId === undefined || payload.runId !== writer.runId)) {
    throw new ApiError("forbidden", "artifact entries are written by their run's box only");
  }
  // A delivery mark says the running agent took a message: the UI shows it as "message delivered
  // to the agent" wherever it sits. Only the run's box knows that; anyone else's mark (under any
  // id) would tell the person who wrote a message that it arrived when it may not have.
  if (payload.type === MESSAGE_DELIVERED && (writer.runId === undefined || payload.runId !== writer.runId)) {
    throw new ApiError("forbidden", `${MESSAGE_DELIVERED} entries are written by their run's box only`);
  }
  if (id !== undefined && CONTROL_PLANE_ID.test(id) && !isRunsOwnStart(id, writer)) throw new ApiError("forbidden", `ids of the form ${id.slice(0, id.indexOf(":") + 1)}… are kept for the control plane's own entries`);
  // A bot's run_command output on its thread (`exec:<bot>:<turn>:<call>:out:<n>`): an entry posted
  // under one first would have the bot's own dropped as a duplicate, or stand in for it. Turn and
  // call ids show on the thread, so another bot could do that too.
  if (id !== undefined && id.startsWith("exec:") && !(writer.isBot && id.startsWith(`exec:${writer.subject}:`))) {
    throw new ApiError("forbidden", "ids of the form exec:<bot>:… are kept for that bot's live command output");
  }
  if (payload.type === INTERRUPT && !writer.mayInterrupt) {
    throw new ApiError("forbidden", `${INTERRUPT} entries are written with a house token only (POST /api/threads/:id/interrupt)`);
  }
  // A command run through the exec route is shown on a card of its own, found by its execId, and
  // its output entries are written under ids that start with it: output posted under that execId,
  // or under one of those ids first, by anyone else would stand in the command's card as its output.
  // Readers find the card by the execId made a string, which an array of it also is.
  if (payload.type === EXEC_OUTPUT && payload.execId !== undefined && typeof payload.execId !== "string") {
    throw new ApiError("validation_failed", `${EXEC_OUTPUT}'s execId is a string`, [{ path: "payload.execId", message: "a string" }]);
  }
  if (payload.type === EXEC_OUTPUT && typeof payload.execId === "string" && EXEC_ROUTE_ID.test(payload.execId) && payload.execId !== writer.execId) {
    throw new ApiError("forbidden", "output of a command run through POST /api/environments/:id/exec (execId exec_…) is written by that command only");
  }
  // Any other execId is a tool call's id, and its output is shown on that call's card. Call ids
  // show on the thread: output from anyone but the call's own writer (the bot for its run_command,
  // which writes with the call's execId; the run's box for its agent's calls) would stand in the
  // card as what the command printed.
  if (payload.type === EXEC_OUTPUT && !(writer.execId !== undefined ? payload.execId === writer.execId : typeof payload.execId === "string" && ownsCall(payload.execId))) {
    throw new ApiError("forbidden", "a tool call's live output (signal.exec.output) is written only by the writer that posted that call (pi.tool_call) on this thread");
  }
  if (id !== undefined && EXEC_ROUTE_ID.test(id) && (writer.execId === undefined || !id.startsWith(`${writer.execId}:`))) {
    throw new ApiError("forbidden", "ids of the form exec_… are kept for the output of a command run through POST /api/environments/:id/exec");
  }
  const boxId = id === undefined ? null : RUN_BOX_ID.exec(id);
  if (boxId) {
    // A run's box writes its end, its stderr, its delivery marks and its harness's messages under
    // these ids; one posted first by anyone else had the box's entry dropped as a duplicate (a
    // taken finished-signal left a completed run running until the orphan alarm).
    const named = boxId[1] === "m" ? undefined : boxId[1] === "delivered" && /^[0-9a-f]{40}$/.test(boxId[2]) ? undefined : boxId[2].split(":")[0];
    if (writer.runId === undefined || (named !== undefined && named !== writer.runId)) {
      throw new ApiError("forbidden", `ids of the form <thread>:${boxId[1]}:… are kept for the entries a run's box writes`);
    }
  }
  const idRun = id === undefined ? undefined : ARTIFACT_ID.exec(id)?.[1];
  if (idRun !== undefined && idRun !== writer.runId) throw new ApiError("forbidden", "ids of the form <thread>:artifacts:<runId>:… are kept for that run's artifacts");
}

/** The author an entry is stored with, or a 403 if this writer may not claim it. */
export function authorFor(requested: string | undefined, writer: EntryWriter, field: "authorId" | "brainId" = "authorId"): string {
  if (requested === undefined || requested === writer.subject) return writer.subject;
  if (passesForControlPlane(requested)) throw new ApiError("forbidden", `${field} ${SYSTEM_AUTHOR} (in any spelling that looks like it) is reserved for the control plane`);
  if (!writer.mayAuthorAsOthers) {
    throw new ApiError("forbidden", `this token writes entries as ${writer.subject}; only the ${AUTHOR_AS_OTHERS_ROLE} role may set another ${field}`);
  }
  return requested;
}

export type PreparedEntries = { messages: NewMessage[]; entries: Entry[]; heartbeats: number };

/**
 * Validates a write of one envelope or an array of envelopes and fills in what the writer may omit.
 * The whole write is rejected if any entry is invalid, so a bad request changes nothing.
 */
const entryListSchema = z.array(entryInputSchema);

/**
 * Where the writer's run stands (run-writes.ts), for a writer whose token names a run; `onLog`:
 * whether an entry of that id is on the thread already.
 */
export type WriterRun = { standing: RunStanding; onLog(id: string): boolean };

export function prepareEntries(raw: unknown, writer: EntryWriter, nowMs: number, calls: ToolCallWriters, run?: WriterRun): PreparedEntries {
  const list = Array.isArray(raw) ? raw : [raw];
  if (list.length === 0) throw new ApiError("bad_request", "empty arrays are not allowed");
  if (list.length > MAX_ENTRIES_PER_POST) throw new ApiError("payload_too_large", `at most ${MAX_ENTRIES_PER_POST} entries per write`);
  const parsed = entryListSchema.safeParse(list);
  if (!parsed.success) throw new ApiError("validation_failed", "invalid entry", formatZodError(parsed.error));
  const authors = parsed.data.map((input) => authorFor(input.authorId, writer));
  const key = toolCallWriterKey(writer);
  // A call and its output may come in one write.
  const posted = new Set<string>();
  const ownsCall = (callId: string) => posted.has(callId) || calls.has(callId, key);
  for (const input of parsed.data) {
    assertWritable(input.payload, writer, input.id, ownsCall);
    const refusal = run && writer.runId !== undefined ? runWriteRefusal(run.standing, writer.runId, input, run.onLog) : null;
    if (refusal !== null) throw new ApiError("run_ended", refusal);
    if (input.payload.type === TOOL_CALL && typeof input.payload.toolCallId === "string") posted.add(input.payload.toolCallId);
  }
  if (posted.size > 0) calls.add([...posted].map((c) => [c, key]));
  const out: PreparedEntries = { messages: [], entries: [], heartbeats: 0 };
  const seen = new Set<string>();
  parsed.data.forEach((input, i) => {
    if (isHeartbeat(input)) {
      out.heartbeats += 1;
      return;
    }
    const id = input.id ?? crypto.randomUUID();
    if (seen.has(id)) return; // the same id twice in one write is still one entry
    seen.add(id);
    const entry: Entry = { id, ts: input.ts ?? nowMs, authorId: authors[i], payload: input.payload as Entry["payload"] };
    out.entries.push(entry);
    out.messages.push({ data: UTF8_ENCODER.encode(JSON.stringify(entry)), entryId: id, parsed: entry });
  });
  return out;
}

/** An append body on the stream path: the same depth limit and errors as the REST path. */
export function parseJsonBody(body: Uint8Array): unknown {
  return parseJsonBytes(body);
}

/**
 * A stored entry for a reader. Entries written before the depth limit may nest deeper than any
 * reader can clone or serialize: their deep parts are replaced by a marker, never a 500.
 */
export function toEntryWithOffset(m: StoredMessage): EntryWithOffset {
  const offset = formatOffset(m.seq);
  // Just appended by this actor: the entry it was serialized from (validated, within the limits).
  if (m.parsed !== undefined) return { offset, ...(m.parsed as Entry) };
  if (!jsonNestsDeeperThan(m.data)) {
    const entry = JSON.parse(UTF8_DECODER.decode(m.data)) as Entry;
    return { offset, ...entry };
  }
  let entry: Entry;
  try {
    entry = pruneDeepJson(JSON.parse(UTF8_DECODER.decode(m.data))) as Entry;
  } catch {
    entry = { id: m.entryId ?? `seq:${m.seq}`, ts: 0, payload: { type: "signal.entry_unreadable" } };
  }
  return { offset, ...entry };
}
