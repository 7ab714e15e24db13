// What `npm run dev` seeds into the dev house, decided from the demo model's URL and .dev.vars.
import { describe, expect, it } from "vitest";
import { agentChanges, devSeedPlan } from "../../scripts/lib/seed-dev.mjs";

describe("dev seed plan", () => {
  it("without provider keys: only the demo environment and the @demo bot, both on the demo model", () => {
    const plan = devSeedPlan("http://127.0.0.1:3987/v1", {});
    expect(plan.environments.map((e) => [e.id, e.name, e.model])).toEqual([["env_demo", "demo", "demo/demo"]]);
    expect((plan.environments[0].piModels as any).providers.demo.baseUrl).toBe("http://127.0.0.1:3987/v1");
    expect(plan.agents.map((a) => [a.handle, a.model, a.environmentId])).toEqual([["demo", "demo/demo", "env_demo"]]);
  });

  it("each provider key adds an environment holding it only as a secret, and a bot on it", () => {
    const plan = devSeedPlan("http://127.0.0.1:3987/v1", { OPENAI_API_KEY: "sk-o", ANTHROPIC_API_KEY: "sk-a", OTHER: "x" });
    expect(plan.environments.map((e) => e.id)).toEqual(["env_demo", "env_openai", "env_anthropic"]);
    const openai = plan.environments[1];
    expect(openai.secrets).toEqual({ OPENAI_API_KEY: "sk-o" });
    const { secrets, ...rest } = openai;
    expect(JSON.stringify(rest)).not.toContain("sk-o");
    expect((openai.piModels as any).providers.openai).toMatchObject({ apiKey: "$OPENAI_API_KEY", api: "openai-completions" });
    expect((plan.environments[2].piModels as any).providers.anthropic).toMatchObject({ apiKey: "$ANTHROPIC_API_KEY", api: "anthropic-messages" });
    expect(plan.agents.map((a) => [a.handle, a.model])).toEqual([["demo", "demo/demo"], ["gpt", "openai/gpt-4.1-mini"], ["claude", "anthropic/claude-sonnet-4-5"]]);
  });

  it("a stored bot is patched with only the fields that differ", () => {
    expect(agentChanges({ handle: "demo", model: "demo/demo", tools: ["delegate_task"] }, { handle: "demo", model: "demo/demo", tools: ["delegate_task", "run_command"] }))
      .toEqual({ tools: ["delegate_task", "run_command"] });
    expect(agentChanges({ handle: "demo", model: "demo/demo" }, { handle: "demo", model: "demo/demo" })).toEqual({});
  });
});
