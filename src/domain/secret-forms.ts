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
