// An environment names the Daytona API and target its boxes run on (`apiUrl`, `target`): the
// target reaches the box's create, and an apiUrl other than the worker's own is refused, since
// the worker's Daytona key would be sent there.
import { env } from "cloudflare:test";
import { describe, expect, inject, it } from "vitest";
import { call, houseToken } from "./helpers";

const bindings = env as unknown as { DAYTONA_API_URL: string; DAYTONA_API_KEY: string };

describe("an environment's apiUrl and target", () => {
  it("are stored and listed, and its shared box is made in its target on the worker's Daytona API", async () => {
    const token = await houseToken("house-env-target");
    const apiUrl = inject("sandboxHostApiUrl");
    const r = await call("/api/environments", { method: "POST", token, json: { name: "eu", apiUrl, target: "eu", sharedBox: true } });
    expect(r.status).toBe(201);
    const created = (await r.json()) as { id: string; runtime: string; apiUrl: string; target: string };
    expect(created).toMatchObject({ runtime: "daytona", apiUrl, target: "eu" });
    const listed = (await (await call("/api/environments", { token })).json()) as { environments: { id: string; apiUrl?: string; target?: string }[] };
    expect(listed.environments.find((e) => e.id === created.id)).toMatchObject({ apiUrl, target: "eu" });

    const exec = await call(`/api/environments/${created.id}/exec`, { method: "POST", token, json: { command: "echo hi" } });
    expect(exec.status).toBe(200);
    const { boxId } = (await exec.json()) as { boxId: string };
    const box = (await (await call(`/api/sandboxes/${boxId}`, { token })).json()) as { providerRef: string };
    const atHost = await fetch(`${bindings.DAYTONA_API_URL}/sandbox/${box.providerRef}`, { headers: { authorization: `Bearer ${bindings.DAYTONA_API_KEY}` } });
    expect(((await atHost.json()) as { target: string }).target).toBe("eu");

    // A box keeps the target it was made in: another target replaces the shared box.
    expect((await call(`/api/environments/${created.id}`, { method: "PATCH", token, json: { target: "us" } })).status).toBe(200);
    const again = await call(`/api/environments/${created.id}/exec`, { method: "POST", token, json: { command: "echo hi" } });
    const next = ((await again.json()) as { boxId: string }).boxId;
    expect(next).not.toBe(boxId);
    const nextRef = ((await (await call(`/api/sandboxes/${next}`, { token })).json()) as { providerRef: string }).providerRef;
    const nextAtHost = await fetch(`${bindings.DAYTONA_API_URL}/sandbox/${nextRef}`, { headers: { authorization: `Bearer ${bindings.DAYTONA_API_KEY}` } });
    expect(((await nextAtHost.json()) as { target: string }).target).toBe("us");
    await call(`/api/sandboxes/${next}?force=true`, { method: "DELETE", token });
  });

  it("an apiUrl other than the worker's DAYTONA_API_URL is a 400 naming apiUrl, on a create and a PATCH; nothing is stored", async () => {
    const token = await houseToken("house-env-apiurl");
    const elsewhere = { name: "elsewhere", apiUrl: "https://attacker.example/api" };
    const r = await call("/api/environments", { method: "POST", token, json: elsewhere });
    expect(r.status).toBe(400);
    const body = (await r.json()) as { error: { code: string; details: { path: string; message: string }[] } };
    expect(body.error.code).toBe("validation_failed");
    expect(body.error.details[0].path).toBe("apiUrl");
    expect(((await (await call("/api/environments", { token })).json()) as { environments: unknown[] }).environments).toEqual([]);

    const ok = (await (await call("/api/environments", { method: "POST", token, json: { name: "ok" } })).json()) as { id: string };
    const patched = await call(`/api/environments/${ok.id}`, { method: "PATCH", token, json: { apiUrl: "https://attacker.example/api" } });
    expect(patched.status).toBe(400);
    const after = (await (await call(`/api/environments/${ok.id}`, { token })).json()) as { apiUrl?: string };
    expect(after.apiUrl).toBeUndefined();
    // The worker's own, written with a trailing slash, is the same API.
    const same = await call(`/api/environments/${ok.id}`, { method: "PATCH", token, json: { apiUrl: `${inject("sandboxHostApiUrl")}/` } });
    expect(same.status).toBe(200);
  });

  it("a target that is not a name is a 400", async () => {
    const token = await houseToken("house-env-target-bad");
    const r = await call("/api/environments", { method: "POST", token, json: { name: "bad", target: "../x y" } });
    expect(r.status).toBe(400);
  });
});
