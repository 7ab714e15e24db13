import { useEffect, useMemo, useState } from "preact/hooks";
import { Api } from "./lib/api";
import { clearToken, loadToken, readClaims, saveToken, takeTokenFromLocation } from "./lib/auth";
import { matchRoute, onLinkClick, usePath } from "./lib/router";
import { SignIn } from "./components/SignIn";
import { ThreadsPage } from "./components/ThreadsPage";
import { ThreadView } from "./components/ThreadView";
import { SandboxesPage } from "./components/SandboxesPage";
import { EnvironmentsPage } from "./components/EnvironmentsPage";
import { BotsPage } from "./components/BotsPage";

export type Session = { api: Api; token: string; houseId?: string; subject?: string };

export function App() {
  const [token, setToken] = useState(() => loadToken(localStorage));
  /** Why the last session ended without the user asking (the server refused its token). */
  const [refused, setRefused] = useState(false);
  const path = usePath();
  // A sign-in link opened in this tab changes only the fragment: the page does not load again,
  // so the token is taken (and removed from the address bar) here too.
  useEffect(() => {
    const onHash = () => {
      takeTokenFromLocation(location, history, localStorage);
      const next = loadToken(localStorage);
      if (next !== token) { setRefused(false); setToken(next); }
    };
    addEventListener("hashchange", onHash);
    return () => removeEventListener("hashchange", onHash);
  }, [token]);
  const signOut = (byServer = false) => { clearToken(localStorage); setRefused(byServer); setToken(null); };
  const session = useMemo<Session | null>(() => {
    if (!token) return null;
    const c = readClaims(token);
    return { api: new Api(token, () => signOut(true)), token, houseId: c.houseId, subject: c.subject };
  }, [token]);

  if (!session) {
    return <SignIn refused={refused} onToken={(t) => { saveToken(localStorage, t); setRefused(false); setToken(t); }} />;
  }
  const route = matchRoute(path);
  const nav = (href: string, label: string, active: boolean) => (
    <a href={href} onClick={onLinkClick} class={active ? "active" : ""}>{label}</a>
  );
  return (
    <div class="shell">
      <header class="topbar">
        <a href="/" onClick={onLinkClick} class="brand">threadbox</a>
        <nav>
          {nav("/", "Threads", route.page === "threads" || route.page === "thread")}
          {nav("/sandboxes", "Sandboxes", route.page === "sandboxes")}
          {nav("/environments", "Environments", route.page === "environments")}
          {nav("/bots", "Bots", route.page === "bots")}
        </nav>
        <span class="who" title={session.subject}>house <b>{session.houseId ?? "?"}</b></span>
        <button class="link" onClick={() => signOut()}>Sign out</button>
      </header>
      <main>
        {route.page === "threads" && <ThreadsPage session={session} />}
        {route.page === "thread" && <ThreadView key={route.id} id={route.id} session={session} />}
        {route.page === "sandboxes" && <SandboxesPage session={session} />}
        {route.page === "environments" && <EnvironmentsPage session={session} />}
        {route.page === "bots" && <BotsPage session={session} />}
        {route.page === "missing" && <p class="empty">No such page. <a href="/" onClick={onLinkClick}>Threads</a></p>}
      </main>
    </div>
  );
}
