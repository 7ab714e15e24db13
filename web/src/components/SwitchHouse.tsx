import type { ComponentChildren } from "preact";
import { readClaims } from "../lib/auth";

/** Who a token signs in as, for the user to compare; its claims are read, not verified. */
function whom(token: string): ComponentChildren {
  const c = readClaims(token);
  return <>house <b>{c.houseId ?? "?"}</b> as <b>{c.subject ?? "?"}</b>{c.role && ` (${c.role})`}</>;
}

/**
 * A sign-in link carrying another token than the one in use: asked, never switched silently, since
 * anyone can send a link with a token of their own house. Staying is the default (Enter, Escape).
 */
export function SwitchHouse({ offered, current, onSwitch, onStay }: { offered: string; current: string; onSwitch: () => void; onStay: () => void }) {
  const [now, next] = [readClaims(current), readClaims(offered)];
  // The buttons name what differs: the house, else the subject, else only the token (its role).
  const [stay, go] = now.houseId !== next.houseId ? [`Stay in house ${now.houseId ?? "?"}`, `Switch to house ${next.houseId ?? "?"}`]
    : now.subject !== next.subject ? [`Stay as ${now.subject ?? "?"}`, `Switch to ${next.subject ?? "?"}`]
    : ["Keep the current sign-in", "Use the link's token"];
  return (
    <form class="switch-house signin card" onSubmit={(e) => { e.preventDefault(); onStay(); }}
      onKeyDown={(e) => { if (e.key === "Escape") onStay(); }}>
      <h1>Switch sign-in?</h1>
      <p>This link signs you in to {whom(offered)} instead of {whom(current)}.</p>
      <p class="muted">Switch only if you expected this link: whatever you type after switching (messages, environment secrets) goes to that house.</p>
      <div class="row actions">
        <button type="submit" autofocus>{stay}</button>
        <button type="button" class="link" onClick={onSwitch}>{go}</button>
      </div>
    </form>
  );
}
