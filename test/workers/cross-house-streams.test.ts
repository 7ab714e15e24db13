import { describe, expect, it } from "vitest";
import { call, houseToken } from "./helpers";

// House ids and stream names may both contain ':'; the storage key must still tell them apart.
describe("plain streams never cross houses", () => {
  it("house acme:eng cannot read, write or delete house acme's stream eng:payroll", async () => {
    const acme = await houseToken("acme", "alice");
    const acmeEng = await houseToken("acme:eng", "mallory");
    const created = await call("/api/stream/eng:payroll", { method: "PUT", token: acme, headers: { "content-type": "text/plain" } });
    expect(created.status).toBe(201);
    expect((await call("/api/stream/eng:payroll", { method: "POST", token: acme, body: "salary", headers: { "content-type": "text/plain" } })).status).toBe(204);

    expect((await call("/api/stream/payroll?offset=-1", { token: acmeEng })).status).toBe(404);
    expect((await call("/api/stream/payroll", { method: "HEAD", token: acmeEng })).status).toBe(404);
    expect((await call("/api/stream/payroll", { method: "POST", token: acmeEng, body: "x", headers: { "content-type": "text/plain" } })).status).toBe(404);
    expect((await call("/api/stream/payroll", { method: "DELETE", token: acmeEng })).status).toBe(404);

    // The owner still sees exactly what it wrote.
    const read = await call("/api/stream/eng:payroll?offset=-1", { token: acme });
    expect(read.status).toBe(200);
    expect(await read.text()).toBe("salary");
  });
});
