// What the demo model answers, decided from the request alone (no state, no randomness), so the
// same conversation always gets the same reply. Pure: the HTTP server in server.mjs applies it.
//
// It understands a handful of phrasings and turns them into calls of the tools the caller offers
// (pi's `write`/`bash`/`ls`/`read`, a bot's `delegate_task`/`run_command`). After a tool result
// it summarises the result, so a run always ends with a plain answer.

export const DEMO_MODEL_ID = "demo";

export const HELP_TEXT = [
  "I am threadbox's offline demo model: I follow a few fixed phrasings, nothing else.",
  "Try: \"write FILE containing TEXT\", \"run COMMAND\", \"list files\", \"read FILE\", \"delegate: TASK\"",
  "(\"fail: REASON\" answers with a model error, to show a failed run).",
  "For a real model, put OPENAI_API_KEY or ANTHROPIC_API_KEY in .dev.vars and restart `npm run dev`,",
  "or create an environment whose piModels point at any OpenAI-compatible endpoint (see the README).",
].join(" ");

/** The text of one chat message, whatever shape its content has. */
export function messageText(message) {
  const c = message?.content;
  if (typeof c === "string") return c;
  if (Array.isArray(c)) return c.map((p) => (typeof p === "string" ? p : p?.text ?? "")).join("");
  return "";
}

/** Names of the function tools the request offers. */
export function offeredTools(body) {
  return new Set((body?.tools ?? []).map((t) => t?.function?.name ?? t?.name).filter(Boolean));
}

/** The first required string parameter of an offered tool (how to pass a task to `delegate_task`, whatever it calls it). */
function mainParameter(body, toolName, fallback) {
  const tool = (body?.tools ?? []).find((t) => (t?.function?.name ?? t?.name) === toolName);
  const params = tool?.function?.parameters ?? tool?.parameters;
  const props = params?.properties ?? {};
  for (const name of params?.required ?? []) if (props[name]?.type === "string") return name;
  return fallback;
}

const clip = (s, n) => (s.length > n ? `${s.slice(0, n)}…` : s);

/**
 * A request written to a bot arrives as "[authorId] @demo write …" (the bot's model layer names
 * the author in brackets): the author and leading @handles are not part of the request.
 */
function stripMentions(text) {
  return text.replace(/^\s*\[[^\]\n]{1,200}\]\s*/, "").replace(/^(\s*@[a-z0-9_-]+[,:]?\s*)+/i, "").trim();
}

/**
 * Reads what the user asked for in the latest user message.
 * @returns {{ kind: "write", path: string, content: string } | { kind: "run", command: string } |
 *   { kind: "list", path: string } | { kind: "read", path: string } | { kind: "delegate", task: string } |
 *   { kind: "fail", reason: string } | { kind: "help", text: string }}
 */
export function parseRequest(raw) {
  const text = stripMentions(raw);
  let m;
  if ((m = /^delegate\s*:\s*([\s\S]+)$/i.exec(text))) return { kind: "delegate", task: m[1].trim() };
  if ((m = /^fail\s*:\s*([\s\S]*)$/i.exec(text))) return { kind: "fail", reason: m[1].trim() || "asked to fail" };
  if ((m = /^(?:please\s+)?(?:write|create)\s+(?:a\s+file\s+)?(\S+)\s+(?:containing|with)\s+([\s\S]+)$/i.exec(text))) {
    return { kind: "write", path: m[1], content: unquote(m[2].trim()) };
  }
  if ((m = /^(?:please\s+)?run\s+([\s\S]+)$/i.exec(text))) return { kind: "run", command: unquote(m[1].trim()) };
  if ((m = /^(?:please\s+)?(?:list\s+(?:the\s+)?files|ls)(?:\s+in\s+(\S+))?\s*$/i.exec(text))) return { kind: "list", path: m[1] ?? "." };
  if ((m = /^(?:please\s+)?(?:read|cat|show)\s+(\S+)\s*$/i.exec(text))) return { kind: "read", path: m[1] };
  return { kind: "help", text };
}

function unquote(s) {
  const m = /^(["'`])([\s\S]*)\1$/.exec(s);
  return m ? m[2] : s;
}

const shellQuote = (s) => `'${s.replace(/'/g, `'\\''`)}'`;

/** The tool call that carries out a parsed request with the tools on offer, or null. */
export function toolCallFor(request, tools, body) {
  const delegate = (task) =>
    tools.has("delegate_task") ? { name: "delegate_task", arguments: { [mainParameter(body, "delegate_task", "task")]: task } } : null;
  switch (request.kind) {
    case "write":
      if (tools.has("write")) return { name: "write", arguments: { path: request.path, content: `${request.content}\n` } };
      if (tools.has("bash")) return { name: "bash", arguments: { command: `printf '%s\\n' ${shellQuote(request.content)} > ${shellQuote(request.path)}` } };
      return delegate(`write ${request.path} containing ${request.content}`);
    case "run":
      if (tools.has("bash")) return { name: "bash", arguments: { command: request.command } };
      if (tools.has("run_command")) return { name: "run_command", arguments: { [mainParameter(body, "run_command", "command")]: request.command } };
      return delegate(`run ${request.command}`);
    case "list":
      if (tools.has("ls")) return { name: "ls", arguments: { path: request.path } };
      if (tools.has("bash")) return { name: "bash", arguments: { command: `ls -la ${shellQuote(request.path)}` } };
      return delegate("list files");
    case "read":
      if (tools.has("read")) return { name: "read", arguments: { path: request.path } };
      if (tools.has("bash")) return { name: "bash", arguments: { command: `cat ${shellQuote(request.path)}` } };
      return delegate(`read ${request.path}`);
    case "delegate":
      return delegate(request.task);
    default:
      return null;
  }
}

/** A delegate_task result (`{childThreadId, status, note}`), read so the answer says it in words; null when it is not one. */
function childOf(out) {
  try {
    const r = JSON.parse(out);
    return r && typeof r.childThreadId === "string" ? { childThreadId: r.childThreadId, note: typeof r.note === "string" ? r.note : "" } : null;
  } catch {
    return null;
  }
}

/** A short answer after the latest tool results. */
export function summarise(toolMessages, callsById) {
  const parts = toolMessages.map((m) => {
    const call = callsById.get(m.tool_call_id);
    const name = call?.function?.name ?? "tool";
    const out = messageText(m).trim();
    const delegated = name === "delegate_task" ? childOf(out) : null;
    if (delegated) return `I handed it to a coding agent in thread ${delegated.childThreadId}${delegated.note ? `: ${delegated.note}` : "."}`;
    const shown = out ? `:\n${clip(out, 600)}` : " (no output).";
    return `${name} finished${shown}`;
  });
  return `Done. ${parts.join("\n")}`;
}

/**
 * An ambient bot's gate ("should BOT reply now? Reply YES or NO", src/dispatch/gate.ts) sends the
 * conversation as "author: text" lines. Its answer is YES when the latest message is one of the
 * phrasings above (the bot could act on it), else NO; without this the help text would read as
 * "no", and an ambient bot on the demo model would never answer. Returns null for any other request.
 */
export function gateAnswer(messages) {
  const lastUser = [...messages].reverse().find((m) => m.role === "user");
  const text = messageText(lastUser);
  const m = /^Conversation \(oldest first\):\n([\s\S]*)\n\nShould [\s\S]{1,200} reply now\? Reply YES or NO\.\s*$/.exec(text);
  if (!m) return null;
  // The latest message starts at the last line shaped "author: …" (a message may span lines).
  const lines = m[1].split("\n");
  let i = lines.length - 1;
  while (i > 0 && !/^[^\s:][^:\n]{0,199}: /.test(lines[i])) i--;
  const latest = lines.slice(i).join("\n").replace(/^[^:\n]{1,200}: /, "");
  return parseRequest(latest).kind === "help" ? "NO" : "YES";
}

/**
 * The whole decision for one chat-completions request.
 * @returns {{ text?: string, toolCalls?: {name: string, arguments: object}[] } | { error: number, message: string }}
 */
export function decideReply(body) {
  const messages = Array.isArray(body?.messages) ? body.messages : [];
  const last = messages[messages.length - 1];
  if (last?.role === "tool") {
    // every tool message since the last assistant turn answers one of its calls
    let i = messages.length - 1;
    while (i >= 0 && messages[i].role === "tool") i--;
    const callsById = new Map((messages[i]?.tool_calls ?? []).map((c) => [c.id, c]));
    return { text: summarise(messages.slice(i + 1), callsById) };
  }
  const gate = gateAnswer(messages);
  if (gate) return { text: gate };
  const lastUser = [...messages].reverse().find((m) => m.role === "user");
  const request = parseRequest(messageText(lastUser));
  if (request.kind === "fail") return { error: 500, message: `demo model failure: ${request.reason}` };
  const call = toolCallFor(request, offeredTools(body), body);
  if (call) return { toolCalls: [call] };
  if (request.kind !== "help") return { text: `I understood "${request.kind}", but no tool to do it was offered to me. ${HELP_TEXT}` };
  return { text: HELP_TEXT };
}
