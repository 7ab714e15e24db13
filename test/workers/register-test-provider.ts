// Registers the in-memory sandbox provider as "test" for the workers tests. The deployed worker
// never imports it: production knows only the providers src/sandbox/providers.ts registers.
import { registerProvider } from "../../src/sandbox/providers";
import { TestSandboxProvider } from "../../src/sandbox/test-provider";

let shared: TestSandboxProvider | null = null;

/** The one instance every actor and test in this isolate sees. */
export function sharedTestProvider(): TestSandboxProvider {
  shared ??= new TestSandboxProvider();
  return shared;
}

registerProvider("test", () => sharedTestProvider());
