import { describe, expect, it } from "vitest";
import { SignJWT } from "jose";
import { mintHouseToken, verifyToken } from "../../src/auth/tokens";

const SECRET = "tokens-test-secret-0123456789abcdef";

describe("token verification", () => {
  it("accepts a minted token and refuses a correctly signed one that has no expiry", async () => {
    const { token } = await mintHouseToken(SECRET, "house-t", "alice", "owner");
    expect(await verifyToken(SECRET, token)).toMatchObject({ kind: "house", houseId: "house-t", subject: "alice" });
    const forever = await new SignJWT({ kind: "house", house: "house-t", role: "owner" })
      .setProtectedHeader({ alg: "HS256" }).setIssuer("threadbox").setSubject("alice").setIssuedAt()
      .sign(new TextEncoder().encode(SECRET));
    await expect(verifyToken(SECRET, forever)).rejects.toMatchObject({ code: "unauthorized" });
  });
});
