import type { OutputStream } from "./provider";

export type LiveOutputPayload = {
  type: "signal.exec.output";
  execId: string;
  stream: OutputStream;
  text: string;
  /** Set on the one marker that says the rest of the output was not posted live. */
  truncated?: true;
};

export type LiveOutputLimits = { maxEntries: number; maxBytes: number; flushMs: number; maxEntryBytes: number };
export const DEFAULT_LIVE_OUTPUT_LIMITS: LiveOutputLimits = { maxEntries: 200, maxBytes: 64 * 1024, flushMs: 250, maxEntryBytes: 8 * 1024 };

/**
 * Turns a command's output chunks into bounded, line-buffered thread entries while it runs:
 * complete lines are posted at most every `flushMs` (one entry per stream per flush), a partial
 * line waits for its newline or the end. Past `maxEntries` or `maxBytes` one marker entry says
 * so and nothing more is posted (the command's final result still carries its output).
 * Posts run one after another, in order; a failed post is reported and never stops the command.
 */
export class LiveOutput {
  private readonly partial: Record<OutputStream, string> = { stdout: "", stderr: "" };
  private ready: { stream: OutputStream; text: string }[] = [];
  private entries = 0;
  private bytes = 0;
  private cut = false;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private chain: Promise<void> = Promise.resolve();

  constructor(
    private readonly execId: string,
    private readonly post: (payloads: LiveOutputPayload[]) => Promise<void>,
    private readonly onError: (err: unknown) => void,
    private readonly limits: LiveOutputLimits = DEFAULT_LIVE_OUTPUT_LIMITS,
  ) {}

  push(stream: OutputStream, text: string): void {
    if (this.cut) return;
    const all = this.partial[stream] + text;
    const end = all.lastIndexOf("\n");
    if (end < 0) {
      this.partial[stream] = all;
      // A line that never ends must not grow without bound.
      if (all.length > this.limits.maxEntryBytes) {
        this.take(stream, all);
        this.partial[stream] = "";
      }
    } else {
      this.take(stream, all.slice(0, end + 1));
      this.partial[stream] = all.slice(end + 1);
    }
    if (this.ready.length > 0 && !this.timer) this.timer = setTimeout(() => this.flush(), this.limits.flushMs);
  }

  /** Posts what is left (partial lines included) and waits for every post. */
  async end(): Promise<void> {
    for (const stream of ["stdout", "stderr"] as const) {
      if (this.partial[stream]) this.take(stream, this.partial[stream]);
      this.partial[stream] = "";
    }
    this.flush();
    await this.chain;
  }

  /**
   * Posts what is ready, then the marker, and nothing after: for output that can no longer be
   * followed live (its result still carries all of it).
   */
  cutShort(): void {
    if (this.cut) return;
    this.flush();
    if (this.cut) return;
    this.cut = true;
    const marker: LiveOutputPayload = { type: "signal.exec.output", execId: this.execId, stream: "stdout", text: "", truncated: true };
    this.chain = this.chain.then(() => this.post([marker])).catch(this.onError);
  }

  private take(stream: OutputStream, text: string): void {
    const last = this.ready.at(-1);
    if (last && last.stream === stream && last.text.length + text.length <= this.limits.maxEntryBytes) last.text += text;
    else this.ready.push({ stream, text });
  }

  private flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    const batch: LiveOutputPayload[] = [];
    for (const r of this.ready) {
      if (this.cut) break;
      const size = new TextEncoder().encode(r.text).byteLength;
      if (this.entries + 1 >= this.limits.maxEntries || this.bytes + size > this.limits.maxBytes) {
        this.cut = true;
        batch.push({ type: "signal.exec.output", execId: this.execId, stream: r.stream, text: "", truncated: true });
        break;
      }
      this.entries += 1;
      this.bytes += size;
      batch.push({ type: "signal.exec.output", execId: this.execId, stream: r.stream, text: r.text });
    }
    this.ready = [];
    if (batch.length === 0) return;
    this.chain = this.chain.then(() => this.post(batch)).catch(this.onError);
  }
}
