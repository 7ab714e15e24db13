import { useRef, useState } from "preact/hooks";
import type { Session } from "../app";
import type { Agent } from "../lib/api";
import { ApiError } from "../lib/api";
import { insertMention, mentionQuery } from "../lib/mentions";
import { ErrorNote } from "./common";

/** Posts chat to the thread; `@` opens a list of the house's bots to mention. */
/** `onMention`: an `@` was just typed; the list of bots may be older than a bot made since. */
export function Composer({ session, threadId, agents, onMention }: { session: Session; threadId: string; agents: Agent[]; onMention?: () => void }) {
  const [text, setText] = useState("");
  const [query, setQuery] = useState<string | null>(null);
  const [pick, setPick] = useState(0);
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);
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
  const send = async () => {
    const body = text.trim();
    if (!body || busy) return;
    setBusy(true);
    setError(null);
    // The box empties at once, so what is typed while the message is on its way is the next
    // message; a message the server refused goes back in front of it.
    setText("");
    setQuery(null);
    try {
      await session.api.post(threadId, body);
    } catch (err) {
      setText((typed) => (typed.trim() ? `${body}\n${typed}` : body));
      setError(err as ApiError);
    } finally {
      setBusy(false);
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
  return (
    <form class="composer card" onSubmit={(e) => { e.preventDefault(); send(); }}>
      {matches.length > 0 && (
        <ul class="mentions" role="listbox">
          {matches.map((a, i) => (
            <li key={a.id} role="option" aria-selected={i === pick} class={i === pick ? "picked" : ""} onMouseDown={(e) => { e.preventDefault(); choose(a.handle); }}>
              <b>@{a.handle}</b> <span class="muted">{a.name} · {a.model}</span>
            </li>
          ))}
        </ul>
      )}
      <textarea ref={box} name="message" aria-label="Message" rows={2} placeholder={agents.length ? "Message… (@ to mention a bot)" : "Message…"}
        value={text} onInput={(e) => update(e.currentTarget)} onKeyDown={onKeyDown} onClick={(e) => update(e.currentTarget)} />
      <button type="submit" disabled={busy || !text.trim()}>Send</button>
      <ErrorNote error={error} />
    </form>
  );
}
