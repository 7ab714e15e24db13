/**
 * The last bytes a harness wrote to stderr, kept so a failed run can say why on the thread (the
 * box's log goes away with the box). Bounded, and scrubbed of secret values before it leaves.
 */
import { redactionList } from "./redact";
import { redactCutText } from "../domain/secret-forms";

export const STDERR_TAIL_BYTES = 4096;

/** Env names whose values are secret even when the control plane did not list them. */
const SECRET_NAME = /KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL/i;

export class StderrTail {
  private buf = Buffer.alloc(0);
  private dropped = 0;

  constructor(private readonly maxBytes = STDERR_TAIL_BYTES) {}

  push(chunk: Buffer | string): void {
    const next = Buffer.concat([this.buf, typeof chunk === "string" ? Buffer.from(chunk) : chunk]);
    const over = next.length - this.maxBytes;
    if (over > 0) this.dropped += over;
    this.buf = over > 0 ? next.subarray(over) : next;
  }

  /**
   * The tail as text (a split UTF-8 sequence at its start dropped), secrets replaced. The bytes
   * before it were dropped unredacted: a secret they cut through leaves its end at the start.
   */
  text(secrets: string[]): { text: string; truncated: boolean } {
    const text = redactCutText(this.buf.toString("utf8").replace(/^\uFFFD+/, ""), redactionList(secrets), { start: this.dropped > 0 });
    return { text, truncated: this.dropped > 0 };
  }
}

/** The values to scrub: the variables the control plane named as secrets, and any secret-looking one. */
export function secretValues(env: Record<string, string | undefined>, namedSecrets: string[], extra: string[] = []): string[] {
  const out = [...extra];
  for (const [name, value] of Object.entries(env)) {
    if (value && (namedSecrets.includes(name) || SECRET_NAME.test(name))) out.push(value);
  }
  return out;
}

const SAYS_WHY = /error|fail|no |not |cannot|can't|unable|invalid|denied|refused|missing/i;

/** The line that says why, for a one-line failure reason: the last one that sounds like it, else the last. */
export function lastLine(text: string): string {
  const lines = text.split(/\r?\n/).map((l) => l.trim()).filter(Boolean);
  const why = [...lines].reverse().find((l) => SAYS_WHY.test(l));
  return (why ?? lines.at(-1) ?? "").slice(0, 500);
}
