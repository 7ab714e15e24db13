/**
 * The worker as the workers tests run it: production's entry, with a ThreadActor whose clock the
 * tests can move forward (instead of sleeping) and whose outbox they can load directly, a
 * SandboxActor whose clock they can move too, and a HouseActor that can be made to fail. Registered
 * only in vitest.config.ts; the deployed worker never contains it.
 */
import { HouseActor as ProductionHouseActor, SandboxActor as ProductionSandboxActor, ThreadActor as ProductionThreadActor } from "../../src/worker";
import type { ThreadSummary } from "../../src/actors/house/house-actor";
import type { BoxView, RegisterBoxInput } from "../../src/actors/sandbox/sandbox-actor";
import type { Clock } from "../../src/actors/clock";
import type { OutboxKind, OutboxPayloads } from "../../src/actors/thread/outbox";
import type { CreateThreadInput } from "../../src/actors/thread/thread-actor";
import type { Env } from "../../src/env";
import { launchBoxId, type LaunchStep } from "../../src/threads/launch-progress";
import { sandboxStub } from "../../src/actors/stubs";
import { unwrapRpc } from "../../src/actors/rpc";
import type { Entry } from "../../src/entries/schema";
import type { Step } from "./inside-request";

export { default } from "../../src/worker";

class ShiftedClock implements Clock {
  skewMs = 0;
  now(): number {
    return Date.now() + this.skewMs;
  }
}

/**
 * The actor's env with overrides a test stored in this actor (they survive a restart of the
 * actor, as a deployment's configuration would).
 */
/** A test switch: the next `count` calls it guards fail (the callee unreachable for a moment). */
class FailNext {
  private left = 0;

  arm(count: number): void {
    this.left = count;
  }

  /** Whether this call fails; a call that does is counted off. */
  take(): boolean {
    if (this.left <= 0) return false;
    this.left--;
    return true;
  }
}

/**
 * Throws `message` when one of `switches`, asked in order, takes the call: only that one counts it.
 * `message` ends in ` (test)`: workerd reports each such failure of an RPC method as an uncaught
 * exception, and the test output filter (test/support/quiet-expected-noise.mjs) knows it by that.
 */
function failIfArmed(message: string, ...switches: FailNext[]): void {
  if (switches.some((s) => s.take())) throw new Error(message);
}

function envWithOverrides(ctx: DurableObjectState, env: Env): Env {
  ctx.storage.sql.exec(`create table if not exists test_env (name text primary key, value text not null)`);
  const rows = ctx.storage.sql.exec(`select name, value from test_env`).toArray();
  return { ...env, ...Object.fromEntries(rows.map((r) => [r.name as string, r.value as string])) };
}

/** Env vars a thread's children start with (a bot's delegate makes children whose ids a test cannot know first), by parent id. */
const childTestEnv = new Map<string, Record<string, string>>();

export class ThreadActor extends ProductionThreadActor {
  private readonly testClock: ShiftedClock;
  private crashAtLaunchStep: LaunchStep | null = null;
  private stopAtLaunchStep: LaunchStep | null = null;
  private resumeAfterTestStop = false;
  private deleteBoxAtLaunchStep: LaunchStep | null = null;
  private crashBeforeOutbox = false;
  /** What the plain delete of the launch's box, asked for at a step, answered. */
  deleteBoxAnswer: Promise<string> | null = null;

  constructor(ctx: DurableObjectState, env: Env) {
    const clock = new ShiftedClock();
    super(ctx, envWithOverrides(ctx, env), clock);
    this.testClock = clock;
  }

  /** Sets env vars for this actor, now and after a restart (e.g. a THREADBOX_STREAM_URL for launches). */
  setTestEnv(vars: Record<string, string>): void {
    for (const [name, value] of Object.entries(vars)) {
      this.ctx.storage.sql.exec(`insert into test_env (name, value) values (?, ?) on conflict(name) do update set value = excluded.value`, name, value);
    }
    Object.assign(this.env, vars);
  }

  /** Threads made from now on as children of this one get `vars` (as by setTestEnv) before their first run launches. */
  setChildTestEnv(vars: Record<string, string>): void {
    childTestEnv.set(this.rows.get()!.id, vars);
  }

  override async createThread(input: CreateThreadInput) {
    const vars = input.parent.kind === "thread" && input.parent.id ? childTestEnv.get(input.parent.id) : undefined;
    if (vars) this.setTestEnv(vars);
    return super.createThread(input);
  }

  /** The next launch dies at `step`, as a crashed or evicted alarm would: the actor is reset. */
  crashLaunchAt(step: LaunchStep): void {
    this.crashAtLaunchStep = step;
  }

  private failAtLaunchStep: LaunchStep | null = null;

  /** The next launch fails for good at `step`, as a step whose call fails does (the run fails). */
  failLaunchAt(step: LaunchStep): void {
    this.failAtLaunchStep = step;
  }

  /** The run is stopped (as by POST /stop) when its launch reaches `step`. */
  stopLaunchAt(step: LaunchStep): void {
    this.stopAtLaunchStep = step;
  }

  /** The run is stopped and at once resumed (POST /stop, then /resume) when its launch reaches `step`. */
  stopAndResumeLaunchAt(step: LaunchStep): void {
    this.stopAtLaunchStep = step;
    this.resumeAfterTestStop = true;
  }

  /** The next handler's actor dies after its writes are committed, before its outbox calls. */
  crashBeforeOutboxCalls(): void {
    this.crashBeforeOutbox = true;
  }

  protected override async beforeOutboxCalls(): Promise<void> {
    if (!this.crashBeforeOutbox) return;
    this.crashBeforeOutbox = false;
    // The handler's writes are on disk, as they are once its first outbox call is under way.
    await this.ctx.storage.sync();
    this.ctx.abort("test: crashed before the outbox calls");
  }

  /** When the launch reaches `step`, someone deletes its box without force (as DELETE /api/sandboxes/:id does). */
  deleteBoxAt(step: LaunchStep): void {
    this.deleteBoxAtLaunchStep = step;
  }

  testDeleteBoxAnswer(): Promise<string> | null {
    return this.deleteBoxAnswer;
  }

  private runIsCurrentDelayMs = 0;

  /** Answers to "is this run current?" (a box asks before a delete) take `ms` from now on, as under load. */
  delayRunIsCurrent(ms: number): void {
    this.runIsCurrentDelayMs = ms;
  }

  private runIsCurrentFails = false;

  /** Asking this thread whether a run is current fails from now on (the thread unreachable), until turned off. */
  failRunIsCurrent(on: boolean): void {
    this.runIsCurrentFails = on;
  }

  override async runIsCurrent(houseId: string, runId: string) {
    if (this.runIsCurrentDelayMs > 0) await new Promise((r) => setTimeout(r, this.runIsCurrentDelayMs));
    if (this.runIsCurrentFails) throw new Error("thread unreachable (test)");
    return super.runIsCurrent(houseId, runId);
  }

  private tailStep: Step<unknown> | null = null;

  /** The next ask for this plain stream's tail (a subscription linking it) first runs `step`, inside that request. */
  duringNextSubscriptionTail(step: Step<unknown>): void {
    this.tailStep = step;
  }

  override async subscriptionTail(houseId: string) {
    const step = this.tailStep;
    this.tailStep = null;
    await step?.run();
    return super.subscriptionTail(houseId);
  }

  private boxDiedDelayMs = 0;

  /** Telling this thread its box died takes `ms` from now on (a box's force delete waits on it). */
  delayBoxDied(ms: number): void {
    this.boxDiedDelayMs = ms;
  }

  override async boxDied(houseId: string, boxId: string, reason: string) {
    if (this.boxDiedDelayMs > 0) await new Promise((r) => setTimeout(r, this.boxDiedDelayMs));
    return super.boxDied(houseId, boxId, reason);
  }

  protected override launchCheckpoint(step: LaunchStep): void {
    if (this.deleteBoxAtLaunchStep === step) {
      this.deleteBoxAtLaunchStep = null;
      const row = this.rows.get()!;
      const boxId = this.launchProgress.get(row.runId!).boxId ?? launchBoxId(row.runId!);
      this.deleteBoxAnswer = unwrapRpc(sandboxStub(this.env, boxId).destroy(row.houseId, false))
        .then(() => "deleted", (err: Error) => err.message);
    }
    if (this.stopAtLaunchStep === step) {
      this.stopAtLaunchStep = null;
      const houseId = this.rows.get()!.houseId;
      void this.stopRun(houseId, "tester");
      if (this.resumeAfterTestStop) {
        this.resumeAfterTestStop = false;
        // In the same turn as the stop: the resume has claimed the thread before the launch looks again.
        void this.startRun(houseId, { task: "go on", harness: "pi", resume: true, authorId: "alice" });
      }
    }
    if (this.failAtLaunchStep === step) {
      this.failAtLaunchStep = null;
      throw new Error(`launch step after ${step} failed (test)`);
    }
    if (this.crashAtLaunchStep !== step) return;
    this.crashAtLaunchStep = null;
    this.ctx.abort(`test: launch crashed at ${step}`);
  }

  /** Moves this actor's clock forward, as if that much time had passed. */
  advanceClock(ms: number): void {
    this.testClock.skewMs += ms;
  }

  testNow(): number {
    return this.clock.now();
  }

  /** How long this actor holds a long-poll with nothing to read (LONG_POLL_TIMEOUT_MS otherwise). */
  setLongPollTimeout(ms: number): void {
    this.longPollTimeoutMs = ms;
  }

  /** Long-poll and SSE readers waiting for an append. */
  testWaiterCount(): number {
    return this.fanout.hub.size;
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

  /** The thread's copy of the house's bots (dispatch decides unaddressed chats from it), or null. */
  testAgentCache(): { version: number; ids: string[] } | null {
    const cache = (this.dispatch as unknown as { agentCache: { version: number; ids: Set<string> } | null }).agentCache;
    return cache && { version: cache.version, ids: [...cache.ids] };
  }

  /** Chats recorded for the dispatch alarm to decide. */
  testPendingTriggers(): number {
    const sql = this.ctx.storage.sql;
    // A thread whose chat never woke a bot has no trigger table (it is created with the first).
    if (sql.exec(`select 1 from sqlite_master where name = 'dispatch_triggers'`).toArray().length === 0) return 0;
    return sql.exec(`select count(*) as n from dispatch_triggers`).one().n as number;
  }

  /** Appends entries as the control plane does (`authorId: threadbox`), past client validation. */
  testAppendAsControlPlane(entries: Entry[]): void {
    this.appendInternal(entries);
  }

  /** The keys of what the thread still owes (its outbox). */
  testOutboxKeys(): string[] {
    return this.ctx.storage.sql.exec(`select key from outbox order by key`).toArray().map((r) => r.key as string);
  }

  testEnqueue<K extends OutboxKind>(key: string, kind: K, payload: OutboxPayloads[K]): void {
    this.outbox.enqueue(key, kind, payload, this.clock.now());
  }
}

/** The house index, with a switch that makes its next thread updates fail (an index outage). */
export class HouseActor extends ProductionHouseActor {
  private readonly testClock: ShiftedClock;

  constructor(ctx: DurableObjectState, env: Env) {
    const clock = new ShiftedClock();
    super(ctx, env, clock);
    this.testClock = clock;
  }

  /** Moves this house's clock forward (its alarm's deadlines come due without waiting). */
  advanceClock(ms: number): void {
    this.testClock.skewMs += ms;
  }

  private readonly threadUpsertFailures = new FailNext();

  failThreadUpserts(count: number): void {
    this.threadUpsertFailures.arm(count);
  }

  private readonly agentSetFailures = new FailNext();

  /** The next `count` reads of the house's agents fail (the house unreachable for a thread's bots). */
  failAgentSets(count: number): void {
    this.agentSetFailures.arm(count);
  }

  override async agentSet() {
    failIfArmed("house unavailable (test)", this.agentSetFailures);
    return super.agentSet();
  }

  private readonly agentReadFailures = new FailNext();

  /** The next `count` reads of one agent fail (the house unreachable while a bot's turn runs). */
  failAgentReads(count: number): void {
    this.agentReadFailures.arm(count);
  }

  override async getAgent(id: string) {
    failIfArmed("house unavailable (test)", this.agentReadFailures);
    return super.getAgent(id);
  }

  private readonly boxUpsertFailures = new FailNext();

  /** The next `count` box updates of the index fail (an index outage while a box registers). */
  failBoxUpserts(count: number): void {
    this.boxUpsertFailures.arm(count);
  }

  override async upsertBox(box: BoxView) {
    failIfArmed("house index unavailable (test)", this.boxUpsertFailures);
    return super.upsertBox(box);
  }

  private folderListStep: Step<unknown> | null = null;

  /**
   * The next list of an environment's folder versions (a DELETE of the environment reads it between
   * deleting the shared box and forgetting the environment) first runs `step`, inside that request.
   */
  duringNextFolderVersionList(step: Step<unknown>): void {
    this.folderListStep = step;
  }

  override async listFolderVersions(environmentId: string) {
    const step = this.folderListStep;
    this.folderListStep = null;
    await step?.run();
    return super.listFolderVersions(environmentId);
  }

  private readonly environmentReadFailures = new FailNext();

  /** The next `count` reads of one environment fail (the house unreachable). */
  failEnvironmentReads(count: number): void {
    this.environmentReadFailures.arm(count);
  }

  override async getEnvironment(id: string) {
    failIfArmed("house unavailable (test)", this.environmentReadFailures);
    return super.getEnvironment(id);
  }

  private readonly claimFailures = new FailNext();
  private readonly lostClaimAnswers = new FailNext();

  /** The next `count` claims of a shared box fail before anything is recorded (the house unreachable). */
  failClaims(count: number): void {
    this.claimFailures.arm(count);
  }

  /** The next `count` claims of a shared box are recorded, and then their answer is lost (the caller sees a failure). */
  loseClaimAnswers(count: number): void {
    this.lostClaimAnswers.arm(count);
  }

  override async claimSharedBox(environmentId: string, boxId: string, replace: string | null, houseId?: string) {
    failIfArmed("house unavailable (test)", this.claimFailures);
    const answer = await super.claimSharedBox(environmentId, boxId, replace, houseId);
    failIfArmed("house answer lost (test)", this.lostClaimAnswers);
    return answer;
  }

  override async upsertThread(t: ThreadSummary) {
    failIfArmed("house index unavailable (test)", this.threadUpsertFailures);
    return super.upsertThread(t);
  }
}

/** A box whose clock the tests can move forward (a grace period passes without waiting for it). */
export class SandboxActor extends ProductionSandboxActor {
  private readonly testClock: ShiftedClock;

  constructor(ctx: DurableObjectState, env: Env) {
    const clock = new ShiftedClock();
    super(ctx, env, clock);
    this.testClock = clock;
  }

  advanceClock(ms: number): void {
    this.testClock.skewMs += ms;
  }

  private readonly registerFailures = new FailNext();

  /** The next `count` registers of this box fail before anything is written (the actor unreachable). */
  failRegisters(count: number): void {
    this.registerFailures.arm(count);
  }

  private reserveStep: Step<unknown> | null = null;

  /** The next reserve of this box, once recorded, runs `step` inside that request before it answers. */
  duringNextReserve(step: Step<unknown>): void {
    this.reserveStep = step;
  }

  override async reserve(houseId: string, threadId: string, runId: string) {
    const answer = await super.reserve(houseId, threadId, runId);
    const step = this.reserveStep;
    this.reserveStep = null;
    await step?.run();
    return answer;
  }

  private readonly retireFailures = new FailNext();

  /** The next `count` retires of this box fail before anything is written (the actor unreachable). */
  failRetires(count: number): void {
    this.retireFailures.arm(count);
  }

  override async retire(houseId: string) {
    failIfArmed("box actor unavailable (test)", this.retireFailures, SandboxActor.anyBoxDeleteFailures);
    return super.retire(houseId);
  }

  private static readonly anyBoxDeleteFailures = new FailNext();

  /**
   * The next `count` retires or deletes (`destroy`) of any box fail before anything is written (its
   * actor unreachable): for a box whose id a test cannot know in advance.
   */
  failDeletesOfAnyBox(count: number): void {
    SandboxActor.anyBoxDeleteFailures.arm(count);
  }

  override async destroy(houseId: string, force: boolean) {
    failIfArmed("box actor unavailable (test)", SandboxActor.anyBoxDeleteFailures);
    return super.destroy(houseId, force);
  }

  private readonly viewFailures = new FailNext();

  /** The next `count` reads of this box's view fail (the actor unreachable for a moment). */
  failViews(count: number): void {
    this.viewFailures.arm(count);
  }

  override async view(houseId: string) {
    failIfArmed("box actor unavailable (test)", this.viewFailures);
    return super.view(houseId);
  }

  private readonly detachFailures = new FailNext();

  /** The next `count` detaches of a thread from this box fail before anything is written (the actor unreachable). */
  failDetaches(count: number): void {
    this.detachFailures.arm(count);
  }

  override async detach(houseId: string, threadId: string, opts: { keepBox?: boolean } = {}) {
    failIfArmed("box actor unavailable (test)", this.detachFailures);
    return super.detach(houseId, threadId, opts);
  }

  private static readonly lateBoxWatchFailures = new FailNext();

  /** The next `count` starts of a late box's watch, for any name, fail before anything is written (its actor unreachable). */
  failLateBoxWatches(count: number): void {
    SandboxActor.lateBoxWatchFailures.arm(count);
  }

  override async watchLateBox(houseId: string, provider: string, name: string) {
    failIfArmed("late-box watch unavailable (test)", SandboxActor.lateBoxWatchFailures);
    return super.watchLateBox(houseId, provider, name);
  }

  private static readonly anyBoxRegisterFailures = new FailNext();

  /** The next `count` registers of any box fail before anything is written (for a box whose id a test cannot know). */
  failRegistersOfAnyBox(count: number): void {
    SandboxActor.anyBoxRegisterFailures.arm(count);
  }

  override async register(input: RegisterBoxInput) {
    failIfArmed("box actor unavailable (test)", this.registerFailures, SandboxActor.anyBoxRegisterFailures);
    return super.register(input);
  }
}
