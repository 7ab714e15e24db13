/**
 * The worker as the workers tests run it: production's entry, with a ThreadActor whose clock the
 * tests can move forward (instead of sleeping) and whose outbox they can load directly, and a
 * HouseActor that can be made to fail. Registered
 * only in vitest.config.ts; the deployed worker never contains it.
 */
import { HouseActor as ProductionHouseActor, ThreadActor as ProductionThreadActor } from "../../src/worker";
import type { ThreadSummary } from "../../src/actors/house/house-actor";
import type { Clock } from "../../src/actors/clock";
import type { OutboxKind, OutboxPayloads } from "../../src/actors/thread/outbox";
import type { Env } from "../../src/env";

export { default, SandboxActor } from "../../src/worker";

class ShiftedClock implements Clock {
  skewMs = 0;
  now(): number {
    return Date.now() + this.skewMs;
  }
}

export class ThreadActor extends ProductionThreadActor {
  private readonly testClock: ShiftedClock;

  constructor(ctx: DurableObjectState, env: Env) {
    const clock = new ShiftedClock();
    super(ctx, env, clock);
    this.testClock = clock;
  }

  /** Moves this actor's clock forward, as if that much time had passed. */
  advanceClock(ms: number): void {
    this.testClock.skewMs += ms;
  }

  testNow(): number {
    return this.clock.now();
  }

  testRow() {
    return this.rows.get();
  }

  /** Writes bytes straight into the log, bypassing validation: what an older version may have stored. */
  testAppendRaw(entryId: string, data: Uint8Array): void {
    this.log.append({ messages: [{ data, entryId }] });
  }

  /** Reads the stream's metadata as if the clock were `aheadMs` later (expires it if due). */
  testExpireCheck(aheadMs: number): void {
    this.log.meta(Date.now() + aheadMs);
  }

  testEnqueue<K extends OutboxKind>(key: string, kind: K, payload: OutboxPayloads[K]): void {
    this.outbox.enqueue(key, kind, payload, this.clock.now());
  }
}

/** The house index, with a switch that makes its next thread updates fail (an index outage). */
export class HouseActor extends ProductionHouseActor {
  private failingThreadUpserts = 0;

  failThreadUpserts(count: number): void {
    this.failingThreadUpserts = count;
  }

  override async upsertThread(t: ThreadSummary) {
    if (this.failingThreadUpserts > 0) {
      this.failingThreadUpserts--;
      throw new Error("house index unavailable (test)");
    }
    return super.upsertThread(t);
  }
}
