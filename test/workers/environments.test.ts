import { describe, expect, it, vi } from "vitest";
import { env, runInDurableObject } from "cloudflare:test";
import type { HouseActor, SandboxActor } from "./test-worker";
import { call, createThread, errorCode, houseToken } from "./helpers";
import { step, within } from "./inside-request";
import { sharedTestProvider } from "./register-test-provider";
import { ProviderError } from "../../src/sandbox/errors";

describe("environments", () => {
  it("PATCH with null clears an optional field (its default comes back); a required one stays required", async () => {
    const token = await houseToken("house-env-null");
    const created = await call("/api/environments", { method: "POST", token, json: { name: "n", model: "local/m", snapshot: "snap", env: { A: "1" }, folders: [{ source: "notes", path: "notes" }], secrets: { S: "sk-keep" } } });
    const { id } = (await created.json()) as { id: string };
    const r = await call(`/api/environments/${id}`, { method: "PATCH", token, json: { model: null, snapshot: null, folders: null, env: null } });
    expect(r.status).toBe(200);
    const e = (await r.json()) as Record<string, unknown>;
    expect(e.model).toBeUndefined();
    expect(e.snapshot).toBeUndefined();
    expect(e.folders).toEqual([]);
    expect(e.env).toEqual({});
    expect(e.secretNames).toEqual(["S"]);
    const noName = await call(`/api/environments/${id}`, { method: "PATCH", token, json: { name: null } });
    expect(noName.status).toBe(400);
    expect(JSON.stringify(await noName.json())).toContain('"path":"name"');
  });

  it("a create-or-replace onto an existing id keeps its createdAt; updatedAt moves with each replace and PATCH", async () => {
    const token = await houseToken("house-env-dates");
    type Dated = { createdAt: string; updatedAt: string; name: string };
    const put = async (name: string) => {
      const r = await call("/api/environments", { method: "POST", token, json: { id: "env_dated", name } });
      expect(r.status).toBe(201);
      return (await r.json()) as Dated;
    };
    const first = await put("one");
    await new Promise((r) => setTimeout(r, 5));
    const replaced = await put("two");
    expect(replaced.name).toBe("two");
    expect(replaced.createdAt).toBe(first.createdAt);
    expect(first.updatedAt).toBe(first.createdAt);
    expect(Date.parse(replaced.updatedAt)).toBeGreaterThan(Date.parse(first.createdAt));
    const read = (await (await call("/api/environments/env_dated", { token })).json()) as Dated;
    expect(read).toMatchObject({ createdAt: first.createdAt, updatedAt: replaced.updatedAt });
    await new Promise((r) => setTimeout(r, 5));
    const patched = (await (await call("/api/environments/env_dated", { method: "PATCH", token, json: { name: "three" } })).json()) as Dated;
    expect(patched.createdAt).toBe(first.createdAt);
    expect(Date.parse(patched.updatedAt)).toBeGreaterThan(Date.parse(replaced.updatedAt));
  });

  it("PATCHes cannot add up to an environment larger than one create may send: 413, and the environment stays as it was", async () => {
    const token = await houseToken("house-env-grow");
    const created = await call("/api/environments", { method: "POST", token, json: { name: "big", files: [{ path: "data.txt", content: "d".repeat(300 * 1024) }] } });
    expect(created.status).toBe(201);
    const { id } = (await created.json()) as { id: string };
    const vars = (prefix: string) => Object.fromEntries(Array.from({ length: 60 }, (_, i) => [`${prefix}${i}`, "v".repeat(10_000)]));
    // Each body is well under the 1 MiB limit; the second would make the environment about 1.5 MB.
    expect((await call(`/api/environments/${id}`, { method: "PATCH", token, json: { env: vars("A") } })).status).toBe(200);
    const grown = await call(`/api/environments/${id}`, { method: "PATCH", token, json: { secrets: vars("S") } });
    expect(grown.status).toBe(413);
    const body = (await grown.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("payload_too_large");
    expect(body.error.message).toMatch(/^the environment would be \d+ bytes after this PATCH; at most 1048576/);
    expect(((await (await call(`/api/environments/${id}`, { token })).json()) as { secretNames: string[] }).secretNames).toEqual([]);
    // Making room first works.
    expect((await call(`/api/environments/${id}`, { method: "PATCH", token, json: { env: null, secrets: vars("S") } })).status).toBe(200);
  });

  it("refuse a name set both in env and in secrets, on create and on PATCH, naming the field", async () => {
    const token = await houseToken("house-env-both");
    const both = await call("/api/environments", { method: "POST", token, json: { name: "both", env: { API_KEY: "plain" }, secrets: { API_KEY: "sk-x" } } });
    expect(both.status).toBe(400);
    const body = (await both.json()) as { error: { code: string; details: { path: string; message: string }[] } };
    expect(body.error.code).toBe("validation_failed");
    expect(body.error.details).toEqual([{ path: "secrets.API_KEY", message: "API_KEY is also set in env: set it in one of them" }]);
    expect(JSON.stringify(body)).not.toContain("sk-x");
    const ok = await call("/api/environments", { method: "POST", token, json: { name: "one", env: { FOO: "bar" }, secrets: { API_KEY: "sk-x" } } });
    expect(ok.status).toBe(201);
    const { id } = (await ok.json()) as { id: string };
    const patched = await call(`/api/environments/${id}`, { method: "PATCH", token, json: { secrets: { FOO: "sk-y" } } });
    expect(patched.status).toBe(400);
    expect(await errorCode(patched)).toBe("validation_failed");
    const moved = await call(`/api/environments/${id}`, { method: "PATCH", token, json: { env: {}, secrets: { FOO: "sk-y" } } });
    expect(moved.status).toBe(200);
  });

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

  it("a child of a thread whose environment was deleted is refused as a thread naming a missing environment is, unless it names another", async () => {
    const token = await houseToken("house-env-child");
    const made = async (name: string) => ((await (await call("/api/environments", { method: "POST", token, json: { name } })).json()) as { id: string }).id;
    const gone = await made("gone");
    const parent = await createThread(token, { environmentId: gone });
    // A child inherits a live environment.
    const child = await call("/api/threads", { method: "POST", token, json: { parent: { kind: "thread", id: parent.id } } });
    expect(child.status).toBe(201);
    expect(((await child.json()) as { environmentId: string }).environmentId).toBe(gone);
    expect((await call(`/api/environments/${gone}`, { method: "DELETE", token })).status).toBe(204);
    // Named outright, a missing environment is a 404 ...
    const named = await call("/api/threads", { method: "POST", token, json: { environmentId: gone } });
    expect(named.status).toBe(404);
    expect(await errorCode(named)).toBe("not_found");
    // ... and so is one the child would inherit, saying whose it was.
    const orphan = await call("/api/threads", { method: "POST", token, json: { parent: { kind: "thread", id: parent.id } } });
    expect(orphan.status).toBe(404);
    const body = (await orphan.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("not_found");
    expect(body.error.message).toBe(`environment ${gone} of parent thread ${parent.id} no longer exists: name another environmentId`);
    // Naming another environment makes the child.
    const other = await made("other");
    const moved = await call("/api/threads", { method: "POST", token, json: { parent: { kind: "thread", id: parent.id }, environmentId: other } });
    expect(moved.status).toBe(201);
    expect(((await moved.json()) as { environmentId: string }).environmentId).toBe(other);
    const children = (await (await call(`/api/threads?parent=${parent.id}`, { token })).json()) as { threads: { environmentId: string }[] };
    expect(children.threads.map((t) => t.environmentId).sort()).toEqual([gone, other].sort());
  });

  it("delegating from a thread whose environment was deleted says which environment and what to do, and makes no child", async () => {
    const token = await houseToken("house-env-delegate");
    const made = async (name: string) => ((await (await call("/api/environments", { method: "POST", token, json: { name, model: "local/m" } })).json()) as { id: string }).id;
    const gone = await made("gone");
    const parent = await createThread(token, { environmentId: gone });
    expect((await call(`/api/environments/${gone}`, { method: "DELETE", token })).status).toBe(204);
    const r = await call(`/api/threads/${parent.id}/delegate`, { method: "POST", token, json: { task: "write a.txt", model: "local/m" } });
    expect(r.status).toBe(404);
    expect(((await r.json()) as { error: { code: string; message: string } }).error).toEqual({
      code: "not_found",
      message: `environment ${gone} of parent thread ${parent.id} no longer exists: name another environmentId`,
    });
    const children = (await (await call(`/api/threads?parent=${parent.id}`, { token })).json()) as { threads: unknown[] };
    expect(children.threads).toEqual([]);
    // Resuming the thread itself has no other environment to go to: said so.
    const resumed = await call(`/api/threads/${parent.id}/resume`, { method: "POST", token, json: { message: "go on" } });
    expect(resumed.status).toBe(404);
    expect(((await resumed.json()) as { error: { message: string } }).error.message)
      .toBe(`environment ${gone} of thread ${parent.id} no longer exists: the thread cannot run again; delegate the task anew from a thread with another environment`);
  });

  it("delegating names another environment by environmentName as by environmentId; another house's name is a missing one; both at once is a 400", async () => {
    const token = await houseToken("house-env-delegate-name");
    const made = async (t: string, name: string) => ((await (await call("/api/environments", { method: "POST", token: t, json: { name, model: "local/m" } })).json()) as { id: string }).id;
    const gone = await made(token, "gone");
    const other = await made(token, "other");
    await made(await houseToken("house-env-delegate-name-2"), "theirs");
    const parent = await createThread(token, { environmentId: gone });
    expect((await call(`/api/environments/${gone}`, { method: "DELETE", token })).status).toBe(204);
    const delegate = (json: Record<string, unknown>) => call(`/api/threads/${parent.id}/delegate`, { method: "POST", token, json: { task: "write a.txt", ...json } });

    // The way on from a parent whose environment was deleted, by name.
    const named = await delegate({ environmentName: "other" });
    expect(named.status).toBe(202);
    const { childThreadId } = (await named.json()) as { childThreadId: string };
    expect(((await (await call(`/api/threads/${childThreadId}`, { token })).json()) as { environmentId: string }).environmentId).toBe(other);

    // Another house's environment is not looked at: its name answers as a name no house has.
    for (const name of ["theirs", "nobody-has-this"]) {
      const r = await delegate({ environmentName: name });
      expect(r.status).toBe(404);
      expect(((await r.json()) as { error: unknown }).error).toEqual({ code: "not_found", message: `no environment named ${JSON.stringify(name)} in this house` });
    }
    const both = await delegate({ environmentId: other, environmentName: "other" });
    expect(both.status).toBe(400);
    expect(((await both.json()) as { error: unknown }).error).toMatchObject({ code: "validation_failed", details: [{ path: "environmentName", message: "give environmentId or environmentName, not both" }] });
    const children = (await (await call(`/api/threads?parent=${parent.id}`, { token })).json()) as { threads: { id: string }[] };
    expect(children.threads.map((t) => t.id)).toEqual([childThreadId]);
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

  it("refuses a piModels pi cannot read as its models.json with a 400 naming the field; PATCH too", async () => {
    const token = await houseToken("house-env-pimodels");
    const refused = async (method: string, path: string, json: unknown) => {
      const r = await call(path, { method, token, json });
      const body = (await r.json()) as { error: { code: string; details?: { path: string; message: string }[] } };
      return { status: r.status, code: body.error?.code, details: body.error?.details?.map((d) => [d.path, d.message]) };
    };
    const cases: [unknown, string, RegExp][] = [
      [{ providers: [] }, "piModels.providers", /"providers" is an array; pi's models.json wants an object of providers by name/],
      [{}, "piModels.providers", /needs "providers"/],
      [{ providers: { local: [] } }, "piModels.providers.local", /provider local is an array/],
      [{ providers: { local: { baseUrl: "http://x/v1", models: { id: "m" } } } }, "piModels.providers.local.models", /models of provider local is an object; pi wants an array/],
      [{ providers: { local: { models: [{ name: "m" }] } } }, "piModels.providers.local.models.0.id", /needs an "id"/],
      [{ providers: { local: { apiKey: 42, models: [{ id: "m" }] } } }, "piModels.providers.local.apiKey", /apiKey of provider local is a number/],
    ];
    for (const [piModels, path, message] of cases) {
      const r = await refused("POST", "/api/environments", { name: "p", piModels });
      expect(r.status, JSON.stringify(piModels)).toBe(400);
      expect(r.code).toBe("validation_failed");
      expect(r.details?.map(([p]) => p)).toEqual([path]);
      expect(r.details?.[0][1]).toMatch(message);
    }
    // What pi reads (extra fields such as the bots' idleTimeoutMs included) is taken, on a create and a PATCH.
    const ok = await call("/api/environments", { method: "POST", token, json: { name: "ok", piModels: { providers: { local: { baseUrl: "http://x/v1", api: "openai-completions", idleTimeoutMs: 5000, models: [{ id: "m", contextWindow: 8000 }] } } } } });
    expect(ok.status).toBe(201);
    const { id } = (await ok.json()) as { id: string };
    const patched = await refused("PATCH", `/api/environments/${id}`, { piModels: { providers: [] } });
    expect([patched.status, patched.details?.map(([p]) => p)]).toEqual([400, ["piModels.providers"]]);
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
    // A repo URL with credentials in it is refused as an environment's would be: they would reach logs and entries.
    const withPassword = await call(`/api/threads/${parent.id}/delegate`, { method: "POST", token, json: { task: "x", model: "local/m", repo: "https://user:pw@example.com/r.git" } });
    expect(withPassword.status).toBe(400);
    expect(JSON.stringify(await withPassword.json())).not.toContain("pw@");
    const list = (await (await call("/api/threads", { token })).json()) as { threads: unknown[] };
    expect(list.threads).toHaveLength(1);
    const idle = await call(`/api/threads/${parent.id}/resume`, { method: "POST", token, json: { message: "again" } });
    expect(idle.status).toBe(409);
  });

  it("delegate refuses a pi run with no model (none in the request, none on the environment) with a clear 400", async () => {
    const token = await houseToken("house-env-m");
    const parent = await createThread(token);
    const noEnv = await call(`/api/threads/${parent.id}/delegate`, { method: "POST", token, json: { task: "x" } });
    expect(noEnv.status).toBe(400);
    const noEnvError = ((await noEnv.json()) as { error: { code: string; message: string } }).error;
    expect(noEnvError.code).toBe("validation_failed");
    expect(noEnvError.message).toMatch(/no model .*no environment.*"model"/);
    const bare = (await (await call("/api/environments", { method: "POST", token, json: { name: "bare", provider: "test" } })).json()) as { id: string };
    const noModel = await call(`/api/threads/${parent.id}/delegate`, { method: "POST", token, json: { task: "x", environmentId: bare.id } });
    expect(noModel.status).toBe(400);
    expect(((await noModel.json()) as { error: { message: string } }).error.message).toContain(`environment ${bare.id} has no default model`);
    const list = (await (await call("/api/threads", { token })).json()) as { threads: unknown[] };
    expect(list.threads).toHaveLength(1); // no child was created
    // A model in the request, or on the environment, is enough.
    expect((await call(`/api/threads/${parent.id}/delegate`, { method: "POST", token, json: { task: "x", environmentId: bare.id, model: "local/m" } })).status).toBe(202);
    const withModel = (await (await call("/api/environments", { method: "POST", token, json: { name: "m", provider: "test", model: "local/m" } })).json()) as { id: string };
    expect((await call(`/api/threads/${parent.id}/delegate`, { method: "POST", token, json: { task: "x", environmentId: withModel.id } })).status).toBe(202);
  });
});

describe("run_command on an environment's shared box", () => {
  it("a shared box the provider lost (a restarted local host) is replaced when a command finds it gone, and the command runs", async () => {
    const token = await houseToken("house-env-lost-box");
    const provider = sharedTestProvider();
    provider.execHandler = () => ({ exitCode: 0, output: "ran" });
    expect((await call("/api/environments", { method: "POST", token, json: { id: "env_lost", name: "shared", provider: "test", sharedBox: true } })).status).toBe(201);
    const exec = () => call("/api/environments/env_lost/exec", { method: "POST", token, json: { command: "echo hi" } });
    const first = (await (await exec()).json()) as { boxId: string };
    const ref = ((await (await call(`/api/sandboxes/${first.boxId}`, { token })).json()) as { providerRef: string }).providerRef;
    provider.kill(ref);
    const again = await exec();
    expect(again.status).toBe(200);
    const second = (await again.json()) as { boxId: string; output: string };
    expect(second.output).toBe("ran");
    expect(second.boxId).not.toBe(first.boxId);
    expect(["dead", "deleted"]).toContain(((await (await call(`/api/sandboxes/${first.boxId}`, { token })).json()) as { state: string }).state);
    // A cwd the live box refuses is still the client's 400, not a reason to replace the box.
    provider.execHandler = () => { throw new ProviderError("not_found", "no such directory", { status: 404 }); };
    const badCwd = await call("/api/environments/env_lost/exec", { method: "POST", token, json: { command: "ls", cwd: "nope" } });
    expect(badCwd.status).toBe(400);
    expect(((await (await call("/api/environments/env_lost/exec", { method: "POST", token, json: { command: "ls" } })).json()) as { boxId?: string }).boxId).toBeUndefined();
    provider.execHandler = () => ({ exitCode: 0, output: "" });
  });

  it("an environment deleted while its shared box is being created: the command answers 404 and the new box is deleted, not kept for an environment that is gone", async () => {
    const token = await houseToken("house-env-deleted-mid-create");
    const provider = sharedTestProvider();
    provider.execHandler = () => ({ exitCode: 0, output: "ran" });
    expect((await call("/api/environments", { method: "POST", token, json: { id: "env_gone", name: "shared", provider: "test", sharedBox: true } })).status).toBe(201);
    const create = provider.create;
    // The delete lands while the provider makes the box (a real create takes seconds).
    provider.create = async function (this: typeof provider, opts) {
      provider.create = create;
      expect((await call("/api/environments/env_gone", { method: "DELETE", token })).status).toBe(204);
      return create.call(this, opts);
    };
    try {
      const r = await call("/api/environments/env_gone/exec", { method: "POST", token, json: { command: "echo hi" } });
      expect(r.status).toBe(404);
      expect(await errorCode(r)).toBe("not_found");
    } finally {
      provider.create = create;
    }
    const boxes = ((await (await call("/api/sandboxes", { token })).json()) as { sandboxes: { state: string; labels: Record<string, string> }[] }).sandboxes;
    expect(boxes.filter((b) => b.labels["threadbox.environment"] === "env_gone" && b.state !== "deleted")).toEqual([]);
    expect((await provider.list({ "threadbox.house": "house-env-deleted-mid-create" })).filter((b) => b.state !== "destroyed")).toEqual([]);
  });

  it("an environment deleted while a first command makes its shared box (the delete read it before the box was claimed): the new box is deleted too, not left running for an environment that is gone", async () => {
    const houseId = "house-env-deleted-mid-claim";
    const token = await houseToken(houseId);
    const provider = sharedTestProvider();
    provider.execHandler = () => ({ exitCode: 0, output: "ran" });
    expect((await call("/api/environments", { method: "POST", token, json: { id: "env_claim", name: "shared", provider: "test", sharedBox: true } })).status).toBe(201);
    const houses = (env as unknown as { HOUSES: DurableObjectNamespace<HouseActor> }).HOUSES;
    const house = houses.get(houses.idFromName(houseId));
    // The DELETE has read the environment (no shared box yet) and is on its way to forgetting it.
    const ran = step("the command during the DELETE", async () => (await call("/api/environments/env_claim/exec", { method: "POST", token, json: { command: "echo hi" } })).status);
    await runInDurableObject(house, (h: HouseActor) => h.duringNextFolderVersionList(ran));
    const deleted = await within(call("/api/environments/env_claim", { method: "DELETE", token }), "the DELETE");
    expect(ran.value()).toBe(200);
    expect(deleted.status).toBe(204);
    expect((await call("/api/environments/env_claim", { token })).status).toBe(404);
    await vi.waitFor(async () => {
      expect((await provider.list({ "threadbox.house": houseId })).filter((b) => b.state !== "destroyed")).toEqual([]);
    });
    const boxes = ((await (await call("/api/sandboxes", { token })).json()) as { sandboxes: { state: string; labels: Record<string, string> }[] }).sandboxes;
    expect(boxes.filter((b) => b.labels["threadbox.environment"] === "env_claim" && b.state !== "deleted")).toEqual([]);
    provider.execHandler = () => ({ exitCode: 0, output: "" });
  });

  it("an environment that stops keeping a shared box (sharedBox: false) while a first command makes one: the command is refused as on such an environment, and the new box is deleted, not kept live and unused", async () => {
    const houseId = "house-env-unshared-mid-create";
    const token = await houseToken(houseId);
    const provider = sharedTestProvider();
    provider.execHandler = () => ({ exitCode: 0, output: "ran" });
    expect((await call("/api/environments", { method: "POST", token, json: { id: "env_unshared", name: "shared", provider: "test", sharedBox: true } })).status).toBe(201);
    const create = provider.create;
    // The change lands while the provider makes the box (a real create takes seconds).
    provider.create = async function (this: typeof provider, opts) {
      provider.create = create;
      expect((await call("/api/environments/env_unshared", { method: "PATCH", token, json: { sharedBox: false } })).status).toBe(200);
      return create.call(this, opts);
    };
    try {
      const r = await call("/api/environments/env_unshared/exec", { method: "POST", token, json: { command: "echo hi" } });
      expect(r.status).toBe(409);
      expect(await errorCode(r)).toBe("conflict");
    } finally {
      provider.create = create;
    }
    await vi.waitFor(async () => {
      expect((await provider.list({ "threadbox.house": houseId })).filter((b) => b.state !== "destroyed")).toEqual([]);
    });
    // Turned on again, the environment makes its box afresh.
    expect((await call("/api/environments/env_unshared", { method: "PATCH", token, json: { sharedBox: true } })).status).toBe(200);
    expect((await call("/api/environments/env_unshared/exec", { method: "POST", token, json: { command: "echo hi" } })).status).toBe(200);
    expect((await provider.list({ "threadbox.house": houseId })).filter((b) => b.state !== "destroyed")).toHaveLength(1);
    provider.execHandler = () => ({ exitCode: 0, output: "" });
  });

  it("a command still running on the shared box is not cut off when a change replaces the box: the old box goes once the command is done", async () => {
    const token = await houseToken("house-env-exec-held");
    const provider = sharedTestProvider();
    let release!: () => void;
    const held = new Promise<void>((r) => { release = r; });
    provider.execHandler = async (_box, command) => {
      if (command === "long") await held;
      return { exitCode: 0, output: command };
    };
    try {
      expect((await call("/api/environments", { method: "POST", token, json: { id: "env_held", name: "s", provider: "test", sharedBox: true } })).status).toBe(201);
      const exec = (command: string) => call("/api/environments/env_held/exec", { method: "POST", token, json: { command } });
      const old = ((await (await exec("warm")).json()) as { boxId: string }).boxId;
      const long = exec("long");
      // The long command is running on the old box when a change makes the next use replace it.
      await vi.waitFor(() => expect(provider.calls.filter((c) => c.op === "exec" && (c.args as { command: string }).command === "long")).toHaveLength(1));
      expect((await call("/api/environments/env_held", { method: "PATCH", token, json: { image: "other:2" } })).status).toBe(200);
      const fresh = ((await (await exec("short")).json()) as { boxId: string }).boxId;
      expect(fresh).not.toBe(old);
      const state = async () => ((await (await call(`/api/sandboxes/${old}`, { token })).json()) as { state: string }).state;
      expect(await state()).toBe("live");
      release();
      const done = await long;
      expect(done.status).toBe(200);
      expect(await done.json()).toMatchObject({ boxId: old, exitCode: 0, output: "long" });
      await vi.waitFor(async () => expect(await state()).toBe("deleted"));
    } finally {
      release();
      provider.execHandler = () => ({ exitCode: 0, output: "" });
    }
  });

  it("a shared box that could not be read for a moment is replaced, and the old one is deleted, not left live at the provider with nothing to use or reap it", async () => {
    const houseId = "house-env-unreadable-box";
    const token = await houseToken(houseId);
    const provider = sharedTestProvider();
    provider.execHandler = () => ({ exitCode: 0, output: "ok" });
    expect((await call("/api/environments", { method: "POST", token, json: { id: "env_unreadable", name: "s", provider: "test", sharedBox: true } })).status).toBe(201);
    const exec = async () => ((await (await call("/api/environments/env_unreadable/exec", { method: "POST", token, json: { command: "true" } })).json()) as { boxId: string }).boxId;
    const first = await exec();
    const sandboxes = (env as unknown as { SANDBOXES: DurableObjectNamespace<SandboxActor> }).SANDBOXES;
    await runInDurableObject(sandboxes.get(sandboxes.idFromName(first)), (b: SandboxActor) => b.failViews(1));
    const second = await exec();
    expect(second).not.toBe(first);
    expect(await exec()).toBe(second);
    await vi.waitFor(async () => {
      expect(((await (await call(`/api/sandboxes/${first}`, { token })).json()) as { state: string }).state).toBe("deleted");
    });
    expect((await provider.list({ "threadbox.house": houseId })).filter((b) => b.state !== "destroyed")).toHaveLength(1);
    provider.execHandler = () => ({ exitCode: 0, output: "" });
  });

  it("replacing the environment (POST with its id) or patching it keeps its shared box: no second box, none left behind", async () => {
    const token = await houseToken("house-env-replace");
    const provider = sharedTestProvider();
    provider.execHandler = () => ({ exitCode: 0, output: "ok" });
    const body = { id: "env_replace", name: "shared", provider: "test", sharedBox: true };
    expect((await call("/api/environments", { method: "POST", token, json: body })).status).toBe(201);
    const exec = async () => ((await (await call(`/api/environments/env_replace/exec`, { method: "POST", token, json: { command: "echo hi" } })).json()) as { boxId: string }).boxId;
    const first = await exec();
    expect((await call("/api/environments", { method: "POST", token, json: { ...body, env: { NEW: "1" } } })).status).toBe(201);
    expect(await exec()).toBe(first);
    expect((await call("/api/environments/env_replace", { method: "PATCH", token, json: { name: "renamed" } })).status).toBe(200);
    expect(await exec()).toBe(first);
    const boxes = (await (await call("/api/sandboxes?ephemeral=false", { token })).json()) as { sandboxes: { id: string }[] };
    expect(boxes.sandboxes.map((b) => b.id)).toEqual([first]);
    // Deleting the environment deletes that one box.
    expect((await call("/api/environments/env_replace", { method: "DELETE", token })).status).toBe(204);
    expect(((await (await call(`/api/sandboxes/${first}`, { token })).json()) as { state: string }).state).toBe("deleted");
  });

  it("a shared box is made with the environment's image, egress and volumes: changing them replaces it (the old one is deleted); turning the shared box off deletes it", async () => {
    const token = await houseToken("house-env-respec");
    const provider = sharedTestProvider();
    provider.execHandler = () => ({ exitCode: 0, output: "ok" });
    expect((await call("/api/environments", { method: "POST", token, json: { id: "env_respec", name: "s", provider: "test", sharedBox: true } })).status).toBe(201);
    const exec = async () => ((await (await call("/api/environments/env_respec/exec", { method: "POST", token, json: { command: "true" } })).json()) as { boxId: string }).boxId;
    const state = async (boxId: string) => ((await (await call(`/api/sandboxes/${boxId}`, { token })).json()) as { state: string }).state;
    const first = await exec();
    // What commands get per call (env) changes nothing about the box.
    expect((await call("/api/environments/env_respec", { method: "PATCH", token, json: { env: { A: "1" } } })).status).toBe(200);
    expect(await exec()).toBe(first);
    for (const patch of [{ egress: "deny" }, { volumes: [{ name: "mem", path: "mem" }] }, { image: "node:22" }]) {
      const before = await exec();
      expect((await call("/api/environments/env_respec", { method: "PATCH", token, json: patch })).status).toBe(200);
      const after = await exec();
      expect([JSON.stringify(patch), after === before]).toEqual([JSON.stringify(patch), false]);
      expect(await state(before)).toBe("deleted");
    }
    const last = await exec();
    const made = provider.calls.filter((c) => c.op === "create" && JSON.stringify(c.args).includes("house-env-respec")).at(-1)!.args as { egress?: { blockAll?: boolean }; image?: string };
    expect([made.egress?.blockAll, made.image]).toEqual([true, "node:22"]);
    expect((await call("/api/environments/env_respec", { method: "PATCH", token, json: { sharedBox: false } })).status).toBe(200);
    expect(await state(last)).toBe("deleted");
    provider.execHandler = () => ({ exitCode: 0, output: "" });
  });

  it("a secret changed or removed (PATCH, or a create-or-replace POST) lets the shared box go at once: the next command gets a new one; a secret added or sent again unchanged keeps it", async () => {
    const token = await houseToken("house-env-secret-rotate");
    const body = { id: "env_rotate", name: "s", provider: "test", sharedBox: true, secrets: { A_KEY: "a-value-1", B_KEY: "b-value-1" } };
    expect((await call("/api/environments", { method: "POST", token, json: body })).status).toBe(201);
    const exec = async () => ((await (await call("/api/environments/env_rotate/exec", { method: "POST", token, json: { command: "true" } })).json()) as { boxId: string }).boxId;
    const state = async (boxId: string) => ((await (await call(`/api/sandboxes/${boxId}`, { token })).json()) as { state: string }).state;
    const sharedBoxId = async () => ((await (await call("/api/environments/env_rotate", { token })).json()) as { sharedBoxId?: string }).sharedBoxId;
    const first = await exec();
    for (const patch of [{ secrets: { C_KEY: "c-value-1" } }, { secrets: { A_KEY: "a-value-1" } }, { name: "renamed" }]) {
      expect((await call("/api/environments/env_rotate", { method: "PATCH", token, json: patch })).status).toBe(200);
      expect([JSON.stringify(patch), await exec()]).toEqual([JSON.stringify(patch), first]);
    }
    expect((await call("/api/environments", { method: "POST", token, json: { ...body, secrets: { A_KEY: "a-value-1", B_KEY: "b-value-1", C_KEY: "c-value-1" } } })).status).toBe(201);
    expect(await exec()).toBe(first);
    let before = first;
    for (const change of [
      { method: "PATCH", path: "/api/environments/env_rotate", json: { secrets: { A_KEY: "a-value-2" } } },
      { method: "PATCH", path: "/api/environments/env_rotate", json: { secrets: { B_KEY: null } } },
      { method: "POST", path: "/api/environments", json: { ...body, secrets: { A_KEY: "a-value-2" } } },
    ]) {
      expect((await call(change.path, { method: change.method, token, json: change.json })).status).toBeLessThan(300);
      // Let go at once (nothing runs on it): not kept live until a next use that may never come.
      expect([JSON.stringify(change.json), await sharedBoxId(), await state(before)]).toEqual([JSON.stringify(change.json), undefined, "deleted"]);
      const after = await exec();
      expect(after).not.toBe(before);
      before = after;
    }
  });

  it("creates the shared box once, runs commands there with the environment's env (never its secrets)", async () => {
    const token = await houseToken("house-exec");
    const provider = sharedTestProvider();
    provider.execHandler = (_box, command, opts) => ({ exitCode: command.includes("fail") ? 3 : 0, output: `ran ${command} env=${JSON.stringify(opts.env ?? {})}` });
    const e = (await (await call("/api/environments", {
      method: "POST", token, json: { name: "shared", provider: "test", sharedBox: true, env: { FOO: "bar" }, secrets: { API_KEY: "sk-never-shown" } },
    })).json()) as { id: string };
    const first = await call(`/api/environments/${e.id}/exec`, { method: "POST", token, json: { command: "echo hi" } });
    expect(first.status).toBe(200);
    const r1 = (await first.json()) as { boxId: string; exitCode: number; output: string };
    expect(r1.exitCode).toBe(0);
    expect(r1.output).toContain('"FOO":"bar"');
    expect(r1.output).not.toContain("sk-never-shown");
    const r2 = (await (await call(`/api/environments/${e.id}/exec`, { method: "POST", token, json: { command: "fail now" } })).json()) as { boxId: string; exitCode: number };
    expect(r2.boxId).toBe(r1.boxId);
    expect(r2.exitCode).toBe(3);
    const boxes = (await (await call("/api/sandboxes?ephemeral=false", { token })).json()) as { sandboxes: { id: string; state: string }[] };
    expect(boxes.sandboxes.map((b) => [b.id, b.state])).toEqual([[r1.boxId, "live"]]);
    expect(provider.calls.filter((c) => c.op === "create" && JSON.stringify(c.args).includes("house-exec"))).toHaveLength(1);
    provider.execHandler = () => ({ exitCode: 0, output: "" });
  });

  it("refuses environments without a shared box, bad commands and read-only tokens", async () => {
    const token = await houseToken("house-exec-2");
    const e = (await (await call("/api/environments", { method: "POST", token, json: { name: "no-box", provider: "test" } })).json()) as { id: string };
    expect((await call(`/api/environments/${e.id}/exec`, { method: "POST", token, json: { command: "ls" } })).status).toBe(409);
    expect((await call(`/api/environments/${e.id}/exec`, { method: "POST", token, json: {} })).status).toBe(400);
    expect((await call(`/api/environments/env_missing/exec`, { method: "POST", token, json: { command: "ls" } })).status).toBe(404);
    const reader = await houseToken("house-exec-2", "rita", "reader");
    expect((await call(`/api/environments/${e.id}/exec`, { method: "POST", token: reader, json: { command: "ls" } })).status).toBe(403);
  });
});


describe("DELETE /api/environments/:id", () => {
  it("deletes its shared box and the environment; volumes are never deleted with it; readers and bots may not", async () => {
    const token = await houseToken("house-env-del");
    const provider = sharedTestProvider();
    provider.execHandler = () => ({ exitCode: 0, output: "ok" });
    const e = (await (await call("/api/environments", {
      method: "POST", token, json: { name: "doomed", provider: "test", sharedBox: true, volumes: [{ name: "memory", path: "memory" }] },
    })).json()) as { id: string };
    const { boxId } = (await (await call(`/api/environments/${e.id}/exec`, { method: "POST", token, json: { command: "echo hi" } })).json()) as { boxId: string };
    for (const role of ["reader", "bot"]) {
      expect((await call(`/api/environments/${e.id}`, { method: "DELETE", token: await houseToken("house-env-del", `r-${role}`, role) })).status).toBe(403);
    }
    const before = provider.calls.length;
    expect((await call(`/api/environments/${e.id}`, { method: "DELETE", token })).status).toBe(204);
    expect((await call(`/api/environments/${e.id}`, { token })).status).toBe(404);
    expect(((await (await call(`/api/sandboxes/${boxId}`, { token })).json()) as { state: string }).state).toBe("deleted");
    // The only provider call was the box's delete: nothing touched a volume.
    const ops = provider.calls.slice(before).map((c) => c.op);
    expect(ops).toContain("delete");
    expect(ops.filter((op) => /volume/i.test(op))).toEqual([]);
    expect((await call(`/api/environments/${e.id}`, { method: "DELETE", token })).status).toBe(404);
    expect((await call(`/api/threads`, { method: "POST", token, json: { environmentId: e.id } })).status).toBe(404);
    provider.execHandler = () => ({ exitCode: 0, output: "" });
  });

  it("while a command runs on the shared box: the environment's DELETE and the box's plain DELETE are a 409 and the command finishes; after it, the delete goes through", async () => {
    const token = await houseToken("house-env-del-exec");
    const provider = sharedTestProvider();
    let release!: () => void;
    const held = new Promise<void>((r) => { release = r; });
    provider.execHandler = async (_box, command) => {
      if (command === "long-del") await held;
      return { exitCode: 0, output: command };
    };
    try {
      expect((await call("/api/environments", { method: "POST", token, json: { id: "env_del_exec", name: "s", provider: "test", sharedBox: true } })).status).toBe(201);
      const exec = (command: string) => call("/api/environments/env_del_exec/exec", { method: "POST", token, json: { command } });
      const boxId = ((await (await exec("warm")).json()) as { boxId: string }).boxId;
      const long = exec("long-del");
      await vi.waitFor(() => expect(provider.calls.filter((c) => c.op === "exec" && (c.args as { command: string }).command === "long-del")).toHaveLength(1));
      const refused = await call("/api/environments/env_del_exec", { method: "DELETE", token });
      expect(refused.status).toBe(409);
      expect(await errorCode(refused)).toBe("conflict");
      expect((await call(`/api/sandboxes/${boxId}`, { method: "DELETE", token })).status).toBe(409);
      expect(((await (await call(`/api/sandboxes/${boxId}`, { token })).json()) as { state: string }).state).toBe("live");
      expect((await call("/api/environments/env_del_exec", { token })).status).toBe(200);
      release();
      const done = await long;
      expect(done.status).toBe(200);
      expect(await done.json()).toMatchObject({ boxId, exitCode: 0, output: "long-del" });
      expect((await call("/api/environments/env_del_exec", { method: "DELETE", token })).status).toBe(204);
      expect(((await (await call(`/api/sandboxes/${boxId}`, { token })).json()) as { state: string }).state).toBe("deleted");
    } finally {
      release();
      provider.execHandler = () => ({ exitCode: 0, output: "" });
    }
  });

  it("PATCHes at once all take effect (secrets merge by name), and a PATCH after a DELETE is a 404 that brings nothing back", async () => {
    const token = await houseToken("house-env-patch-race");
    const { id } = (await (await call("/api/environments", { method: "POST", token, json: { name: "race" } })).json()) as { id: string };
    const answers = await Promise.all(Array.from({ length: 10 }, (_, i) =>
      call(`/api/environments/${id}`, { method: "PATCH", token, json: { secrets: { [`S_${i}`]: `secret-value-${i}` } } })));
    expect(answers.map((r) => r.status)).toEqual(Array(10).fill(200));
    const got = (await (await call(`/api/environments/${id}`, { token })).json()) as { secretNames: string[] };
    expect([...got.secretNames].sort()).toEqual(Array.from({ length: 10 }, (_, i) => `S_${i}`).sort());

    const [patched, deleted] = await Promise.all([
      call(`/api/environments/${id}`, { method: "PATCH", token, json: { env: { LATE: "1" } } }),
      call(`/api/environments/${id}`, { method: "DELETE", token }),
    ]);
    expect(deleted.status).toBe(204);
    expect([200, 404]).toContain(patched.status);
    expect((await call(`/api/environments/${id}`, { token })).status).toBe(404);
    expect((await call(`/api/environments/${id}`, { method: "PATCH", token, json: { env: { AFTER: "1" } } })).status).toBe(404);
    expect((await call(`/api/environments/${id}`, { token })).status).toBe(404);
  });
  it("a NUL byte in a command, a cwd or an environment variable is a 400 at its field, before any box is asked (it was a 502 blaming the provider)", async () => {
    const token = await houseToken("house-exec-nul");
    const { id } = (await (await call("/api/environments", { method: "POST", token, json: { name: "nul", provider: "test", sharedBox: true } })).json()) as { id: string };
    for (const [bad, field] of [[{ env: { A: "x\u0000y" } }, "env.A"], [{ secrets: { S: "x\u0000y" } }, "secrets.S"]] as const) {
      const r = await call("/api/environments", { method: "POST", token, json: { name: "nul-env", ...bad } });
      const { error } = (await r.json()) as { error: { details?: { path: string }[] } };
      expect({ status: r.status, paths: error.details?.map((d) => d.path) }).toEqual({ status: 400, paths: [field] });
    }
    for (const [body, field] of [[{ command: "echo a\u0000b" }, "command"], [{ command: "ls", cwd: "a\u0000b" }, "cwd"]] as const) {
      const r = await call(`/api/environments/${id}/exec`, { method: "POST", token, json: body });
      const { error } = (await r.json()) as { error: { code: string; details?: { path: string }[] } };
      expect({ status: r.status, code: error.code, paths: error.details?.map((d) => d.path) }).toEqual({ status: 400, code: "validation_failed", paths: [field] });
    }
  });
});

describe("an environment's box mode and shared box", () => {
  it("sharedBox false next to boxMode shared is a 400 naming sharedBox, on create and on PATCH, never a 200 that changes nothing", async () => {
    const token = await houseToken("house-boxmode");
    const bad = await call("/api/environments", { method: "POST", token, json: { name: "x", provider: "test", boxMode: "shared", sharedBox: false } });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { details: { path: string }[] } }).error.details.map((d) => d.path)).toEqual(["sharedBox"]);

    const created = await call("/api/environments", { method: "POST", token, json: { name: "s", provider: "test", boxMode: "shared" } });
    const env = (await created.json()) as { id: string; sharedBox: boolean };
    expect(env.sharedBox).toBe(true);
    const patch = (json: unknown) => call(`/api/environments/${env.id}`, { method: "PATCH", token, json });
    const refused = await patch({ sharedBox: false });
    expect(refused.status).toBe(400);
    expect(await errorCode(refused)).toBe("validation_failed");
    // Leaving the shared mode can drop the box, or keep it for run_command.
    const left = await patch({ boxMode: "ephemeral", sharedBox: false });
    expect(((await left.json()) as { boxMode: string; sharedBox: boolean })).toMatchObject({ boxMode: "ephemeral", sharedBox: false });
    const back = await patch({ boxMode: "shared" });
    expect(back.status).toBe(200);
    expect(((await back.json()) as { sharedBox: boolean }).sharedBox).toBe(true);
  });

  it("an environment stored by an older version with values refused now: a PATCH that leaves them alone succeeds and keeps them; one that sends a bad value is told which", async () => {
    const houseId = "house-env-legacy";
    const token = await houseToken(houseId);
    expect((await call("/api/environments", { method: "POST", token, json: { id: "env_old", name: "old", model: "local/m", egress: "deny" } })).status).toBe(201);
    const houses = (env as unknown as { HOUSES: DurableObjectNamespace<HouseActor> }).HOUSES;
    // What earlier releases accepted: a model name with a space, a comma-joined allow-list, a file under ~.
    const legacy = { model: "local/my model", egress: { domainAllowList: ["pypi.org,evil.example"] }, files: [{ path: "~/.bashrc", content: "x" }] };
    await runInDurableObject(houses.get(houses.idFromName(houseId)), (_h: HouseActor, state) => {
      const row = state.storage.sql.exec(`select body from environments where id = 'env_old'`).one();
      state.storage.sql.exec(`update environments set body = ? where id = 'env_old'`, JSON.stringify({ ...JSON.parse(row.body as string), ...legacy }));
    });
    const renamed = await call("/api/environments/env_old", { method: "PATCH", token, json: { name: "renamed", env: { A: "1" } } });
    expect(renamed.status).toBe(200);
    expect(await renamed.json()).toMatchObject({ name: "renamed", env: { A: "1" }, model: "local/my model", egress: legacy.egress, files: [{ path: "~/.bashrc" }] });
    // A bad value sent in the PATCH is the caller's to fix, and named as before.
    const bad = await call("/api/environments/env_old", { method: "PATCH", token, json: { model: "still bad" } });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string; details: { path: string }[] } }).error).toMatchObject({ code: "validation_failed", details: [{ path: "model" }] });
    // Sending a valid value replaces the stored one.
    const fixed = await call("/api/environments/env_old", { method: "PATCH", token, json: { model: "local/m", egress: "deny", files: [] } });
    expect(fixed.status).toBe(200);
    expect(await fixed.json()).toMatchObject({ model: "local/m", egress: "deny", files: [] });
    // A stored value another field depends on (a secret with a NUL byte that a repository names) cannot be
    // kept aside: the 400 names it as stored and says how to fix it.
    await runInDurableObject(houses.get(houses.idFromName(houseId)), (_h: HouseActor, state) => {
      const row = state.storage.sql.exec(`select body from environments where id = 'env_old'`).one();
      const old = { secrets: { GIT_TOKEN: "a\0b" }, repositories: [{ url: "https://git.example/a.git", credentialsSecret: "GIT_TOKEN" }] };
      state.storage.sql.exec(`update environments set body = ? where id = 'env_old'`, JSON.stringify({ ...JSON.parse(row.body as string), ...old }));
    });
    const tied = await call("/api/environments/env_old", { method: "PATCH", token, json: { name: "again" } });
    expect(tied.status).toBe(400);
    expect(((await tied.json()) as { error: unknown }).error).toEqual({
      code: "validation_failed",
      message: "this environment holds values an older version accepted and this one refuses (secrets): send valid ones in this PATCH, or null to clear them",
      details: [{ path: "secrets.GIT_TOKEN", message: "stored by an older version: an environment variable's value cannot contain a NUL byte" }],
    });
    expect((await call("/api/environments/env_old", { method: "PATCH", token, json: { name: "again", secrets: { GIT_TOKEN: "fine" } } })).status).toBe(200);
  });
});
