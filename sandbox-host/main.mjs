#!/usr/bin/env node
// `npm run sandbox-host`: the local Daytona-compatible host on its own.
import { startSandboxHost } from "./server.mjs";
import { busyPortsMessage, envPort } from "../scripts/lib/ports.mjs";
import { stopWhenNpmRunEnds } from "../scripts/lib/npm-run-watch.mjs";

const port = envPort("SANDBOX_HOST_PORT", 3986, "npm run sandbox-host");
// A taken port is said as such, with a free one to use, before anything starts: not a Node stack
// trace from listen, with a temporary root made for nothing.
const busy = await busyPortsMessage([{ port, envVar: "SANDBOX_HOST_PORT", what: "the local sandbox host" }], "npm run sandbox-host");
if (busy) {
  console.error(busy);
  process.exit(1);
}
// The same development default as .dev.vars.example's DAYTONA_API_KEY, so `npm run dev` and a
// host started alone agree; set SANDBOX_HOST_API_KEY for anything but a laptop.
const apiKey = process.env.SANDBOX_HOST_API_KEY || "dev-sandbox-key";
if (!process.env.SANDBOX_HOST_API_KEY) console.log("[sandbox-host] SANDBOX_HOST_API_KEY not set: using the development key dev-sandbox-key");
const host = await startSandboxHost({
  port,
  apiKey,
  root: process.env.SANDBOX_HOST_ROOT || undefined,
  publicUrl: process.env.SANDBOX_HOST_PUBLIC_URL || undefined,
  log: (line) => console.log(`[sandbox-host] ${line}`),
});
console.log(`[sandbox-host] listening; Daytona API base ${host.apiUrl}`);
console.log(`[sandbox-host] boxes under ${host.root}`);
console.log(`[sandbox-host] development host: isolation by directory and process group, not by kernel`);
console.log(`[sandbox-host] use DAYTONA_API_URL=${host.apiUrl} and the SDK in polling mode (useDeprecatedPolling: true)`);

let closing = false;
// SIGHUP too (the terminal closed): its default ends the process with its boxes still running.
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(sig, async () => {
    if (closing) process.exit(1);
    closing = true;
    await host.close();
    process.exit(0);
  });
}
stopWhenNpmRunEnds("sandbox-host");
