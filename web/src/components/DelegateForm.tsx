import { useRef, useState } from "preact/hooks";
import type { Session } from "../app";
import { ApiError } from "../lib/api";
import { useHouseList } from "../lib/hooks";
import { ActionKey } from "../lib/retry";
import { ErrorNote, RetryingNote } from "./common";
import { environmentLabel } from "../lib/labels";

/** Hands a task to a coding agent in a fresh box: a child thread of this one. */
export function DelegateForm({ session, threadId, defaultEnvironmentId, onStarted }: {
  session: Session; threadId: string; defaultEnvironmentId?: string; onStarted: (childId: string) => void;
}) {
  const envs = useHouseList(() => session.api.environments(), [session]);
  const [task, setTask] = useState("");
  const [environmentId, setEnvironmentId] = useState("");
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);
  const [retrying, setRetrying] = useState(false);
  // A lost answer is asked again under the delegation's key: one child, however often it is sent.
  const keys = useRef(new ActionKey());
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const body = { task: task.trim(), environmentId: environmentId || undefined };
      const r = await keys.current.send({ threadId, ...body }, (key) => session.api.delegate(threadId, body, key), () => setRetrying(true));
      setTask("");
      onStarted(r.childThreadId);
    } catch (err) {
      setError(err as ApiError);
    } finally {
      setBusy(false);
      setRetrying(false);
    }
  };
  return (
    <form class="card row delegate" onSubmit={submit}>
      <input name="task" aria-label="Task for a coding agent" placeholder="Delegate a task to a coding agent, e.g. write hello.txt containing hi" value={task} onInput={(e) => setTask(e.currentTarget.value)} />
      <select name="environment" aria-label="Environment of the delegated run" value={environmentId} onFocus={envs.reload} onChange={(e) => setEnvironmentId(e.currentTarget.value)}>
        <option value="">{defaultEnvironmentId ? "thread's environment" : "no environment (pick one)"}</option>
        {envs.data?.map((env, _i, all) => <option key={env.id} value={env.id}>{environmentLabel(env, all)}</option>)}
      </select>
      {/* A thread without an environment has no model for the run to use: one must be picked. */}
      <button type="submit" disabled={busy || !task.trim() || (!defaultEnvironmentId && !environmentId)} title={!defaultEnvironmentId && !environmentId ? "pick an environment first" : undefined}>Delegate</button>
      <RetryingNote retrying={retrying} />
      <ErrorNote error={error} />
    </form>
  );
}
