// The public HTTP API of the same origin. Errors come back as {"error":{"code","message"}}.
import { randomId } from "./ids";

export type ThreadStatus = "idle" | "running" | "completed" | "failed";
export type ParentRef = { kind: "none" | "agent" | "thread"; id: string | null };
export type ThreadSummary = {
  id: string; parent: ParentRef; status: ThreadStatus; reason: string | null; title: string | null;
  environmentId: string | null; boxId: string | null; createdAt: string; updatedAt: string;
};
export type Thread = ThreadSummary & { detail?: string | null; lastLivenessAt?: number | null };
export type Payload = { type: string; [k: string]: unknown };
export type Entry = { offset: string; id: string; ts: number; authorId?: string; payload: Payload };
export type Environment = {
  id: string; name: string; model?: string; provider?: string; sharedBox?: boolean;
  env?: Record<string, string>; secretNames: string[]; createdAt?: string;
};
export type Agent = {
  id: string; name: string; handle: string; model: string; triggerMode: string; environmentId?: string | null; tools?: string[];
  systemPrompt?: string | null;
};
export type Box = {
  id: string; provider: string; providerRef: string; ephemeral: boolean; state: string;
  labels: Record<string, string>; threads: string[]; lastError: string | null; createdAt: string; updatedAt: string;
};

export class ApiError extends Error {
  constructor(readonly status: number, readonly code: string, message: string, readonly details?: unknown) {
    super(message);
  }
}

/** What a person reads for an error: the code and message, then which fields were wrong and why. */
export function errorText(error: ApiError): string {
  const fields = Array.isArray(error.details)
    ? (error.details as { path?: unknown; message?: unknown }[])
      .filter((d) => d && typeof d.message === "string")
      .map((d) => (typeof d.path === "string" && d.path ? `${d.path}: ${d.message}` : String(d.message)))
    : [];
  return `${error.code}: ${error.message}${fields.length ? ` (${fields.join("; ")})` : ""}`;
}

export class Api {
  /** A token the server refused stays refused: pages left open under the sign-in form ask no more. */
  private refused = false;

  /** `onUnauthorized` runs when the server refuses the token (expired, revoked): the app signs out. */
  constructor(private readonly token: string, private readonly onUnauthorized: () => void = () => {}, private readonly base = "") {}

  /** The token was refused outside a request (a WebSocket closed for its expiry): as for a 401. */
  refuse(): void {
    if (this.refused) return;
    this.refused = true;
    this.onUnauthorized();
  }

  /** `headers`: more request headers (an `Idempotency-Key`). */
  async request<T>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<T> {
    if (this.refused) throw new ApiError(401, "unauthorized", "the server refused this token: sign in again");
    let res: Response;
    try {
      res = await fetch(this.base + path, {
        method,
        headers: { authorization: `Bearer ${this.token}`, ...(body !== undefined ? { "content-type": "application/json" } : {}), ...headers },
        body: body !== undefined ? JSON.stringify(body) : undefined,
      });
    } catch {
      throw new ApiError(0, "network_error", "the server cannot be reached");
    }
    const text = await res.text();
    const data = text ? safeJson(text) : null;
    if (res.status === 401) this.refuse();
    if (!res.ok) {
      const err = (data as { error?: { code?: string; message?: string; details?: unknown } } | null)?.error;
      throw new ApiError(res.status, err?.code ?? `http_${res.status}`, err?.message ?? res.statusText, err?.details);
    }
    return data as T;
  }

  threads = (q = "limit=500") => this.request<{ threads: ThreadSummary[] }>("GET", `/api/threads?${q}`).then((r) => r.threads);
  thread = (id: string) => this.request<Thread>("GET", `/api/threads/${enc(id)}`);
  /** `key`: an Idempotency-Key; the same key sent again (a retry after a lost answer) makes no second thread. */
  createThread = (body: { title?: string; environmentId?: string; parent?: ParentRef }, key?: string) =>
    this.request<Thread>("POST", "/api/threads", body, idempotent(key));
  /** `entryId`: the same id sent again (a retry after a lost answer) is kept once by the server. */
  post = (id: string, text: string, entryId = randomId()) =>
    this.request("POST", `/api/threads/${enc(id)}/entries`, { id: entryId, payload: { type: "chat", text } });
  delegate = (id: string, body: { task: string; environmentId?: string }, key?: string) =>
    this.request<{ childThreadId: string }>("POST", `/api/threads/${enc(id)}/delegate`, body, idempotent(key));
  stop = (id: string) => this.request<Thread>("POST", `/api/threads/${enc(id)}/stop`);
  interrupt = (id: string) => this.request<{ threadId: string; runId: string | null; entryId: string }>("POST", `/api/threads/${enc(id)}/interrupt`);
  resume = (id: string, message: string, key?: string) => this.request("POST", `/api/threads/${enc(id)}/resume`, { message }, idempotent(key));
  environments = () => this.request<{ environments: Environment[] }>("GET", "/api/environments").then((r) => r.environments);
  createEnvironment = (body: Record<string, unknown>) => this.request<Environment>("POST", "/api/environments", body);
  updateEnvironment = (id: string, body: Record<string, unknown>) => this.request<Environment>("PATCH", `/api/environments/${enc(id)}`, body);
  deleteEnvironment = (id: string) => this.request<null>("DELETE", `/api/environments/${enc(id)}`);
  sandboxes = () => this.request<{ sandboxes: Box[] }>("GET", "/api/sandboxes").then((r) => r.sandboxes);
  previewLink = (boxId: string, port: number) =>
    this.request<{ url: string; expiresAt: string }>("GET", `/api/sandboxes/${encodeURIComponent(boxId)}/ports/${port}/preview`);
  createAgent = (body: Record<string, unknown>) => this.request<Agent>("POST", "/api/agents", body);
  updateAgent = (id: string, body: Record<string, unknown>) => this.request<Agent>("PATCH", `/api/agents/${enc(id)}`, body);
  deleteAgent = (id: string) => this.request<null>("DELETE", `/api/agents/${enc(id)}`);

  /** The house's bots, or null where this server has no bots yet (404). */
  async agents(): Promise<Agent[] | null> {
    try {
      return (await this.request<{ agents: Agent[] }>("GET", "/api/agents")).agents;
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) return null;
      throw err;
    }
  }
}

const enc = encodeURIComponent;
const idempotent = (key: string | undefined): Record<string, string> => (key ? { "idempotency-key": key } : {});

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}
