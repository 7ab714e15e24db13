// The box side of stream-token renewal, with a fake endpoint.
import { describe, expect, it } from "vitest";
import { TokenKeeper, tokenLife } from "../../src/runner/token-keeper";

const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString("base64url");
const jwt = (iat: number, exp: number, tag = "x") => `${b64({ alg: "HS256" })}.${b64({ iat, exp, tag })}.sig`;

function endpoint(answers: (() => Response)[]) {
  const seen: string[] = [];
  const fetchImpl = (async (_url: string, init: RequestInit) => {
    seen.push(String((init.headers as Record<string, string>).authorization));
    const next = answers.shift();
    if (!next) throw new Error("unreachable");
    return next();
  }) as unknown as typeof fetch;
  return { seen, fetchImpl };
}

describe("TokenKeeper", () => {
  it("keeps the token until half its life, then exchanges it once", async () => {
    const t0 = 1_800_000_000;
    const first = jwt(t0, t0 + 7200);
    const second = jwt(t0 + 3600, t0 + 10800, "fresh");
    const ep = endpoint([() => Response.json({ token: second }, { status: 201 })]);
    const keeper = new TokenKeeper(first, "http://x/thread-t/token", () => {}, ep.fetchImpl);
    expect(keeper.current(t0 * 1000 + 3_599_000)).toBe(first);
    expect(ep.seen).toHaveLength(0);
    keeper.current(t0 * 1000 + 3_600_000); // past half-life: renewal starts in the background
    await keeper.renew(t0 * 1000 + 3_600_001); // joins the renewal in flight
    expect(ep.seen).toEqual([`Bearer ${first}`]);
    expect(keeper.current(t0 * 1000 + 3_600_002)).toBe(second);
  });

  it("retries a refused or failed renewal soon enough to beat the expiry, with the old token", async () => {
    const t0 = 1_800_000_000;
    const first = jwt(t0, t0 + 80);
    const ep = endpoint([
      () => new Response("nope", { status: 503 }),
      () => { throw new Error("connection reset"); },
      () => Response.json({ token: jwt(t0 + 50, t0 + 130, "fresh") }, { status: 201 }),
    ]);
    const logs: string[] = [];
    const keeper = new TokenKeeper(first, "http://x/thread-t/token", (m) => logs.push(m), ep.fetchImpl);
    expect(await keeper.renew(t0 * 1000 + 40_000)).toBe(false);
    // A retry waits span/8 (10 s here), not the 10 s cap of long tokens.
    keeper.current(t0 * 1000 + 45_000);
    expect(ep.seen).toHaveLength(1);
    expect(await keeper.renew(t0 * 1000 + 51_000)).toBe(false);
    expect(await keeper.renew(t0 * 1000 + 62_000)).toBe(true);
    expect(tokenLife(keeper.current(t0 * 1000 + 62_001))!.expiresAtMs).toBe((t0 + 130) * 1000);
    expect(logs.some((l) => l.includes("503"))).toBe(true);
    expect(logs.some((l) => l.includes("connection reset"))).toBe(true);
  });

  it("reads iat/exp from a JWT and nothing from garbage", () => {
    expect(tokenLife(jwt(10, 20))).toEqual({ issuedAtMs: 10_000, expiresAtMs: 20_000 });
    expect(tokenLife("not-a-jwt")).toBeNull();
    expect(tokenLife(`${b64({})}.${b64({ exp: 5 })}.s`)).toBeNull();
  });

  it("a renewal that hangs is abandoned after its timeout, and the next one renews", async () => {
    const t0 = 1_800_000_000;
    const first = jwt(t0, t0 + 80);
    const fresh = jwt(t0 + 50, t0 + 130, "fresh");
    let calls = 0;
    const fetchImpl = (async (_url: string, init: RequestInit) => {
      calls++;
      if (calls === 1) return new Promise((_, reject) => init.signal?.addEventListener("abort", () => reject(new DOMException("timed out", "TimeoutError"))));
      return Response.json({ token: fresh }, { status: 201 });
    }) as unknown as typeof fetch;
    const logs: string[] = [];
    const keeper = new TokenKeeper(first, "http://x/thread-t/token", (m) => logs.push(m), fetchImpl, 100);
    const hung = await Promise.race([keeper.renew(), new Promise<string>((r) => setTimeout(() => r("still pending"), 5_000))]);
    expect(hung).toBe(false);
    expect(logs.join("\n")).toMatch(/token renewal failed/);
    expect(await keeper.renew()).toBe(true);
    expect(keeper.current((t0 + 51) * 1000)).toBe(fresh);
  });
});
