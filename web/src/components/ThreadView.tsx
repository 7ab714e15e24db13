import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import type { Session } from "../app";
import type { Agent, Entry, ThreadSummary } from "../lib/api";
import { ApiError } from "../lib/api";
import { useHouseList, usePolled } from "../lib/hooks";
import { ThreadSubscription, type LinkState } from "../lib/subscription";
import { appendEntries, buildTimeline } from "../lib/timeline";
import { ActionKey } from "../lib/retry";
import { ErrorNote, Link, ReadOnlyNote, RetryingNote, StatusBadge } from "./common";
import { Timeline } from "./Timeline";
import { Composer } from "./Composer";
import { DelegateForm } from "./DelegateForm";
import { environmentLabel } from "../lib/labels";

export function ThreadView({ id, session }: { id: string; session: Session }) {
  const [entries, setEntries] = useState<Entry[]>([]);
  const [link, setLink] = useState<LinkState>("connecting");
  const [actionError, setActionError] = useState<ApiError | null>(null);
  const [resumeText, setResumeText] = useState("");
  const thread = usePolled(() => session.api.thread(id), 5000, [id, session]);
  // Nothing is subscribed to or polled for a thread this house cannot read (unknown, another house's).
  const readable = thread.data?.id === id;
  const children = usePolled(() => session.api.threads(`parent=${encodeURIComponent(id)}&limit=200`), readable ? 2500 : 0, [id, session, readable]);
  const agents = useHouseList(() => session.api.agents(), [session]);
  const environments = useHouseList(() => session.api.environments(), [session]);
  const refreshRows = useRef(() => {});
  refreshRows.current = () => { thread.reload(); children.reload(); };

  useEffect(() => {
    setEntries([]);
    if (!readable || session.ended) return;
    // A catch-up replays the whole thread one frame per entry: render them in batches.
    let pending: Entry[] = [];
    let flush: ReturnType<typeof setTimeout> | undefined;
    const sub = new ThreadSubscription({
      threadId: id,
      token: session.token,
      onEntry: (entry) => {
        pending.push(entry);
        flush ??= setTimeout(() => {
          const batch = pending;
          pending = [];
          flush = undefined;
          setEntries((list) => appendEntries(list, batch));
          if (batch.some((e) => e.payload.type.startsWith("signal.thread."))) refreshRows.current();
        }, 16);
      },
      onState: setLink,
      onTokenExpired: () => session.api.refuse(),
      // A 401 there ends the session (the Api's onUnauthorized); other failures are retried anyway.
      onFailedToOpen: () => { session.api.thread(id).catch(() => {}); },
    }).start();
    return () => { sub.close(); clearTimeout(flush); };
  }, [id, session.token, session.ended, readable]);

  const bots = useMemo(() => new Map((agents.data ?? []).map((a) => [a.id, a.handle])), [agents.data]);
  const items = useMemo(() => buildTimeline(entries, children.data ?? [], { me: session.subject, bots }), [entries, children.data, bots]);

  // Follow new entries while the reader is at the bottom; leave them be when they scrolled up.
  const bottom = useRef<HTMLDivElement>(null);
  const following = useRef(true);
  // How far a following reader is from the page's bottom: kept as entries arrive, so a reader
  // typing in the composer below the timeline keeps it in view, the newest entries appearing above it.
  const fromBottom = useRef<number | null>(null);
  useEffect(() => {
    // Only the reader scrolling up stops the following; by the time a scroll event comes, more
    // entries may have made the page taller than "the bottom" it was measured against. The end of
    // the timeline in view is following: a scroll of ours goes up when the oldest items drawn are
    // let go and were taller than the newest, and the composer below keeps that end above the
    // page's bottom, so neither may read as the reader scrolling away.
    let lastY = scrollY;
    const onScroll = () => {
      if (scrollY < lastY) following.current = false;
      const end = bottom.current?.getBoundingClientRect().bottom;
      const endInView = end !== undefined && end <= innerHeight + 80;
      if (innerHeight + scrollY >= document.body.scrollHeight - 80 || endInView) following.current = true;
      fromBottom.current = following.current && endInView ? document.body.scrollHeight - innerHeight - scrollY : null;
      lastY = scrollY;
    };
    addEventListener("scroll", onScroll, { passive: true });
    return () => removeEventListener("scroll", onScroll);
  }, []);
  useEffect(() => {
    if (!following.current) return;
    if (fromBottom.current !== null) scrollTo(0, document.body.scrollHeight - innerHeight - fromBottom.current);
    const end = bottom.current?.getBoundingClientRect().bottom;
    if (fromBottom.current === null || (end !== undefined && end > innerHeight)) bottom.current?.scrollIntoView({ block: "end" });
  }, [items.length]);

  // One action at a time, until the thread's new state is shown: a second click on Stop would
  // otherwise be refused ("not running") after the first one did it.
  const [acting, setActing] = useState(false);
  const [retrying, setRetrying] = useState(false);
  // A resume whose answer is lost is asked again under its key: one run, however often it is sent.
  const resumeKey = useRef(new ActionKey());
  const resume = (message: string) => resumeKey.current.send({ id, message }, (key) => session.api.resume(id, message, key), () => setRetrying(true))
    .finally(() => setRetrying(false));
  const act = async (fn: () => Promise<unknown>): Promise<boolean> => {
    if (acting) return false;
    setActing(true);
    setActionError(null);
    try {
      await fn();
      await thread.reload();
      return true;
    } catch (err) {
      setActionError(err as ApiError);
      return false;
    } finally {
      setActing(false);
    }
  };
  const t = thread.data;
  const heading = t?.title || id;
  const environment = t?.environmentId ? environments.data?.find((e) => e.id === t.environmentId) : undefined;
  // As the pickers and the Sandboxes page name it (its id too when another has its name; its id alone until the list knows it).
  const environmentName = t?.environmentId ? (environment ? environmentLabel(environment, environments.data!) : t.environmentId) : null;
  // The tab says which thread it is, among several open.
  useEffect(() => {
    document.title = `${heading} · threadbox`;
    return () => { document.title = "threadbox"; };
  }, [heading]);
  if (thread.error?.status === 404) return <p class="empty">Thread {id} not found. <Link href="/">Threads</Link></p>;
  return (
    <section class="thread">
      <header class="thread-head">
        <div>
          <h2 dir="auto">{heading}</h2>
          <div class="muted small">
            {id}
            {t?.parent.kind === "thread" && t.parent.id && <> · child of <Link href={`/threads/${t.parent.id}`}>{t.parent.id}</Link></>}
            {t?.parent.kind === "agent" && t.parent.id && (bots.has(t.parent.id) || !agents.data
              ? <> · direct messages with <b>@{bots.get(t.parent.id) ?? t.parent.id}</b></>
              : <> · direct messages with a bot that was deleted (<code>{t.parent.id}</code>): nobody answers here any more</>)}
            {/* What the thread's bots and runs get their box and model from; without one, a bot has no hands here. */}
            {t && (environmentName
              ? <> · environment <b data-environment={t.environmentId}>{environmentName}</b></>
              : <> · <span data-environment="" title="a bot here has no box to run a command in or delegate from; a delegated run needs an environment picked">no environment</span></>)}
            {t?.boxId && <> · box {t.boxId}</>}
          </div>
        </div>
        <div class="head-actions">
          {t && <StatusBadge status={t.status} reason={t.reason} />}
          <span class={`link-state link-${link}`} data-link={link}>{link}</span>
          {t?.status === "running" && !session.readOnly && <button class="interrupt" disabled={acting} title="abort the agent's current turn; the run waits for your next message" onClick={() => act(() => session.api.interrupt(id))}>Interrupt</button>}
          {t?.status === "running" && !session.readOnly && <button class="danger" disabled={acting} onClick={() => act(() => session.api.stop(id))}>Stop</button>}
        </div>
      </header>
      <ErrorNote error={thread.error ?? actionError} />
      <Timeline items={items} empty={emptyHint(t, agents.data, session.readOnly)} following={() => following.current} />
      <div ref={bottom} />
      <ReadOnlyNote session={session} cannot="post, delegate, interrupt, stop or resume a run" />
      {(t?.status === "completed" || t?.status === "failed") && !session.readOnly && (
        <form class="card row" onSubmit={(e) => { e.preventDefault(); act(() => resume(resumeText.trim())).then((ok) => ok && setResumeText("")); }}>
          <input name="resume" aria-label="Message to resume the run with" placeholder="Tell the agent what to do next, then resume the run" value={resumeText} onInput={(e) => setResumeText(e.currentTarget.value)} />
          <button type="submit" disabled={acting || !resumeText.trim()}>Resume</button>
          <RetryingNote retrying={retrying} />
        </form>
      )}
      {!session.readOnly && <>
        <Composer session={session} threadId={id} agents={agents.data ?? []} onMention={agents.reload} />
        <DelegateForm session={session} threadId={id} defaultEnvironmentId={t?.environmentId ?? undefined} onStarted={() => children.reload()} />
      </>}
    </section>
  );
}

/**
 * What an empty thread tells someone about to write in it: a bot answers only when its @handle is
 * mentioned (outside its direct messages), so a first plain message would otherwise meet silence.
 */
function emptyHint(t: ThreadSummary | undefined, agents: Agent[] | null | undefined, readOnly: boolean | undefined) {
  if (readOnly || !t || !agents?.length) return undefined;
  const dm = t.parent.kind === "agent" ? agents.find((a) => a.id === t.parent.id) : undefined;
  if (dm) return <>Nothing here yet: every message here goes to <b>@{dm.handle}</b>.</>;
  const bot = agents[0].handle;
  return <>Nothing here yet. Bots answer when mentioned: try <code>@{bot} write hello.txt containing hi</code>, or delegate a task below.</>;
}
