import { describe, expect, it } from "vitest";
import { call, createThread, errorCode, houseToken, streamToken } from "./helpers";

const base = { name: "Coder", handle: "coder", model: "local/scripted-model" };

describe("agents API", () => {
  it("create, list, get, patch, delete; defaults filled in; location header", async () => {
    const token = await houseToken("house-agents-1");
    const r = await call("/api/agents", { method: "POST", token, json: { ...base, systemPrompt: "Write code.", gateModel: "local/cheap" } });
    expect(r.status).toBe(201);
    const a = (await r.json()) as Record<string, any>;
    expect(a).toMatchObject({ ...base, triggerMode: "mention", systemPrompt: "Write code.", gateModel: "local/cheap", houseId: "house-agents-1", createdBy: "alice" });
    expect(a.id).toMatch(/^ag_/);
    expect(r.headers.get("location")).toBe(`/api/agents/${a.id}`);

    const list = (await (await call("/api/agents", { token })).json()) as { agents: { id: string }[] };
    expect(list.agents.map((x) => x.id)).toEqual([a.id]);
    expect(((await (await call(`/api/agents/${a.id}`, { token })).json()) as { handle: string }).handle).toBe("coder");

    const p = await call(`/api/agents/${a.id}`, { method: "PATCH", token, json: { triggerMode: "always", tools: ["run_command"], systemPrompt: null } });
    expect(p.status).toBe(200);
    const patched = (await p.json()) as Record<string, unknown>;
    expect(patched).toMatchObject({ triggerMode: "always", tools: ["run_command"], handle: "coder" });
    expect("systemPrompt" in patched).toBe(false);
    // null clears triggerMode back to what a new bot gets
    const cleared = await call(`/api/agents/${a.id}`, { method: "PATCH", token, json: { triggerMode: null } });
    expect(cleared.status).toBe(200);
    expect(((await cleared.json()) as { triggerMode: string }).triggerMode).toBe("mention");

    expect((await call(`/api/agents/${a.id}`, { method: "DELETE", token })).status).toBe(204);
    expect((await call(`/api/agents/${a.id}`, { token })).status).toBe(404);
    expect((await call(`/api/agents/${a.id}`, { method: "DELETE", token })).status).toBe(404);
  });

  it("handles are unique per house, on create and on rename; another house may reuse one", async () => {
    const token = await houseToken("house-agents-2");
    expect((await call("/api/agents", { method: "POST", token, json: base })).status).toBe(201);
    const dup = await call("/api/agents", { method: "POST", token, json: { ...base, name: "Other" } });
    expect(dup.status).toBe(409);
    expect(await errorCode(dup)).toBe("conflict");
    const second = (await (await call("/api/agents", { method: "POST", token, json: { ...base, handle: "reviewer" } })).json()) as { id: string };
    expect((await call(`/api/agents/${second.id}`, { method: "PATCH", token, json: { handle: "coder" } })).status).toBe(409);
    expect((await call(`/api/agents/${second.id}`, { method: "PATCH", token, json: { handle: "reviewer" } })).status).toBe(200);
    expect((await call("/api/agents", { method: "POST", token: await houseToken("house-agents-2b"), json: base })).status).toBe(201);
  });

  it("validation: bad handle, bad model, unknown tool, unknown field, bad JSON -> 400 with a stable code", async () => {
    const token = await houseToken("house-agents-3");
    for (const body of [
      { ...base, handle: "Coder" }, { ...base, handle: "has space" }, { ...base, handle: "" },
      { ...base, model: "no-slash" }, { ...base, tools: ["rm_rf"] }, { ...base, tools: ["run_command", "run_command"] },
      { ...base, triggerMode: "sometimes" }, { ...base, extra: 1 }, { ...base, name: "" }, { ...base, name: " \n\t " },
      { name: "x", handle: "x" },
    ]) {
      const r = await call("/api/agents", { method: "POST", token, json: body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(await errorCode(r)).toBe("validation_failed");
    }
    const bad = await call("/api/agents", { method: "POST", token, body: "{nope", headers: { "content-type": "application/json" } });
    expect([bad.status, await errorCode(bad)]).toEqual([400, "invalid_json"]);
    const created = (await (await call("/api/agents", { method: "POST", token, json: base })).json()) as { id: string };
    expect((await call(`/api/agents/${created.id}`, { method: "PATCH", token, json: { handle: "UPPER" } })).status).toBe(400);
    expect((await call(`/api/agents/${created.id}`, { method: "PATCH", token, json: { name: "   " } })).status).toBe(400);
  });

  it("tokens: none -> 401, reader cannot write, stream tokens are refused, houses are isolated", async () => {
    const token = await houseToken("house-agents-4");
    expect((await call("/api/agents")).status).toBe(401);
    expect((await call("/api/agents", { method: "POST", json: base })).status).toBe(401);
    const reader = await houseToken("house-agents-4", "rita", "reader");
    expect((await call("/api/agents", { method: "POST", token: reader, json: base })).status).toBe(403);
    const a = (await (await call("/api/agents", { method: "POST", token, json: base })).json()) as { id: string };
    expect((await call(`/api/agents/${a.id}`, { token: reader })).status).toBe(200);
    expect((await call(`/api/agents/${a.id}`, { method: "PATCH", token: reader, json: { name: "x" } })).status).toBe(403);
    expect((await call(`/api/agents/${a.id}`, { method: "DELETE", token: reader })).status).toBe(403);
    const thread = await createThread(token);
    expect((await call("/api/agents", { token: await streamToken("house-agents-4", thread.id) })).status).toBe(403);
    const other = await houseToken("house-agents-4-other");
    expect((await call(`/api/agents/${a.id}`, { token: other })).status).toBe(404);
    expect((await call(`/api/agents/${a.id}`, { method: "PATCH", token: other, json: { name: "x" } })).status).toBe(404);
    expect((await call(`/api/agents/${a.id}`, { method: "DELETE", token: other })).status).toBe(404);
    expect(((await (await call("/api/agents", { token: other })).json()) as { agents: unknown[] }).agents).toEqual([]);
    // A bot may create agents (the create_agent tool acts through this same gate).
    expect((await call("/api/agents", { method: "POST", token: await houseToken("house-agents-4", "ag_x", "bot"), json: { ...base, handle: "made-by-bot" } })).status).toBe(201);
  });
});

describe("thread config and decisions routes", () => {
  it("GET returns defaults; PATCH merges and validates; other houses and readers are kept out", async () => {
    const token = await houseToken("house-config-1");
    const t = await createThread(token);
    const got = (await (await call(`/api/threads/${t.id}/config`, { token })).json()) as { dispatch: Record<string, unknown> };
    expect(got).toEqual({ dispatch: { perAgent: {}, ambientDelayMs: 2000, cooldownMs: 0, widthCap: 3 } });
    const bot = (await (await call("/api/agents", { method: "POST", token, json: { name: "Cfg", handle: "cfg", model: "local/m" } })).json()) as { id: string };
    const p = await call(`/api/threads/${t.id}/config`, { method: "PATCH", token, json: { dispatch: { cooldownMs: 5000, perAgent: { [bot.id]: { triggerMode: "ambient" } } } } });
    expect(p.status).toBe(200);
    expect(await p.json()).toEqual({ dispatch: { perAgent: { [bot.id]: { triggerMode: "ambient" } }, ambientDelayMs: 2000, cooldownMs: 5000, widthCap: 3 } });
    // An override for a bot the house does not have is refused (a typo would do nothing); removing one is always fine.
    const typo = await call(`/api/threads/${t.id}/config`, { method: "PATCH", token, json: { dispatch: { perAgent: { ag_nope: { triggerMode: "always" } } } } });
    expect(typo.status).toBe(400);
    expect(((await typo.json()) as { error: { details: unknown } }).error.details).toEqual([{ path: "dispatch.perAgent.ag_nope", message: "not an agent of this house" }]);
    expect((await call(`/api/threads/${t.id}/config`, { method: "PATCH", token, json: { dispatch: { perAgent: { ag_nope: null } } } })).status).toBe(200);
    const p2 = (await (await call(`/api/threads/${t.id}/config`, { method: "PATCH", token, json: { dispatch: { perAgent: { [bot.id]: null }, widthCap: 1 } } })).json()) as { dispatch: Record<string, unknown> };
    expect(p2.dispatch).toMatchObject({ perAgent: {}, cooldownMs: 5000, widthCap: 1 });

    for (const body of [{ dispatch: { widthCap: -1 } }, { dispatch: { cooldownMs: "5" } }, { dispatch: { perAgent: { a: { triggerMode: "x" } } } }, { other: 1 }, {}]) {
      const r = await call(`/api/threads/${t.id}/config`, { method: "PATCH", token, json: body });
      expect(r.status, JSON.stringify(body)).toBe(400);
    }
    const reader = await houseToken("house-config-1", "rita", "reader");
    expect((await call(`/api/threads/${t.id}/config`, { token: reader })).status).toBe(200);
    expect((await call(`/api/threads/${t.id}/config`, { method: "PATCH", token: reader, json: { dispatch: { widthCap: 2 } } })).status).toBe(403);
    const other = await houseToken("house-config-other");
    expect((await call(`/api/threads/${t.id}/config`, { token: other })).status).toBe(404);
    expect((await call(`/api/threads/${t.id}/config`, { method: "PATCH", token: other, json: { dispatch: { widthCap: 2 } } })).status).toBe(404);
    expect((await call(`/api/threads/${t.id}/dispatch`, { token: other })).status).toBe(404);
    expect((await call(`/api/threads/th_missing/config`, { token })).status).toBe(404);
    expect((await call(`/api/threads/${t.id}/dispatch`)).status).toBe(401);
    expect((await call(`/api/threads/${t.id}/dispatch?limit=0`, { token })).status).toBe(400);
    expect(await (await call(`/api/threads/${t.id}/dispatch`, { token })).json()).toEqual({ decisions: [] });
  });
});
