import { useRef, useState } from "preact/hooks";
import type { Session } from "../app";
import type { ThreadSummary } from "../lib/api";
import { ApiError } from "../lib/api";
import { useHouseList, usePolled } from "../lib/hooks";
import { navigate } from "../lib/router";
import { ActionKey } from "../lib/retry";
import { ErrorNote, Link, ReadOnlyNote, RetryingNote, StatusBadge, ago } from "./common";
import { environmentLabel } from "../lib/labels";

type Node = { thread: ThreadSummary; children: Node[] };

/** Parents and children: a thread whose parent is not in the list is shown as a root. */
export function threadTree(threads: ThreadSummary[]): Node[] {
  const nodes = new Map(threads.map((t) => [t.id, { thread: t, children: [] as Node[] }]));
  const roots: Node[] = [];
  for (const node of nodes.values()) {
    const parentId = node.thread.parent.kind === "thread" ? node.thread.parent.id : null;
    const parent = parentId ? nodes.get(parentId) : undefined;
    (parent ? parent.children : roots).push(node);
  }
  return roots;
}

function TreeNode({ node }: { node: Node }) {
  const t = node.thread;
  return (
    <li>
      <div class="tree-row" data-thread-id={t.id}>
        <StatusBadge status={t.status} reason={t.reason} />
        <Link href={`/threads/${t.id}`}><bdi>{t.title || t.id}</bdi></Link>
        <span class="muted">{ago(t.createdAt)}</span>
      </div>
      {node.children.length > 0 && <ul>{[...node.children].reverse().map((c) => <TreeNode key={c.thread.id} node={c} />)}</ul>}
    </li>
  );
}

/** The most threads one request lists (the API's own cap): older ones come a page at a time, on request. */
export const THREADS_PAGE = 1000;

export function ThreadsPage({ session }: { session: Session }) {
  const { data: newest, error } = usePolled(() => session.api.threads(`limit=${THREADS_PAGE}`), 3000, [session]);
  // Older pages are loaded once, when asked for; the newest page keeps being polled.
  const [older, setOlder] = useState<{ threads: ThreadSummary[]; more: boolean }>({ threads: [], more: true });
  const [olderError, setOlderError] = useState<ApiError | null>(null);
  const data = newest ? [...newest, ...older.threads.filter((o) => !newest.some((n) => n.id === o.id))] : null;
  const mayHaveOlder = !!newest && newest.length >= THREADS_PAGE && older.more;
  const loadOlder = async () => {
    const last = data?.at(-1);
    if (!last) return;
    try {
      const page = await session.api.threads(`limit=${THREADS_PAGE}&before=${encodeURIComponent(last.createdAt)}&beforeId=${encodeURIComponent(last.id)}`);
      setOlder({ threads: [...older.threads, ...page], more: page.length >= THREADS_PAGE });
    } catch (err) {
      setOlderError(err as ApiError);
    }
  };
  const envs = useHouseList(() => session.api.environments(), [session]);
  const [title, setTitle] = useState("");
  // null until the user picks: a house with one environment (npm run dev's `demo`) starts on it, since a
  // thread's environment is fixed at creation and without one its bots have nowhere to run anything.
  const [picked, setPicked] = useState<string | null>(null);
  const environmentId = picked ?? (envs.data?.length === 1 ? envs.data[0].id : "");
  const [createError, setCreateError] = useState<ApiError | null>(null);

  // One thread per press: a double click made two.
  const [creating, setCreating] = useState(false);
  const [retrying, setRetrying] = useState(false);
  // A lost answer is asked again under the press's key: one thread, however often it is sent.
  const createKey = useRef(new ActionKey());
  const create = async (e: Event) => {
    e.preventDefault();
    if (creating) return;
    setCreating(true);
    setCreateError(null);
    try {
      const body = { title: title.trim() || undefined, environmentId: environmentId || undefined };
      const t = await createKey.current.send(body, (key) => session.api.createThread(body, key), () => setRetrying(true));
      navigate(`/threads/${t.id}`);
    } catch (err) {
      setCreateError(err as ApiError);
    } finally {
      setCreating(false);
      setRetrying(false);
    }
  };
  const roots = data ? threadTree(data) : [];
  return (
    <section>
      <ReadOnlyNote session={session} cannot="start a thread" />
      {!session.readOnly && <form class="card row" onSubmit={create}>
        <input name="title" aria-label="New thread title" placeholder="New thread title" value={title} onInput={(e) => setTitle(e.currentTarget.value)} />
        <select name="environment" aria-label="Environment of the new thread" value={environmentId} onFocus={envs.reload} onChange={(e) => setPicked(e.currentTarget.value)}>
          <option value="">no environment</option>
          {envs.data?.map((env, _i, all) => <option key={env.id} value={env.id}>{environmentLabel(env, all)}</option>)}
        </select>
        <button type="submit" disabled={creating}>New thread</button>
        <RetryingNote retrying={retrying} />
      </form>}
      <ErrorNote error={createError ?? error ?? olderError} />
      <h2>Threads</h2>
      {data && roots.length === 0 && <p class="empty">No threads yet.{session.readOnly ? "" : " Create one above."}</p>}
      <ul class="tree">{roots.map((n) => <TreeNode key={n.thread.id} node={n} />)}</ul>
      {mayHaveOlder && (
        <p class="muted">
          The newest {data!.length} threads. <button type="button" class="link" onClick={loadOlder}>Show older threads</button>
        </p>
      )}
    </section>
  );
}
