import { createHash } from "node:crypto";
import { z } from "zod";
import { recordSchema } from "../domain/record-schema";
import { BOX_DIR, WORK_DIR } from "../domain/box-layout";

/**
 * What an environment puts into a box besides its image, env and secrets: files written before
 * the harness starts, how much the harness may do on its own (permission mode, allowed tools),
 * and whether boxes are per run or one shared box.
 */

/**
 * A path inside the run's working directory, in one spelling only: relative, no `..` or `.`
 * segments (`./x` is `x`, and `.` is the directory itself), no empty segments, no NUL.
 */
export const workspacePathSchema = z.string().min(1).max(500).refine(
  (p) => !p.startsWith("/") && !p.includes("\0") && !p.split("/").some((seg) => seg === ".." || seg === "." || seg === ""),
  "a relative path inside the working directory (no leading /, no . or .. segments, no empty segments)",
  // Nothing here expands `~`: `~/.bashrc` would be written as work/~/.bashrc, not into HOME.
).refine((p) => p !== "~" && !p.startsWith("~/"), "a path relative to the working directory (work/): ~ is not the home directory here");

/** Below the 1 MiB request body limit, so the whole environment still fits one request. */
export const MAX_FILES_BYTES = 512 * 1024;

export const workspaceFileSchema = z.object({
  path: workspacePathSchema,
  content: z.string().max(MAX_FILES_BYTES),
  /** Never echoed in a response or an entry (its path is). */
  sensitive: z.boolean().default(false),
}).strict();
export type WorkspaceFile = z.infer<typeof workspaceFileSchema>;

export const filesSchema = z.array(workspaceFileSchema).max(200).superRefine((files, ctx) => {
  const bytes = files.reduce((n, f) => n + new TextEncoder().encode(f.content).byteLength, 0);
  if (bytes > MAX_FILES_BYTES) ctx.addIssue({ code: "custom", message: `files add up to ${bytes} bytes; at most ${MAX_FILES_BYTES}` });
  const seen = new Set<string>();
  for (const f of files) {
    if (seen.has(f.path)) ctx.addIssue({ code: "custom", message: `file ${f.path} is given twice` });
    seen.add(f.path);
  }
  // A path cannot be a file and the directory of another file at once: the launch's upload would fail.
  for (const [i, f] of files.entries()) {
    const under = files.find((g) => g.path.startsWith(`${f.path}/`));
    if (under) ctx.addIssue({ code: "custom", path: [i, "path"], message: `file ${f.path} is also the directory of file ${under.path}` });
  }
});

/**
 * How much a harness may do without asking (Claude Code's modes; mapped onto each harness):
 * `plan` reads only, `acceptEdits` / `default` may edit the workspace, `bypassPermissions` anything.
 */
export const PERMISSION_MODES = ["default", "acceptEdits", "plan", "bypassPermissions"] as const;
export const permissionModeSchema = z.enum(PERMISSION_MODES);
export type PermissionMode = z.infer<typeof permissionModeSchema>;

/** Harness-native tool names (pi: read, bash, edit, write, grep, find, ls; Claude Code: Read, Bash, ...). */
export const allowedToolsSchema = z.array(z.string().regex(/^[A-Za-z0-9_.:*()-]{1,100}$/, "a tool name")).max(100);

export const boxModeSchema = z.enum(["ephemeral", "shared"]);

/** pi has no permission prompts: `plan` becomes its read-only tool set. */
export const PI_READ_ONLY_TOOLS = ["read", "grep", "find", "ls"] as const;

/**
 * The tools a pi run gets: the explicit list, else pi's default; `plan` keeps only the read-only
 * ones of either, as Claude Code's plan mode and Codex's read-only sandbox hold whatever the list
 * (a delegate's `plan` over an environment's list is still a read-only run).
 */
export function piTools(mode: PermissionMode | undefined, allowed: string[] | undefined): string[] | undefined {
  if (mode !== "plan") return allowed;
  const readOnly: readonly string[] = PI_READ_ONLY_TOOLS;
  return allowed ? allowed.filter((t) => readOnly.includes(t)) : [...PI_READ_ONLY_TOOLS];
}

/** A file list as a response or an entry may show it: sensitive contents left out. */
export function publicFiles(files: WorkspaceFile[] | undefined) {
  return (files ?? []).map((f) => (f.sensitive ? { path: f.path, sensitive: true } : f));
}

/** Where a volume's `path` lands, HOME-relative: `/home/daytona/x`, `x`, `./x` and `x/` are one place. */
export function volumeHomePath(p: string): string {
  const rel = p.startsWith("/home/daytona/") ? p.slice("/home/daytona/".length) : p;
  return rel.split("/").filter((seg) => seg !== "" && seg !== ".").join("/");
}

/** Codex's config directory, HOME-relative: its config.toml gets the MCP servers, secrets resolved. */
export const CODEX_CONFIG_DIR = ".codex";

/**
 * Where a volume may not go: HOME itself (every box of the environment would share one home),
 * threadbox's own files, and the runs' working directory, which a launch clears and fills (a
 * repository cloned, a folder unpacked): a volume there would be emptied by it, or written by
 * every run of the environment at once.
 */
function volumePathProblem(p: string): string | null {
  if (p.startsWith("/") && !p.startsWith("/home/daytona/")) return "a HOME-relative path, or an absolute one under /home/daytona/";
  const rel = volumeHomePath(p);
  if (rel === "") return "a directory below HOME, not HOME itself";
  if (rel.includes("\0") || rel.split("/").some((seg) => seg === ".." || seg.startsWith("~"))) return "a directory below HOME (no .. or ~)";
  for (const reserved of [BOX_DIR, WORK_DIR]) {
    if (rel === reserved || rel.startsWith(`${reserved}/`)) return `not at or inside ${reserved}/ (${reserved === WORK_DIR ? "the runs' working directory, which each launch clears and fills" : "threadbox's own files"})`;
  }
  // A volume outlives the box: config a launch writes with secrets filled in would stay on it,
  // for every later box of the environment and after the secret is changed or removed.
  if (rel === CODEX_CONFIG_DIR) return `not at ${CODEX_CONFIG_DIR}/ (a launch writes Codex's config.toml there with the MCP servers' secrets filled in; a volume would keep them)`;
  return null;
}

/** A volume of the house, mounted into every box of the environment; it outlives boxes and environments. */
export const volumeSchema = z.object({
  name: z.string().regex(/^[a-z0-9][a-z0-9-]{0,39}$/, "volume names are 1-40 chars of [a-z0-9-]"),
  /** HOME-relative (e.g. `memory`), or absolute under /home/daytona/; not HOME itself, `work/`, `.threadbox/` or `.codex`. */
  path: z.string().min(1).max(300).superRefine((p, ctx) => {
    const problem = volumePathProblem(p);
    if (problem) ctx.addIssue({ code: "custom", message: problem });
  }),
}).strict();
export type VolumeSpec = z.infer<typeof volumeSchema>;

export const volumesSchema = z.array(volumeSchema).max(10).superRefine((vs, ctx) => {
  if (new Set(vs.map((v) => v.name)).size !== vs.length) ctx.addIssue({ code: "custom", message: "a volume is named twice" });
  if (new Set(vs.map((v) => volumeHomePath(v.path))).size !== vs.length) ctx.addIssue({ code: "custom", message: "two volumes at one path" });
  // Mounting a volume inside another's path replaces what the outer volume holds there.
  for (const v of vs) {
    const at = volumeHomePath(v.path);
    const outer = vs.find((w) => w !== v && at.startsWith(`${volumeHomePath(w.path)}/`));
    if (outer) ctx.addIssue({ code: "custom", message: `volume ${v.name} at ${at} lies inside volume ${outer.name} at ${volumeHomePath(outer.path)}: give volumes paths side by side` });
  }
});

/**
 * The provider's volumes are one namespace for every house: the house is part of the name, so
 * two houses' `memory` volumes are two volumes.
 */
export function providerVolumes(houseId: string, volumes: VolumeSpec[] | undefined): { name: string; mountPath: string }[] {
  const owner = volumeOwner(houseId);
  return (volumes ?? []).map((v) => ({
    name: `${owner}-${v.name}`,
    mountPath: `/home/daytona/${volumeHomePath(v.path)}`,
  }));
}

/** A house id a volume name holds as it is: no two such ids give the same name. */
const NAME_SAFE_HOUSE = /^[a-z0-9-]{1,40}$/;

/**
 * A house id the name can hold as it is stays in it whole (beside the hash such names always
 * carried, so its volumes keep their names). Any other id is shown lossily (lower case, other
 * characters as `-`, cut at 30), which a 32-bit hash beside it did not make safe: another house
 * could pick an id with the same shown part and the same hash in seconds, and mount this house's
 * volumes. Such ids are named by a SHA-256 prefix under a prefix of their own (`tbx-`), which no
 * name-safe id's `tb-` name can equal; the total length stays what it was.
 */
function volumeOwner(houseId: string): string {
  if (NAME_SAFE_HOUSE.test(houseId)) return `tb-${houseId}-${fnv1a(houseId)}`;
  const shown = houseId.toLowerCase().replace(/[^a-z0-9-]/g, "-").slice(0, 30);
  return `tbx-${shown}-${createHash("sha256").update(houseId).digest("hex").slice(0, 16)}`;
}

/** The hash name-safe house ids' volume names have always carried. */
function fnv1a(s: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
  return h.toString(16).padStart(8, "0");
}

/**
 * A repository URL a box may clone: no credentials in it (they would end up in logs, process lists
 * and entries: they go in a secret instead). An ssh URL's user (`ssh://git@host/…`) is the account
 * the key logs in as, no secret: it may be given, a password may not. Nor a query string or a
 * fragment: git appends its own paths to the URL, so it cannot clone through one, and what they
 * hold (`?private_token=…`) would be shown wherever the URL is. A user or host starting with `-`
 * would reach ssh as an option (`-oProxyCommand=…`).
 */
export const repositoryUrlSchema = z.string().min(1).max(2000).refine((u) => {
  try {
    const parsed = new URL(u);
    return ["https:", "http:", "git:", "ssh:", "file:"].includes(parsed.protocol) && (parsed.username === "" || parsed.protocol === "ssh:") && parsed.password === ""
      && !parsed.username.startsWith("-") && !parsed.hostname.startsWith("-")
      && !u.includes("?") && !u.includes("#");
  } catch {
    return false;
  }
}, "an http(s), git, ssh or file URL without credentials, a query string or a fragment in it (name a secret in credentialsSecret)");

/**
 * A branch name git itself would take (`git check-ref-format --branch`'s rules). The name is an
 * argument of git commands on the box (`git fetch origin <branch>`), where one starting with `-`
 * would be read as an option (`--upload-pack=<command>` runs the command).
 */
export const branchNameSchema = z.string().min(1).max(200).refine(
  (b) => !b.startsWith("-") && !b.startsWith("/") && !b.endsWith("/") && !b.endsWith(".") && !b.endsWith(".lock")
    && !b.includes("..") && !b.includes("@{") && !b.includes("//") && b !== "@" && !/[\x00-\x20\x7f~^:?*[\\]/.test(b),
  "a git branch name (no leading -, no spaces, control characters, ~ ^ : ? * [ \\, .. or @{)",
);

/** A repository cloned into the run's working directory with the SDK's git API. */
export const repositorySchema = z.object({
  url: repositoryUrlSchema,
  branch: branchNameSchema.optional(),
  /** A commit (its id, or a prefix of 7 or more digits), branch or tag to check out, detached. */
  ref: z.string().min(1).max(200).refine(
    (ref) => /^[0-9a-fA-F]{7,40}$/.test(ref) || branchNameSchema.safeParse(ref).success,
    "a commit id, or a branch or tag name (no leading -, no spaces, control characters, ~ ^ : ? * [ \\, .. or @{)",
  ).optional(),
  depth: z.number().int().min(1).max(100_000).optional(),
  /** Where in the working directory (default: the repository's name). */
  path: workspacePathSchema.optional(),
  /** The name of one of the environment's secrets: the password/token for the clone. */
  credentialsSecret: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, "credentialsSecret names one of the environment's secrets ([A-Za-z_][A-Za-z0-9_]*)").optional(),
  /** The user name sent with that secret (default `x-access-token`, what GitHub and most hosts take with a token). */
  credentialsUsername: z.string().min(1).max(200).optional(),
  /**
   * On a shared box, reconciling discards local work: tracked changes, local commits on the branch
   * and untracked files (ignored ones stay). Default false: untracked work is kept, the update is
   * fast-forward only.
   */
  reset: z.boolean().optional(),
}).strict().refine((r) => r.credentialsUsername === undefined || r.credentialsSecret !== undefined, {
  path: ["credentialsUsername"],
  message: "a user name is sent only with a credentialsSecret: name the secret that holds the password or token",
});
export type RepositorySpec = z.infer<typeof repositorySchema>;

export const repositoriesSchema = z.array(repositorySchema).max(20).superRefine((rs, ctx) => {
  for (const [i, r] of rs.entries()) {
    // A path taken from the URL (`…/..`) is held to the rules a given one is.
    if (!r.path && !workspacePathSchema.safeParse(repoPath(r)).success) {
      ctx.addIssue({ code: "custom", path: [i, "path"], message: `the URL's last segment (${repoPath(r)}) is no directory name: give the repository a path` });
    }
  }
  const paths = rs.map(repoPath);
  if (new Set(paths).size !== paths.length) ctx.addIssue({ code: "custom", message: "two repositories at one path: give them different `path`s" });
  // Each launch clears a checkout's path before it clones there: an outer repository listed after
  // an inner one removes it, and one listed before has the inner checkout written into its tree.
  for (const [i, p] of paths.entries()) {
    const outer = paths.find((q) => p.startsWith(`${q}/`));
    if (outer !== undefined) ctx.addIssue({ code: "custom", path: [i, "path"], message: `repository ${p} lies inside repository ${outer}: give repositories paths side by side` });
  }
});

/**
 * Where a repository goes in the working directory. A query or fragment is no part of the name: a
 * URL stored before they were refused would otherwise make its token the checkout's directory.
 */
export function repoPath(r: Pick<RepositorySpec, "url" | "path">): string {
  if (r.path) return r.path;
  const last = r.url.replace(/[?#].*$/s, "").replace(/\/+$/, "").split("/").pop() ?? "repo";
  return last.replace(/\.git$/, "") || "repo";
}

/**
 * Where a delegate's own repository goes in the working directory: `repo` on a box of its own; on
 * a shared box one checkout per repository and branch, so a delegate of another repository (or
 * branch) does not turn a checkout another run is working in to its own.
 */
export function delegateRepoPath(url: string, branch: string | undefined, shared: boolean): string {
  return shared ? `repo-${fnv1a(`${url}\0${branch ?? ""}`)}` : "repo";
}

/** Agent Skills names: lowercase words joined by single hyphens, at most 64 characters. */
const pluginNameSchema = z.string().max(64).regex(/^[a-z0-9]+(-[a-z0-9]+)*$/, "lowercase letters, digits and single hyphens");
const envNameSchema = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, "env var names are [A-Za-z_][A-Za-z0-9_]*");

/** Launchers that fetch the server from a registry when it starts: what they fetch must be pinned. */
const REGISTRY_LAUNCHERS = new Set(["npx", "bunx", "pnpx", "uvx", "pipx"]);

/** `name@1.2.3`, `@scope/name@1.2.3`, `name==1.2.3`: a package with an exact version. */
function isPinnedPackage(spec: string): boolean {
  return /^(@[^/@\s]+\/)?[^@=\s]+(@|==)v?\d[^\s]*$/.test(spec) && !/[\^~*<>]|latest|next/.test(spec.split(/@|==/).pop()!);
}

/** Launcher options whose value is a package fetched too (`npx -p`, `uvx --from/--with`, `pipx run --spec`). */
const PACKAGE_OPTIONS = new Set(["-p", "--package", "--from", "--with", "--spec"]);
/** Of those, the ones after which the first positional is only a command to run, not a package. */
const COMMAND_FROM_OPTIONS = new Set(["-p", "--package", "--from", "--spec"]);

/**
 * The packages a registry launcher fetches: those its package options name (`--package x`,
 * `--package=x`), and its first argument that is not an option unless one of those options said
 * where the command comes from (`pipx run x`: after `run`). Null for a command that is no launcher.
 */
export function launchedPackages(command: string, args: string[] = []): string[] | null {
  if (!REGISTRY_LAUNCHERS.has(command.split("/").pop()!)) return null;
  const packages: string[] = [];
  const positional: string[] = [];
  let commandGiven = false;
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    const eq = a.indexOf("=");
    const name = a.startsWith("--") && eq > 0 ? a.slice(0, eq) : a;
    if (PACKAGE_OPTIONS.has(name)) {
      packages.push(name === a ? (args[++i] ?? "") : a.slice(eq + 1));
      if (COMMAND_FROM_OPTIONS.has(name)) commandGiven = true;
    } else if (!a.startsWith("-")) {
      positional.push(a);
    }
  }
  const first = command.endsWith("pipx") && positional[0] === "run" ? positional[1] : positional[0];
  if (!commandGiven) packages.push(first ?? "");
  return packages;
}

/**
 * What a value was, for a message that says what was sent: short, and on one line. `echo: false`
 * names an object's fields only (an MCP server's env may hold a key given in place of `$NAME`).
 */
function sentValue(v: unknown, echo: boolean): string {
  if (v === undefined) return "nothing";
  if (Array.isArray(v)) return "an array";
  if (!echo && typeof v === "object" && v !== null) return Object.keys(v).length ? `an object of ${Object.keys(v).slice(0, 10).join(", ")}` : "{}";
  if (!echo && typeof v === "string") return "a string";
  const text = JSON.stringify(v) ?? String(v);
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

/** A union's own message ("Invalid input") says nothing of what it takes: this one says both. */
function unionMessage(forms: string, echo: boolean) {
  return (iss: { code?: string; input?: unknown }) => iss.code === "invalid_union" ? `${forms}; got ${sentValue(iss.input, echo)}` : undefined;
}

export const mcpServerSchema = z.union([
  z.object({ command: z.string().min(1).max(500), args: z.array(z.string().max(2000)).max(50).optional(), env: recordSchema(envNameSchema, z.string().max(10_000)).optional() }).strict()
    .refine((srv) => {
      const packages = launchedPackages(srv.command, srv.args);
      return packages === null || packages.every(isPinnedPackage);
    }, "a server fetched from a registry (npx, bunx, pnpx, uvx, pipx) names an exact version: pkg@1.2.3 or pkg==1.2.3"),
  // Claude Code and Codex speak MCP over HTTP(S) only: another scheme would fail in the box, at run time.
  z.object({ type: z.enum(["http", "sse"]).default("http"), url: z.string().url().max(2000).refine((u) => /^https?:\/\//i.test(u), "an http or https URL") }).strict(),
], { error: unionMessage('an MCP server is {"command": "...", "args"?: [...], "env"?: {...}} (run in the box) or {"url": "https://...", "type"?: "http" | "sse"}', false) });

/**
 * What a harness loads besides its own defaults: pi skills (instructions the model loads when a
 * task calls for them) and pi extensions (TypeScript run inside pi), and MCP servers for Claude
 * Code and Codex. All inline: nothing is fetched from a registry at run time.
 */
export const pluginsSchema = z.object({
  skills: z.array(z.object({
    name: pluginNameSchema,
    description: z.string().min(1).max(1024),
    instructions: z.string().max(64 * 1024),
  }).strict()).max(50).default([]),
  extensions: z.array(z.object({ name: pluginNameSchema, source: z.string().min(1).max(256 * 1024) }).strict()).max(20).default([]),
  mcpServers: recordSchema(z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, "an MCP server's name is 1-64 characters of [A-Za-z0-9_-]"), mcpServerSchema).default({}),
}).strict().superRefine((p, ctx) => {
  for (const [what, list] of [["skill", p.skills], ["extension", p.extensions]] as const) {
    const names = list.map((x) => x.name);
    if (new Set(names).size !== names.length) ctx.addIssue({ code: "custom", message: `a ${what} name is given twice` });
  }
});
export type Plugins = z.infer<typeof pluginsSchema>;

/** pi's skill file: Agent Skills frontmatter, then the instructions. */
export function skillFile(s: Plugins["skills"][number]): string {
  return `---\nname: ${s.name}\ndescription: ${JSON.stringify(s.description)}\n---\n\n${s.instructions}\n`;
}

/** Codex reads MCP servers from its config.toml. */
export function codexMcpToml(servers: Plugins["mcpServers"]): string {
  const q = (v: string) => JSON.stringify(v);
  return Object.entries(servers).map(([name, srv]) => {
    const lines = [`[mcp_servers.${name}]`];
    if ("command" in srv) {
      lines.push(`command = ${q(srv.command)}`);
      if (srv.args?.length) lines.push(`args = [${srv.args.map(q).join(", ")}]`);
      if (srv.env && Object.keys(srv.env).length) lines.push(`env = { ${Object.entries(srv.env).map(([k, v]) => `${k} = ${q(v)}`).join(", ")} }`);
    } else {
      lines.push(`url = ${q(srv.url)}`);
    }
    return lines.join("\n");
  }).join("\n\n") + "\n";
}

const LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
const DOMAIN = new RegExp(`^(?=.{1,253}$)${LABEL}(?:\\.${LABEL})*$`);

/**
 * An allow-list entry: a host, `host:port`, or a wildcard domain (`*.example.com`: its
 * subdomains, as Daytona's domainAllowList takes them). The local host allows only loopback
 * `host:port` entries and refuses the rest at create.
 */
const hostSchema = z.string().superRefine((h, ctx) => {
  const wildcard = h.startsWith("*.");
  const rest = wildcard ? h.slice(2) : h;
  const m = /^([\s\S]*?)(?::(\d{1,5}))?$/.exec(rest)!;
  if (wildcard && m[2] !== undefined) {
    ctx.addIssue({ code: "custom", message: "a wildcard domain (*.example.com) takes no port" });
  } else if (!DOMAIN.test(m[1])) {
    ctx.addIssue({ code: "custom", message: "a host name, host:port, or a wildcard domain (one leading *. label, then a domain: *.example.com)" });
  } else if (m[2] !== undefined && (Number(m[2]) < 1 || Number(m[2]) > 65535)) {
    ctx.addIssue({ code: "custom", message: "a port from 1 to 65535" });
  }
});

/**
 * What a box may reach: everything (`open`, the default), nothing but its thread stream (`deny`),
 * or the stream plus listed hosts (`{allow}`). The older `{blockAll, domainAllowList}` form means
 * what Daytona makes of it: a non-empty `domainAllowList` is an allow-list whatever `blockAll`
 * says (only the listed domains are reachable), `blockAll: true` without one is `deny`, and
 * neither is `open`.
 */
const allowForm = z.object({ allow: z.array(hostSchema).min(1).max(100) }).strict();
const egressForms = z.union([
  z.literal("open"),
  z.literal("deny"),
  allowForm,
  z.object({ blockAll: z.boolean().optional(), domainAllowList: z.array(hostSchema).max(100).optional() }).strict(),
], { error: unionMessage('egress must be "open" (the default), "deny", or {"allow": ["host", ...]} (the older {"blockAll"?: boolean, "domainAllowList"?: ["host", ...]} is read too)', true) });
export type Egress = z.infer<typeof egressForms>;
// An object with `allow` is that form: checked as it, a bad entry is named at its place, where the
// union would only say that the value is none of the forms.
export const egressSchema = z.custom<Egress>().superRefine((v, ctx) => {
  const form = typeof v === "object" && v !== null && "allow" in v ? allowForm : egressForms;
  const r = form.safeParse(v);
  for (const issue of r.error?.issues ?? []) ctx.addIssue({ ...issue } as Parameters<typeof ctx.addIssue>[0]);
});

/** The provider's egress settings for a box whose runs write to `streamUrl`: the stream is always allowed. */
export function egressSettings(egress: Egress | undefined, streamUrl: string | undefined): { blockAll?: boolean; domainAllowList?: string[] } | undefined {
  if (egress === undefined || egress === "open") return undefined;
  // Open unless it blocks or lists hosts. A list closes the box on Daytona and on the local host
  // alike, so the stream goes on it below, as for `{allow}`.
  if (typeof egress === "object" && !("allow" in egress) && !egress.blockAll && !egress.domainAllowList?.length) return egress;
  let stream: string[] = [];
  try {
    if (streamUrl) stream = [new URL(streamUrl).host];
  } catch {
    stream = [];
  }
  const allow = egress === "deny" ? [] : "allow" in egress ? egress.allow : (egress.domainAllowList ?? []);
  return { blockAll: true, domainAllowList: [...new Set([...allow, ...stream])] };
}
