// sandboxes, envs / env add, agents / agent add: the house's configuration.
import { readFileSync } from "node:fs";
import { Option } from "commander";
import { envArg, idArg, intArg, resolveEnvironment } from "../lib/api.mjs";
import { CliError } from "../lib/errors.mjs";
import { agentLine, environmentLine, printableLine, safe, sandboxLine } from "../lib/render.mjs";
import { promptHidden } from "../lib/term.mjs";

const collect = (value, previous = []) => [...previous, value];

function readJsonFile(path, what) {
  try {
    return JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    // A mistake on the command line, said on one line (a parse error quotes the file, newlines and all).
    throw new CliError("usage", `${what} ${path}: ${err.code === "ENOENT" ? "no such file" : err.message.replace(/\s+/g, " ")}`);
  }
}

/**
 * A secret's value: from the variable of the same name in this process's environment, else typed
 * at a prompt that does not echo. Never from argv: command lines end up in shell history and `ps`.
 */
export async function secretValue(name, env = process.env, stdin = process.stdin) {
  if (env[name]) return env[name];
  if (!stdin.isTTY) throw new CliError("usage", `secret ${name}: set it in the environment (${name}=… threadbox env add …) or run in a terminal to be asked`);
  const v = await promptHidden(`${name}: `);
  if (!v) throw new CliError("usage", `secret ${name} is empty`);
  return v;
}

/** The environment body `env add` sends. */
export async function environmentBody(name, opts, readSecret = secretValue) {
  const body = { name };
  if (opts.id) body.id = opts.id;
  if (opts.model) body.model = opts.model;
  if (opts.harness) body.harness = opts.harness;
  if (opts.sharedBox) body.sharedBox = true;
  const env = {};
  for (const kv of opts.var ?? []) {
    const i = kv.indexOf("=");
    if (i < 1) throw new CliError("usage", `--var ${kv}: use KEY=VALUE`);
    env[kv.slice(0, i)] = kv.slice(i + 1);
  }
  if (Object.keys(env).length) body.env = env;
  // Checked before any secret is asked for: nobody should type a key only to be told the command was wrong.
  const [provider, ...rest] = String(opts.model ?? "").split("/");
  if (opts.baseUrl && (!provider || !rest.length)) throw new CliError("usage", "--base-url needs --model provider/model-id");
  const secretNames = [...(opts.secret ?? []), ...(opts.apiKeySecret && !(opts.secret ?? []).includes(opts.apiKeySecret) ? [opts.apiKeySecret] : [])];
  if (secretNames.length) {
    body.secrets = {};
    for (const s of secretNames) body.secrets[s] = await readSecret(s);
  }
  if (opts.piModels) body.piModels = readJsonFile(opts.piModels, "--pi-models");
  if (opts.piSettings) body.piSettings = readJsonFile(opts.piSettings, "--pi-settings");
  if (opts.baseUrl) {
    // One OpenAI-compatible provider named by --model's provider part, its key read from a secret.
    const keySecret = opts.apiKeySecret ?? secretNames[0];
    body.piModels = {
      providers: {
        ...(body.piModels?.providers ?? {}),
        [provider]: { baseUrl: opts.baseUrl, api: opts.api, apiKey: keySecret ? `$${keySecret}` : "none", models: [{ id: rest.join("/") }] },
      },
    };
  }
  return body;
}

export function registerHouse(program, ctxOf) {
  program
    .command("sandboxes")
    .description("list the house's boxes and the threads running on each")
    .addOption(new Option("--state <state>", "only boxes in this state").choices(["provisioning", "live", "dead", "deleted"]))
    .action(async (opts, cmd) => {
      const ctx = ctxOf(cmd);
      const q = opts.state ? `?state=${opts.state}` : "";
      const r = await ctx.wait("loading boxes", () => ctx.api().get(`/api/sandboxes${q}`));
      const boxes = r.sandboxes ?? r.boxes ?? [];
      ctx.print(r, () => (boxes.length ? boxes.map((b) => sandboxLine(b, ctx.c)) : ctx.c.gray("no boxes")));
    });

  program
    .command("preview")
    .description("a URL that opens a port served inside a box (a dev server an agent started)")
    .argument("<box|thread>", "a box id, or a thread id (its current box)", idArg("box or thread id"))
    .argument("<port>", "port inside the box", intArg("port", 1, 65_535))
    .option("--expires <seconds>", "how long the link works (1–86400)", intArg("--expires", 1, 86_400), 3600)
    .action(async (target, port, opts, cmd) => {
      const ctx = ctxOf(cmd);
      const api = ctx.api();
      let boxId = target;
      if (!target.startsWith("box_")) {
        const row = await api.get(`/api/threads/${encodeURIComponent(target)}`);
        if (!row.boxId) throw new CliError("no_box", `thread ${target} has no box right now (its run has ended or not started)`);
        boxId = row.boxId;
      }
      const r = await ctx.wait("asking for a link", () =>
        api.get(`/api/sandboxes/${encodeURIComponent(boxId)}/ports/${encodeURIComponent(port)}/preview?expiresInSeconds=${encodeURIComponent(opts.expires)}`));
      // Only the URL goes to stdout, so `curl "$(threadbox preview …)"` and `open $(…)` get a URL;
      // what it reaches and until when is for the person, on stderr.
      if (!ctx.json) process.stderr.write(`${ctx.c.gray(safe`port ${r.port} of ${r.boxId}, valid until ${r.expiresAt}`)}\n`);
      ctx.print(r, () => printableLine(r.url));
    });

  program
    .command("envs")
    .description("list the house's environments (secrets show by name only)")
    .action(async (_opts, cmd) => {
      const ctx = ctxOf(cmd);
      const { environments } = await ctx.wait("loading environments", () => ctx.api().get("/api/environments"));
      ctx.print({ environments }, () => (environments.length ? environments.map((e) => environmentLine(e, ctx.c)) : ctx.c.gray("no environments: threadbox env add NAME …")));
    });

  const env = program.command("env").description("manage environments");
  env
    .command("add")
    .description("create (or, with --id, replace) an environment")
    .argument("<name>", "name of the environment")
    .option("--model <provider/model>", "default model for runs, e.g. openai/gpt-4.1-mini")
    .option("--base-url <url>", "an OpenAI-compatible endpoint serving --model (writes pi's models.json)")
    .option("--api <api>", "pi API type of --base-url", "openai-completions")
    .option("--api-key-secret <NAME>", "the secret holding --base-url's key (default: the first --secret)")
    .option("--secret <NAME>", "a secret for boxes, read from $NAME or asked for (repeatable)", collect)
    .option("--var <KEY=VALUE>", "a plain environment variable for boxes (repeatable)", collect)
    .option("--pi-models <file>", "pi models.json for boxes")
    .option("--pi-settings <file>", "pi settings.json for boxes")
    .option("--shared-box", "keep one box for run_command")
    .addOption(new Option("--harness <harness>", "coding agent").choices(["pi", "claude-code", "codex"]))
    .option("--id <id>", "environment id (the same id replaces it)")
    .action(async (name, opts, cmd) => {
      const ctx = ctxOf(cmd);
      const body = await environmentBody(name, opts);
      const e = await ctx.wait("creating environment", () => ctx.api().post("/api/environments", body));
      ctx.print(e, () => environmentLine(e, ctx.c));
    });

  program
    .command("agents")
    .description("list the house's bots")
    .action(async (_opts, cmd) => {
      const ctx = ctxOf(cmd);
      const { agents } = await ctx.wait("loading bots", () => ctx.api().get("/api/agents"));
      ctx.print({ agents }, () => (agents.length ? agents.map((a) => agentLine(a, ctx.c)) : ctx.c.gray("no bots: threadbox agent add HANDLE --model provider/model")));
    });

  const agent = program.command("agent").description("manage bots");
  agent
    .command("add")
    .description("create a bot that answers when its @handle is mentioned")
    .argument("<handle>", "what @handle in chat calls it ([a-z0-9_-])")
    .requiredOption("--model <provider/model>", "its model")
    .option("--name <name>", "display name (default: the handle)")
    .option("--system-prompt <text>", "its system prompt")
    .addOption(new Option("--trigger-mode <mode>", "when it answers").choices(["mention", "ambient", "always"]))
    .option("--tools <names>", "comma-separated tools it may use, e.g. delegate_task,run_command")
    .option("--env <environment>", "environment (id or name) for its work", envArg)
    .action(async (handle, opts, cmd) => {
      const ctx = ctxOf(cmd);
      const api = ctx.api();
      const body = { name: opts.name ?? handle.replace(/^@/, ""), handle: handle.replace(/^@/, ""), model: opts.model };
      if (opts.systemPrompt) body.systemPrompt = opts.systemPrompt;
      if (opts.triggerMode) body.triggerMode = opts.triggerMode;
      // `--tools ""` is an empty allow-list (no tools), not "not given" (every tool).
      if (opts.tools !== undefined) body.tools = opts.tools.split(",").map((t) => t.trim()).filter(Boolean);
      const environmentId = await resolveEnvironment(api, opts.env);
      if (environmentId) body.environmentId = environmentId;
      const a = await ctx.wait("creating bot", () => api.post("/api/agents", body));
      ctx.print(a, () => agentLine(a, ctx.c));
    });
}
