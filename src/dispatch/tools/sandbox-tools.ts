import { z } from "zod";
import { chosenEnvironmentId, commandSchema, cwdSchema, environmentChoiceFields, NO_SHARED_BOX, oneEnvironment, previewInEnvironment, runInEnvironment, type EnvironmentChoice } from "../../http/routes-environments";
import { ApiError } from "../../errors";
import { branchNeedsRepo, delegateTask, delegateTaskFields, goneParentEnvironment } from "../../http/routes-threads";
import { defineTool, type ToolContext } from "./context";
import type { ToolSpec } from "../tool-loop";
import { NO_SANDBOX } from "./no-sandbox";

/** The JSON schema of the choice, for a tool that does `what` there. */
const environmentChoiceProperties = (what: string) => ({
  environmentId: { type: "string", description: `id of an environment of this house to ${what} instead of this thread's (needed when this thread has none, or its environment was deleted)` },
  environmentName: { type: "string", description: "the same as environmentId, by the environment's name (give one of the two)" },
});

/** What a tool says of this thread's environment deleted since: the tools take it by id or by name. */
const goneThreadEnvironment = (environmentId: string) =>
  `this thread's environment ${environmentId} no longer exists: name another of this house's environments by environmentId or environmentName`;

/**
 * What run_command and preview_link tell a bot of an environment without a shared box (`so`: what
 * follows for the tool): a bot cannot change an environment, only the user can give it one.
 */
function noSharedBox(target: { id: string; missing?: string }, so: string): string {
  const which = target.missing ? "this thread's environment" : "that environment";
  return `${which} keeps no shared sandbox box, so ${so}: tell the user, who can give it one by setting sharedBox: true on environment ${target.id} (bots cannot change environments)`;
}

/** Where run_command and preview_link work (the environment named, else the thread's), and what its 404 says; null for neither. */
async function toolEnvironment(ctx: ToolContext, choice: EnvironmentChoice): Promise<{ id: string; missing?: string } | null> {
  const named = await chosenEnvironmentId(ctx.env, ctx.claims.houseId, choice);
  if (named !== undefined) return { id: named };
  if (!ctx.environmentId) return null;
  return { id: ctx.environmentId, missing: goneThreadEnvironment(ctx.environmentId) };
}

/** The thread environment's hands: a synchronous shell, and a detached coding agent on a child thread. */
export function sandboxTools(ctx: ToolContext): ToolSpec[] {
  const runCommand = defineTool({
    name: "run_command",
    description: "Run a shell command on the shared sandbox box of this thread's environment, or of the one environmentId or environmentName names, and get its output (truncated to 16 KiB). For quick checks; use delegate_task for multi-step coding work.",
    parameters: {
      type: "object",
      properties: {
        command: { type: "string", description: "shell command" },
        cwd: { type: "string", description: "working directory (optional)" },
        timeoutSec: { type: "integer", minimum: 1, maximum: 3600, description: "default 120" },
        ...environmentChoiceProperties("run the command in"),
      },
      required: ["command"],
      additionalProperties: false,
    },
    args: oneEnvironment(z.object({ command: commandSchema, cwd: cwdSchema.optional(), timeoutSec: z.number().int().min(1).max(3600).default(120), ...environmentChoiceFields }).strict()),
    async run({ environmentId, environmentName, ...args }, _signal, call) {
      const target = await toolEnvironment(ctx, { environmentId, environmentName });
      if (!target) return NO_SANDBOX;
      // The output reaches this thread while the command runs (whichever environment's box runs it), under the tool call's id.
      const r = await runInEnvironment(ctx.env, ctx.claims, target.id, args, {
        threadId: ctx.threadId, execId: call.toolCallId, idPrefix: `exec:${ctx.claims.subject}:${ctx.turnId}:${call.toolCallId}`,
      }, target.missing).catch((err) => {
        // The route's answer tells a user to change the environment, which a bot cannot do.
        if (!(err instanceof ApiError && err.code === "conflict" && err.publicMessage === NO_SHARED_BOX)) throw err;
        throw new ApiError("conflict", `${noSharedBox(target, "it runs no commands")}; delegate_task still runs a job there, on a box of its own`);
      });
      // The model sees the head of this (defineTool's cut): the box's own cut, further on, is named up front.
      const cut = r.omittedBytes ? ` (${r.omittedBytes} bytes cut from the middle of its output)` : "";
      return `exit code ${r.exitCode}${cut}\n${r.output}`;
    },
  });
  const delegate = defineTool({
    name: "delegate_task",
    description: "Hand a multi-step coding job to a coding agent running in a sandbox, on a child thread. The agent's box comes from this thread's environment, or from the one environmentId or environmentName names. Returns the child thread id at once; when the job ends, its result is posted here.",
    parameters: {
      type: "object",
      properties: {
        task: { type: "string", description: "what the coding agent should do" },
        repo: { type: "string", description: "git URL to clone first (optional)" },
        branch: { type: "string", description: "branch of repo to check out (only with repo)" },
        depth: { type: "integer", minimum: 1, description: "clone only this many commits of repo (only with repo)" },
        harness: { type: "string", enum: ["pi", "claude-code", "codex"] },
        model: { type: "string", description: "model the coding agent runs, e.g. provider/modelId (default: the environment's model)" },
        ...environmentChoiceProperties("run the job in"),
      },
      required: ["task"],
      additionalProperties: false,
    },
    args: branchNeedsRepo(oneEnvironment(z.object(delegateTaskFields).strict())),
    async run(args) {
      if (!ctx.environmentId && args.environmentId === undefined && args.environmentName === undefined) return NO_SANDBOX;
      // delegateTask looks the name up and checks the environment as POST /delegate does.
      const r = await delegateTask(ctx.env, ctx.claims, { id: ctx.threadId, environmentId: ctx.environmentId }, args).catch((err) => {
        // The route's answer names only the id, and a thread's parent: the tool takes a name too.
        if (!(err instanceof ApiError && err.code === "not_found" && ctx.environmentId && err.publicMessage === goneParentEnvironment(ctx.environmentId, ctx.threadId))) throw err;
        throw new ApiError("not_found", goneThreadEnvironment(ctx.environmentId));
      });
      return JSON.stringify({ childThreadId: r.childThreadId, status: r.status, note: "the result will be posted on this thread when the job ends" });
    },
  });
  const preview = defineTool({
    name: "preview_link",
    description: "Get a URL that opens a port served inside the shared sandbox box of this thread's environment, or of the one environmentId or environmentName names (e.g. a dev server started there with run_command), to hand to the user. Valid for expiresInSeconds (default 3600) while the box lives.",
    parameters: {
      type: "object",
      properties: {
        port: { type: "integer", minimum: 1, maximum: 65535 },
        expiresInSeconds: { type: "integer", minimum: 60, maximum: 86400 },
        ...environmentChoiceProperties("open the port of"),
      },
      required: ["port"],
      additionalProperties: false,
    },
    args: oneEnvironment(z.object({ port: z.number().int().min(1).max(65_535), expiresInSeconds: z.number().int().min(60).max(86_400).default(3_600), ...environmentChoiceFields }).strict()),
    async run({ environmentId, environmentName, ...args }) {
      const target = await toolEnvironment(ctx, { environmentId, environmentName });
      if (!target) return NO_SANDBOX;
      const r = await previewInEnvironment(ctx.env, ctx.claims, target.id, args.port, args.expiresInSeconds, target.missing);
      if (r.unavailable === "no_shared_box") return noSharedBox(target, "there is nothing to preview and none will start");
      if (r.unavailable === "not_running") {
        return target.missing
          ? "this thread's sandbox box is not running yet: start the server with run_command first, then ask for the link"
          : "that environment's sandbox box is not running yet: start the server with run_command naming the same environment first, then ask for the link";
      }
      const { link } = r;
      return JSON.stringify({ url: link.url, port: link.port, expiresAt: link.expiresAt });
    },
  });
  return [runCommand, delegate, preview];
}
