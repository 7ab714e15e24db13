import { useState } from "preact/hooks";
import type { Session } from "../app";
import { ApiError } from "../lib/api";
import { usePolled } from "../lib/hooks";
import { ErrorNote } from "./common";

const TOOLS = ["run_command", "delegate_task", "preview_link", "create_agent", "create_thread", "list_threads", "post_to_thread"];

/** Bots: personas that answer chat. Their model keys live in environments, as write-only secrets. */
export function BotsPage({ session }: { session: Session }) {
  const list = usePolled(() => session.api.agents(), 0, [session]);
  const envs = usePolled(() => session.api.environments(), 0, [session]);
  const [form, setForm] = useState({ name: "", handle: "", model: "", environmentId: "", triggerMode: "mention", systemPrompt: "" });
  const [tools, setTools] = useState<string[]>(["delegate_task"]);
  const [error, setError] = useState<ApiError | null>(null);
  const field = (k: keyof typeof form) => ({
    name: k, value: form[k], onInput: (e: Event) => setForm({ ...form, [k]: (e.currentTarget as HTMLInputElement).value }),
  });
  if (list.data === null) {
    return <section><h2>Bots</h2><p class="empty">This server has no bots API yet (<code>/api/agents</code>). Delegate tasks from a thread instead.</p></section>;
  }
  const submit = async (e: Event) => {
    e.preventDefault();
    setError(null);
    try {
      await session.api.createAgent({
        name: form.name.trim(), handle: form.handle.trim(), model: form.model.trim(), triggerMode: form.triggerMode, tools,
        ...(form.environmentId ? { environmentId: form.environmentId } : {}),
        ...(form.systemPrompt.trim() ? { systemPrompt: form.systemPrompt } : {}),
      });
      setForm({ name: "", handle: "", model: "", environmentId: "", triggerMode: "mention", systemPrompt: "" });
      setTools(["delegate_task"]);
      list.reload();
    } catch (err) {
      setError(err as ApiError);
    }
  };
  return (
    <section>
      <h2>Bots</h2>
      <ErrorNote error={list.error} />
      {list.data && list.data.length === 0 && <p class="empty">No bots yet.</p>}
      <ul class="cards">
        {list.data?.map((a) => (
          <li key={a.id} class="card" data-agent-id={a.id}>
            <b>@{a.handle}</b> {a.name}
            <div class="small">{a.model} · answers on {a.triggerMode}{a.tools?.length ? ` · tools: ${a.tools.join(", ")}` : ""}</div>
          </li>
        ))}
      </ul>
      <form class="card form" onSubmit={submit}>
        <h3>New bot</h3>
        <label>Name <input required {...field("name")} /></label>
        <label>Handle (what @mentions match) <input required pattern="[a-z0-9_\-]{1,40}" title="1-40 of a-z, 0-9, _ and -" {...field("handle")} /></label>
        <label>Model (provider/id) <input required placeholder="openai/gpt-4.1-mini" {...field("model")} /></label>
        <label>Environment (its secrets hold the model key)
          <select name="environmentId" value={form.environmentId} onChange={(e) => setForm({ ...form, environmentId: e.currentTarget.value })}>
            <option value="">none</option>
            {envs.data?.map((env) => <option key={env.id} value={env.id}>{env.name}</option>)}
          </select>
        </label>
        <label>Answers
          <select name="triggerMode" value={form.triggerMode} onChange={(e) => setForm({ ...form, triggerMode: e.currentTarget.value })}>
            <option value="mention">when @mentioned</option>
            <option value="ambient">when it judges it should</option>
            <option value="always">every message</option>
          </select>
        </label>
        <fieldset><legend>Tools</legend>
          {TOOLS.map((t) => (
            <label class="check" key={t}><input type="checkbox" checked={tools.includes(t)} onChange={(e) => setTools(e.currentTarget.checked ? [...tools, t] : tools.filter((x) => x !== t))} /> {t}</label>
          ))}
        </fieldset>
        <label>Instructions <textarea rows={3} {...field("systemPrompt")} /></label>
        <ErrorNote error={error} />
        <button type="submit">Create bot</button>
      </form>
    </section>
  );
}
