// Runs the reference Durable Streams server in its own Node process (so its CPU is not shared
// with the bench client's event loop). Prints `READY <url>` on stdout.
import { DurableStreamTestServer } from "@durable-streams/server";

const port = Number(process.env.REF_PORT);
const longPollTimeout = Number(process.env.REF_LONG_POLL_TIMEOUT_MS ?? "20000");
const dataDir = process.env.REF_DATA_DIR || undefined;
const server = new DurableStreamTestServer({ port, host: "127.0.0.1", longPollTimeout, dataDir });
const url = await server.start();
process.stdout.write(`READY ${url}\n`);
const stop = async () => {
  const t = setTimeout(() => process.exit(0), 3000);
  try { await server.stop(); } catch {}
  clearTimeout(t);
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
