/**
 * The words of a model provider's error answer, as a reader wants them in a turn's failure: the
 * client library gives "500 {json}" or "500: {json}" (the status again, then the body as sent),
 * and a provider's body names the problem in `error.message`, `message` or `error`.
 */
export function providerErrorText(detail: string, status: number): string {
  const rest = detail.replace(new RegExp(`^${status}\\b:?\\s*`), "");
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

/** An error event of a provider's stream as the client library passes it on (`{"type":"error","error":{type, message}}`), if that is what `text` is. */
export function streamedError(text: string): { type: string; message: string } | null {
  if (!text.startsWith("{")) return null;
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof body !== "object" || body === null || (body as Record<string, unknown>).type !== "error") return null;
  const e = (body as Record<string, unknown>).error;
  if (typeof e !== "object" || e === null) return null;
  const { type, message } = e as Record<string, unknown>;
  if (typeof type !== "string" || !type) return null;
  return { type, message: typeof message === "string" && message.trim() ? message.trim() : type };
}
