import { useRef, useState } from "preact/hooks";
import type { Session } from "../app";
import type { Agent } from "../lib/api";
import type { ApiError } from "../lib/api";
import { insertMention, mentionQuery } from "../lib/mentions";
import { retrying } from "../lib/retry";
import { ErrorNote } from "./common";
import { randomId } from "../lib/ids";

/** A queued message as one short line. */
const oneLine = (m: string) => {
  const first = m.split("\n")[0];
  return first.length > 120 || first !== m ? `${first.slice(0, 120)}…` : first;
};

type Outgoing = { id: string; text: string };

/** Posts chat to the thread; `@` opens a list of the house's bots to mention. */
/** `onMention`: an `@` was just typed; the list of bots may be older than a bot made since. */
export function Composer({ session, threadId, agents, onMention }: { session: Session; threadId: string; agents: Agent[]; onMention?: () => void }) {
  const [text, setText] = useState("");
  const [query, setQuery] = useState<string | null>(null);
  const [pick, setPick] = useState(0);
  const [error, setError] = useState<ApiError | null>(null);
  // Messages sent but not yet taken by the server, oldest first: Enter while one is on its way
  // queues the next, as a chat does, and the queue goes out in order, one at a time.
  // Each keeps its entry id across retries: one the server took before its answer was lost is not posted twice.
  const outbox = useRef<Outgoing[]>([]);
  const [pending, setPending] = useState<Outgoing[]>([]);
  const [unreachable, setUnreachable] = useState(false);
  const draining = useRef(false);
  // The queue outlives the render that started it: it posts with the session of now (one signed in again).
  const latest = useRef(session);
  latest.current = session;
  const box = useRef<HTMLTextAreaElement>(null);
  const matches = query === null ? [] : agents.filter((a) => a.handle.startsWith(query)).slice(0, 8);

  const update = (el: HTMLTextAreaElement) => {
    setText(el.value);
    const q = mentionQuery(el.value, el.selectionStart ?? el.value.length);
    if (q !== null && query === null) onMention?.();
    setQuery(q);
    setPick(0);
  };
  const choose = (handle: string) => {
    const el = box.current!;
    const next = insertMention(el.value, el.selectionStart ?? el.value.length, handle);
    // Text and caret change now, not on a later frame: keys typed right after Tab land after the mention.
    el.value = next.text;
    el.focus();
    el.setSelectionRange(next.caret, next.caret);
    setText(next.text);
    setQuery(null);
  };
  const send = () => {
    const body = text.trim();
    if (!body) return;
    setError(null);
    // The box empties at once, so what is typed while the message is on its way is the next message.
    setText("");
    setQuery(null);
    outbox.current = [...outbox.current, { id: randomId(), text: body }];
    setPending(outbox.current);
    if (!draining.current) void drain();
  };
  const drain = async () => {
    draining.current = true;
    try {
      while (outbox.current.length > 0) {
        const first = outbox.current[0];
        try {
          // A server restarting or a network gone: the message stays queued and is sent again, under
          // the same id, until it is taken or the window ends (then it is put back).
          await retrying(() => latest.current.api.post(threadId, first.text, first.id), { onRetry: () => setUnreachable(true) });
        } catch (err) {
          // Nothing after a refused message is sent (it would arrive out of order): the refused one
          // and those queued behind it go back in front of what is being typed.
          const back = outbox.current.map((m) => m.text).join("\n");
          outbox.current = [];
          setPending([]);
          setText((typed) => (typed.trim() ? `${back}\n${typed}` : back));
          setError(err as ApiError);
          return;
        } finally {
          setUnreachable(false);
        }
        outbox.current = outbox.current.slice(1);
        setPending(outbox.current);
      }
    } finally {
      draining.current = false;
    }
  };
  const onKeyDown = (e: KeyboardEvent) => {
    // Keys that compose a character (an IME's Enter that commits the word, its arrows) are the
    // input method's, not the composer's: that Enter must not send half a word.
    if (e.isComposing || e.keyCode === 229) return;
    if (matches.length > 0) {
      if (e.key === "ArrowDown" || e.key === "ArrowUp") {
        e.preventDefault();
        setPick((p) => (p + (e.key === "ArrowDown" ? 1 : matches.length - 1)) % matches.length);
        return;
      }
      if (e.key === "Enter" || e.key === "Tab") {
        e.preventDefault();
        choose(matches[pick].handle);
        return;
      }
      if (e.key === "Escape") {
        setQuery(null);
        return;
      }
    }
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      send();
    }
  };
  // Moving the caret (arrows, Home, End) changes no text, yet may leave the mention or enter one:
  // the list follows the caret, or Enter would "choose" a bot where no mention is and send nothing.
  const onKeyUp = (e: KeyboardEvent) => {
    if (e.isComposing) return;
    if (matches.length > 0 && (e.key === "ArrowDown" || e.key === "ArrowUp")) return;
    if (/^(Arrow|Home$|End$|Page)/.test(e.key)) update(e.currentTarget as HTMLTextAreaElement);
  };
  const listId = `mentions-${threadId}`;
  return (
    <form class="composer card" onSubmit={(e) => { e.preventDefault(); send(); }}>
      {matches.length > 0 && (
        <ul class="mentions" role="listbox" id={listId} aria-label="bots to mention">
          {matches.map((a, i) => (
            <li key={a.id} id={`${listId}-${i}`} role="option" aria-selected={i === pick} class={i === pick ? "picked" : ""} onMouseDown={(e) => { e.preventDefault(); choose(a.handle); }}>
              <b>@{a.handle}</b> <span class="muted">{a.name} · {a.model}</span>
            </li>
          ))}
        </ul>
      )}
      {pending.length > 0 && (
        <ul class="outbox muted" aria-live="polite">
          {pending.map((m, i) => <li key={m.id} class="sending">{i === 0 ? (unreachable ? "Sending (the server cannot be reached: trying again)" : "Sending") : "Queued"}: {oneLine(m.text)}</li>)}
        </ul>
      )}
      <textarea ref={box} name="message" aria-label="Message" rows={2} placeholder={agents.length ? "Message… (@ to mention a bot)" : "Message…"}
        value={text} onInput={(e) => update(e.currentTarget)} onKeyDown={onKeyDown} onKeyUp={onKeyUp} onClick={(e) => update(e.currentTarget)}
        // A screen reader hears the list open and which bot Enter or Tab would pick.
        aria-autocomplete="list" aria-controls={matches.length > 0 ? listId : undefined}
        aria-activedescendant={matches.length > 0 ? `${listId}-${Math.min(pick, matches.length - 1)}` : undefined} />
      <button type="submit" disabled={!text.trim()}>Send</button>
      <ErrorNote error={error} />
    </form>
  );
}
