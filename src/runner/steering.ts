/**
 * What a running agent does with the thread's new entries (pure): a person's (or a bot's) chat
 * becomes a message to the agent, an interrupt aborts its current turn. Entries from before the
 * run's own prompt, control-plane notes (`dispatch: false`, e.g. the prompt itself) and entries of
 * other runs are never fed back.
 */
import type { WireEntry } from "./stream-writer";
import { FINISHED_STATUSES, STATUS_CHANGED } from "../domain/statuses";

export type SteerAction =
  | { kind: "message"; entryId: string; text: string }
  | { kind: "interrupt"; entryId: string }
  /** The thread ended this run (a stop, an orphaning, the mirror's failure): nothing more is its to take. */
  | { kind: "ended" }
  | { kind: "none" };

export const INTERRUPT = "signal.run.interrupt";
export const MESSAGE_DELIVERED = "signal.run.message_delivered";

export function steerAction(entry: WireEntry, runId: string): SteerAction {
  const p = entry.payload;
  const id = entry.id ?? "";
  if (p.type === "chat") {
    if (p.dispatch === false || typeof p.text !== "string" || !p.text.trim()) return { kind: "none" };
    return { kind: "message", entryId: id, text: p.text };
  }
  if (p.type === INTERRUPT && (p.runId === undefined || p.runId === runId)) return { kind: "interrupt", entryId: id };
  // A finished-signal without a run id ends the current run too (the thread's rule).
  if (p.type === STATUS_CHANGED && (FINISHED_STATUSES as readonly unknown[]).includes(p.status) && (p.runId === undefined || p.runId === runId)) return { kind: "ended" };
  return { kind: "none" };
}

/**
 * How a message reaches pi: while it works, as a steering message (delivered after the current
 * tool calls, before its next model call); while it is idle (after an interrupt), as a new prompt.
 */
export type DeliveryMode = "steer" | "prompt";
export const deliveryMode = (agentBusy: boolean): DeliveryMode => (agentBusy ? "steer" : "prompt");

/**
 * Whether the run is over once pi has settled: not while messages wait, and not right after an
 * interrupt (the person who interrupted is about to say what to do instead).
 */
export function endsWhenSettled(s: { queued: number; interruptedSincePrompt: boolean }): boolean {
  return s.queued === 0 && !s.interruptedSincePrompt;
}

/**
 * The entries a run acts on, from a read of its thread: everything after the run's own prompt
 * entry (`prompt:<runId>`); when the thread has no such entry, only what arrives from now on.
 */
export class RunCursor {
  private armed = false;
  constructor(private readonly runId: string) {}

  /** Entries of one catch-up page; returns those after the prompt. */
  catchUp(entries: WireEntry[]): WireEntry[] {
    if (this.armed) return entries;
    const at = entries.findIndex((e) => e.id === `prompt:${this.runId}`);
    if (at < 0) return [];
    this.armed = true;
    return entries.slice(at + 1);
  }

  /** The catch-up reached the tail: from here on everything counts. */
  caughtUp(): void {
    this.armed = true;
  }
}
