// The suite sends no credentials; every threadbox route needs a token. Add the house token to
// each request to the worker under test (auth stays on in the worker itself).
const token = process.env.CONFORMANCE_TOKEN;
const baseUrl = process.env.CONFORMANCE_BASE_URL ?? "";
const original = globalThis.fetch;
globalThis.fetch = ((input: RequestInfo | URL, init?: RequestInit) => {
  const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
  if (!token || !url.startsWith(baseUrl)) return original(input, init);
  const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
  if (!headers.has("authorization")) headers.set("authorization", `Bearer ${token}`);
  return original(input, { ...init, headers });
}) as typeof fetch;
