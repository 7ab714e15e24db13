// A tiny path router over the History API: the worker serves index.html for every app route
// (not_found_handling = "single-page-application").
import { useEffect, useState } from "preact/hooks";

const listeners = new Set<() => void>();

export function navigate(path: string): void {
  if (path === location.pathname) return;
  history.pushState(null, "", path);
  listeners.forEach((l) => l());
}

export function usePath(): string {
  const [path, setPath] = useState(location.pathname);
  useEffect(() => {
    const update = () => setPath(location.pathname);
    listeners.add(update);
    addEventListener("popstate", update);
    return () => {
      listeners.delete(update);
      removeEventListener("popstate", update);
    };
  }, []);
  return path;
}

export type Route =
  | { page: "threads" }
  | { page: "thread"; id: string }
  | { page: "sandboxes" }
  | { page: "environments" }
  | { page: "bots" }
  | { page: "missing" };

export function matchRoute(rawPath: string): Route {
  // A trailing slash names the same page (`/threads/`, `/bots/`).
  const path = rawPath.length > 1 ? rawPath.replace(/\/+$/, "") || "/" : rawPath;
  const thread = /^\/threads\/([^/]+)$/.exec(path);
  if (thread) return { page: "thread", id: decodeURIComponent(thread[1]) };
  if (path === "/" || path === "/threads") return { page: "threads" };
  if (path === "/sandboxes") return { page: "sandboxes" };
  if (path === "/environments") return { page: "environments" };
  if (path === "/bots") return { page: "bots" };
  return { page: "missing" };
}

/** Same-origin link that navigates without a page load (modifier-clicks keep the browser's behaviour). */
export function onLinkClick(e: MouseEvent): void {
  const a = e.currentTarget as HTMLAnchorElement;
  if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  e.preventDefault();
  navigate(a.getAttribute("href")!);
}
