import { defineConfig } from "vitest/config";
import { cloudflareTest } from "@cloudflare/vitest-plugin";

export default defineConfig({
  test: {
    projects: [
      {
        plugins: [
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
                THREADBOX_ALLOW_TEST_PROVIDER: "1",
                STOP_GRACE_MS: "300",
                DISPATCH_TURN_LEASE_MS: "1500",
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
          globalSetup: ["test/workers/sandbox-provider.setup.ts", "test/workers/model-control.setup.ts"],
        },
      },
      {
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
