import type { Plugin } from "vite";
import { defineConfig } from "vitest/config";
import { cloudflareTest } from "@cloudflare/vitest-plugin";
import quietExpectedWorkerdNoise from "./test/support/quiet-expected-noise.mjs";

// The Workers integration writes workerd's logs from this process: filter them here.
quietExpectedWorkerdNoise();

/**
 * Drops one known, harmless Vite warning: packages (e.g. @daytonaio/sdk) whose sourcemaps name
 * sources outside the package. Vitest sets each project's logger itself, so this wraps whatever
 * logger it set; every other message still prints.
 */
const quietExpectedWarnings: Plugin = {
  name: "threadbox:quiet-expected-warnings",
  enforce: "post",
  config(config) {
    const logger = config.customLogger;
    if (!logger) return;
    const expected = /Sourcemap for .* points to a source file outside its package/;
    config.customLogger = {
      ...logger,
      warn: (msg, opts) => { if (!expected.test(msg)) logger.warn(msg, opts); },
      warnOnce: (msg, opts) => { if (!expected.test(msg)) logger.warnOnce(msg, opts); },
    };
  },
};

// The Workers integration reads wrangler.toml through wrangler, which announces at info level every
// `.dev.vars` it finds (tests override those values anyway); warnings and errors still print.
process.env.WRANGLER_LOG ??= "warn";

export default defineConfig({
  test: {
    projects: [
      {
        plugins: [
          quietExpectedWarnings,
          cloudflareTest(({ inject }) => ({
            wrangler: { configPath: "./wrangler.toml" },
            // Production's entry plus test-only hooks (a movable clock): see the file.
            main: "./test/workers/test-worker.ts",
            miniflare: {
              bindings: {
                THREADBOX_ADMIN_SECRET: "test-admin-secret",
                THREADBOX_TOKEN_SECRET: "test-token-secret-0123456789abcdef",
                LONG_POLL_TIMEOUT_MS: "1500",
                ORPHAN_SILENCE_MS: "300000",
                PROBE_INTERVAL_MS: "60000",
                PROBE_CONFIRM_MS: "5000",
                STOP_GRACE_MS: "300",
                DISPATCH_TURN_LEASE_MS: "1500",
                // Small enough that an oversize upload is cheap to send; large enough for several stored chunks.
                FOLDER_MAX_BYTES: "2000000",
                // Explicit, so a developer's .dev.vars cannot change what the tests see.
                THREADBOX_STREAM_URL: "",
                // Local sandbox host started by test/workers/sandbox-provider.setup.ts
                DAYTONA_API_URL: inject("sandboxHostApiUrl"),
                DAYTONA_API_KEY: inject("sandboxHostApiKey"),
                DAYTONA_TARGET: "local",
              },
            },
          })),
        ],
        test: {
          name: "workers",
          include: ["test/workers/**/*.test.ts"],
          // Not vitest's 5 s: on a loaded 2-core machine a test of many requests (the 1 MiB route
          // checks, a launch) takes 4 s and more, and the waits inside tests run up to 20 s.
          testTimeout: 30_000,
          // Two files at a time, not vitest's default of one per core but one (a 2-core machine gets
          // 1): a file spends most of its wall time starting its own workerd and waiting on timers and
          // I/O, not on CPU. Each file has its own Miniflare (own storage), so files stay independent.
          maxWorkers: 2,
          globalSetup: ["test/workers/sandbox-provider.setup.ts", "test/workers/model-server.setup.ts"],
          // The in-memory sandbox provider "test" exists only in this configuration.
          setupFiles: ["test/workers/register-test-provider.ts"],
        },
      },
      {
        plugins: [quietExpectedWarnings],
        test: {
          name: "node",
          include: ["test/node/**/*.test.ts"],
          environment: "node",
          testTimeout: 120_000,
          hookTimeout: 120_000,
          fileParallelism: false,
        },
      },
    ],
  },
});
