// Requests asked again while the server is away (a restart, a network drop), saying so on stderr.
import { randomUUID } from "node:crypto";
import { retrying } from "./api.mjs";
import { printableLine } from "./render.mjs";

/**
 * `retrying`'s notice for a write asked again after its answer was lost (a restart, a network
 * drop): for people only, so with --json stderr keeps JSON errors alone.
 */
export const retryNotice = (ctx, what) => (ms, err) => {
  if (!ctx.json) process.stderr.write(`${process.stderr.isTTY ? "\r\x1b[2K" : ""}${ctx.c.gray(`${printableLine(err.message)}: ${what(ms)}`)}\n`);
};

/** The notice for a GET asked again while the server is away (the API client asks every GET again). */
export const askingAgain = (ctx) => retryNotice(ctx, (ms) => `asking again in ${ms} ms`);

/**
 * A POST that makes one thing (a thread, a child, a run), asked again under one Idempotency-Key when
 * its answer is lost: the server answers with what the first request made, so a retry never makes a second.
 */
export function postOnce(ctx, api, path, body, made) {
  const key = `cli-${randomUUID()}`;
  return retrying(() => api.post(path, body, { headers: { "idempotency-key": key } }), {
    onRetry: retryNotice(ctx, (ms) => `asking again in ${ms} ms (same Idempotency-Key: one ${made} at most)`),
  });
}
