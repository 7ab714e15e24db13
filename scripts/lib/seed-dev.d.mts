export const DEMO_ENVIRONMENT_ID: string;
export type DevSeedPlan = { environments: Array<Record<string, unknown> & { id: string; name: string }>; agents: Array<Record<string, unknown> & { handle: string }> };
export function devSeedPlan(demoModelBaseUrl: string, vars?: Record<string, string>): DevSeedPlan;
export function agentChanges(existing: Record<string, unknown>, wanted: Record<string, unknown>): Record<string, unknown>;
export function seedDevHouse(opts: {
  url: string; token: string; demoModelBaseUrl: string; vars: Record<string, string>; statePath: string;
}): Promise<{ environments: string[]; agents: string[]; agentsSupported: boolean }>;
