/**
 * What a box must not post to a thread: the environment's secret values and the content of its
 * files marked `sensitive`. The runner and the mirror both scrub what they post with these.
 */
import { readFileSync } from "node:fs";
import { isAbsolute, join, normalize } from "node:path";
import { BOX_ENV } from "../domain/box-layout";
import { MIN_BOX_SECRET_LENGTH, redactCutText, redactionList as formsOf, redactText, sensitiveContentValues } from "../domain/secret-forms";

export { redactText };

/** Shorter values are too common to redact without mangling ordinary text. */
export const MIN_REDACTED_LENGTH = MIN_BOX_SECRET_LENGTH;

/** The environment's files marked sensitive, as paths relative to the working directory. */
export function sensitiveFilePaths(env: Record<string, string | undefined>): string[] {
  try {
    const parsed: unknown = JSON.parse(env[BOX_ENV.sensitiveFiles] ?? "[]");
    return Array.isArray(parsed) ? parsed.filter((p): p is string => typeof p === "string" && p !== "") : [];
  } catch {
    return [];
  }
}

/** Read before the harness starts (it may change them): each file's content, and its longer lines. */
export function sensitiveValues(workDir: string, paths: string[]): string[] {
  const out: string[] = [];
  for (const p of paths) {
    let content: string;
    try {
      content = readFileSync(isAbsolute(p) ? p : join(workDir, p), "utf8");
    } catch {
      continue; // not there (yet): nothing of it can be posted either
    }
    out.push(...sensitiveContentValues(content));
  }
  return out;
}

/** The names of the variables the control plane named as the environment's secrets. */
export function secretNamesOf(env: Record<string, string | undefined>): string[] {
  return (env[BOX_ENV.secretNames] ?? "").split(",").filter(Boolean);
}

/** The values of the variables the control plane named as the environment's secrets. */
export function namedSecretValues(env: Record<string, string | undefined>): string[] {
  return secretNamesOf(env).map((n) => env[n]).filter((v): v is string => !!v);
}

/** What the box scrubs from what it posts: every form of each value (see secretForms), longest first. */
export function redactionList(values: string[], minLength = MIN_REDACTED_LENGTH): string[] {
  return formsOf(values, minLength);
}

/**
 * How pi-ai ends a model provider's error body it cut to 4000 characters (its utils/error-body.js):
 * the body was cut before anything could redact it, so what precedes the marker may be the
 * beginning of a secret the body quoted.
 */
const PI_AI_CUT = /\.\.\. \[truncated \d+ chars\]/;

/** `text` with the listed values replaced, and what a cut pi-ai made left of one before its marker. */
export function redactBoxText(text: string, list: readonly string[]): string {
  const pieces = text.split(new RegExp(`(${PI_AI_CUT.source})`));
  if (pieces.length === 1) return redactText(text, list);
  return pieces.map((p, i) => (i % 2 === 1 ? p : redactCutText(p, list, { end: i < pieces.length - 1 }))).join("");
}

/** Every string in `value` (an entry about to be posted) with the listed values replaced (see redactBoxText). */
export function redactDeep<T>(value: T, list: string[]): T {
  if (list.length === 0) return value;
  const walk = (v: unknown): unknown => {
    if (typeof v === "string") return redactBoxText(v, list);
    if (Array.isArray(v)) return v.map(walk);
    if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]));
    return v;
  };
  return walk(value) as T;
}

/** Whether `path` (relative to the working directory) is one of the sensitive files. */
export function isSensitivePath(path: string, sensitive: string[]): boolean {
  const p = normalize(path);
  return sensitive.some((s) => normalize(s) === p);
}
