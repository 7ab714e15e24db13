/**
 * A JSON client for the worker's HTTP API in Node e2e tests: bearer token, JSON body in, parsed
 * JSON (or null) out with the status. `url` and `token` are read per call, so a test can create
 * the client before its worker has started.
 */
export type ApiInit = { method?: string; json?: unknown; as?: string };
export type ApiResult = { status: number; body: any };

export function jsonApi(target: () => { url: string; token: string }) {
  return async function api(path: string, init: ApiInit = {}): Promise<ApiResult> {
    const { url, token } = target();
    const r = await fetch(`${url}${path}`, {
      method: init.method ?? "GET",
      headers: { authorization: `Bearer ${init.as ?? token}`, ...(init.json !== undefined ? { "content-type": "application/json" } : {}) },
      body: init.json !== undefined ? JSON.stringify(init.json) : undefined,
    });
    const text = await r.text();
    return { status: r.status, body: text ? JSON.parse(text) : null };
  };
}
