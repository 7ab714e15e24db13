import { z } from "zod";
import { commandSchema, cwdSchema, environmentIdNamed, previewInEnvironment, runInEnvironment } from "../../http/routes-environments";
import { environmentNameSchema } from "../../environments";
import { branchNeedsRepo, delegateTask, delegateTaskFields } from "../../http/routes-threads";
import { defineTool, type ToolContext } from "./context";
import type { ToolSpec } from "../tool-loop";
import { NO_SANDBOX } from "./no-sandbox";

/** The thread environment's hands: a synchronous shell, and a detached coding agent on a child thread. */
export function sandboxTools(ctx: ToolContext): ToolSpec[] {
  const runCommand = defineTool({
    name: "run_command",
    description: "Run a shell command on this thread's sandbox box and get its output (truncated to 16 KiB). For quick checks; use delegate_task for multi-step coding work.",
    parameters: {
      type: "object",
      properties: {
        command: { type: "string", description: "shell command" },
        cwd: { type: "string", description: "working directory (optional)" },
        timeoutSec: { type: "integer", minimum: 1, maximum: 3600, description: "default 120" },
      },
      required: ["command"],
      additionalProperties: false,
    },
    args: z.object({ command: commandSchema, cwd: cwdSchema.optional(), timeoutSec: z.number().int().min(1).max(3600).default(120) }).strict(),
    async run(args, _signal, call) {
      if (!ctx.environmentId) return NO_SANDBOX;
      // The output reaches the thread while the command runs, under the tool call's id.
      const r = await runInEnvironment(ctx.env, ctx.claims, ctx.environmentId, args, {
        threadId: ctx.threadId, execId: call.toolCallId, idPrefix: `exec:${ctx.claims.subject}:${ctx.turnId}:${call.toolCallId}`,
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
        harness: { type: "string", enum: ["pi", "claude-code", "codex"] },
        model: { type: "string", description: "model the coding agent runs, e.g. provider/modelId (default: the environment's model)" },
        environmentId: { type: "string", description: "id of an environment of this house to run the job in instead of this thread's (needed when this thread has none, or its environment was deleted)" },
        environmentName: { type: "string", description: "the same as environmentId, by the environment's name (give one of the two)" },
      },
      required: ["task"],
      additionalProperties: false,
    },
    args: branchNeedsRepo(z.object({ ...delegateTaskFields, environmentName: environmentNameSchema.optional() }).strict()
      .refine((a) => a.environmentId === undefined || a.environmentName === undefined, { message: "give environmentId or environmentName, not both", path: ["environmentName"] })),
    async run({ environmentName, ...args }) {
      // A name is only a way to say an id: what follows checks the id as POST /delegate does.
      const environmentId = environmentName === undefined ? args.environmentId : await environmentIdNamed(ctx.env, ctx.claims.houseId, environmentName);
      if (!ctx.environmentId && environmentId === undefined) return NO_SANDBOX;
      const r = await delegateTask(ctx.env, ctx.claims, { id: ctx.threadId, environmentId: ctx.environmentId }, { ...args, environmentId });
      return JSON.stringify({ childThreadId: r.childThreadId, status: r.status, note: "the result will be posted on this thread when the job ends" });
    },
  });
  const preview = defineTool({
    name: "preview_link",
    description: "Get a URL that opens a port served inside this thread's sandbox box (e.g. a dev server started with run_command), to hand to the user. Valid for expiresInSeconds (default 3600) while the box lives.",
    parameters: {
      type: "object",
      properties: {
        port: { type: "integer", minimum: 1, maximum: 65535 },
        expiresInSeconds: { type: "integer", minimum: 60, maximum: 86400 },
      },
      required: ["port"],
      additionalProperties: false,
    },
    args: z.object({ port: z.number().int().min(1).max(65_535), expiresInSeconds: z.number().int().min(60).max(86_400).default(3_600) }).strict(),
    async run(args) {
      if (!ctx.environmentId) return NO_SANDBOX;
      const link = await previewInEnvironment(ctx.env, ctx.claims, ctx.environmentId, args.port, args.expiresInSeconds);
      if (!link) return "this thread's sandbox box is not running yet: start the server with run_command first, then ask for the link";
      return JSON.stringify({ url: link.url, port: link.port, expiresAt: link.expiresAt });
    },
  });
  return [runCommand, delegate, preview];
}
