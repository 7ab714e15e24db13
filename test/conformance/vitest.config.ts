import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/conformance/conformance.test.ts"],
    setupFiles: ["test/conformance/inject-token.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
