import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { ApiError } from "./api";

/** `reload` settles once the answer is shown. */
export type Loaded<T> = { data: T | undefined; error: ApiError | null; reload: () => Promise<void> };

/** Loads `fn` now and every `everyMs` while the page is visible (live lists: statuses, boxes). */
export function usePolled<T>(fn: () => Promise<T>, everyMs: number, deps: unknown[]): Loaded<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<ApiError | null>(null);
  const fnRef = useRef(fn);
  fnRef.current = fn;
  // A 404 will not turn into something by asking again: polling stops until the deps change.
  const gone = useRef(false);
  const reload = useCallback(() =>
    fnRef.current().then(
      (d) => { setData(d); setError(null); gone.current = false; },
      (e) => {
        const err = e instanceof ApiError ? e : new ApiError(0, "error", String(e));
        gone.current = err.status === 404;
        setError(err);
      },
    ), []);
  useEffect(() => {
    gone.current = false;
    reload();
    if (!everyMs) return;
    const t = setInterval(() => { if (document.visibilityState === "visible" && !gone.current) reload(); }, everyMs);
    return () => clearInterval(t);
  }, deps);
  return { data, error, reload };
}

/**
 * A list of the house that changes elsewhere (another tab, the CLI, a bot's create_agent): its
 * bots, its environments. Loaded again whenever the page comes back into view; a picker showing it
 * calls `reload` when it is opened, so what was made meanwhile is there to pick.
 */
export function useHouseList<T>(fn: () => Promise<T>, deps: unknown[]): Loaded<T> {
  const loaded = usePolled(fn, 0, deps);
  const { reload } = loaded;
  useEffect(() => {
    const onShow = () => { if (document.visibilityState === "visible") reload(); };
    window.addEventListener("focus", onShow);
    document.addEventListener("visibilitychange", onShow);
    return () => {
      window.removeEventListener("focus", onShow);
      document.removeEventListener("visibilitychange", onShow);
    };
  }, [reload]);
  return loaded;
}
