import { useState } from "preact/hooks";
import { Api, ApiError } from "../lib/api";
import { ErrorNote } from "./common";
import { tokenFromInput } from "../lib/auth";

/** Paste a house token; it is checked against the API before it is kept. */
const REFUSED = "That token was not accepted (expired or not a house token).";

export function SignIn({ onToken, refused = false }: { onToken: (token: string) => void; refused?: boolean }) {
  const [token, setToken] = useState("");
  // A link's or a stored token the server refused lands here: say so rather than show a bare form.
  const [error, setError] = useState<string | null>(refused ? REFUSED : null);
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    const t = tokenFromInput(token);
    if (!t) return;
    setBusy(true);
    setError(null);
    try {
      await new Api(t).threads("limit=1");
      onToken(t);
    } catch (err) {
      setError(err instanceof ApiError && err.status === 401 ? REFUSED : String((err as Error).message));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="signin card" onSubmit={submit}>
      <h1>threadbox</h1>
      <p>Sign in with a house token, or paste the sign-in link <code>npm run dev</code> prints.</p>
      <textarea name="token" rows={4} placeholder="eyJhbGciOi…" value={token} onInput={(e) => setToken(e.currentTarget.value)}
        // A token is one line: Enter signs in, as in any one-field form.
        onKeyDown={(e) => { if (e.key === "Enter" && !e.shiftKey) void submit(e); }} autofocus />
      <ErrorNote error={error} />
      <button type="submit" disabled={busy || !token.trim()}>Sign in</button>
    </form>
  );
}
