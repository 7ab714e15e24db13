import { DEFAULT_LIVE_OUTPUT_LIMITS, LiveOutput, type LiveOutputLimits, type LiveOutputPayload } from "../sandbox/live-output";

export type LiveToolOutputOptions = {
  /** A call that ends sooner posts nothing live: its result carries the output, once. */
  afterMs: number;
  limits: LiveOutputLimits;
};

export const DEFAULT_LIVE_TOOL_OUTPUT: LiveToolOutputOptions = { afterMs: 1_000, limits: DEFAULT_LIVE_OUTPUT_LIMITS };

type Call = { seen: string; pending: string; live?: LiveOutput; timer?: ReturnType<typeof setTimeout>; lost: boolean };

/**
 * An agent's long-running tool calls (pi's `bash`), followed live: pi reports a call's whole
 * output so far on every update, and the thread gets the new part as `signal.exec.output`
 * entries keyed by the call's id, within the bounds `LiveOutput` keeps. Only calls still running
 * after `afterMs` are followed, so quick commands do not post their output twice.
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
      call = { seen: "", pending: "", lost: false };
      const started = call;
      started.timer = setTimeout(() => this.follow(toolCallId, started), this.options.afterMs);
      started.timer.unref?.();
      this.calls.set(toolCallId, call);
    }
    if (call.lost) return;
    // A tool that keeps only its output's tail no longer extends what was seen: the rest is in
    // the result.
    if (!snapshot.startsWith(call.seen)) {
      call.lost = true;
      call.live?.cutShort();
      return;
    }
    const added = snapshot.slice(call.seen.length);
    call.seen = snapshot;
    if (!added) return;
    if (call.live) call.live.push("stdout", added);
    else call.pending += added;
  }

  /** The call returned: what is left is posted (partial line included) before this resolves. */
  async end(toolCallId: string): Promise<void> {
    const call = this.calls.get(toolCallId);
    if (!call) return;
    this.calls.delete(toolCallId);
    clearTimeout(call.timer);
    await call.live?.end();
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
