import { z } from "zod";
import { recordSchema } from "./domain/record-schema";
import { idSchema } from "./auth/tokens";
import { modelNameSchema } from "./agents";
import { ApiError } from "./errors";
import { MAX_JSON_BODY_BYTES } from "./http/body";
import { formatZodError } from "./entries/schema";
import { providerNameSchema } from "./sandbox/providers";
import { packagesSchema } from "./workspace/packages";
import { foldersSchema } from "./workspace/folders";
import { keptRepositoryUrls, shownRepositoryUrl } from "./workspace/repository-url";
import { allowedToolsSchema, boxModeSchema, egressSchema, filesSchema, permissionModeSchema, pluginsSchema, publicFiles, repoPath, repositoriesSchema, volumesSchema } from "./workspace/box-config";

/** A process's environment cannot carry a NUL byte: every launch would fail on it. */
const envVarValue = z.string().max(10_000).refine((v) => !v.includes("\0"), "an environment variable's value cannot contain a NUL byte");
const envVarName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, "env var names are [A-Za-z_][A-Za-z0-9_]*");

const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const kindOf = (v: unknown) => (Array.isArray(v) ? "an array" : v === null ? "null" : typeof v === "object" ? "an object" : `a ${typeof v}`);
const PI_MODELS_EXAMPLE = '{"providers": {"local": {"baseUrl": "http://127.0.0.1:8080/v1", "api": "openai-completions", "apiKey": "$LOCAL_KEY", "models": [{"id": "my-model"}]}}}';

/**
 * The first thing in `piModels` that pi cannot read as its models.json, or null. pi checks the file
 * against its own schema (pi-coding-agent's core/model-config.js: `providers` an object of provider
 * objects by name, their `models` an array of objects with an `id`) and refuses a file of another
 * shape whole: no custom provider at all, said only inside the box, where the run then fails on
 * its model. Fields pi does not know (the bots' `idleTimeoutMs`, say) pass, as pi lets them.
 */
export function piModelsProblem(v: Record<string, unknown>): { path: (string | number)[]; message: string } | null {
  if (!("providers" in v)) return { path: ["providers"], message: `pi's models.json needs "providers", an object of providers by name: ${PI_MODELS_EXAMPLE}` };
  const providers = v.providers;
  if (!isPlainObject(providers)) {
    return { path: ["providers"], message: `"providers" is ${kindOf(providers)}; pi's models.json wants an object of providers by name (pi would refuse the whole file): ${PI_MODELS_EXAMPLE}` };
  }
  const nonEmptyString = (x: unknown) => typeof x === "string" && x.length > 0;
  const stringMap = (x: unknown) => isPlainObject(x) && Object.values(x).every((h) => typeof h === "string");
  for (const [name, provider] of Object.entries(providers)) {
    const at = ["providers", name];
    if (!isPlainObject(provider)) return { path: at, message: `provider ${name} is ${kindOf(provider)}; pi wants an object such as {"baseUrl": "…", "api": "openai-completions", "models": [{"id": "…"}]}` };
    for (const key of ["name", "baseUrl", "apiKey", "api"]) {
      if (key in provider && !nonEmptyString(provider[key])) return { path: [...at, key], message: `${key} of provider ${name} is ${kindOf(provider[key])}; pi wants a string that is not empty` };
    }
    if ("headers" in provider && !stringMap(provider.headers)) return { path: [...at, "headers"], message: `headers of provider ${name} must be an object of strings by header name` };
    if ("authHeader" in provider && typeof provider.authHeader !== "boolean") return { path: [...at, "authHeader"], message: `authHeader of provider ${name} must be true or false` };
    if ("modelOverrides" in provider && !(isPlainObject(provider.modelOverrides) && Object.values(provider.modelOverrides).every(isPlainObject))) {
      return { path: [...at, "modelOverrides"], message: `modelOverrides of provider ${name} must be an object of overrides by model id` };
    }
    if (!("models" in provider)) continue;
    const models = provider.models;
    if (!Array.isArray(models)) return { path: [...at, "models"], message: `models of provider ${name} is ${kindOf(models)}; pi wants an array of models, e.g. [{"id": "my-model"}]` };
    for (const [i, m] of models.entries()) {
      const mat = [...at, "models", i];
      if (!isPlainObject(m)) return { path: mat, message: `model ${i} of provider ${name} is ${kindOf(m)}; pi wants an object with an "id"` };
      if (!nonEmptyString(m.id)) return { path: [...mat, "id"], message: `model ${i} of provider ${name} needs an "id", a string that is not empty (what "model": "${name}/<id>" names)` };
      for (const key of ["name", "api", "baseUrl"]) {
        if (key in m && !nonEmptyString(m[key])) return { path: [...mat, key], message: `${key} of model ${m.id} is ${kindOf(m[key])}; pi wants a string that is not empty` };
      }
      for (const key of ["contextWindow", "maxTokens"]) {
        if (key in m && typeof m[key] !== "number") return { path: [...mat, key], message: `${key} of model ${m.id} is ${kindOf(m[key])}; pi wants a number` };
      }
      if ("reasoning" in m && typeof m.reasoning !== "boolean") return { path: [...mat, "reasoning"], message: `reasoning of model ${m.id} must be true or false` };
      if ("input" in m && !(Array.isArray(m.input) && m.input.every((x) => x === "text" || x === "image"))) {
        return { path: [...mat, "input"], message: `input of model ${m.id} must be an array of "text" and "image"` };
      }
      if ("headers" in m && !stringMap(m.headers)) return { path: [...mat, "headers"], message: `headers of model ${m.id} must be an object of strings by header name` };
    }
  }
  return null;
}

/** What people call an environment; not unique in a house (an id is). */
export const environmentNameSchema = z.string().min(1).max(200);

/** A house's configuration that gives a thread's bots hands: where boxes run and what they get. */
export const environmentInputSchema = z.object({
  id: idSchema.optional(),
  name: environmentNameSchema,
  runtime: z.literal("daytona").default("daytona"),
  provider: providerNameSchema.default("daytona"),
  /** The Daytona API its boxes run on: the worker's own (DAYTONA_API_URL), whose key it holds; see apiUrlProblem. */
  apiUrl: z.string().max(2000).refine((u) => URL.canParse(u) && /^https?:$/.test(new URL(u).protocol), "an http(s) URL").optional(),
  /** Daytona's target (region) its boxes are made in; default the worker's DAYTONA_TARGET. */
  target: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/, "a Daytona target name, such as us or eu").optional(),
  snapshot: z.string().max(200).optional(),
  image: z.string().max(500).optional(),
  env: recordSchema(envVarName, envVarValue).default({}),
  /** Write-only: handed to boxes as env vars, never returned, never written to an entry. */
  secrets: recordSchema(envVarName, envVarValue).default({}),
  /** `open` (default), `deny` (only the thread stream), or `{allow: [host]}` (the stream and those). */
  egress: egressSchema.optional(),
  /** Keep one non-ephemeral box for `run_command`; with `boxMode: "ephemeral"` delegated runs still get their own. */
  sharedBox: z.boolean().optional(),
  /** `shared`: delegated runs and `run_command` all use the environment's one long-lived box. */
  boxMode: boxModeSchema.optional(),
  /** Written into the working directory before the harness starts. */
  files: filesSchema.default([]),
  permissionMode: permissionModeSchema.optional(),
  allowedTools: allowedToolsSchema.optional(),
  /** Archives copied into the working directory before the harness starts; `readwrite` ones come back as new versions. */
  folders: foldersSchema.default([]),
  /** Persistent storage mounted into every box of the environment; never deleted with a box or the environment. */
  volumes: volumesSchema.default([]),
  /** Cloned into the working directory of every delegated run (a delegate's own `repo` replaces them). */
  repositories: repositoriesSchema.default([]),
  /** pi skills and extensions, MCP servers for Claude Code and Codex. */
  plugins: pluginsSchema.optional(),
  /** Installed at box start when the box lacks them (checked per package); the launch entry lists what was. */
  packages: packagesSchema.optional(),
  /** pi's models.json for boxes of this environment (providers, base URLs, models); a shape pi cannot read is refused here. */
  piModels: recordSchema(z.string(), z.unknown()).superRefine((v, ctx) => {
    const problem = piModelsProblem(v);
    if (problem) ctx.addIssue({ code: "custom", path: problem.path, message: problem.message });
  }).optional(),
  /** pi's settings.json for boxes of this environment. */
  piSettings: recordSchema(z.string(), z.unknown()).optional(),
  /** Default model for runs, e.g. `local/scripted` (pi `--model`). */
  model: modelNameSchema.optional(),
  harness: z.enum(["pi", "claude-code", "codex"]).default("pi"),
}).strict().transform((e, ctx) => {
  // One variable, one value: a box cannot tell which of the two a name set in both should be.
  const both = Object.keys(e.secrets).filter((name) => name in e.env);
  if (both.length > 0) {
    for (const name of both) ctx.addIssue({ code: "custom", path: ["secrets", name], message: `${name} is also set in env: set it in one of them` });
    return z.NEVER;
  }
  for (const [i, r] of e.repositories.entries()) {
    if (r.credentialsSecret && !(r.credentialsSecret in e.secrets)) {
      ctx.addIssue({ code: "custom", path: ["repositories", i, "credentialsSecret"], message: `no secret named ${r.credentialsSecret} in this environment` });
      return z.NEVER;
    }
  }
  // An MCP env value `$NAME` is replaced by that secret in the box; without the secret the server
  // would get the text `$NAME` itself and fail, or run unauthenticated, at run time.
  for (const [server, srv] of Object.entries(e.plugins?.mcpServers ?? {})) {
    if (!("command" in srv)) continue;
    for (const [k, v] of Object.entries(srv.env ?? {})) {
      const name = /^\$([A-Za-z_][A-Za-z0-9_]*)$/.exec(v)?.[1];
      if (name !== undefined && !(name in e.secrets)) {
        ctx.addIssue({ code: "custom", path: ["plugins", "mcpServers", server, "env", k], message: `no secret named ${name} in this environment` });
        return z.NEVER;
      }
    }
  }
  // Several repositories sit side by side in the working directory, and folders are copied in
  // after the clones, each replacing its path: one at or around a checkout would take its place.
  if (e.repositories.length > 1) {
    for (const [i, f] of e.folders.entries()) {
      const under = e.repositories.map(repoPath).find((p) => p === f.path || p.startsWith(`${f.path}/`));
      if (under !== undefined) {
        ctx.addIssue({ code: "custom", path: ["folders", i, "path"], message: `folder ${f.path} would replace the checkout of repository ${under}: put it beside the repositories or inside one` });
        return z.NEVER;
      }
    }
  }
  // Files are written after the clones and folders are in place: one at or around a folder's
  // path, or (with several repositories) a checkout's, would have to replace a directory.
  const dirs = [
    ...e.folders.map((f) => ({ what: `folder ${f.path}`, path: f.path })),
    ...(e.repositories.length > 1 ? e.repositories.map((r) => ({ what: `repository ${repoPath(r)}`, path: repoPath(r) })) : []),
  ];
  for (const [i, f] of e.files.entries()) {
    const taken = dirs.find((d) => d.path === f.path || d.path.startsWith(`${f.path}/`));
    if (taken) {
      ctx.addIssue({ code: "custom", path: ["files", i, "path"], message: `file ${f.path} would replace the directory of ${taken.what}: files may go inside it, not at or around it` });
      return z.NEVER;
    }
  }
  // `shared`: every run and `run_command` use the one box. `ephemeral` (the default): a box per
  // run; `sharedBox: true` then still keeps a box for `run_command`.
  const boxMode = e.boxMode ?? "ephemeral";
  // Said outright, not overruled in silence: the shared mode is its box.
  if (boxMode === "shared" && e.sharedBox === false) {
    ctx.addIssue({ code: "custom", path: ["sharedBox"], message: "boxMode shared runs everything on the shared box: sharedBox cannot be false (set boxMode to ephemeral first)" });
    return z.NEVER;
  }
  return { ...e, boxMode, sharedBox: e.sharedBox === true || boxMode === "shared" };
});

export type EnvironmentInput = z.output<typeof environmentInputSchema>;

const withoutTrailingSlash = (u: string) => u.replace(/\/+$/, "");

/**
 * Why an environment's `apiUrl` cannot be used, or null. The worker holds one Daytona key, for
 * its DAYTONA_API_URL: an environment naming another API would have that key sent there, so it
 * may only name the worker's own (stating where its boxes run), never redirect them.
 */
export function apiUrlProblem(configured: string | undefined, apiUrl: string | undefined): string | null {
  if (apiUrl === undefined || (configured !== undefined && withoutTrailingSlash(configured) === withoutTrailingSlash(apiUrl))) return null;
  return configured
    ? `apiUrl must be this worker's Daytona API, ${withoutTrailingSlash(configured)} (DAYTONA_API_URL): its key (DAYTONA_API_KEY) is for that API only`
    : "apiUrl cannot be used: this worker has no Daytona API configured (DAYTONA_API_URL)";
}
/** `updatedAt`: the last create-or-replace or PATCH (absent on environments stored before it was kept: `createdAt` then). */
export type Environment = EnvironmentInput & { id: string; houseId: string; createdAt: string; updatedAt?: string; sharedBoxId?: string };

export function publicEnvironment(e: Environment) {
  const { secrets, files, ...rest } = e;
  return {
    ...rest, updatedAt: e.updatedAt ?? e.createdAt, files: publicFiles(files), secretNames: Object.keys(secrets ?? {}).sort(),
    ...(e.repositories ? { repositories: e.repositories.map((r) => ({ ...r, url: shownRepositoryUrl(r.url) })) } : {}),
  };
}

const secretsPatchSchema = recordSchema(z.string(), z.unknown());

/**
 * A PATCH applied to an environment: the fields given replace the stored ones (`files` as a
 * whole list, where a sensitive file given without content keeps the stored one) and `null`
 * clears one (it takes its default); `secrets` merges by name, `null` removing one. The result is validated like a create. Pure: the house's actor applies it.
 */
export function applyEnvironmentPatch(current: Environment, patch: Record<string, unknown>): Environment {
  if ("id" in patch && patch.id !== current.id) throw new ApiError("validation_failed", "id cannot be changed", [{ path: "id", message: "cannot be changed" }]);
  const { houseId, createdAt, updatedAt: _updated, sharedBoxId, id: _id, ...stored } = current;
  const merged: Record<string, unknown> = { ...stored, ...patch };
  for (const [k, v] of Object.entries(patch)) if (v === null && k !== "secrets") delete merged[k];
  // A sensitive file is shown without its content, so a list sent back as read keeps the content
  // stored at that path: adding or removing one file does not mean sending every secret one again.
  if (Array.isArray(patch.files)) {
    merged.files = patch.files.map((f: unknown, i: number) => {
      if (!f || typeof f !== "object" || Array.isArray(f) || "content" in f) return f;
      const given = f as { path?: unknown; sensitive?: unknown };
      const kept = given.sensitive === true ? current.files?.find((c) => c.sensitive && c.path === given.path) : undefined;
      if (!kept && given.sensitive === true && typeof given.path === "string") {
        // Not "content: expected string": the caller sent the file as GET shows a kept one.
        const message = `no sensitive file is stored at ${given.path} to keep: send its content`;
        throw new ApiError("validation_failed", "invalid environment", [{ path: `files.${i}.content`, message }]);
      }
      return kept ? { ...given, content: kept.content } : f;
    });
  }
  // A URL stored with credentials before they were refused is shown redacted: the list sent back
  // as read keeps it (validated without its credentials, stored as it was).
  const givenRepositories: unknown[] = Array.isArray(patch.repositories) ? patch.repositories : [];
  const { kept: keptUrls, check } = keptRepositoryUrls(
    givenRepositories.map((r) => (isPlainObject(r) && typeof r.url === "string" ? r.url : undefined)),
    (current.repositories ?? []).map((r) => r.url),
  );
  if (keptUrls.size > 0) merged.repositories = givenRepositories.map((r, i) => (keptUrls.has(i) ? { ...(r as object), url: check[i] } : r));
  if ("secrets" in patch) {
    if (patch.secrets === null || typeof patch.secrets !== "object" || Array.isArray(patch.secrets)) {
      throw new ApiError("validation_failed", "secrets must be an object (a null value removes that secret)", [{ path: "secrets", message: "an object of NAME: value (null removes one)" }]);
    }
    // Read as every other map is (a `__proto__` key is refused, not merged through the prototype).
    const given = secretsPatchSchema.safeParse(patch.secrets);
    if (!given.success) throw new ApiError("validation_failed", "invalid environment", formatZodError(given.error).map((d) => ({ ...d, path: `secrets.${d.path}` })));
    const next: Record<string, unknown> = { ...(current.secrets ?? {}) };
    for (const [k, v] of Object.entries(given.data)) {
      if (v === null) delete next[k];
      else next[k] = v;
    }
    merged.secrets = next;
  }
  // Leaving `shared` keeps the box for run_command unless sharedBox says otherwise; entering it
  // takes the box whatever sharedBox was.
  if (patch.boxMode === "ephemeral" && !("sharedBox" in patch)) merged.sharedBox = current.sharedBox;
  if (patch.boxMode === "shared" && !("sharedBox" in patch)) delete merged.sharedBox;
  const parsed = environmentInputSchema.safeParse(merged);
  const checked = parsed.success ? parsed.data : keepingStoredProblems(stored, patch, merged, parsed.error);
  const data = keptUrls.size > 0 ? { ...checked, repositories: checked.repositories.map((r, i) => ({ ...r, url: keptUrls.get(i) ?? r.url })) } : checked;
  // Each PATCH body is capped, but what they add up to is not: PATCHes one after another would
  // grow an environment past what its house stores in one row, and every box's env and files with it.
  const bytes = new TextEncoder().encode(JSON.stringify(data)).byteLength;
  if (bytes > MAX_JSON_BODY_BYTES) {
    throw new ApiError("payload_too_large", `the environment would be ${bytes} bytes after this PATCH; at most ${MAX_JSON_BODY_BYTES}, what one create may send: remove or shorten something first`);
  }
  return { ...data, id: current.id, houseId, createdAt, ...(sharedBoxId ? { sharedBoxId } : {}) };
}

/**
 * A PATCH's result refused only for values an older version stored and this PATCH leaves alone
 * (a model name with a space, a file under ~, a comma-joined allow-list...): those are not the
 * caller's to fix now, so they are kept as they are and the rest is validated as any PATCH. A
 * problem the PATCH brings in, or a field it sends, is its 400; stored values that cannot be
 * kept beside the PATCH are a 400 naming them, to be replaced in the same PATCH.
 */
function keepingStoredProblems(stored: Record<string, unknown>, patch: Record<string, unknown>, merged: Record<string, unknown>, error: z.ZodError): EnvironmentInput {
  const problems = formatZodError(error);
  const before = environmentInputSchema.safeParse(stored);
  const storedProblems = new Set(before.success ? [] : formatZodError(before.error).map((d) => `${d.path}\0${d.message}`));
  const field = (path: string) => path.split(".")[0];
  const left = (d: { path: string; message: string }) => field(d.path) !== "" && !Object.hasOwn(patch, field(d.path)) && storedProblems.has(`${d.path}\0${d.message}`);
  const brought = problems.filter((d) => !left(d));
  if (brought.length > 0) throw new ApiError("validation_failed", "invalid environment", brought);
  const kept = [...new Set(problems.map((d) => field(d.path)))];
  const rest = environmentInputSchema.safeParse(Object.fromEntries(Object.entries(merged).filter(([k]) => !kept.includes(k))));
  if (!rest.success) {
    throw new ApiError(
      "validation_failed",
      `this environment holds values an older version accepted and this one refuses (${kept.join(", ")}): send valid ones in this PATCH, or null to clear them`,
      problems.map((d) => ({ ...d, message: `stored by an older version: ${d.message}` })),
    );
  }
  return { ...rest.data, ...Object.fromEntries(kept.map((k) => [k, stored[k]])) } as EnvironmentInput;
}
