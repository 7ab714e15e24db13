/**
 * The words of a model provider's error answer, as a reader wants them in a turn's failure: the
 * client library gives "500 {json}" or "500: {json}" (the status again, then the body as sent),
 * and a provider's body names the problem in `error.message`, `message` or `error`.
 */
export function providerErrorText(detail: string, status: number): string {
  const rest = detail.replace(new RegExp(`^${status}\\b:?\\s*`), "");
  // A proxy's or gateway's error page (nginx, a CDN): its title says it, its markup says nothing.
  if (/^\s*<(!doctype|html|head|body)\b/i.test(rest)) return pageText(rest);
  if (!rest.startsWith("{")) return rest || detail;
  let body: unknown;
  try {
    body = JSON.parse(rest);
  } catch {
    return rest;
  }
  const said = messageOf(body);
  return said ?? rest;
}

function pageText(html: string): string {
  const title = /<title[^>]*>([^<]*)</i.exec(html)?.[1]?.replace(/\s+/g, " ").trim();
  if (title) return `${title} (an HTML page)`;
  const text = html.replace(/<(script|style)\b[\s\S]*?(<\/\1>|$)/gi, " ").replace(/<[^>]*>?/g, " ").replace(/\s+/g, " ").trim();
  return text ? `${text} (an HTML page)` : "an HTML page";
}

function messageOf(body: unknown): string | null {
  if (typeof body !== "object" || body === null) return null;
  const b = body as Record<string, unknown>;
  if (typeof b.error === "object" && b.error !== null && typeof (b.error as Record<string, unknown>).message === "string") {
    return (b.error as Record<string, string>).message.trim() || null;
  }
  if (typeof b.message === "string" && b.message.trim()) return b.message.trim();
  if (typeof b.error === "string" && b.error.trim()) return b.error.trim();
  return null;
}

/**
 * A coding agent's model error, as pi words it ("500: {json}": the status, then the provider's
 * body as sent), in the words the body says, as a bot's failed turn says it. Anything else is kept.
 */
export function modelErrorReason(message: string): string {
  const status = /^(\d{3}):?\s+\{/.exec(message)?.[1];
  if (!status) return message;
  const said = providerErrorText(message, Number(status));
  return said.startsWith("{") ? message : `the model API answered HTTP ${status}: ${said}`;
}

/** The error types a provider's error event names that say "not now" rather than "not this request". */
const TRANSIENT_TYPES = new Set(["overloaded_error", "api_error", "rate_limit_error", "server_error"]);

/** What went wrong inside a stream that began well (HTTP 200), as its events say. */
export type StreamProblem = { kind: "error"; type: string; message: string; transient: boolean } | { kind: "not_json"; line: string };

/**
 * An error event (Anthropic's `{"type":"error","error":{type, message}}`, as its client passes it
 * on in `failureText`; OpenAI-compatible servers' `data: {"error":{message, type?, code?}}`), or a
 * `data:` line that is not JSON, in `streamTail` (the end of the stream's text; `cut`: its first
 * line may be partial).
 */
export function streamProblem(failureText: string, streamTail: string, cut: boolean): StreamProblem | null {
  const fromFailure = failureText.startsWith("{") ? errorEventOf(parseJson(failureText)) : null;
  if (fromFailure) return fromFailure;
  const lines = streamTail.split(/\r?\n/);
  lines.pop(); // not ended by a newline: it may be partial
  if (cut) lines.shift();
  let notJson: StreamProblem | null = null;
  for (const line of lines) {
    const m = /^data:\s?(.*)$/.exec(line);
    if (!m || m[1].trim() === "[DONE]" || m[1].trim() === "") continue;
    const body = parseJson(m[1]);
    if (body === undefined) {
      notJson ??= { kind: "not_json", line: m[1] };
      continue;
    }
    const e = errorEventOf(body);
    if (e) return e;
  }
  return notJson;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function errorEventOf(body: unknown): StreamProblem | null {
  if (typeof body !== "object" || body === null) return null;
  const e = (body as Record<string, unknown>).error;
  if (typeof e !== "object" || e === null) return null;
  const { type, code, message } = e as Record<string, unknown>;
  const numeric = typeof code === "number" ? code : typeof code === "string" && /^\d{3}$/.test(code) ? Number(code) : undefined;
  const named = typeof type === "string" && type ? type : numeric !== undefined ? `code ${numeric}` : typeof code === "string" && code ? code : "error";
  const said = typeof message === "string" && message.trim() ? message.trim() : named;
  const transient = TRANSIENT_TYPES.has(named) || (numeric !== undefined && (numeric === 429 || numeric >= 500));
  return { kind: "error", type: named, message: said, transient };
}
