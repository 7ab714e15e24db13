import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { Api } from "./lib/api";
import { clearToken, isReadOnly, loadToken, readClaims, saveToken, takeTokenFromLocation } from "./lib/auth";
import { matchRoute, onLinkClick, usePath } from "./lib/router";
import { SignIn } from "./components/SignIn";
import { SwitchHouse } from "./components/SwitchHouse";
import { ThreadsPage } from "./components/ThreadsPage";
import { ThreadView } from "./components/ThreadView";
import { SandboxesPage } from "./components/SandboxesPage";
import { EnvironmentsPage } from "./components/EnvironmentsPage";
import { BotsPage } from "./components/BotsPage";

/**
 * `ended`: the server refused its token; its pages wait, hidden, for the next sign-in.
 * `readOnly`: the token's role may only read, so no page offers a write.
 */
export type Session = { api: Api; token: string; houseId?: string; subject?: string; role?: string; readOnly?: boolean; ended?: boolean };

/** `offered`: a sign-in link's token that differs from the stored one, to confirm before switching. */
export function App({ offered = null }: { offered?: string | null }) {
  const [token, setToken] = useState(() => loadToken(localStorage));
  const [offer, setOffer] = useState(offered);
  /** Why the last session ended without the user asking (the server refused its token). */
  const [refused, setRefused] = useState(false);
  // The session whose token the server refused: its pages stay mounted (hidden) under the sign-in
  // form, so a half-written message or form is still there after signing in again.
  const [ended, setEnded] = useState<Session | null>(null);
  const current = useRef(token);
  current.current = token;
  const path = usePath();
  const adopt = (next: string | null) => { setRefused(false); setEnded(null); setToken(next); };
  // A sign-in link opened in this tab changes only the fragment: the page does not load again,
  // so the token is taken (and removed from the address bar) here too.
  useEffect(() => {
    const onHash = () => {
      const another = takeTokenFromLocation(location, history, localStorage);
      if (another) return setOffer(another);
      const next = loadToken(localStorage);
      if (next !== token) adopt(next);
    };
    addEventListener("hashchange", onHash);
    return () => removeEventListener("hashchange", onHash);
  }, [token]);
  const signOut = () => { clearToken(localStorage); adopt(null); };
  const session = useMemo<Session | null>(() => {
    if (!token) return null;
    const c = readClaims(token);
    const s: Session = {
      api: new Api(token, () => {
        // A late answer to a session already ended or replaced changes nothing.
        if (current.current !== token) return;
        clearToken(localStorage);
        setRefused(true);
        setEnded({ ...s, ended: true });
        setToken(null);
      }),
      token, houseId: c.houseId, subject: c.subject, role: c.role, readOnly: isReadOnly(c),
    };
    return s;
  }, [token]);
  const shown = session ?? ended;
  const signIn = <SignIn refused={refused} onToken={(t) => { saveToken(localStorage, t); adopt(t); }} />;
  // Compared with the stored token, which is this tab's unless another tab signed in since.
  const stored = offer ? loadToken(localStorage) : null;
  const asking = offer && stored && offer !== stored ? (
    <SwitchHouse offered={offer} current={stored}
      onSwitch={() => { saveToken(localStorage, offer); setOffer(null); adopt(offer); }}
      onStay={() => { setOffer(null); if (stored !== token) adopt(stored); }} />
  ) : null;
  // Nothing left to ask (another tab signed out, or in with the link's token): the link is dropped.
  useEffect(() => { if (offer && !asking) setOffer(null); });

  if (asking && !shown) return asking;
  if (!shown) return signIn;
  const route = matchRoute(path);
  const nav = (href: string, label: string, active: boolean) => (
    <a href={href} onClick={onLinkClick} class={active ? "active" : ""}>{label}</a>
  );
  return (
    <>
      {asking ?? (!session && signIn)}
      <div class="shell" hidden={!session || !!asking}>
        <header class="topbar">
          <a href="/" onClick={onLinkClick} class="brand">threadbox</a>
          <nav>
            {nav("/", "Threads", route.page === "threads" || route.page === "thread")}
            {nav("/sandboxes", "Sandboxes", route.page === "sandboxes")}
            {nav("/environments", "Environments", route.page === "environments")}
            {nav("/bots", "Bots", route.page === "bots")}
          </nav>
          <span class="who" title="the house this tab is signed in to, and as whom">house <b>{shown.houseId ?? "?"}</b> as <b>{shown.subject ?? "?"}</b>
            {shown.readOnly && <> <span class="badge read-only" title={`this token's role (${shown.role}) may read, not write`}>read-only</span></>}</span>
          <button class="link" onClick={signOut}>Sign out</button>
        </header>
        <main>
          {route.page === "threads" && <ThreadsPage session={shown} />}
          {route.page === "thread" && <ThreadView key={route.id} id={route.id} session={shown} />}
          {route.page === "sandboxes" && <SandboxesPage session={shown} />}
          {route.page === "environments" && <EnvironmentsPage session={shown} />}
          {route.page === "bots" && <BotsPage session={shown} />}
          {route.page === "missing" && <p class="empty">No such page. <a href="/" onClick={onLinkClick}>Threads</a></p>}
        </main>
      </div>
    </>
  );
}
