import type { WorkspaceFile } from "./box-config";
import type { OutputStream } from "../sandbox/provider";
import { MIN_BOX_SECRET_LENGTH, partialSecretAtEnd, redactCutText, redactionList, redactText, sensitiveContentValues } from "../domain/secret-forms";
import { CUT_LINE } from "../sandbox/bounded-output";
import { repositoryUrlSecrets } from "./repository-url";

/**
 * What a command's output may show once it leaves a box through the control plane (an exec
 * answer, its live entries on a thread, a bot's tool result and so the bot's model). A shared box
 * holds what runs left there: the environment's files, a `sensitive` one included, and whatever a
 * harness wrote from its secrets (an MCP config, say). The runner and the mirror scrub what a run
 * posts by the same rule; this is that rule for the commands the control plane runs itself. A
 * repository URL stored before credentials in one were refused holds them still (git quotes the
 * URL it clones from, and the checkout's origin is that URL).
 */
export function boxSecretForms(e: BoxSecretSource): string[] {
  return redactionList(boxSecretValues(e), MIN_BOX_SECRET_LENGTH);
}

type BoxSecretSource = { secrets?: Record<string, string>; files?: WorkspaceFile[]; repositories?: { url: string }[] };

function boxSecretValues(e: BoxSecretSource): string[] {
  return [
    ...Object.values(e.secrets ?? {}),
    ...(e.files ?? []).filter((f) => f.sensitive).flatMap((f) => sensitiveContentValues(f.content)),
    ...(e.repositories ?? []).flatMap((r) => repositoryUrlSecrets(r.url)),
  ];
}

/**
 * Whether a box given `before`'s secrets, sensitive files and repository credentials may hold a
 * value redaction no longer knows once the environment is `after`: a secret changed or removed, a
 * sensitive file's content changed or the file taken out. Whatever the box was given holds the old
 * value still (an MCP config written with it, the file, what a run copied or printed of it). A value
 * added is in no box yet; one kept under another name or path is still redacted.
 */
export function retiresBoxSecret(before: BoxSecretSource | null, after: BoxSecretSource): boolean {
  const known = new Set(boxSecretValues(after));
  return boxSecretValues(before ?? {}).some((v) => !known.has(v));
}

export function redactorFor(forms: readonly string[]): (text: string) => string {
  return forms.length === 0 ? (text) => text : (text) => redactText(text, forms);
}

/**
 * The last `max` characters of a step's output, as a failure's reason quotes them: redacted before
 * it is cut, since a cut through a secret leaves a piece of it that no redaction after recognises.
 */
export function lastWords(output: string, max: number, e: Parameters<typeof boxSecretForms>[0] | null): string {
  return redactorFor(e ? boxSecretForms(e) : [])(output.trim()).slice(-max);
}

/**
 * A command's output as an answer shows it, redacted. The box cut the middle out of a long output
 * (bounded-output.ts) before it could be redacted: a secret the cut went through leaves its
 * beginning before the cut line and its end after it, and those pieces are redacted too.
 */
export function redactBoundedOutput(output: string, forms: readonly string[]): string {
  if (forms.length === 0) return output;
  const pieces = output.split(new RegExp(`(${CUT_LINE.source})`));
  return pieces.map((p, i) => (i % 2 === 1 ? p : redactCutText(p, forms, { start: i > 0, end: i < pieces.length - 1 }))).join("");
}

/**
 * Passes a command's output on as it arrives, redacted. Output comes in chunks cut anywhere (and
 * a line too long for one entry is cut again further on), so a secret can arrive in two pieces
 * that are each harmless alone: an end that could begin a secret is held back until the rest
 * comes, as the mirror does for a tool's live output. What is held is the output as it came: a
 * secret that begins with another (a sensitive file and its first line, say) must not have its
 * beginning redacted on its own and its rest let through.
 */
export class RedactedFeed {
  private readonly held: Record<OutputStream, string> = { stdout: "", stderr: "" };

  constructor(private readonly forms: readonly string[], private readonly push: (stream: OutputStream, text: string) => void) {}

  write(stream: OutputStream, text: string): void {
    if (this.forms.length === 0) return this.push(stream, text);
    const raw = this.held[stream] + text;
    const cut = safeCut(raw, this.forms);
    this.held[stream] = raw.slice(cut);
    if (cut > 0) this.push(stream, redactText(raw.slice(0, cut), this.forms));
  }

  /** The output ended: what was held back is redacted as it stands. */
  end(): void {
    for (const stream of ["stdout", "stderr"] as const) {
      if (this.held[stream]) this.push(stream, redactText(this.held[stream], this.forms));
      this.held[stream] = "";
    }
  }
}

/**
 * How much of `raw` can be redacted and passed on now: all but an end that could begin a secret,
 * and never through a secret, which would be passed on half (and so unredacted) either side.
 */
function safeCut(raw: string, forms: readonly string[]): number {
  let cut = raw.length - partialSecretAtEnd(raw, forms);
  for (let moved = true; moved && cut > 0;) {
    moved = false;
    for (const form of forms) {
      const at = raw.lastIndexOf(form, cut - 1);
      if (at >= 0 && at < cut && at + form.length > cut) {
        cut = at;
        moved = true;
      }
    }
  }
  return cut;
}
