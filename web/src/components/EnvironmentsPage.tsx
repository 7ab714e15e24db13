import { useState } from "preact/hooks";
import type { Session } from "../app";
import { ApiError, type Environment } from "../lib/api";
import { useHouseList } from "../lib/hooks";
import { ErrorNote, ReadOnlyNote, parseKeyValues } from "./common";

type Secret = { name: string; value: string };

function parseJsonField(label: string, text: string): unknown {
  if (!text.trim()) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`${label} is not valid JSON`);
  }
}

/** Name and value inputs, a row per secret, and a button for one more. Values are never filled in from the server. */
function SecretRows({ secrets, onChange }: { secrets: Secret[]; onChange: (next: Secret[]) => void }) {
  const set = (i: number, patch: Partial<Secret>) => onChange(secrets.map((x, j) => (j === i ? { ...x, ...patch } : x)));
  return (
    <>
      {secrets.map((s, i) => (
        <div class="row" key={i}>
          <input name={`secret-name-${i}`} aria-label={`Secret ${i + 1} name`} placeholder="NAME" value={s.name} onInput={(e) => set(i, { name: e.currentTarget.value })} />
          <input name={`secret-value-${i}`} aria-label={`Secret ${i + 1} value`} type="password" autocomplete="off" placeholder="value" value={s.value} onInput={(e) => set(i, { value: e.currentTarget.value })} />
        </div>
      ))}
      <button type="button" class="link" onClick={() => onChange([...secrets, { name: "", value: "" }])}>+ another secret</button>
    </>
  );
}

/** What the secret rows say, checked: a half-filled row is a mistake to point out, not to drop or send empty. */
function secretsOf(rows: Secret[]): Record<string, string> {
  if (rows.some((s) => !s.name.trim() && s.value)) throw new Error("a secret has a value but no name");
  const named = rows.filter((s) => s.name.trim());
  const empty = named.find((s) => !s.value);
  if (empty) throw new Error(`secret ${empty.name.trim()} has no value`);
  return Object.fromEntries(named.map((s) => [s.name.trim(), s.value]));
}

/** KEY=value lines for a textarea, the inverse of parseKeyValues. */
function keyValueLines(env: Record<string, string> | undefined): string {
  return Object.entries(env ?? {}).map(([k, v]) => `${k}=${v}`).join("\n");
}

/**
 * Edits what a PATCH can change from here: model, variables, the shared box and secrets (new
 * values by name, or removed). Secret values are never shown: a blank one leaves it as it is.
 */
function EnvironmentEditor({ environment, session, onDone }: { environment: Environment; session: Session; onDone: (saved: boolean) => void }) {
  const [model, setModel] = useState(environment.model ?? "");
  const [env, setEnv] = useState(keyValueLines(environment.env));
  const [sharedBox, setSharedBox] = useState(!!environment.sharedBox);
  const [secrets, setSecrets] = useState<Secret[]>([{ name: "", value: "" }]);
  const [removed, setRemoved] = useState<string[]>([]);
  const [error, setError] = useState<ApiError | string | null>(null);
  const [busy, setBusy] = useState(false);
  const save = async (e: Event) => {
    e.preventDefault();
    if (busy) return;
    setError(null);
    setBusy(true);
    try {
      const set = secretsOf(secrets);
      const both = removed.find((n) => n in set);
      if (both) throw new Error(`secret ${both} is both removed and set: untick one`);
      const secretPatch: Record<string, string | null> = { ...Object.fromEntries(removed.map((n) => [n, null])), ...set };
      const body: Record<string, unknown> = { model: model.trim() || null, env: parseKeyValues(env), sharedBox };
      if (Object.keys(secretPatch).length) body.secrets = secretPatch;
      await session.api.updateEnvironment(environment.id, body);
      onDone(true);
    } catch (err) {
      setError(err instanceof ApiError ? err : (err as Error).message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="form env-edit" onSubmit={save}>
      <label>Model (provider/id) <input name="model" value={model} onInput={(e) => setModel(e.currentTarget.value)} /></label>
      <label>Environment variables (KEY=value per line) <textarea name="env" rows={3} value={env} onInput={(e) => setEnv(e.currentTarget.value)} /></label>
      {environment.secretNames.length > 0 && (
        <fieldset><legend>Remove secrets</legend>
          {environment.secretNames.map((n) => (
            <label class="check" key={n}><input type="checkbox" name={`remove-secret-${n}`} checked={removed.includes(n)} onChange={(e) => setRemoved(e.currentTarget.checked ? [...removed, n] : removed.filter((x) => x !== n))} /> <code>{n}</code></label>
          ))}
        </fieldset>
      )}
      <fieldset>
        <legend>Set secrets (a name that exists gets the new value)</legend>
        <SecretRows secrets={secrets} onChange={setSecrets} />
      </fieldset>
      <label class="check"><input type="checkbox" name="sharedBox" checked={sharedBox} onChange={(e) => setSharedBox(e.currentTarget.checked)} /> shared box for run_command</label>
      <ErrorNote error={error} />
      <div class="row">
        <button type="submit" disabled={busy}>Save environment</button>
        <button type="button" class="link" onClick={() => onDone(false)}>Cancel</button>
      </div>
    </form>
  );
}

function EnvironmentCard({ environment: e, session, onChanged }: { environment: Environment; session: Session; onChanged: () => void }) {
  const [editing, setEditing] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const remove = async () => {
    if (!confirm(`Delete environment ${e.name}? Its shared box and folder archives are deleted too; its threads can start no new run.`)) return;
    setError(null);
    try {
      await session.api.deleteEnvironment(e.id);
      onChanged();
    } catch (err) {
      setError(err as ApiError); // e.g. 409 while a run uses its shared box
    }
  };
  return (
    <li class="card" data-env-id={e.id}>
      <b>{e.name}</b> <code class="muted">{e.id}</code>
      <div class="small">model {e.model ?? <span class="muted">default</span>}{e.sharedBox ? " · shared box" : ""}</div>
      <div class="small">secrets: {e.secretNames.length ? e.secretNames.map((s) => <code key={s} class="secret-name">{s}</code>) : <span class="muted">none</span>}</div>
      {session.readOnly ? null : editing
        ? <EnvironmentEditor environment={e} session={session} onDone={(saved) => { setEditing(false); if (saved) onChanged(); }} />
        : (
          <div class="row actions">
            <button type="button" class="link" onClick={() => setEditing(true)}>Edit</button>
            <button type="button" class="link danger" onClick={remove}>Delete</button>
          </div>
        )}
      <ErrorNote error={error} />
    </li>
  );
}

/** Environments: what a run's box gets. Secrets are write-only: sent once, never shown again. */
export function EnvironmentsPage({ session }: { session: Session }) {
  const list = useHouseList(() => session.api.environments(), [session]);
  const [name, setName] = useState("");
  const [model, setModel] = useState("");
  const [env, setEnv] = useState("");
  const [secrets, setSecrets] = useState<Secret[]>([{ name: "", value: "" }]);
  const [piModels, setPiModels] = useState("");
  const [piSettings, setPiSettings] = useState("");
  const [sharedBox, setSharedBox] = useState(false);
  const [error, setError] = useState<ApiError | string | null>(null);
  // One environment per press: names need not be unique, so a double click made two.
  const [busy, setBusy] = useState(false);

  const submit = async (e: Event) => {
    e.preventDefault();
    if (busy) return;
    setBusy(true);
    setError(null);
    try {
      const body: Record<string, unknown> = { name: name.trim(), sharedBox };
      if (model.trim()) body.model = model.trim();
      const envVars = parseKeyValues(env);
      if (Object.keys(envVars).length) body.env = envVars;
      // A value typed without a name would be lost without a word: say so instead.
      const secretMap = secretsOf(secrets);
      if (Object.keys(secretMap).length) body.secrets = secretMap;
      const models = parseJsonField("pi models.json", piModels);
      if (models !== undefined) body.piModels = models;
      const settings = parseJsonField("pi settings.json", piSettings);
      if (settings !== undefined) body.piSettings = settings;
      await session.api.createEnvironment(body);
      setName(""); setModel(""); setEnv(""); setPiModels(""); setPiSettings(""); setSharedBox(false);
      setSecrets([{ name: "", value: "" }]);
      list.reload();
    } catch (err) {
      setError(err instanceof ApiError ? err : (err as Error).message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <section>
      <h2>Environments</h2>
      <ErrorNote error={list.error} />
      {list.data && list.data.length === 0 && <p class="empty">No environments yet.</p>}
      <ul class="cards">
        {list.data?.map((e) => <EnvironmentCard key={e.id} environment={e} session={session} onChanged={list.reload} />)}
      </ul>
      <ReadOnlyNote session={session} cannot="create, edit or delete an environment" />
      {!session.readOnly && <form class="card form new-env" onSubmit={submit}>
        <h3>New environment</h3>
        <label>Name <input name="name" required value={name} onInput={(e) => setName(e.currentTarget.value)} /></label>
        <label>Model (provider/id) <input name="model" placeholder="openai/gpt-4.1-mini" value={model} onInput={(e) => setModel(e.currentTarget.value)} /></label>
        <label>Environment variables (KEY=value per line) <textarea name="env" rows={2} value={env} onInput={(e) => setEnv(e.currentTarget.value)} /></label>
        <fieldset>
          <legend>Secrets (write-only: never shown again)</legend>
          <SecretRows secrets={secrets} onChange={setSecrets} />
        </fieldset>
        <label>pi models.json (optional JSON; <code>"apiKey": "$NAME"</code> reads a secret)<textarea name="piModels" rows={4} value={piModels} onInput={(e) => setPiModels(e.currentTarget.value)} /></label>
        <label>pi settings.json (optional JSON)<textarea name="piSettings" rows={2} value={piSettings} onInput={(e) => setPiSettings(e.currentTarget.value)} /></label>
        <label class="check"><input type="checkbox" name="sharedBox" checked={sharedBox} onChange={(e) => setSharedBox(e.currentTarget.checked)} /> shared box for run_command</label>
        <ErrorNote error={error} />
        <button type="submit" disabled={busy || !name.trim()}>Create environment</button>
      </form>}
    </section>
  );
}
