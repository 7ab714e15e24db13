// A box the provider refuses to create is the caller's to fix (an image, a snapshot, an egress
// allow-list the provider does not take): the API says why instead of blaming the provider.
import { describe, expect, it } from "vitest";
import { call, houseToken } from "./helpers";
import { sharedTestProvider } from "./register-test-provider";

const WHY = "this host enforces egress by loopback host:port only; it cannot allow example.com (use an open network, or Daytona)";

async function sharedBoxEnvironment(token: string): Promise<string> {
  const r = await call("/api/environments", { method: "POST", token, json: { name: "allow-list", provider: "test", sharedBox: true, egress: { allow: ["example.com"] } } });
  expect(r.status).toBe(201);
  return ((await r.json()) as { id: string }).id;
}

describe("a box the provider refuses to create", () => {
  it("is a 400 bad_request naming the provider's reason, on POST /api/sandboxes and on exec", async () => {
    const house = "house-create-refused";
    const token = await houseToken(house);
    sharedTestProvider().failOn("create", house, WHY);
    const refused = { error: { code: "bad_request", message: `the sandbox provider refused to create the box: ${WHY}` } };

    const box = await call("/api/sandboxes", { method: "POST", token, json: { provider: "test", ephemeral: false } });
    expect([box.status, await box.json()]).toEqual([400, refused]);

    const envId = await sharedBoxEnvironment(token);
    const exec = await call(`/api/environments/${envId}/exec`, { method: "POST", token, json: { command: "echo hi" } });
    expect([exec.status, await exec.json()]).toEqual([400, refused]);
  });

  it("a provider that fails or cannot be reached is still a 502 provider_unavailable, without its message", async () => {
    const house = "house-create-unavailable";
    const token = await houseToken(house);
    sharedTestProvider().failOn("create", house, "upstream connect error at 10.0.0.7", "unavailable");
    const box = await call("/api/sandboxes", { method: "POST", token, json: { provider: "test", ephemeral: false } });
    expect([box.status, await box.json()]).toEqual([502, { error: { code: "provider_unavailable", message: "sandbox provider: unavailable" } }]);
    const envId = await sharedBoxEnvironment(token);
    const exec = await call(`/api/environments/${envId}/exec`, { method: "POST", token, json: { command: "echo hi" } });
    expect(exec.status).toBe(502);
  });
});
