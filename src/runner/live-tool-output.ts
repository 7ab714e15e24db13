import { DEFAULT_LIVE_OUTPUT_LIMITS, LiveOutput, type LiveOutputLimits, type LiveOutputPayload } from "../sandbox/live-output";
import { partialSecretAtEnd } from "../domain/secret-forms";

export { partialSecretAtEnd };

export type LiveToolOutputOptions = {
  /** A call that ends sooner posts nothing live: its result carries the output, once. */
  afterMs: number;
  limits: LiveOutputLimits;
  /** Replaces secrets in a call's whole output so far (see below). */
  redact: (text: string) => string;
  /**
   * How much of the end of the redacted output is held back until more comes (or the call ends):
   * an end that could be the beginning of a secret, so one only partly printed yet is never
   * posted in part.
   */
  heldBack: (redacted: string) => number;
};

export const DEFAULT_LIVE_TOOL_OUTPUT: LiveToolOutputOptions = { afterMs: 1_000, limits: DEFAULT_LIVE_OUTPUT_LIMITS, redact: (t) => t, heldBack: () => 0 };

/** `seen`: the redacted output posted (or waiting to be) so far; `latest`: the whole redacted output last reported. */
type Call = { seen: string; latest: string; pending: string; live?: LiveOutput; timer?: ReturnType<typeof setTimeout>; lost: boolean };

/**
 * An agent's long-running tool calls (pi's `bash`), followed live: pi reports a call's whole
 * output so far on every update, and the thread gets the new part as `signal.exec.output`
 * entries keyed by the call's id, within the bounds `LiveOutput` keeps. Only calls still running
 * after `afterMs` are followed, so quick commands do not post their output twice.
 *
 * Secrets are replaced in the whole output, not per piece: a secret printed across two updates
 * (a multi-line key, a long line cut where an update ended) would match in neither piece.
 */
export class LiveToolOutputs {
  private readonly calls = new Map<string, Call>();

  constructor(
    private readonly post: (payloads: LiveOutputPayload[]) => Promise<void> | void,
    private readonly onError: (err: unknown) => void,
    private readonly options: LiveToolOutputOptions = DEFAULT_LIVE_TOOL_OUTPUT,
  ) {}

  /** `snapshot`: the call's output so far, as its tool reports it. */
  update(toolCallId: string, snapshot: string): void {
    let call = this.calls.get(toolCallId);
    if (!call) {
      call = { seen: "", latest: "", pending: "", lost: false };
      const started = call;
      started.timer = setTimeout(() => this.follow(toolCallId, started), this.options.afterMs);
      started.timer.unref?.();
      this.calls.set(toolCallId, call);
    }
    if (call.lost) return;
    call.latest = this.options.redact(snapshot);
    this.take(call, call.latest.length - this.options.heldBack(call.latest));
  }

  /** The call returned: what is left is posted (partial line included) before this resolves. */
  async end(toolCallId: string): Promise<void> {
    const call = this.calls.get(toolCallId);
    if (!call) return;
    this.calls.delete(toolCallId);
    clearTimeout(call.timer);
    if (!call.lost) this.take(call, call.latest.length);
    await call.live?.end();
  }

  /** Passes on the redacted output up to `upTo`, past what was already taken. */
  private take(call: Call, upTo: number): void {
    const ready = call.latest.slice(0, Math.max(0, upTo));
    if (ready.length <= call.seen.length) return;
    // What was taken must still begin the output: a tool that keeps only its output's tail (or
    // a secret longer than the hold-back) changed it, and the rest is in the result.
    if (!ready.startsWith(call.seen)) {
      call.lost = true;
      call.live?.cutShort();
      return;
    }
    const added = ready.slice(call.seen.length);
    call.seen = ready;
    if (call.live) call.live.push("stdout", added);
    else call.pending += added;
  }

  /** The session ends: every call still followed is finished. */
  async endAll(): Promise<void> {
    await Promise.all([...this.calls.keys()].map((id) => this.end(id)));
  }

  private follow(toolCallId: string, call: Call): void {
    if (this.calls.get(toolCallId) !== call || call.lost) return;
    call.live = new LiveOutput(toolCallId, async (payloads) => { await this.post(payloads); }, this.onError, this.options.limits);
    if (call.pending) call.live.push("stdout", call.pending);
    call.pending = "";
  }
}

/** The text of a tool's (partial) result: its text parts, joined. */
export function toolResultText(result: unknown): string {
  const content = (result as { content?: unknown } | null | undefined)?.content;
  if (!Array.isArray(content)) return "";
  return content.map((c) => (c && typeof c === "object" && (c as { type?: unknown }).type === "text" ? String((c as { text?: unknown }).text ?? "") : "")).join("");
}
