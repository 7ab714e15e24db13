// How entries, threads and other rows look in a terminal. Pure: values in, lines out.

const clip = (s, n) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);
/** How a bot's tool answers in a thread without an environment (src/dispatch/tools/no-sandbox.ts). */
export const NOT_RUN_PREFIX = "no sandbox is bound to this thread";
const isRecord = (v) => typeof v === "object" && v !== null && !Array.isArray(v);
/** JSON of a value parsed from JSON; never throws. */
const json = (v) => {
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
};
/**
 * A payload field as text. Payloads are free-form (any writer of a thread may write any shape), so a
 * field may be missing, null or of another type: nothing is "", a string is itself, else its JSON.
 */
const str = (v) => (typeof v === "string" ? v : v === undefined || v === null ? "" : typeof v === "object" ? json(v) : String(v));

// Control characters a terminal acts on: C0 (ESC starts CSI/OSC sequences that move the cursor,
// clear lines, set the window title), DEL and C1 (0x9b is a one-byte CSI). Tab is harmless.
const CONTROLS = /[\x00-\x08\x0a-\x1f\x7f-\x9f]/g;
const CONTROLS_BUT_NEWLINE = /[\x00-\x08\x0b-\x1f\x7f-\x9f]/g;
const escapeControl = (ch) => (ch === "\n" ? "\\n" : ch === "\r" ? "\\r" : `\\x${ch.charCodeAt(0).toString(16).padStart(2, "0")}`);
/**
 * Text from the server as the terminal may show it: control characters written out visibly
 * (`\x1b`), so what a thread's writers wrote cannot drive the user's terminal. Newlines stay (CRLF
 * becomes one).
 */
export const printable = (v) => str(v).replace(/\r\n/g, "\n").replace(CONTROLS_BUT_NEWLINE, escapeControl);
/** `printable` for a field shown on one line (a title, an id, a reason): a newline is written out too. */
export const printableLine = (v) => str(v).replace(CONTROLS, escapeControl);
/** A template whose interpolated values are `printableLine`d: safe`posted ${id}`. */
export const safe = (strings, ...values) => strings.reduce((out, s, i) => out + (i ? printableLine(values[i - 1]) : "") + s, "");
// A time no Date can hold (a writer's mistake) is shown blank rather than ending the tail.
const time = (ts) => (typeof ts === "number" && Number.isFinite(new Date(ts).getTime()) ? new Date(ts).toISOString().replace(/^.*T/, "").slice(0, 8) : "        ");
const indent = (text, pad) => text.split("\n").map((l) => `${pad}${l}`).join("\n");

const FINISHED_OK = new Set(["completed"]);

/** Bots' ids carry the `ag_` prefix, so an entry's author tells a bot from a person. */
export const isBot = (entry) => typeof entry?.authorId === "string" && entry.authorId.startsWith("ag_");

/** Continuation lines of a multi-line text, aligned under its first line. */
const continued = (text) => text.replace(/\n/g, "\n           ");

export function statusColour(c, status) {
  if (status === "running") return c.yellow(status);
  if (FINISHED_OK.has(status)) return c.green(status);
  if (["failed", "pi_failed", "pi_session_orphaned", "stopped"].includes(status)) return c.red(status);
  return c.gray(printableLine(String(status)));
}

/** One line for a tool call: the command for bash, the path for file tools, else the arguments. */
export function describeToolCall(name, args) {
  const tool = printableLine(name) || "tool";
  if (isRecord(args)) {
    if (typeof args.command === "string") return `${tool} $ ${printableLine(args.command)}`;
    if (typeof args.path === "string") {
      const size = typeof args.content === "string" ? ` (${Buffer.byteLength(args.content)} bytes)` : "";
      return `${tool} ${printableLine(args.path)}${size}`;
    }
  }
  return args === undefined || args === null ? tool : `${tool} ${clip(printableLine(json(args)), 200)}`;
}

/**
 * Lines for one entry of a thread.
 * @param {{ offset?: string, ts?: number, authorId?: string, payload: { type: string, [k: string]: any } }} entry
 * @param {ReturnType<import("./term.mjs").palette>} c
 * @param {{ maxOutputLines?: number, names?: Map<string, string>, chatTexts?: Set<string> }} [opts]
 *   `chatTexts`: the chat texts shown so far (a tail keeps one): a run's prompt comes as a chat
 *   entry and again as pi's own `pi.user` entry, shown once.
 */
export function renderEntry(entry, c, opts = {}) {
  const e = isRecord(entry) ? entry : {};
  try {
    return renderPayload(e, c, opts);
  } catch {
    // A shape no case above foresaw still gets a line: one odd entry must not end a tail.
    return c.gray(`${time(e.ts)} · ${clip(printableLine(json(e.payload)), 200)}`);
  }
}

function renderPayload(entry, c, opts) {
  const p = isRecord(entry.payload) ? entry.payload : { type: "?" };
  const type = typeof p.type === "string" ? p.type : "?";
  const at = c.gray(time(entry.ts));
  const authorId = str(entry.authorId);
  const author = authorId ? printableLine(opts.names?.get(authorId) ?? authorId) : "";
  const maxLines = opts.maxOutputLines ?? 20;
  switch (type) {
    case "chat": {
      if (typeof p.text === "string") opts.chatTexts?.add(p.text);
      const who = isBot(entry) ? c.magenta(author) : c.cyan(author || "anonymous");
      return `${at} ${c.bold(who)}: ${continued(printable(p.text))}`;
    }
    case "pi.user":
      if (typeof p.text === "string" && opts.chatTexts?.has(p.text)) return null;
      return `${at} ${c.blue("task")}  ${printable(p.text)}`;
    case "pi.assistant": {
      if (p.stopReason === "error") return `${at} ${c.red(isBot(entry) ? `${author} error` : "pi error")} ${printable(p.errorMessage ?? p.text)}`;
      // A bot's turn lists its tool calls here; its words reach the thread as a chat entry, shown there.
      const calls = (Array.isArray(p.toolCalls) ? p.toolCalls : []).map((tc) => {
        const call = isRecord(tc) ? tc : {};
        return `${at} ${c.yellow("▶")} ${describeToolCall(call.name, call.args ?? call.arguments)}`;
      });
      const said = printable(p.text);
      const text = said && !isBot(entry) ? [`${at} ${c.bold("pi")}: ${continued(said)}`] : [];
      return [...text, ...calls].join("\n") || null;
    }
    case "pi.tool_call":
      return `${at} ${c.yellow("▶")} ${describeToolCall(p.name, p.args)}`;
    case "pi.tool_result": {
      const out = printable(p.output).replace(/\s+$/, "");
      const lines = out ? out.split("\n") : [];
      const shown = lines.slice(0, maxLines).join("\n") + (lines.length > maxLines ? `\n… ${lines.length - maxLines} more lines` : "");
      // A bot's tool in a thread without an environment: no error, but nothing ran (src/dispatch/tools/no-sandbox.ts).
      const notRun = !p.isError && typeof p.output === "string" && p.output.startsWith(NOT_RUN_PREFIX);
      const mark = p.isError ? c.red("✗") : notRun ? c.yellow("–") : c.green("✓");
      const head = `${at} ${mark} ${printableLine(p.name ?? p.toolName) || "tool"}${notRun ? c.yellow(" (not run)") : ""}${lines.length ? "" : c.gray(" (no output)")}`;
      return lines.length ? `${head}\n${c.gray(indent(shown, "           │ "))}` : head;
    }
    case "pi.error":
      return `${at} ${c.red("pi error")} ${printable(p.message)}`;
    case "signal.thread.status_changed":
      return `${at} ${c.gray("●")} ${statusColour(c, str(p.status))}${p.reason ? c.gray(` (${printableLine(p.reason)})`) : ""}`;
    case "signal.thread.box_assigned":
      return `${at} ${c.gray(`· on box ${printableLine(p.boxId)}`)}`;
    case "signal.run.launched":
      return `${at} ${c.gray(`· ${printableLine(p.harness) || "agent"} started (${p.boxReused ? "box reused" : "new box"}, session ${printableLine(p.session) || "new"})`)}`;
    case "signal.exec.output": {
      if (p.truncated === true) return `${at} ${c.gray("  │ … the rest of this output is in its result")}`;
      const out = printable(p.text).replace(/\n$/, "");
      if (!out) return null;
      const lines = out.split("\n");
      const shown = lines.slice(0, maxLines).join("\n") + (lines.length > maxLines ? `\n… ${lines.length - maxLines} more lines` : "");
      return `${at} ${indent(p.stream === "stderr" ? c.red(shown) : c.gray(shown), "  │ ").replace(/\n/g, "\n         ")}`;
    }
    case "artifact.files": {
      const files = (Array.isArray(p.files) ? p.files : []).filter(isRecord);
      const listed = files.slice(0, 10).map((f) => `${printableLine(f.path)}${f.status === "deleted" ? " (deleted)" : ""}`).join(", ");
      const more = files.length > 10 || p.truncated === true ? ", …" : "";
      return `${at} ${c.gray(`◆ ${files.length} file${files.length === 1 ? "" : "s"} changed${listed ? `: ${listed}${more}` : ""}`)}`;
    }
    case "artifact.diff": {
      const bytes = typeof p.bytes === "number" ? ` (${p.bytes} bytes)` : "";
      return `${at} ${c.gray(`◆ diff against ${printableLine(p.base).slice(0, 12) || "the start"}${bytes}; threadbox artifacts shows it`)}`;
    }
    // Why a bot did not answer, and why a harness exited: the reason is the point, so it is not
    // cut at 200 characters behind the ids as the generic line would.
    case "signal.dispatch.error": {
      const bot = printableLine(opts.names?.get(str(p.agentId)) ?? p.agentId) || author || "a bot";
      return `${at} ${c.red("✗")} ${bot} could not answer: ${printable(p.reason) || "no reason given"}`;
    }
    case "signal.run.stderr": {
      const out = printable(p.text).replace(/\s+$/, "");
      if (!out) return null;
      const lines = out.split("\n");
      const shown = lines.slice(-maxLines).join("\n");
      const head = `${at} ${c.red("stderr")} of the run${lines.length > maxLines ? `, last ${maxLines} lines` : ""}${p.truncated === true ? " (its end)" : ""}:`;
      return `${head}\n${c.gray(indent(shown, "           │ "))}`;
    }
    case "signal.thread.child_finished":
      return `${at} ${c.gray("●")} child ${printableLine(p.childThreadId)} ${statusColour(c, str(p.status))}${p.reason ? c.gray(` (${printableLine(p.reason)})`) : ""}`;
    default: {
      const fields = Object.entries(p).filter(([k, v]) => k !== "type" && v !== undefined && v !== null && typeof v !== "object").map(([k, v]) => `${printableLine(k)}=${printableLine(v)}`).join(" ");
      return c.gray(`${time(entry.ts)} · ${printableLine(type)}${fields ? ` ${clip(fields, 200)}` : ""}`);
    }
  }
}

/** `id  status  title` for one thread row. */
export function threadLine(t, c) {
  const reason = t.status !== "running" && t.reason && t.reason !== t.status ? c.gray(` (${printableLine(t.reason)})`) : "";
  return `${c.bold(printableLine(t.id))}  ${statusColour(c, t.status)}${reason}  ${t.title ? printableLine(t.title) : c.gray("(untitled)")}`;
}

/**
 * Threads as a forest: children under their parent thread; a thread whose parent is not in the
 * list is a root.
 */
export function threadTree(threads, c) {
  const byId = new Map(threads.map((t) => [t.id, t]));
  const children = new Map();
  const roots = [];
  for (const t of threads) {
    const parentId = t.parent?.kind === "thread" ? t.parent.id : (t.parentKind === "thread" ? t.parentId : null);
    if (parentId && byId.has(parentId)) {
      if (!children.has(parentId)) children.set(parentId, []);
      children.get(parentId).push(t);
    } else roots.push(t);
  }
  const byCreated = (a, b) => String(a.createdAt).localeCompare(String(b.createdAt));
  const lines = [];
  const walk = (t, prefix, last, isRoot) => {
    lines.push(isRoot ? threadLine(t, c) : `${prefix}${last ? "└─ " : "├─ "}${threadLine(t, c)}`);
    const kids = (children.get(t.id) ?? []).sort(byCreated);
    const next = isRoot ? "" : `${prefix}${last ? "   " : "│  "}`;
    kids.forEach((k, i) => walk(k, next, i === kids.length - 1, false));
  };
  roots.forEach((r) => walk(r, "", true, true));
  return lines;
}

export function sandboxLine(b, c) {
  const threads = (b.threads ?? b.threadIds ?? []).map((t) => printableLine(typeof t === "string" ? t : t.id ?? t.threadId)).join(", ");
  const state = b.state === "live" ? c.green(b.state) : b.state === "provisioning" ? c.yellow(b.state) : c.gray(printableLine(b.state));
  return `${c.bold(printableLine(b.id))}  ${state}  ${b.ephemeral ? "ephemeral" : "kept"}${threads ? `  threads: ${threads}` : ""}`;
}

/** Said either way: `run_command` and `preview_link` need the shared box, and its absence is why they refuse. */
function sharedBoxLabel(e) {
  if (e.boxMode === "shared") return "shared box (all runs)";
  return e.sharedBox ? "shared box" : "no shared box";
}

export function environmentLine(e, c) {
  const secrets = e.secretNames?.length ? `  secrets: ${e.secretNames.map(printableLine).join(", ")}` : "";
  return `${c.bold(printableLine(e.id))}  ${printableLine(e.name)}${e.model ? `  model ${printableLine(e.model)}` : ""}  ${printableLine(e.harness ?? "pi")}  ${sharedBoxLabel(e)}${secrets}`;
}

export function agentLine(a, c) {
  return `${c.bold(`@${printableLine(a.handle)}`)}  ${printableLine(a.name)}  model ${printableLine(a.model)}  ${printableLine(a.triggerMode ?? "mention")}${Array.isArray(a.tools) ? `  tools: ${a.tools.length ? a.tools.map(printableLine).join(", ") : "none"}` : "  tools: all"}  ${c.gray(printableLine(a.id))}`;
}
