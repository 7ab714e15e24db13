/**
 * Holds a box's stream token and renews it before it expires. Runs can last days; a stream
 * token lives 2 h. Past half its life the token is exchanged, through the same stream endpoint
 * the box already reaches (the worker renews only while the thread is running).
 */
export class TokenKeeper {
  private token: string;
  private renewing: Promise<boolean> | undefined;
  private lastAttemptMs = 0;

  constructor(
    token: string,
    private readonly renewUrl: string,
    private readonly log: (m: string) => void = () => {},
    private readonly fetchImpl: typeof fetch = fetch,
    /** A renewal that has not answered by then is abandoned (and retried): a hung one would block every later renewal. */
    private readonly requestTimeoutMs = 30_000,
  ) {
    this.token = token;
  }

  /** The token to use now; starts a renewal in the background once it is past half its life. */
  current(nowMs = Date.now()): string {
    const life = tokenLife(this.token);
    if (life) {
      const span = life.expiresAtMs - life.issuedAtMs;
      // Retry a failed renewal often enough to succeed well before the old token expires.
      const retryMs = Math.min(10_000, span / 8);
      if (nowMs >= life.issuedAtMs + span / 2 && nowMs - this.lastAttemptMs > retryMs) void this.renew(nowMs);
    }
    return this.token;
  }

  /** Checks the token periodically even when nothing is posted (a quiet harness). */
  keepFresh(): () => void {
    const life = tokenLife(this.token);
    const everyMs = life ? Math.max(250, Math.min(60_000, (life.expiresAtMs - life.issuedAtMs) / 8)) : 60_000;
    const timer = setInterval(() => this.current(), everyMs);
    timer.unref?.();
    return () => clearInterval(timer);
  }

  /** Exchanges the token for a fresh one. One renewal at a time; failures are retried later. */
  renew(nowMs = Date.now()): Promise<boolean> {
    if (this.renewing) return this.renewing;
    this.lastAttemptMs = nowMs;
    this.renewing = (async () => {
      try {
        const r = await this.fetchImpl(this.renewUrl, {
          method: "POST", headers: { authorization: `Bearer ${this.token}` }, signal: AbortSignal.timeout(this.requestTimeoutMs),
        });
        if (!r.ok) {
          this.log(`token renewal refused: ${r.status}`);
          return false;
        }
        const body = (await r.json()) as { token?: string };
        if (!body.token) return false;
        this.token = body.token;
        return true;
      } catch (err) {
        this.log(`token renewal failed: ${(err as Error).message}`);
        return false;
      } finally {
        this.renewing = undefined;
      }
    })();
    return this.renewing;
  }
}

/** iat/exp of a JWT, read without verifying it (the worker verifies). */
export function tokenLife(token: string): { issuedAtMs: number; expiresAtMs: number } | null {
  try {
    const part = token.split(".")[1];
    const json = JSON.parse(Buffer.from(part.replace(/-/g, "+").replace(/_/g, "/"), "base64").toString("utf8")) as { iat?: number; exp?: number };
    if (typeof json.iat !== "number" || typeof json.exp !== "number") return null;
    return { issuedAtMs: json.iat * 1000, expiresAtMs: json.exp * 1000 };
  } catch {
    return null;
  }
}

export function renewUrlFor(threadStreamUrl: string): string {
  return `${threadStreamUrl}/token`;
}
