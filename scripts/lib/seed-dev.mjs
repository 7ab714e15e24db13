// Seeds the `dev` house on every `npm run dev` start, idempotently: an environment `demo` whose pi
// uses the local demo model, a bot `@demo` on it (when the server has bots), and, for each
// provider key in .dev.vars, an environment and a bot on that real provider. Each one has a fixed
// id, so a restart updates it in place instead of adding another.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";

export const DEMO_ENVIRONMENT_ID = "env_demo";

/** The environments and bots to seed, given the demo model's URL and the .dev.vars values. Pure. */
export function devSeedPlan(demoModelBaseUrl, vars = {}) {
  const environments = [{
    id: DEMO_ENVIRONMENT_ID,
    name: "demo",
    env: { PI_OFFLINE: "1" },
    piModels: {
      providers: {
        demo: { baseUrl: demoModelBaseUrl, api: "openai-completions", apiKey: "demo-needs-no-key", models: [{ id: "demo", name: "threadbox demo model (offline, development only)" }] },
      },
    },
    piSettings: { retry: { enabled: false } },
    model: "demo/demo",
    sharedBox: true,
  }];
  const agents = [{
    name: "Demo",
    handle: "demo",
    model: "demo/demo",
    environmentId: DEMO_ENVIRONMENT_ID,
    tools: ["delegate_task", "run_command"],
    systemPrompt: "You are the threadbox demo bot. Hand coding work to a coding agent with delegate_task.",
  }];
  const providers = [
    { key: "OPENAI_API_KEY", id: "env_openai", name: "openai", provider: "openai", modelId: "gpt-4.1-mini", baseUrl: "https://api.openai.com/v1", api: "openai-completions", handle: "gpt", botName: "GPT" },
    { key: "ANTHROPIC_API_KEY", id: "env_anthropic", name: "anthropic", provider: "anthropic", modelId: "claude-sonnet-4-5", baseUrl: "https://api.anthropic.com", api: "anthropic-messages", handle: "claude", botName: "Claude" },
  ];
  for (const p of providers) {
    if (!vars[p.key]) continue;
    const model = `${p.provider}/${p.modelId}`;
    // The provider is spelled out so both pi in a box and a bot's own model calls resolve it; the key stays a secret.
    environments.push({
      id: p.id, name: p.name, secrets: { [p.key]: vars[p.key] }, model, sharedBox: true,
      piModels: { providers: { [p.provider]: { baseUrl: p.baseUrl, api: p.api, apiKey: `$${p.key}`, models: [{ id: p.modelId }] } } },
      piSettings: { retry: { enabled: false } },
    });
    agents.push({ name: p.botName, handle: p.handle, model, environmentId: p.id, tools: ["delegate_task", "run_command"] });
  }
  return { environments, agents };
}

/** A fingerprint of what was sent: secrets included, so a changed key is sent again; only the hash is kept, on this machine. */
const fingerprint = (body) => createHash("sha256").update(JSON.stringify(body)).digest("hex");

function loadState(path) {
  try {
    return existsSync(path) ? JSON.parse(readFileSync(path, "utf8")) : {};
  } catch {
    return {};
  }
}

/** Fields of a stored bot that differ from the wanted one (what a PATCH must carry). */
export function agentChanges(existing, wanted) {
  const patch = {};
  for (const [k, v] of Object.entries(wanted)) if (JSON.stringify(existing[k]) !== JSON.stringify(v)) patch[k] = v;
  return patch;
}

/**
 * @param {{ url: string, token: string, demoModelBaseUrl: string, vars: Record<string, string>, statePath: string }} opts
 * @returns {Promise<{ environments: string[], agents: string[], agentsSupported: boolean }>}
 */
export async function seedDevHouse(opts) {
  const call = async (method, path, body) => {
    const r = await fetch(`${opts.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${opts.token}`, ...(body ? { "content-type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await r.text();
    return { status: r.status, body: text ? JSON.parse(text) : null };
  };
  const must = (r, what) => {
    if (r.status >= 300) throw new Error(`seeding ${what}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };

  const plan = devSeedPlan(opts.demoModelBaseUrl, opts.vars);
  const state = loadState(opts.statePath);
  const seeded = { environments: [], agents: [], agentsSupported: false };
  for (const e of plan.environments) {
    const print = fingerprint(e);
    const current = await call("GET", `/api/environments/${e.id}`);
    // Re-sending an unchanged environment would drop its shared box, so an unchanged one is left alone.
    if (current.status !== 200 || state[e.id] !== print) {
      must(await call("POST", "/api/environments", e), `environment ${e.name}`);
      state[e.id] = print;
    }
    seeded.environments.push(e.name);
  }
  mkdirSync(dirname(opts.statePath), { recursive: true });
  writeFileSync(opts.statePath, JSON.stringify(state, null, 2) + "\n", { mode: 0o600 });

  const list = await call("GET", "/api/agents");
  if (list.status === 404) return seeded; // this server has no bots yet
  seeded.agentsSupported = true;
  const existing = must(list, "bots").agents ?? [];
  for (const a of plan.agents) {
    const found = existing.find((x) => x.handle === a.handle);
    if (!found) must(await call("POST", "/api/agents", a), `bot @${a.handle}`);
    else {
      const patch = agentChanges(found, a);
      if (Object.keys(patch).length) must(await call("PATCH", `/api/agents/${found.id}`, patch), `bot @${a.handle}`);
    }
    seeded.agents.push(`@${a.handle}`);
  }
  return seeded;
}
