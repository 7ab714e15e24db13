#!/usr/bin/env node
// `npm run sandbox-host`: the local Daytona-compatible host on its own.
import { startSandboxHost } from "./server.mjs";

const port = Number(process.env.SANDBOX_HOST_PORT ?? 3986);
const apiKey = process.env.SANDBOX_HOST_API_KEY;
if (!apiKey) {
  console.error("SANDBOX_HOST_API_KEY is required (clients send it as DAYTONA_API_KEY).");
  process.exit(2);
}
const host = await startSandboxHost({
  port,
  apiKey,
  root: process.env.SANDBOX_HOST_ROOT || undefined,
  log: (line) => console.log(`[sandbox-host] ${line}`),
});
console.log(`[sandbox-host] listening; Daytona API base ${host.apiUrl}`);
console.log(`[sandbox-host] boxes under ${host.root}`);
console.log(`[sandbox-host] development host: isolation by directory and process group, not by kernel`);
console.log(`[sandbox-host] use DAYTONA_API_URL=${host.apiUrl} and the SDK in polling mode (useDeprecatedPolling: true)`);

let closing = false;
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, async () => {
    if (closing) process.exit(1);
    closing = true;
    await host.close();
    process.exit(0);
  });
}
