import { z } from "zod";
import { ApiError } from "../errors";
import type { Env } from "../env";
import { createDaytonaProvider } from "./daytona-provider";
import type { SandboxProvider } from "./provider";

type ProviderFactory = (env: Env) => SandboxProvider;

function daytonaFromEnv(env: Env): SandboxProvider {
  if (!env.DAYTONA_API_URL || !env.DAYTONA_API_KEY) {
    throw new ApiError("provider_unavailable", "DAYTONA_API_URL and DAYTONA_API_KEY are not configured");
  }
  return createDaytonaProvider({ apiUrl: env.DAYTONA_API_URL, apiKey: env.DAYTONA_API_KEY, target: env.DAYTONA_TARGET });
}

/** The providers a deployed worker knows. Test configurations add theirs with registerProvider. */
const factories = new Map<string, ProviderFactory>([["daytona", daytonaFromEnv]]);

/**
 * Adds a provider under a name. Only test configurations call it (the in-memory provider is
 * registered by test/workers/register-test-provider.ts); production code never imports a double.
 */
export function registerProvider(name: string, factory: ProviderFactory): void {
  factories.set(name, factory);
}

export function isProviderName(name: string): boolean {
  return factories.has(name);
}

export function providerNames(): string[] {
  return [...factories.keys()];
}

/** A provider name in a request body: only the registered ones pass (400 validation_failed otherwise). */
export const providerNameSchema = z.string().max(40).superRefine((name, ctx) => {
  if (!isProviderName(name)) ctx.addIssue({ code: "custom", message: `unknown sandbox provider ${name}; known: ${providerNames().join(", ")}` });
});

export function providerFor(env: Env, name: string): SandboxProvider {
  const factory = factories.get(name);
  if (!factory) throw new ApiError("bad_request", `unknown sandbox provider ${name}`, { known: providerNames() });
  return factory(env);
}
