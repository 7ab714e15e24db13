import { z } from "zod";

/**
 * Durable Streams subscriptions (the protocol's reserved `__ds/subscriptions` API): a subscription
 * links streams of a house, explicitly or by a glob pattern, and wakes a consumer when one of them
 * has entries past what the consumer acknowledged — by a signed webhook or by an event on a
 * wake stream that workers claim. These are the pure rules; subscriptions/service.ts applies them.
 */

export const DEFAULT_LEASE_TTL_MS = 30_000;
export const MIN_LEASE_TTL_MS = 1_000;
export const MAX_LEASE_TTL_MS = 10 * 60_000;
/** The offset of a stream that does not exist (yet): nothing to deliver. */
export const ZERO_OFFSET = "0000000000000000_0000000000000000";
/** Acked offset of a stream linked by a pattern when it appeared: everything in it is pending. */
export const BEFORE_FIRST_OFFSET = "-1";
export const MAX_RETRY_DELAY_MS = 60_000;

/** `thread-<id>` is a thread's log, not a plain stream: subscriptions never see it (its subpaths are plain). */
export const isThreadLog = (path: string) => /^thread-[^/]*$/.test(path);

/** A plain stream's path a subscription may name (normalized): not reserved, not a thread's log. */
export const streamPath = z.string().min(1).max(256).transform(normalizePath)
  .refine((p) => p.length > 0 && !isReserved(p), "a stream path outside __ds/")
  .refine((p) => !isThreadLog(p), "a plain stream: a thread's log (thread-<id>) cannot be subscribed to or woken");

export const subscriptionInputSchema = z.object({
  type: z.enum(["webhook", "pull-wake"]),
  pattern: z.string().min(1).max(256).optional(),
  streams: z.array(streamPath).max(1000).default([]),
  webhook: z.object({ url: z.string().min(1).max(2000) }).optional(),
  // Wakes are appended by the control plane: never into streams only the control plane or a
  // run's box may write (folder archives, a run's artifacts).
  wake_stream: streamPath.refine((p) => !/^folders\//.test(p) && !/^thread-[^/]+\/artifacts\//.test(p), "a plain stream you may write: not folders/… nor a run's artifacts").optional(),
  lease_ttl_ms: z.number().int().min(MIN_LEASE_TTL_MS).max(MAX_LEASE_TTL_MS).default(DEFAULT_LEASE_TTL_MS),
  description: z.string().max(1000).optional(),
});
export type SubscriptionInput = z.output<typeof subscriptionInputSchema>;

export const ackRequestSchema = z.object({
  wake_id: z.string().max(200).nullable().optional(),
  generation: z.number().int().optional(),
  acks: z.array(z.object({ stream: z.string().max(256).optional(), path: z.string().max(256).optional(), offset: z.string().max(100) })).max(1000).optional(),
  done: z.boolean().optional(),
});
export type AckRequest = z.output<typeof ackRequestSchema>;

export function normalizePath(p: string): string {
  return p.replace(/^\/+/, "").replace(/\/+$/, "");
}

/** `__ds` and below belong to the protocol: never a subscribed stream. */
export function isReserved(path: string): boolean {
  return path === "__ds" || path.startsWith("__ds/");
}

/** `*` is one path segment, `**` any number (zero included), anything else literal (`%2A` a literal `*`). */
export function globMatch(pattern: string, path: string): boolean {
  const split = (p: string) => normalizePath(p).split("/").filter((s) => s.length > 0);
  const pat = split(pattern);
  const parts = split(path);
  const match = (pi: number, si: number): boolean => {
    while (pi < pat.length && si < parts.length) {
      const seg = pat[pi];
      if (seg === "**") {
        for (let i = si; i <= parts.length; i++) if (match(pi + 1, i)) return true;
        return false;
      }
      if (seg !== "*" && seg.replace(/%2[Aa]/g, "*") !== parts[si]) return false;
      pi++;
      si++;
    }
    while (pi < pat.length && pat[pi] === "**") pi++;
    return pi === pat.length && si === parts.length;
  };
  return match(0, 0);
}

/** Offsets are fixed-width strings, so string order is log order; `-1` sorts before all. */
export function compareOffsets(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Whether a linked stream holds something past its acked cursor (`-1`, before the first entry, acks nothing). */
export function hasPending(l: { tail: string; acked: string }): boolean {
  const acked = l.acked === BEFORE_FIRST_OFFSET ? ZERO_OFFSET : l.acked;
  return compareOffsets(l.tail, acked) > 0;
}

/** A PUT with the same configuration confirms the subscription; a different one is a conflict. */
export function configKey(input: SubscriptionInput): string {
  return JSON.stringify({
    type: input.type, pattern: input.pattern, streams: [...new Set(input.streams)].sort(), webhook: input.webhook ? { url: input.webhook.url } : undefined,
    wake_stream: input.wake_stream, lease_ttl_ms: input.lease_ttl_ms, description: input.description,
  });
}

/**
 * IPv4 blocks that are not the public internet: this network, private, shared (CGNAT), loopback,
 * link-local (cloud metadata), IETF protocol assignments, documentation, benchmarking, multicast,
 * reserved and broadcast.
 */
const NON_PUBLIC_IPV4: [string, number][] = [
  ["0.0.0.0", 8], ["10.0.0.0", 8], ["100.64.0.0", 10], ["127.0.0.0", 8], ["169.254.0.0", 16], ["172.16.0.0", 12],
  ["192.0.0.0", 24], ["192.0.2.0", 24], ["192.168.0.0", 16], ["198.18.0.0", 15], ["198.51.100.0", 24], ["203.0.113.0", 24],
  ["224.0.0.0", 4], ["240.0.0.0", 4],
];

/** A dotted IPv4 address as a number, or null. */
function ipv4(host: string): number | null {
  const parts = host.split(".").map(Number);
  if (parts.length !== 4 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255)) return null;
  return ((parts[0] << 24) | (parts[1] << 16) | (parts[2] << 8) | parts[3]) >>> 0;
}

function isNonPublicIpv4(host: string): boolean {
  const ip = ipv4(host);
  return ip !== null && NON_PUBLIC_IPV4.some(([base, bits]) => ip >>> (32 - bits) === ipv4(base)! >>> (32 - bits));
}

/** Names that only mean something inside a network (cloud metadata, mDNS, this machine). */
const INTERNAL_NAME = /(^|\.)(internal|local|localhost|localdomain|home\.arpa)\.?$/;

/**
 * Where a webhook may point: https to a public host, or plain http to this machine's loopback
 * (development). Private, link-local and IPv6 literal hosts are refused (no requests into a
 * network the caller could not reach themselves).
 */
export function checkWebhookUrl(raw: string): { ok: true } | { ok: false; message: string } {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return { ok: false, message: "webhook.url must be a valid URL" };
  }
  const host = url.hostname.toLowerCase();
  if (url.username || url.password) return { ok: false, message: "webhook.url must not carry credentials" };
  if (url.protocol === "http:") {
    return host === "localhost" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host) ? { ok: true } : { ok: false, message: "http webhook URLs are only allowed for localhost or 127.0.0.x" };
  }
  if (url.protocol !== "https:") return { ok: false, message: "webhook.url must use https" };
  if (host === "localhost") return { ok: false, message: "localhost webhook URLs must use http" };
  if (host.startsWith("[")) return { ok: false, message: "IPv6 webhook hosts are not accepted" };
  if (isNonPublicIpv4(host)) return { ok: false, message: "webhook.url must not target private, link-local, multicast or reserved addresses" };
  if (INTERNAL_NAME.test(host) || !host.includes(".")) return { ok: false, message: "webhook.url must name a public host" };
  return { ok: true };
}

/** Exponential backoff with ±20 % jitter for a webhook that failed `attempts` times in a row. */
export function retryDelayMs(attempts: number, random = Math.random()): number {
  const base = Math.min(1000 * 2 ** Math.max(0, attempts - 1), MAX_RETRY_DELAY_MS);
  return Math.max(0, Math.round(base + base * 0.2 * (random * 2 - 1)));
}

export type LinkView = { path: string; explicit: boolean; acked: string; tail: string };

/** What a consumer is shown of each linked stream. */
export function streamInfo(l: LinkView) {
  return { path: l.path, link_type: l.explicit ? "explicit" : "glob", acked_offset: l.acked, tail_offset: l.tail, has_pending: hasPending(l) };
}

/** Why a set of acks cannot be applied, or null. */
export function ackProblem(acks: NonNullable<AckRequest["acks"]>, links: Map<string, LinkView>): string | null {
  for (const ack of acks) {
    const link = links.get(normalizePath(ack.stream ?? ack.path ?? ""));
    if (!link) return "Ack references an unknown subscription stream";
    if (ack.offset === BEFORE_FIRST_OFFSET) return "Ack offset must not be -1";
    if (compareOffsets(ack.offset, link.acked) < 0) return "Ack offset regresses the committed cursor";
    if (compareOffsets(ack.offset, link.tail) > 0) return "Ack offset is beyond stream tail";
  }
  return null;
}
