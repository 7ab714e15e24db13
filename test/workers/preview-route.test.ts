import { describe, expect, it } from "vitest";
import { call, houseToken } from "./helpers";
import { sharedTestProvider } from "./register-test-provider";

async function liveBox(token: string) {
  const r = await call("/api/sandboxes", { method: "POST", token, json: { provider: "test", ephemeral: false } });
  expect(r.status).toBe(201);
  return ((await r.json()) as { id: string }).id;
}

describe("GET /api/sandboxes/:id/ports/:port/preview", () => {
  it("answers the provider's signed link with its expiry", async () => {
    const token = await houseToken("house-preview-1");
    const boxId = await liveBox(token);
    const before = Date.now();
    const r = await call(`/api/sandboxes/${boxId}/ports/5173/preview?expiresInSeconds=600`, { token });
    expect(r.status).toBe(200);
    const body = (await r.json()) as { boxId: string; port: number; url: string; token: string; expiresAt: string };
    expect(body).toMatchObject({ boxId, port: 5173 });
    expect(body.url).toContain("5173-");
    expect(body.url).toContain(body.token);
    const expires = Date.parse(body.expiresAt);
    expect(expires).toBeGreaterThanOrEqual(before + 600_000 - 1_000);
    expect(expires).toBeLessThanOrEqual(Date.now() + 600_000 + 1_000);
  });

  it("refuses a bad port or expiry with 400, a reader with 403, and a deleted box with 409", async () => {
    const token = await houseToken("house-preview-2");
    const boxId = await liveBox(token);
    for (const port of ["0", "65536", "abc", "80.5", "-1"]) {
      const r = await call(`/api/sandboxes/${boxId}/ports/${port}/preview`, { token });
      expect(r.status, port).toBe(400);
      expect(((await r.json()) as { error: { code: string } }).error.code).toBe("validation_failed");
    }
    for (const q of ["expiresInSeconds=0", "expiresInSeconds=86401", "expiresInSeconds=x", "other=1"]) {
      expect((await call(`/api/sandboxes/${boxId}/ports/3000/preview?${q}`, { token })).status, q).toBe(400);
    }
    const reader = await houseToken("house-preview-2", "rita", "reader");
    expect((await call(`/api/sandboxes/${boxId}/ports/3000/preview`, { token: reader })).status).toBe(403);
    expect((await call(`/api/sandboxes/${boxId}/ports/3000/preview`)).status).toBe(401);
    expect((await call(`/api/sandboxes/box_nope/ports/3000/preview`, { token })).status).toBe(404);

    expect((await call(`/api/sandboxes/${boxId}?force=true`, { method: "DELETE", token })).status).toBe(200);
    const gone = await call(`/api/sandboxes/${boxId}/ports/3000/preview`, { token });
    expect(gone.status).toBe(409);
    expect(((await gone.json()) as { error: { message: string } }).error.message).toMatch(/live box/);
  });

  it("a box the provider no longer has is a 409 saying the box is gone, not a provider outage", async () => {
    const token = await houseToken("house-preview-lost");
    const boxId = await liveBox(token);
    const ref = ((await (await call(`/api/sandboxes/${boxId}`, { token })).json()) as { providerRef: string }).providerRef;
    sharedTestProvider().kill(ref);
    const r = await call(`/api/sandboxes/${boxId}/ports/3000/preview`, { token });
    expect(r.status).toBe(409);
    const error = ((await r.json()) as { error: { code: string; message: string } }).error;
    expect(error.code).toBe("conflict");
    expect(error.message).toMatch(/gone/);
  });

  it("a box the provider cannot open a port of (the local host's closed network) is a 409 that says so, not a provider outage", async () => {
    const house = "house-preview-closed";
    const token = await houseToken(house);
    const boxId = await liveBox(token);
    sharedTestProvider().failOn("previewLink", house, "box's network is closed", "conflict");
    const r = await call(`/api/sandboxes/${boxId}/ports/3000/preview`, { token });
    expect(r.status).toBe(409);
    const error = ((await r.json()) as { error: { code: string; message: string } }).error;
    expect(error.code).toBe("conflict");
    expect(error.message).toMatch(/cannot open port 3000/);
  });
});
