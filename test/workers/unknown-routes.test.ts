import { describe, expect, it } from "vitest";
import { call, houseToken } from "./helpers";

describe("a path that matches no route", () => {
  it("answers 401 for a missing or bad token, before saying the route does not exist", async () => {
    for (const path of ["/api/threads//entries", "/api/nope", "/v1/nope"]) {
      const none = await call(path, { method: "POST" });
      expect(none.status, path).toBe(401);
      expect(((await none.json()) as { error: { code: string } }).error.code).toBe("unauthorized");
      const bad = await call(path, { method: "GET", token: "not-a-token" });
      expect(bad.status, path).toBe(401);
      await bad.body?.cancel();
    }
  });

  it("answers 404 no such route with a valid token, and outside the API without one", async () => {
    const token = await houseToken();
    const r = await call("/api/threads//entries", { method: "POST", token });
    expect(r.status).toBe(404);
    expect(await r.json()).toEqual({ error: { code: "not_found", message: "no such route" } });
    const outside = await call("/favicon.ico");
    expect(outside.status).toBe(404);
    await outside.body?.cancel();
  });
});
