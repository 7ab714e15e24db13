// The official Durable Streams server conformance suite, run against `wrangler dev`.
// scripts/conformance.mjs starts the worker and passes its URL and a house token.
import { runConformanceTests } from "@durable-streams/server-conformance-tests";

const baseUrl = process.env.CONFORMANCE_BASE_URL;
if (!baseUrl) throw new Error("CONFORMANCE_BASE_URL is not set: run `npm run conformance`");

runConformanceTests({ baseUrl, longPollTimeoutMs: Number(process.env.CONFORMANCE_LONG_POLL_MS ?? 2000), subscriptions: true });
