import type { ComponentChildren } from "preact";
import type { Session } from "../app";
import { onLinkClick } from "../lib/router";
import { errorText, type ApiError } from "../lib/api";

export function StatusBadge({ status, reason }: { status: string; reason?: string | null }) {
  return <span class={`badge status-${status}`} title={reason ?? undefined} data-status={status}>{status}{reason && status === "failed" ? ` · ${reason}` : ""}</span>;
}

export function Link({ href, children, class: cls }: { href: string; children: ComponentChildren; class?: string }) {
  return <a href={href} onClick={onLinkClick} class={cls}>{children}</a>;
}

export function ErrorNote({ error }: { error: ApiError | string | null | undefined }) {
  if (!error) return null;
  const text = typeof error === "string" ? error : errorText(error);
  return <p class="error" role="alert">{text}</p>;
}

/** Said while a request that got no answer is sent again (the server restarting, the network gone). */
export function RetryingNote({ retrying }: { retrying: boolean }) {
  if (!retrying) return null;
  return <p class="retrying muted" aria-live="polite">The server cannot be reached: trying again</p>;
}

/** Stands where a read-only token's missing forms and buttons would be: what it cannot do here, and why. */
export function ReadOnlyNote({ session, cannot }: { session: Session; cannot: string }) {
  if (!session.readOnly) return null;
  return <p class="read-only-note muted" data-read-only>This token is read-only (role {session.role}): it cannot {cannot}. Sign in with a member's token to do that.</p>;
}

export function ago(iso: string | number): string {
  const s = Math.max(0, Math.round((Date.now() - (typeof iso === "number" ? iso : Date.parse(iso))) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  if (s < 86400) return `${Math.round(s / 3600)}h ago`;
  return `${Math.round(s / 86400)}d ago`;
}

/** Parses KEY=value lines (blank lines and # comments skipped). */
export function parseKeyValues(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    const i = line.indexOf("=");
    if (i <= 0) throw new Error(`"${line}" is not KEY=value`);
    out[line.slice(0, i).trim()] = line.slice(i + 1);
  }
  return out;
}
