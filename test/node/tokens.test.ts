import { afterEach, describe, expect, it, vi } from "vitest";
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

  describe("verified tokens kept per isolate", () => {
    afterEach(() => vi.useRealTimers());

    it("a token verified once is still refused once it expires", async () => {
      vi.useFakeTimers({ toFake: ["Date"] });
      const { token } = await mintHouseToken(SECRET, "house-t", "alice", "owner", 60);
      expect(await verifyToken(SECRET, token)).toMatchObject({ subject: "alice" });
      expect(await verifyToken(SECRET, token)).toMatchObject({ subject: "alice" });
      vi.setSystemTime(Date.now() + 61_000);
      const refused = verifyToken(SECRET, token);
      await expect(refused).rejects.toMatchObject({ code: "unauthorized" });
      await expect(refused).rejects.toThrow(/token expired/);
    });

    it("a token verified under one secret is not taken under another, nor with none configured", async () => {
      const { token } = await mintHouseToken(SECRET, "house-t", "alice", "owner");
      expect(await verifyToken(SECRET, token)).toMatchObject({ subject: "alice" });
      await expect(verifyToken("another-secret-0123456789abcdef", token)).rejects.toMatchObject({ code: "unauthorized" });
      await expect(verifyToken(undefined, token)).rejects.toMatchObject({ code: "internal" });
    });
  });
});
