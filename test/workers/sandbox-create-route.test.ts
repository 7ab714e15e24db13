// POST /api/sandboxes with an environmentId: the box is made as the environment's own boxes are.
import { describe, expect, it } from "vitest";
import { call, houseToken } from "./helpers";
import { sharedTestProvider } from "./register-test-provider";

describe("POST /api/sandboxes for an environment", () => {
  it("creates the box with the environment's egress, volumes and snapshot, unless the body names another snapshot", async () => {
    const house = "house-sandbox-for-env";
    const token = await houseToken(house);
    const made = await call("/api/environments", {
      method: "POST", token,
      json: { name: "closed", provider: "test", snapshot: "env-snap", egress: { allow: ["example.com"] }, volumes: [{ name: "cache", path: "cache" }] },
    });
    expect(made.status).toBe(201);
    const envId = ((await made.json()) as { id: string }).id;

    const created = async (json: Record<string, unknown>) => {
      const r = await call("/api/sandboxes", { method: "POST", token, json: { provider: "test", ...json } });
      expect(r.status).toBe(201);
      const ref = ((await r.json()) as { providerRef: string }).providerRef;
      return sharedTestProvider().boxes.get(ref)!.create;
    };

    const asked = await created({ environmentId: envId });
    expect(asked.egress?.domainAllowList).toContain("example.com");
    expect(asked.egress?.blockAll).toBe(true);
    expect(asked.volumes).toEqual([expect.objectContaining({ mountPath: "/home/daytona/cache" })]);
    expect(asked.snapshot).toBe("env-snap");

    expect((await created({ environmentId: envId, snapshot: "other-snap" })).snapshot).toBe("other-snap");
    // Without an environment, nothing of one applies.
    const bare = await created({});
    expect([bare.egress, bare.volumes, bare.snapshot]).toEqual([undefined, undefined, undefined]);
  });
});
