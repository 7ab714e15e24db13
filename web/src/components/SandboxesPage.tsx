import { useState } from "preact/hooks";
import type { Session } from "../app";
import { ApiError } from "../lib/api";
import { usePolled } from "../lib/hooks";
import { ErrorNote, Link, ReadOnlyNote, ago } from "./common";
import { environmentLabel } from "../lib/labels";

/** Asks for a preview link to a port of a live box and shows it as a link that opens in a new tab. */
function PreviewForm({ session, boxId }: { session: Session; boxId: string }) {
  const [link, setLink] = useState<{ url: string; expiresAt: string } | null>(null);
  const [error, setError] = useState<ApiError | string | null>(null);
  return (
    <form class="preview small" onSubmit={async (e) => {
      e.preventDefault();
      const port = Number(new FormData(e.currentTarget).get("port"));
      setError(null);
      try {
        setLink(await session.api.previewLink(boxId, port));
      } catch (err) {
        setLink(null);
        setError(err instanceof ApiError ? err : String(err));
      }
    }}>
      <input name="port" type="number" min={1} max={65535} placeholder="port" required aria-label="port" />
      <button type="submit">open port</button>
      {link && <> <a class="preview-link" href={link.url} target="_blank" rel="noreferrer">{link.url}</a></>}
      <ErrorNote error={error} />
    </form>
  );
}

export function SandboxesPage({ session }: { session: Session }) {
  const { data, error } = usePolled(() => session.api.sandboxes(), 4000, [session]);
  // A box's environment by its name, as every other page names it (its id until the list knows it).
  const envs = usePolled(() => session.api.environments(), 4000, [session]);
  const envName = (id: string) => {
    const e = envs.data?.find((x) => x.id === id);
    return e ? environmentLabel(e, envs.data!) : id;
  };
  const [showDeleted, setShowDeleted] = useState(false);
  // Newest first, as the thread list is.
  const boxes = (data ?? []).filter((b) => showDeleted || b.state !== "deleted").sort((a, b) => b.createdAt.localeCompare(a.createdAt));
  return (
    <section>
      <h2>Sandboxes</h2>
      <label class="small"><input type="checkbox" checked={showDeleted} onChange={(e) => setShowDeleted(e.currentTarget.checked)} /> show deleted</label>
      <ReadOnlyNote session={session} cannot="open a port of a box" />
      <ErrorNote error={error} />
      {data && boxes.length === 0 && <p class="empty">No boxes. A delegated task creates one.</p>}
      {boxes.length > 0 && (
        <div class="table-scroll"><table>
          <thead><tr><th>box</th><th>state</th><th>kind</th><th>threads running</th><th>created</th><th>preview</th></tr></thead>
          <tbody>
            {boxes.map((b) => (
              <tr key={b.id} data-box-id={b.id}>
                <td><code>{b.id}</code><div class="muted small">{b.provider} · {b.providerRef}</div></td>
                <td><span class={`badge box-${b.state}`}>{b.state}</span>{b.lastError && <div class="error small">{b.lastError}</div>}</td>
                <td>{b.ephemeral ? "ephemeral" : "shared"}{b.labels["threadbox.environment"] && <div class="muted small">environment {envName(b.labels["threadbox.environment"])}</div>}</td>
                <td>{b.threads.length ? b.threads.map((t) => <div key={t}><Link href={`/threads/${t}`}>{t}</Link></div>) : <span class="muted">none</span>}</td>
                <td class="muted">{ago(b.createdAt)}</td>
                <td>{b.state === "live" && !session.readOnly ? <PreviewForm session={session} boxId={b.id} />
                  : <span class="muted" title={b.state === "live" ? "a read-only token cannot open a box's port" : undefined}>—</span>}</td>
              </tr>
            ))}
          </tbody>
        </table></div>
      )}
    </section>
  );
}
