import { describe, expect, it } from "vitest";
import { call, createThread, errorCode, houseToken } from "./helpers";

describe("environments", () => {
  it("are created and listed per house; secrets are write-only", async () => {
    const token = await houseToken("house-env");
    const r = await call("/api/environments", {
      method: "POST", token,
      json: { name: "default", env: { FOO: "bar" }, secrets: { MODEL_KEY: "sk-very-secret" }, sharedBox: true, model: "local/m" },
    });
    expect(r.status).toBe(201);
    const created = (await r.json()) as { id: string; runtime: string; provider: string; secretNames: string[]; env: Record<string, string> };
    expect(created.runtime).toBe("daytona");
    expect(created.provider).toBe("daytona");
    expect(created.secretNames).toEqual(["MODEL_KEY"]);
    expect(JSON.stringify(created)).not.toContain("sk-very-secret");

    const got = await call(`/api/environments/${created.id}`, { token });
    expect(got.status).toBe(200);
    expect(await got.text()).not.toContain("sk-very-secret");
    const list = (await (await call("/api/environments", { token })).json()) as { environments: { id: string }[] };
    expect(list.environments.map((e) => e.id)).toEqual([created.id]);

    const other = await houseToken("house-env-2");
    expect((await call(`/api/environments/${created.id}`, { token: other })).status).toBe(404);
    expect(((await (await call("/api/environments", { token: other })).json()) as { environments: unknown[] }).environments).toEqual([]);

    // A thread created in the environment records it; a delegated child would inherit it.
    const t = await createThread(token, { environmentId: created.id });
    expect((t as unknown as { environmentId: string }).environmentId).toBe(created.id);
  });

  it("rejects bad environment input", async () => {
    const token = await houseToken("house-env");
    const bad = [
      { env: { "BAD NAME": "x" }, name: "e" },
      { name: "" },
      { name: "e", runtime: "sprite" },
      { name: "e", unknownField: 1 },
    ];
    for (const json of bad) {
      const r = await call("/api/environments", { method: "POST", token, json });
      expect(r.status).toBe(400);
      expect(await errorCode(r)).toBe("validation_failed");
    }
    const reader = await houseToken("house-env", "rita", "reader");
    expect((await call("/api/environments", { method: "POST", token: reader, json: { name: "x" } })).status).toBe(403);
    expect((await call("/api/environments/nope", { token })).status).toBe(404);
  });

  it("delegate refuses an unknown environment and a missing task without creating a child", async () => {
    const token = await houseToken("house-env-d");
    const parent = await createThread(token);
    const noTask = await call(`/api/threads/${parent.id}/delegate`, { method: "POST", token, json: {} });
    expect(noTask.status).toBe(400);
    const unknownEnv = await call(`/api/threads/${parent.id}/delegate`, { method: "POST", token, json: { task: "x", environmentId: "env_nope" } });
    expect(unknownEnv.status).toBe(404);
    const missingParent = await call(`/api/threads/th_missing/delegate`, { method: "POST", token, json: { task: "x" } });
    expect(missingParent.status).toBe(404);
    const list = (await (await call("/api/threads", { token })).json()) as { threads: unknown[] };
    expect(list.threads).toHaveLength(1);
    const idle = await call(`/api/threads/${parent.id}/resume`, { method: "POST", token, json: { message: "again" } });
    expect(idle.status).toBe(409);
  });
});
