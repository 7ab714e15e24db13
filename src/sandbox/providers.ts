import { ApiError } from "../errors";
import type { Env } from "../env";
import { createDaytonaProvider } from "./daytona-provider";
import type { SandboxProvider } from "./provider";
import { TestSandboxProvider } from "./test-provider";

export const PROVIDER_NAMES = ["daytona", "test"] as const;
export type ProviderName = (typeof PROVIDER_NAMES)[number];

let testProvider: TestSandboxProvider | null = null;

/**
 * The in-memory provider exists for actor tests only: it is reachable only when the test
 * configuration sets THREADBOX_ALLOW_TEST_PROVIDER, never in a deployed worker.
 */
export function sharedTestProvider(): TestSandboxProvider {
  testProvider ??= new TestSandboxProvider();
  return testProvider;
}

export function providerFor(env: Env, name: string): SandboxProvider {
  if (name === "daytona") {
    if (!env.DAYTONA_API_URL || !env.DAYTONA_API_KEY) {
      throw new ApiError("provider_unavailable", "DAYTONA_API_URL and DAYTONA_API_KEY are not configured");
    }
    return createDaytonaProvider({ apiUrl: env.DAYTONA_API_URL, apiKey: env.DAYTONA_API_KEY, target: env.DAYTONA_TARGET });
  }
  if (name === "test" && env.THREADBOX_ALLOW_TEST_PROVIDER === "1") return sharedTestProvider();
  throw new ApiError("bad_request", `unknown sandbox provider ${name}`);
}
