/**
 * Drives pi in RPC mode for the runner: the task goes in as the first prompt, messages from the
 * thread go in one at a time as prompts pi steers with while it works and runs as a new turn when
 * it is idle (after an interrupt, or as it settles), an interrupt is pi's abort. When pi has settled with nothing left to do, stdin is closed and pi
 * exits on its own, so the runner keeps owning the exit code.
 */
import type { Writable } from "node:stream";
import { deliveryMode, endsWhenSettled, type DeliveryMode } from "./steering";

export interface PiRpcHooks {
  /** pi accepted a message from the thread. */
  onDelivered(entryId: string, mode: DeliveryMode): void;
  /** pi refused the task itself (e.g. no API key): its words, for the run's failure. */
  onRefused(error: string): void;
  log(m: string): void;
  /** The run is over from pi's side: its stdin is closed and it should now exit on its own. */
  onInputClosed?(): void;
  /** pi, interrupted, waited `idleAfterInterruptMs` for a message and got none: the run ends now. */
  onIdleAfterInterrupt?(waitedMs: number): void;
}

type Pending = { kind: "task" } | { kind: "message"; entryId: string; mode: DeliveryMode } | { kind: "abort" };

export class PiRpc {
  private busy = false;
  private interruptedSincePrompt = false;
  /** pi has begun the turn of the last prompt (`agent_start`): before that an abort would be lost. */
  private turnStarted = false;
  /** An interrupt that came before the turn began: its abort goes out when the turn does. */
  private abortOnStart = false;
  /** How the turn's last assistant message ended: a turn that ended `stop` was not cut short. */
  private lastStopReason: string | undefined;
  /** An abort was sent and pi has not settled yet: a message now is what to do instead. */
  private aborting = false;
  /**
   * Messages not yet sent to pi, in order. One prompt command is in flight at a time: pi decides
   * steer or new turn only once it has answered the one before (two prompts it reads at once while
   * idle both start a turn, and the second is dropped). While an abort settles they wait for it.
   */
  private readonly outbox: { entryId: string; text: string }[] = [];
  /** A prompt command (the task or a message) pi has not answered yet. */
  private promptInFlight = false;
  private ended = false;
  private seq = 0;
  private readonly pending = new Map<string, Pending>();
  private readonly delivered = new Set<string>();
  /** Running while pi, interrupted, waits for what to do instead. */
  private idleTimer: ReturnType<typeof setTimeout> | undefined;

  /**
   * `idleAfterInterruptMs`: how long an interrupted pi waits for a message before the run ends
   * (0: for ever). A run nobody comes back to would otherwise hold its box, and bill it, for good.
   */
  constructor(private readonly stdin: Writable, private readonly hooks: PiRpcHooks, private readonly idleAfterInterruptMs = 0) {}

  get isEnded(): boolean {
    return this.ended;
  }

  start(task: string): void {
    this.send({ type: "prompt", message: task }, { kind: "task" });
    this.promptInFlight = true;
    this.busy = true;
    this.turnStarted = false;
  }

  /** A chat from the thread. False when the run no longer takes messages. */
  message(entryId: string, text: string): boolean {
    if (this.ended) return false;
    if (this.delivered.has(entryId)) return true;
    this.delivered.add(entryId);
    this.stopIdleTimer();
    this.outbox.push({ entryId, text });
    this.sendNext();
    return true;
  }

  private sendNext(): void {
    // A steer sent to a turn being aborted is not a new instruction to pi: it may run as a
    // continuation the runner cannot tell apart from the aborted turn. Wait for the abort to settle.
    if (this.ended || this.aborting || this.promptInFlight) return;
    const next = this.outbox.shift();
    if (!next) return;
    const mode = deliveryMode(this.busy);
    // Always a prompt that pi steers with while it works: pi decides steer or new turn when it reads
    // it, not the runner from pi's output, which lags. A `steer` pi reads just after settling would
    // sit in its queue until a next prompt that may never come.
    this.send({ type: "prompt", message: next.text, streamingBehavior: "steer" }, { kind: "message", entryId: next.entryId, mode });
    this.promptInFlight = true;
    if (mode === "prompt") this.promptSent();
  }

  /** pi is to start a turn for a message: until it does, an interrupt waits for it. */
  private promptSent(): void {
    this.busy = true;
    this.turnStarted = false;
    this.interruptedSincePrompt = false;
  }

  /** Aborts pi's current turn; the run stays and waits for the next message. */
  interrupt(): void {
    if (this.ended) return;
    if (!this.busy) {
      // pi settled, but a message it has not answered yet (sent to steer, read after it settled)
      // starts a turn: the interrupt, which came after that message, is for that turn.
      if (![...this.pending.values()].some((p) => p.kind === "message")) return;
      this.interruptedSincePrompt = true;
      this.aborting = true;
      this.abortOnStart = true;
      return;
    }
    this.interruptedSincePrompt = true;
    this.aborting = true;
    // pi has the prompt but has not begun its turn (the run is just starting): an abort now would
    // abort nothing and the turn would run anyway. It goes out as soon as the turn begins.
    if (!this.turnStarted) {
      this.abortOnStart = true;
      return;
    }
    this.send({ type: "abort" }, { kind: "abort" });
  }

  /** One record from pi's stdout (events and command responses). */
  onRecord(r: { type?: string; id?: string; success?: boolean; error?: string; message?: { role?: string; stopReason?: string } }): void {
    if (r.type === "response" && r.id) {
      const p = this.pending.get(r.id);
      this.pending.delete(r.id);
      if (!p) return;
      if (p.kind !== "abort") this.promptInFlight = false;
      this.onResponse(p, r);
      this.sendNext();
      return;
    }
    if (r.type === "agent_start") {
      this.busy = true;
      this.turnStarted = true;
      this.lastStopReason = undefined;
      if (this.abortOnStart) {
        this.abortOnStart = false;
        this.send({ type: "abort" }, { kind: "abort" });
      }
    }
    if (r.type === "message_end" && r.message?.role === "assistant") this.lastStopReason = r.message.stopReason;
    if (r.type === "agent_settled") {
      this.busy = false;
      this.aborting = false;
      // An interrupt that came too late to cut anything short (the turn finished its answer) does
      // not hold the run open for a next message: the run is done, as it would be without it.
      if (this.interruptedSincePrompt && !this.abortOnStart && this.lastStopReason === "stop") this.interruptedSincePrompt = false;
      // A turn that never began takes no abort later: the next prompt must not be cut short by it.
      this.abortOnStart = false;
      // The first waiting message is the new prompt; any others steer the turn it starts.
      this.sendNext();
      this.endIfDone();
    }
  }

  /** pi's answer to a command of ours. */
  private onResponse(p: Pending, r: { success?: boolean; error?: string }): void {
    if (r.success) {
      if (p.kind !== "message") return;
      if (p.mode === "steer" && !this.busy) {
        // Sent to steer, read by pi after it had settled: pi runs it as a new turn.
        this.hooks.onDelivered(p.entryId, "prompt");
        const interrupted = this.abortOnStart;
        this.promptSent();
        // Interrupted before pi answered: that turn is aborted once it begins, and the run waits.
        if (interrupted) this.interruptedSincePrompt = true;
        return;
      }
      this.hooks.onDelivered(p.entryId, p.mode);
      // pi settled before answering: the prompt's turn is over, so the end may be due now.
      if (!this.busy) this.endIfDone();
      return;
    }
    this.hooks.log(`pi refused ${p.kind}: ${r.error ?? "unknown error"}`);
    if (p.kind === "task") {
      this.hooks.onRefused(r.error ?? "pi refused the task");
      this.end();
    } else if (p.kind === "message") {
      this.delivered.delete(p.entryId);
      // A prompt pi refused starts no turn: the run waits for the next message as it did before it.
      if (p.mode === "prompt") {
        this.busy = false;
        this.interruptedSincePrompt = true;
      }
      // An interrupt that was waiting for the turn of that message to begin has nothing to abort:
      // held, it would keep every later message out of pi for good.
      if (!this.busy) {
        this.abortOnStart = false;
        this.aborting = false;
      }
      this.endIfDone();
    }
  }

  private endIfDone(): void {
    if (this.busy) return;
    const waiting = [...this.pending.values()].filter((p) => p.kind === "message").length + this.outbox.length;
    if (endsWhenSettled({ queued: waiting, interruptedSincePrompt: this.interruptedSincePrompt })) this.end();
    else if (waiting === 0 && this.idleAfterInterruptMs > 0 && !this.idleTimer) {
      this.idleTimer = setTimeout(() => {
        this.idleTimer = undefined;
        if (this.ended || this.busy) return;
        this.hooks.log(`no message ${this.idleAfterInterruptMs} ms after the interrupt: ending the run`);
        this.hooks.onIdleAfterInterrupt?.(this.idleAfterInterruptMs);
        this.end();
      }, Math.min(this.idleAfterInterruptMs, 2 ** 31 - 1));
    }
  }

  private stopIdleTimer(): void {
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
  }

  /** Closes pi's stdin: pi finishes its shutdown (the mirror flushes) and exits. */
  end(): void {
    if (this.ended) return;
    this.ended = true;
    this.stopIdleTimer();
    this.hooks.log("pi has settled with nothing waiting: closing its input");
    this.stdin.end();
    this.hooks.onInputClosed?.();
  }

  private send(command: Record<string, unknown>, pending: Pending): void {
    const id = `tb-${++this.seq}`;
    this.pending.set(id, pending);
    this.stdin.write(`${JSON.stringify({ id, ...command })}\n`);
  }
}
