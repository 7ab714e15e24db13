import { Component, type ComponentChildren } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { sameItem, toolNotRun, unshownEntryLabel, type ArtifactItem, type TimelineItem, type ToolItem } from "../lib/timeline";
import { chatPreview } from "../lib/fold";
import { diffOfToolCall, looksLikeDiff, parseUnifiedDiff, type DiffLine } from "../lib/diff";
import { Link, StatusBadge } from "./common";
import { terminalText } from "../lib/terminal";
import { entryTime, fullTime } from "../lib/time";

function Time({ ts }: { ts: number }) {
  return <time class="muted" dateTime={new Date(ts).toISOString()} title={fullTime(ts)}>{entryTime(ts)}</time>;
}

export function DiffView({ lines }: { lines: DiffLine[] }) {
  return <pre class="diff">{lines.map((l, i) => <div key={i} class={`d-${l.kind}`}>{l.text || " "}</div>)}</pre>;
}

function Output({ text: raw }: { text: string }) {
  const text = terminalText(raw);
  return looksLikeDiff(text) ? <DiffView lines={parseUnifiedDiff(text)} /> : <pre class="output">{text}</pre>;
}

function summary(item: ToolItem): string {
  const a = (item.args ?? {}) as Record<string, unknown>;
  const first = a.command ?? a.path ?? a.file_path ?? a.pattern ?? a.url;
  return typeof first === "string" ? first.split("\n")[0].slice(0, 120) : "";
}

/** A running command's output: it follows the newest line, unless the reader scrolled up to read. */
function LiveText({ text }: { text: string }) {
  const pre = useRef<HTMLPreElement>(null);
  const following = useRef(true);
  useEffect(() => {
    const el = pre.current;
    if (el && following.current) el.scrollTop = el.scrollHeight;
  }, [text]);
  const onScroll = () => {
    const el = pre.current;
    if (el) following.current = el.scrollHeight - el.scrollTop - el.clientHeight < 24;
  };
  return <pre class="output live" ref={pre} onScroll={onScroll}>{terminalText(text)}</pre>;
}

const STATE_LABEL = { running: "…", error: "failed", output: "output", stopped: "stopped", notrun: "not run", done: "done" } as const;

function ToolCall({ item }: { item: ToolItem }) {
  const r = item.result?.payload;
  const state = item.liveOnly ? "output" : !r ? (item.cutShort ? "stopped" : "running") : r.isError ? "error" : toolNotRun(r) ? "notrun" : "done";
  const diff = diffOfToolCall(item.name, item.args);
  // A call that starts showing output while it runs opens once, so the output is seen; the
  // reader may close it again.
  const details = useRef<HTMLDetailsElement>(null);
  const opened = useRef(false);
  const streaming = !r && item.live !== undefined;
  useEffect(() => {
    if (streaming && !opened.current && details.current) {
      opened.current = true;
      details.current.open = true;
    }
  }, [streaming]);
  return (
    <details ref={details} class={`tool tool-${state}`} data-offset={item.call?.offset ?? item.result?.offset} data-tool={item.name}>
      <summary>
        <span class="tool-name">{item.name}</span>
        <span class="tool-summary">{summary(item)}</span>
        <span class={`tool-state`}>{STATE_LABEL[state]}</span>
      </summary>
      <div class="tool-body">
        {!item.liveOnly && (diff ? <DiffView lines={diff} /> : <pre class="args">{JSON.stringify(item.args ?? {}, null, 2)}</pre>)}
        {r ? <Output text={typeof r.output === "string" ? r.output : JSON.stringify(r.output ?? "", null, 2)} /> : item.live !== undefined && <LiveText text={item.live} />}
      </div>
    </details>
  );
}

function Artifacts({ item }: { item: ArtifactItem }) {
  const files = item.files ?? [];
  return (
    <details class="artifacts card" data-kind="artifacts" data-run={item.runId} open>
      <summary>
        <b>What the run produced</b> <span class="muted">{files.length} file{files.length === 1 ? "" : "s"} changed</span>
      </summary>
      <ul class="artifact-files">
        {files.map((f) => (
          <li key={f.path} data-path={f.path}>
            <span class={`file-status file-${f.status}`}>{f.status}</span> <code>{f.path}</code>{" "}
            <span class="muted">{f.size} B{f.omitted ? ` · ${f.omitted.replace("_", " ")}` : ""}</span>
            {f.content !== undefined && !item.diff && <pre class="output">{f.content}</pre>}
          </li>
        ))}
      </ul>
      {item.diff && item.diff.text && <DiffView lines={parseUnifiedDiff(item.diff.text)} />}
      {item.diff?.truncated && <p class="muted">Diff cut here{item.diff.stream ? `; the whole diff is the plain stream ${item.diff.stream}` : ""}.</p>}
    </details>
  );
}

/** A message's text: in its own direction (a right-to-left one stays so among left-to-right ones), long ones folded. */
function ChatText({ text: raw }: { text: string }) {
  // A bot's answer may quote a command's output, colour codes and all.
  const text = terminalText(raw);
  const [open, setOpen] = useState(false);
  const toggle = useRef<HTMLButtonElement>(null);
  const preview = chatPreview(text);
  const flip = (next: boolean) => {
    setOpen(next);
    // The button is drawn anew where the text ends: keyboard focus goes with it.
    setTimeout(() => toggle.current?.focus(), 0);
  };
  return (
    <div class="bubble-text" dir="auto">
      {preview !== null && !open ? `${preview}…` : text}
      {preview !== null && (
        <div>
          {open
            ? <button type="button" ref={toggle} class="link show-less" onClick={() => flip(false)}>Show less</button>
            : <button type="button" ref={toggle} class="link show-all" onClick={() => flip(true)}>Show all ({text.length.toLocaleString()} characters)</button>}
        </div>
      )}
    </div>
  );
}

/** One item that fails to render is named in its place; the rest of the thread is still shown. */
class ItemBoundary extends Component<{ item: TimelineItem; children: ComponentChildren }, { failed: boolean }> {
  state = { failed: false };
  static getDerivedStateFromError() {
    return { failed: true };
  }
  render() {
    if (!this.state.failed) return this.props.children;
    const { item } = this.props;
    const entry = item.kind === "tool" ? item.call ?? item.result : item.kind === "child" ? undefined : item.entry;
    return (
      <li class="mark mark-bad" data-offset={entry?.offset} data-kind={entry?.payload.type}>
        <span class="dot" /> {entry ? unshownEntryLabel(entry.payload.type) : "a child thread this page cannot show"}
      </li>
    );
  }
}

/** How many of a thread's newest items are drawn at first; earlier ones a page at a time. */
export const TIMELINE_PAGE = 500;

/**
 * `empty`: what an empty thread says instead of the default (who answers a message here).
 * `following`: whether the page keeps the newest entry in view (the reader has not scrolled up).
 */
export function Timeline({ items, empty, following = () => true }: { items: TimelineItem[]; empty?: ComponentChildren; following?: () => boolean }) {
  // How many items at the top are not drawn. Until the reader asks for earlier ones, only the newest
  // TIMELINE_PAGE are: drawing a thread of thousands of entries again on every batch took seconds
  // per batch, and its DOM hundreds of MB. The window moves on with new items only while the page
  // follows them (under a reader who scrolled up, nothing is taken away); once earlier ones are
  // asked for, it starts where it was put.
  const [start, setStart] = useState<number | null>(null);
  const sliding = useRef(0);
  if (following()) sliding.current = Math.max(sliding.current, items.length - TIMELINE_PAGE);
  const hidden = start ?? sliding.current;
  const earlier = useRef<HTMLButtonElement>(null);
  const day = new Date().toDateString();
  if (items.length === 0) return <p class="empty">{empty ?? "Nothing here yet: post a message or delegate a task below."}</p>;
  const showEarlier = () => {
    const anchor = earlier.current?.parentElement?.nextElementSibling;
    const before = anchor?.getBoundingClientRect().top;
    setStart(Math.max(0, hidden - TIMELINE_PAGE));
    // What was read stays where it was on screen; the earlier entries appear above it.
    setTimeout(() => {
      if (anchor && before !== undefined) scrollBy(0, anchor.getBoundingClientRect().top - before);
      earlier.current?.focus();
    }, 0);
  };
  return (
    <ol class="timeline">
      {hidden > 0 && (
        <li class="earlier">
          <button type="button" ref={earlier} class="link show-earlier" onClick={showEarlier}>
            Show earlier entries ({hidden.toLocaleString()} not shown)
          </button>
        </li>
      )}
      {(hidden ? items.slice(hidden) : items).map((item) => <ItemBoundary key={item.key} item={item}><Row item={item} day={day} /></ItemBoundary>)}
    </ol>
  );
}

/**
 * Each batch builds every item anew: a row whose item draws the same is left as it is, until the
 * day changes (its time then shows its date).
 */
class Row extends Component<{ item: TimelineItem; day: string }> {
  shouldComponentUpdate(next: { item: TimelineItem; day: string }) {
    return next.day !== this.props.day || !sameItem(this.props.item, next.item);
  }
  render() {
    return <RowOf item={this.props.item} />;
  }
}

function RowOf({ item }: { item: TimelineItem }) {
  switch (item.kind) {
    case "chat":
      return (
        <li class={`bubble bubble-${item.role}${item.childOutcome?.failed ? " bubble-failed" : ""}`} data-offset={item.entry.offset} data-kind="chat"
          data-outcome={item.childOutcome ? (item.childOutcome.failed ? "failed" : "completed") : undefined}>
          <div class="bubble-head">
            <b>{item.author}</b>
            {item.childOutcome?.failed && <> <span class="outcome">{item.childOutcome.status}{item.childOutcome.reason ? ` (${item.childOutcome.reason})` : ""}</span></>}
            {item.childThreadId && <> <Link href={`/threads/${item.childThreadId}`}>open</Link></>}
            {" "}<Time ts={item.entry.ts} />
          </div>
          <ChatText text={item.text} />
        </li>
      );
    case "tool":
      return <li class="tool-item"><ToolCall item={item} /></li>;
    case "signal":
      return (
        <li class={`mark mark-${item.tone}`} data-offset={item.entry.offset} data-kind={item.entry.payload.type}>
          <span class="dot" /> {item.label}
          {item.childThreadId && <> · <Link href={`/threads/${item.childThreadId}`}>open</Link></>}
          {" "}<Time ts={item.entry.ts} />
        </li>
      );
    case "artifact":
      return <li class="artifact-item" data-offset={item.entry.offset}><Artifacts item={item} /></li>;
    case "child":
      return (
        <li class="child card" data-child-id={item.thread.id}>
          <span class="muted">child thread</span>
          <Link href={`/threads/${item.thread.id}`}><bdi>{item.thread.title || item.thread.id}</bdi></Link>
          <StatusBadge status={item.thread.status} reason={item.thread.reason} />
        </li>
      );
  }
}
