import { useState } from "preact/hooks";
import type { Session } from "../app";
import type { ThreadSummary } from "../lib/api";
import { ApiError } from "../lib/api";
import { usePolled } from "../lib/hooks";
import { navigate } from "../lib/router";
import { ErrorNote, Link, StatusBadge, ago } from "./common";

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
        <Link href={`/threads/${t.id}`}>{t.title || t.id}</Link>
        <span class="muted">{ago(t.createdAt)}</span>
      </div>
      {node.children.length > 0 && <ul>{[...node.children].reverse().map((c) => <TreeNode key={c.thread.id} node={c} />)}</ul>}
    </li>
  );
}

export function ThreadsPage({ session }: { session: Session }) {
  const { data, error } = usePolled(() => session.api.threads(), 3000, [session]);
  const envs = usePolled(() => session.api.environments(), 0, [session]);
  const [title, setTitle] = useState("");
  const [environmentId, setEnvironmentId] = useState("");
  const [createError, setCreateError] = useState<ApiError | null>(null);

  const create = async (e: Event) => {
    e.preventDefault();
    try {
      const t = await session.api.createThread({ title: title.trim() || undefined, environmentId: environmentId || undefined });
      navigate(`/threads/${t.id}`);
    } catch (err) {
      setCreateError(err as ApiError);
    }
  };
  const roots = data ? threadTree(data) : [];
  return (
    <section>
      <form class="card row" onSubmit={create}>
        <input name="title" placeholder="New thread title" value={title} onInput={(e) => setTitle(e.currentTarget.value)} />
        <select name="environment" value={environmentId} onChange={(e) => setEnvironmentId(e.currentTarget.value)}>
          <option value="">no environment</option>
          {envs.data?.map((env) => <option key={env.id} value={env.id}>{env.name}</option>)}
        </select>
        <button type="submit">New thread</button>
      </form>
      <ErrorNote error={createError ?? error} />
      <h2>Threads</h2>
      {data && roots.length === 0 && <p class="empty">No threads yet. Create one above.</p>}
      <ul class="tree">{roots.map((n) => <TreeNode key={n.thread.id} node={n} />)}</ul>
    </section>
  );
}
