// What the thread view shows, folded from the thread's entries (pure: no DOM, no network).
import type { Entry, ThreadSummary } from "./api";
// The same words as a run's failure reason (build-web.mjs rebuilds when this file changes too).
import { modelErrorReason } from "../../../src/dispatch/provider-error";

/** `live` is the command's output as it streamed in (`signal.exec.output`), before or without a result. */
export type ToolItem = { kind: "tool"; key: string; toolCallId: string; name: string; args: unknown; call?: Entry; result?: Entry; live?: string; liveOnly?: boolean; cutShort?: boolean };
export type TimelineItem =
  | { kind: "chat"; key: string; entry: Entry; text: string; role: "person" | "bot" | "agent"; author: string; childThreadId?: string; childOutcome?: ChildOutcome }
  | ToolItem
  | { kind: "signal"; key: string; entry: Entry; label: string; tone: "info" | "good" | "bad"; childThreadId?: string }
  | { kind: "child"; key: string; thread: ThreadSummary }
  | ArtifactItem;

export type ArtifactFile = { path: string; status: string; size: number; binary?: boolean; content?: string; omitted?: string };
/** A run's results: the files it changed and, for a git checkout, its status and diff. */
export type ArtifactItem = { kind: "artifact"; key: string; entry: Entry; runId: string; files?: ArtifactFile[]; diff?: { status: string; text: string; truncated: boolean; stream?: string } };

/** How the child's run that a result chat reports on ended (from the `child_finished` signal posted with it). */
export type ChildOutcome = { status: string; reason?: string; failed: boolean };

export type AuthorInfo = { me?: string; bots: Map<string, string> };

const FINISHED_OK = new Set(["completed"]);

/** How a bot's tool answers in a thread without an environment (src/dispatch/tools/no-sandbox.ts). */
export const NOT_RUN_PREFIX = "no sandbox is bound to this thread";

/** A tool result that is no error, yet nothing ran: it must not look like a command that succeeded. */
export function toolNotRun(result: Entry["payload"] | undefined): boolean {
  return result !== undefined && result.isError !== true && typeof result.output === "string" && result.output.startsWith(NOT_RUN_PREFIX);
}

export function authorOf(entry: Entry, who: AuthorInfo): { role: "person" | "bot"; author: string } {
  const id = entry.authorId;
  if (!id) return { role: "person", author: "someone" };
  const handle = who.bots.get(id);
  if (handle) return { role: "bot", author: `@${handle}` };
  if (id.startsWith("ag_")) return { role: "bot", author: id };
  return { role: "person", author: id === who.me ? `${id} (you)` : id };
}

export function signalLabel(p: Entry["payload"]): { label: string; tone: "info" | "good" | "bad" } {
  const reason = typeof p.reason === "string" && p.reason ? ` (${p.reason})` : "";
  switch (p.type) {
    case "signal.thread.status_changed":
      return { label: `status: ${p.status}${reason}`, tone: p.status === "running" ? "info" : FINISHED_OK.has(String(p.status)) ? "good" : "bad" };
    case "signal.thread.child_finished":
      return { label: `child thread ${p.status}${reason}`, tone: FINISHED_OK.has(String(p.status)) ? "good" : "bad" };
    case "signal.thread.box_assigned":
      return { label: `box ${p.boxId}`, tone: "info" };
    case "signal.run.interrupt":
      return { label: "interrupted: the agent's turn is aborted, the run waits for a message", tone: "info" };
    case "signal.run.message_delivered":
      return { label: `message delivered to the agent (${p.mode === "prompt" ? "as its next prompt" : "while it works"})`, tone: "good" };
    case "signal.run.launched":
      return { label: `${p.harness ?? "agent"} launched (${p.boxReused ? "box reused" : "new box"}, session ${p.session ?? "new"})`, tone: "info" };
    case "signal.dispatch.error":
      return { label: `bot turn failed${reason}`, tone: "bad" };
    default:
      return { label: `${p.type.replace(/^signal\./, "")}${reason}`, tone: "info" };
  }
}

/**
 * Entries (in offset order) and the thread's children become timeline items: chat bubbles,
 * one item per tool call holding its result, small signal marks, and child thread cards placed
 * where the child was created.
 */
export function buildTimeline(entries: Entry[], children: ThreadSummary[], who: AuthorInfo): TimelineItem[] {
  const items: TimelineItem[] = [];
  const tools = new Map<string, ToolItem>();
  const chatTexts = new Set<string>();
  // A bot's turn ends with its answer twice: the last model round (`pi.assistant`) and the chat
  // it posts. The chat is what people read; the round's copy is not shown.
  const botChats = new Set(entries.filter((e) => e.payload.type === "chat" && e.authorId).map((e) => `${e.authorId}\u0000${String(e.payload.text ?? "")}`));
  // A child a tool call started (delegate_task names it in its result) is shown right after that
  // call; the others where they were created.
  const delegated = new Set<string>();
  for (const e of entries) {
    if (e.payload.type !== "pi.tool_result") continue;
    for (const c of children) if (String(e.payload.output ?? "").includes(c.id)) delegated.add(c.id);
  }
  const pending = [...children].filter((c) => !delegated.has(c.id)).sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  const placeChildrenBefore = (ts: number) => {
    while (pending.length && Date.parse(pending[0].createdAt) <= ts) {
      const thread = pending.shift()!;
      items.push({ kind: "child", key: `child:${thread.id}`, thread });
    }
  };
  /** Who wrote the entry that made each card (a call, its result and its output share one writer). */
  const cardAuthors = new Map<ToolItem, string | undefined>();
  /**
   * The card of one tool call, made by whichever of its entries comes first. Call ids show on
   * the thread: an entry by another author than the card's (a call, result or output under that
   * id) is not that call's, and gets a card of its own.
   */
  const toolCard = (id: string, key: string, name: string, entry: Entry): ToolItem => {
    const first = tools.get(id);
    const cardId = first && cardAuthors.get(first) !== entry.authorId ? `${id}\u0000${entry.authorId ?? ""}` : id;
    let item = tools.get(cardId);
    if (!item) {
      item = { kind: "tool", key, toolCallId: id, name, args: undefined };
      tools.set(cardId, item);
      cardAuthors.set(item, entry.authorId);
      items.push(item);
    }
    return item;
  };
  // A child's result chat carries no status: the child_finished signal posted just before it does.
  // Both ids end in `<child>:<runKey>`, so a resumed child's later results get their own run's outcome.
  const outcomes = new Map<string, ChildOutcome>();
  const lastOutcome = new Map<string, ChildOutcome>();
  const called = (item: ToolItem, entry: Entry, name: unknown, args: unknown) => {
    item.call = entry;
    item.name = String(name ?? item.name);
    item.args = args;
    item.liveOnly = false;
  };
  for (const entry of entries) {
    placeChildrenBefore(entry.ts);
    try {
      foldEntry(entry);
    } catch {
      // Any writer may put any fields on a pi.*, signal.* or artifact.* entry: one this code cannot
      // read is named, and the rest of the thread is still shown.
      items.push({ kind: "signal", key: entry.offset, entry, label: unshownEntryLabel(entry.payload.type), tone: "bad" });
    }
  }
  function foldEntry(entry: Entry): void {
    const p = entry.payload;
    const key = entry.offset;
    if (p.type === "chat") {
      const text = String(p.text ?? "");
      chatTexts.add(text);
      if (p.origin === "child_finished" && typeof p.childThreadId === "string") {
        // A delegated child's answer, posted on the parent on behalf of whoever delegated.
        const childOutcome = outcomes.get(entry.id.replace(/^child_result:/, "")) ?? lastOutcome.get(p.childThreadId);
        items.push({ kind: "chat", key, entry, text, role: "agent", author: `result of child thread`, childThreadId: p.childThreadId, childOutcome });
      } else {
        items.push({ kind: "chat", key, entry, text, ...authorOf(entry, who) });
      }
    } else if (p.type === "pi.user") {
      const text = String(p.text ?? "");
      if (!chatTexts.has(text)) items.push({ kind: "chat", key, entry, text, role: "person", author: "prompt" });
    } else if (p.type === "pi.assistant") {
      const text = String(p.text ?? "") || (p.stopReason === "error" ? `error: ${p.errorMessage ? modelErrorReason(String(p.errorMessage)) : "the model failed"}` : "");
      // A bot's model round (it carries its turn) is the bot speaking; a box's is the coding agent.
      const botRound = typeof p.turnId === "string";
      if (text && !(botRound && botChats.has(`${entry.authorId}\u0000${text}`))) {
        items.push(botRound
          ? { kind: "chat", key, entry, text, ...authorOf(entry, who) }
          : { kind: "chat", key, entry, text, role: "agent", author: typeof p.model === "string" ? `agent · ${p.model}` : "agent" });
      }
      // A bot's round names its tool calls itself; a box's agent posts a pi.tool_call for each.
      for (const c of Array.isArray(p.toolCalls) ? (p.toolCalls as { id?: unknown; name?: unknown; args?: unknown }[]) : []) {
        if (!c || typeof c !== "object") continue;
        const id = typeof c.id === "string" ? c.id : "";
        if (id) called(toolCard(id, `${key}:${id}`, String(c.name ?? "tool"), entry), entry, c.name, c.args);
      }
    } else if (p.type === "pi.tool_call" || p.type === "pi.tool_result") {
      const id = String(p.toolCallId ?? entry.id);
      const name = p.name ?? p.toolName;
      const item = toolCard(id, key, String(name ?? "tool"), entry);
      if (p.type === "pi.tool_call") called(item, entry, name, p.args);
      else {
        item.result = entry;
        if (item.name === "tool" && name !== undefined) item.name = String(name);
        for (const c of children) {
          if (delegated.has(c.id) && String(p.output ?? "").includes(c.id)) {
            delegated.delete(c.id);
            items.push({ kind: "child", key: `child:${c.id}`, thread: c });
          }
        }
      }
    } else if (p.type === "signal.exec.output") {
      // A command's output while it runs: on its tool call's card, or a card of its own (an exec
      // started through the API with a threadId).
      // Only a string names a card: the server refuses any other execId, but an entry stored before
      // it did (`["exec_1"]` reads as `exec_1` once made a string) must not land on that card.
      if (typeof p.execId !== "string" || p.execId === "") {
        items.push({ kind: "signal", key, entry, label: unshownEntryLabel(p.type), tone: "bad" });
        return;
      }
      const id = p.execId;
      const known = tools.size;
      const item = toolCard(id, key, "command", entry);
      if (tools.size > known) item.liveOnly = true;
      item.live = (item.live ?? "") + (p.truncated ? "\n[more output not shown live]\n" : typeof p.text === "string" ? p.text : "");
    } else if (p.type === "artifact.files" || p.type === "artifact.diff") {
      const runId = String(p.runId ?? "");
      // One card per run: its diff and its file list arrive as two entries.
      let card = items.find((i): i is ArtifactItem => i.kind === "artifact" && i.runId === runId);
      if (!card) {
        card = { kind: "artifact", key, entry, runId };
        items.push(card);
      }
      if (p.type === "artifact.files") card.files = Array.isArray(p.files) ? p.files.filter((f) => f && typeof f === "object").map(artifactFile) : [];
      else card.diff = { status: typeof p.status === "string" ? p.status : "", text: typeof p.diff === "string" ? p.diff : "", truncated: p.truncated === true, stream: typeof p.stream === "string" ? p.stream : undefined };
    } else if (p.type === "artifact.folder") {
      const folder = p.status === "failed" ? (Array.isArray(p.folders) ? p.folders.join(", ") : "") : String(p.folder ?? "");
      const label = p.status === "synced" ? `folder ${folder} saved as version ${p.version}` : p.status === "unchanged" ? `folder ${folder} unchanged` : `folder sync failed (${folder}): ${typeof p.error === "string" ? p.error : "unknown"}`;
      items.push({ kind: "signal", key, entry, label, tone: p.status === "failed" ? "bad" : p.status === "synced" ? "good" : "info" });
    } else if (p.type === "pi.error") {
      items.push({ kind: "signal", key, entry, label: `error: ${typeof p.message === "string" ? p.message : "unknown"}`, tone: "bad" });
    } else if (p.type.startsWith("signal.")) {
      // A run that ended leaves no call of it running: one without a result was cut short.
      if (p.type === "signal.thread.status_changed" && p.status !== "running") {
        for (const t of tools.values()) if (!t.result && !t.liveOnly) t.cutShort = true;
      }
      // Nor does a bot's turn that failed (given up after restarts, say): no result will come.
      if (p.type === "signal.dispatch.error" && typeof p.turnId === "string") {
        for (const t of tools.values()) if (!t.result && t.call?.payload.turnId === p.turnId) t.cutShort = true;
      }
      const childThreadId = typeof p.childThreadId === "string" ? p.childThreadId : undefined;
      if (p.type === "signal.thread.child_finished" && childThreadId) {
        const status = String(p.status ?? "");
        const outcome: ChildOutcome = { status, ...(typeof p.reason === "string" && p.reason ? { reason: p.reason } : {}), failed: !FINISHED_OK.has(status) };
        lastOutcome.set(childThreadId, outcome);
        if (entry.id.startsWith("child_finished:")) outcomes.set(entry.id.slice("child_finished:".length), outcome);
      }
      const mark = signalLabel(p);
      // Several bots may answer in one thread: a failed turn says whose it was (its writer, which no one else can be).
      const bot = p.type === "signal.dispatch.error" && entry.authorId ? who.bots.get(entry.authorId) : undefined;
      if (bot) mark.label = `@${bot}'s turn failed${typeof p.reason === "string" && p.reason ? ` (${p.reason})` : ""}`;
      items.push({ kind: "signal", key, entry, ...mark, childThreadId });
    } else {
      items.push({ kind: "signal", key, entry, label: p.type, tone: "info" });
    }
  }
  placeChildrenBefore(Infinity);
  return items;
}

/** What stands in the timeline for an entry the page cannot read or draw. */
export function unshownEntryLabel(type: string): string {
  return `${type} (an entry this page cannot show)`;
}

/** A file of an `artifact.files` entry with the fields the page shows, of the types it shows them as. */
function artifactFile(raw: Record<string, unknown>): ArtifactFile {
  return {
    path: typeof raw.path === "string" ? raw.path : "(no path)",
    status: typeof raw.status === "string" ? raw.status : "changed",
    size: typeof raw.size === "number" ? raw.size : 0,
    ...(raw.binary === true ? { binary: true } : {}),
    ...(typeof raw.content === "string" ? { content: raw.content } : {}),
    ...(typeof raw.omitted === "string" ? { omitted: raw.omitted } : {}),
  };
}

/**
 * Whether two builds of an item draw the same. Every batch of entries builds the timeline anew, of
 * the same entry objects: an item whose fields are the same values (the small objects and lists a
 * build or a poll makes afresh, such as a child's outcome, a child thread or a run's files, compared
 * by what they hold) need not be drawn again.
 */
export function sameItem(a: TimelineItem, b: TimelineItem): boolean {
  return sameValue(a, b, 3);
}

function sameValue(a: unknown, b: unknown, depth: number): boolean {
  if (a === b) return true;
  if (depth === 0 || !a || !b || typeof a !== "object" || typeof b !== "object" || Array.isArray(a) !== Array.isArray(b)) return false;
  const x = a as Record<string, unknown>;
  const y = b as Record<string, unknown>;
  const keys = Object.keys(x);
  return keys.length === Object.keys(y).length && keys.every((k) => Object.hasOwn(y, k) && sameValue(x[k], y[k], depth - 1));
}

/** Adds entries to an offset-ordered list, keeping one copy of each offset. */
export function appendEntries(list: Entry[], more: Entry[]): Entry[] {
  const last = list[list.length - 1]?.offset ?? "";
  if (more.every((e, i) => e.offset > (i === 0 ? last : more[i - 1].offset))) return more.length ? [...list, ...more] : list;
  const byOffset = new Map(list.map((e) => [e.offset, e]));
  for (const e of more) if (!byOffset.has(e.offset)) byOffset.set(e.offset, e);
  return [...byOffset.values()].sort((a, b) => a.offset.localeCompare(b.offset));
}
