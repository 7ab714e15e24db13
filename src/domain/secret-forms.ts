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

/** `text` with every form of each value (4 characters or more: shorter ones are too common) as `[redacted]`. */
export function redactValues(text: string, values: readonly (string | null | undefined)[]): string {
  const forms = [...new Set(values.filter((v): v is string => !!v && v.length >= 4).flatMap(secretForms))].sort((a, b) => b.length - a.length);
  let out = text;
  for (const f of forms) if (out.includes(f)) out = out.split(f).join("[redacted]");
  return out;
}
