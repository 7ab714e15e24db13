import { useRef, useState } from "preact/hooks";
import type { Session } from "../app";
import { ApiError, type Agent, type Environment } from "../lib/api";
import { useHouseList } from "../lib/hooks";
import { navigate } from "../lib/router";
import { ActionKey } from "../lib/retry";
import { ErrorNote, ReadOnlyNote, RetryingNote } from "./common";
import { environmentLabel } from "../lib/labels";

const TRIGGER_LABELS: Record<string, string> = { mention: "when @mentioned", ambient: "when it judges it should", always: "every message" };

/** An environment's name, or that it is gone. */
function envName(envs: Environment[] | undefined, id: string): string {
  const e = envs?.find((x) => x.id === id);
  return e ? e.name : envs ? `${id} (deleted)` : id;
}

const TOOLS = ["run_command", "delegate_task", "preview_link", "create_agent", "create_thread", "list_threads", "post_to_thread"];

type BotFields = { name: string; handle: string; model: string; environmentId: string; triggerMode: string; systemPrompt: string; tools: string[] };

const EMPTY: BotFields = { name: "", handle: "", model: "", environmentId: "", triggerMode: "mention", systemPrompt: "", tools: ["delegate_task"] };

function fieldsOf(a: Agent): BotFields {
  return {
    name: a.name, handle: a.handle, model: a.model, environmentId: a.environmentId ?? "", triggerMode: a.triggerMode,
    systemPrompt: a.systemPrompt ?? "", tools: a.tools ?? TOOLS,
  };
}

/** One form for a new bot and for editing one: `onSave` gets the form's fields, trimmed. */
function BotForm({ initial, envs, onEnvsOpen, title, saveLabel, onSave, onCancel }: {
  initial: BotFields; envs: Environment[] | undefined; onEnvsOpen?: () => void; title: string; saveLabel: string;
  onSave: (f: BotFields) => Promise<void>; onCancel?: () => void;
}) {
  const [form, setForm] = useState<BotFields>(initial);
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);
  const missingEnv = !!form.environmentId && !!envs && !envs.some((e) => e.id === form.environmentId);
  const field = (k: "name" | "handle" | "model" | "systemPrompt") => ({
    name: k, value: form[k], onInput: (e: Event) => setForm({ ...form, [k]: (e.currentTarget as HTMLInputElement).value }),
  });
  const submit = async (e: Event) => {
    e.preventDefault();
    setError(null);
    setBusy(true);
    try {
      await onSave({ ...form, name: form.name.trim(), handle: form.handle.trim(), model: form.model.trim() });
    } catch (err) {
      setError(err as ApiError);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="card form bot-form" onSubmit={submit}>
      <h3>{title}</h3>
      <label>Name <input required {...field("name")} /></label>
      <label>Handle (what @mentions match) <input required pattern="[a-z0-9_\-]{1,40}" title="1-40 of a-z, 0-9, _ and -" {...field("handle")} /></label>
      <label>Model (provider/id) <input required placeholder="openai/gpt-4.1-mini" {...field("model")} /></label>
      <label>Environment (its secrets hold the model key)
        <select name="environmentId" value={form.environmentId} onFocus={onEnvsOpen} onChange={(e) => setForm({ ...form, environmentId: e.currentTarget.value })}>
          <option value="">none</option>
          {envs?.map((env) => <option key={env.id} value={env.id}>{environmentLabel(env, envs)}</option>)}
          {missingEnv && <option value={form.environmentId}>deleted: {form.environmentId}</option>}
        </select>
      </label>
      {missingEnv && <p class="error" role="alert">Its environment {form.environmentId} was deleted: pick another, or none, to save.</p>}
      <label>Answers
        <select name="triggerMode" value={form.triggerMode} onChange={(e) => setForm({ ...form, triggerMode: e.currentTarget.value })}>
          <option value="mention">when @mentioned</option>
          <option value="ambient">when it judges it should</option>
          <option value="always">every message</option>
        </select>
      </label>
      <fieldset><legend>Tools</legend>
        {TOOLS.map((t) => (
          <label class="check" key={t}><input type="checkbox" name={`tool-${t}`} checked={form.tools.includes(t)} onChange={(e) => setForm({ ...form, tools: e.currentTarget.checked ? [...form.tools, t] : form.tools.filter((x) => x !== t) })} /> {t}</label>
        ))}
      </fieldset>
      <label>Instructions <textarea rows={3} {...field("systemPrompt")} /></label>
      <ErrorNote error={error} />
      <div class="row">
        <button type="submit" disabled={busy}>{saveLabel}</button>
        {onCancel && <button type="button" class="link" onClick={onCancel}>Cancel</button>}
      </div>
    </form>
  );
}

function BotCard({ agent, session, envs, onChanged }: { agent: Agent; session: Session; envs: Environment[] | undefined; onChanged: () => void }) {
  const [editing, setEditing] = useState(false);
  const [error, setError] = useState<ApiError | string | null>(null);
  // One action at a time: two Messages at once each found no DM yet, and made two.
  const [busy, setBusy] = useState(false);
  const [retrying, setRetrying] = useState(false);
  // A new DM whose answer is lost is asked again under its key: one thread, however often it is sent.
  const dmKey = useRef(new ActionKey());
  const act = async (fn: () => Promise<void>) => {
    if (busy) return;
    setBusy(true);
    setError(null);
    try {
      await fn();
    } catch (err) {
      setError(err as ApiError);
    } finally {
      setBusy(false);
      setRetrying(false);
    }
  };
  // A DM is a thread whose parent is the bot: it answers every message there without a mention.
  // The newest one is opened again; a new one gets the bot's environment, so its tools have a box.
  const message = () => act(async () => {
    const [existing] = await session.api.threads(`parentKind=agent&parent=${encodeURIComponent(agent.id)}&limit=1`);
    // A read-only token may read a DM someone started, not start one.
    if (!existing && session.readOnly) {
      setError(`No direct-message thread with @${agent.handle} yet, and this token is read-only (role ${session.role}): it cannot start one.`);
      return;
    }
    const body = {
      title: `DM with @${agent.handle}`, parent: { kind: "agent" as const, id: agent.id },
      ...(agent.environmentId ? { environmentId: agent.environmentId } : {}),
    };
    const t = existing ?? await dmKey.current.send(body, (key) => session.api.createThread(body, key), () => setRetrying(true));
    navigate(`/threads/${t.id}`);
  });
  const remove = () => act(async () => {
    if (!confirm(`Delete @${agent.handle}? Its threads stay; it answers no more.`)) return;
    await session.api.deleteAgent(agent.id);
    onChanged();
  });
  const save = async (f: BotFields) => {
    // An emptied optional field is cleared (null), not kept.
    await session.api.updateAgent(agent.id, {
      name: f.name, handle: f.handle, model: f.model, triggerMode: f.triggerMode, tools: f.tools,
      environmentId: f.environmentId || null, systemPrompt: f.systemPrompt.trim() ? f.systemPrompt : null,
    });
    setEditing(false);
    onChanged();
  };
  if (editing) {
    return <li data-agent-id={agent.id}><BotForm initial={fieldsOf(agent)} envs={envs} title={`Edit @${agent.handle}`} saveLabel="Save bot" onSave={save} onCancel={() => setEditing(false)} /></li>;
  }
  return (
    <li class="card" data-agent-id={agent.id}>
      <b>@{agent.handle}</b> {agent.name}
      <div class="small">{agent.model} · answers {TRIGGER_LABELS[agent.triggerMode] ?? agent.triggerMode}{agent.environmentId ? ` · environment ${envName(envs, agent.environmentId)}` : ""}{agent.tools?.length ? ` · tools: ${agent.tools.join(", ")}` : ""}</div>
      <div class="row actions">
        <button type="button" disabled={busy} onClick={message}>Message</button>
        {!session.readOnly && <>
          <button type="button" class="link" onClick={() => setEditing(true)}>Edit</button>
          <button type="button" class="link danger" onClick={remove}>Delete</button>
        </>}
      </div>
      <RetryingNote retrying={retrying} />
      <ErrorNote error={error} />
    </li>
  );
}

/** Bots: personas that answer chat. Their model keys live in environments, as write-only secrets. */
export function BotsPage({ session }: { session: Session }) {
  const list = useHouseList(() => session.api.agents(), [session]);
  const envs = useHouseList(() => session.api.environments(), [session]);
  // A new form after each create: its fields start empty again.
  const [formKey, setFormKey] = useState(0);
  if (list.data === null) {
    return <section><h2>Bots</h2><p class="empty">This server has no bots API yet (<code>/api/agents</code>). Delegate tasks from a thread instead.</p></section>;
  }
  const create = async (f: BotFields) => {
    await session.api.createAgent({
      name: f.name, handle: f.handle, model: f.model, triggerMode: f.triggerMode, tools: f.tools,
      ...(f.environmentId ? { environmentId: f.environmentId } : {}),
      ...(f.systemPrompt.trim() ? { systemPrompt: f.systemPrompt } : {}),
    });
    setFormKey((k) => k + 1);
    list.reload();
  };
  return (
    <section>
      <h2>Bots</h2>
      <ErrorNote error={list.error} />
      {list.data && list.data.length === 0 && <p class="empty">No bots yet.</p>}
      <ul class="cards">
        {list.data?.map((a) => <BotCard key={a.id} agent={a} session={session} envs={envs.data} onChanged={list.reload} />)}
      </ul>
      <ReadOnlyNote session={session} cannot="create, edit or delete a bot" />
      {!session.readOnly && <BotForm key={formKey} initial={EMPTY} envs={envs.data} onEnvsOpen={envs.reload} title="New bot" saveLabel="Create bot" onSave={create} />}
    </section>
  );
}
