/**
 * The forms a secret value takes in text that quotes it: as is, escaped inside a JSON string (once,
 * or twice when a JSON error body is itself quoted in JSON), and percent-encoded in a URL. A
 * provider's error that echoes a request header back in JSON shows `sk-\"x\"` for `sk-"x"`;
 * redacting only the raw value would miss it.
 */
export function secretForms(value: string): string[] {
  const json = JSON.stringify(value).slice(1, -1);
  const jsonTwice = JSON.stringify(json).slice(1, -1);
  return [...new Set([value, json, jsonTwice, encodeURIComponent(value)])];
}

/** Every form of each value at least `minLength` long, longest first, so a value that contains another is replaced whole. */
export function redactionList(values: readonly string[], minLength: number): string[] {
  const forms = values.filter((v) => v.length >= minLength).flatMap(secretForms);
  return [...new Set(forms)].sort((a, b) => b.length - a.length);
}

export function redactText(text: string, list: readonly string[]): string {
  let out = text;
  for (const v of list) if (out.includes(v)) out = out.split(v).join("[redacted]");
  return out;
}

/** What a box may hold of a secret: values shorter than this are too common to redact without mangling ordinary text. */
export const MIN_BOX_SECRET_LENGTH = 6;
/** A sensitive file's lines this long are redacted on their own too (a copied line, a diff's `+` line). */
export const MIN_SENSITIVE_LINE_LENGTH = 8;

/** What must not be shown of a file marked sensitive: its content whole, and each of its longer lines. */
export function sensitiveContentValues(content: string): string[] {
  const out = [content, content.trimEnd()];
  for (const line of content.split(/\r?\n/)) if (line.trim().length >= MIN_SENSITIVE_LINE_LENGTH) out.push(line.trim());
  return out;
}

/** `text` with every form of each value (4 characters or more: shorter ones are too common) as `[redacted]`. */
export function redactValues(text: string, values: readonly (string | null | undefined)[]): string {
  return redactText(text, redactionList(values.filter((v): v is string => !!v), 4));
}

/** The length of the longest end of `text` that begins one of `secrets` (and is not all of it), `min` characters or more. */
export function partialSecretAtEnd(text: string, secrets: readonly string[], min = 1): number {
  let longest = 0;
  for (const secret of secrets) {
    for (let k = Math.min(secret.length - 1, text.length); k > longest && k >= min; k--) {
      if (text.endsWith(secret.slice(0, k))) {
        longest = k;
        break;
      }
    }
  }
  return longest;
}

/** The length of the longest start of `text` that ends one of `secrets` (and is not all of it), `min` characters or more. */
export function partialSecretAtStart(text: string, secrets: readonly string[], min = 1): number {
  let longest = 0;
  for (const secret of secrets) {
    for (let k = Math.min(secret.length - 1, text.length); k > longest && k >= min; k--) {
      if (text.startsWith(secret.slice(secret.length - k))) {
        longest = k;
        break;
      }
    }
  }
  return longest;
}

/**
 * What a cut may leave of a secret and still be redacted: a shorter piece says next to nothing of
 * the secret, and matches ordinary text too often.
 */
export const MIN_CUT_PIECE_LENGTH = 4;

/**
 * `text`, a piece of a longer text that was cut before it could be redacted (`cut.start`: what
 * came before it is gone; `cut.end`: what came after), redacted. A cut through a secret leaves a
 * piece of it that is no longer the secret, so the list does not find it: what is left of one at
 * a cut edge (its end at the start, its beginning at the end) is `[redacted]` too. Wherever a text
 * is cut before it is shown, redact it first and cut after; this is for cuts made where the
 * secrets are not known (a byte window kept as output comes, a box cutting a command's output).
 */
export function redactCutText(text: string, list: readonly string[], cut: { start?: boolean; end?: boolean }): string {
  let out = redactText(text, list);
  if (cut.start) {
    const k = partialSecretAtStart(out, list, MIN_CUT_PIECE_LENGTH);
    if (k > 0) out = `[redacted]${out.slice(k)}`;
  }
  if (cut.end) {
    const k = partialSecretAtEnd(out, list, MIN_CUT_PIECE_LENGTH);
    if (k > 0) out = `${out.slice(0, out.length - k)}[redacted]`;
  }
  return out;
}
