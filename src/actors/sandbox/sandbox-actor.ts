import { DurableObject } from "cloudflare:workers";
import { ApiError } from "../../errors";
import { intVar, type Env } from "../../env";
import { LABEL_RUN, LABEL_THREAD, type DetachedHandle, type SandboxProvider } from "../../sandbox/provider";
import { ProviderError } from "../../sandbox/errors";
import { providerFor } from "../../sandbox/providers";
import { providerApiError } from "../../sandbox/api-errors";
import { foldProbe, type ProbeVerdict } from "../../threads/liveness";
import { settle, unwrapRpc } from "../rpc";
import { houseStub, threadStub } from "../stubs";
import { errorMessage, logEvent } from "../../domain/log-event";
import { boxAlarmDecision, claimCheckDecision, deleteRetryDelayMs, releaseDecision, RUNNER_DRAIN_POLL_MS, shouldReap, stopScript, tokenCleanupScript, type BoxState } from "./sandbox-decisions";
import { systemClock, type Clock } from "../clock";
import { addColumnIfMissing } from "../../domain/sql-schema";
import { LateBoxWatch } from "./late-box";
import { backoffDelayMs } from "../../domain/backoff";
import type { Environment } from "../../environments";

export type RegisterBoxInput = {
  boxId: string;
  houseId: string;
  provider: string;
  providerRef: string;
  ephemeral: boolean;
  labels: Record<string, string>;
  state?: BoxState;
  /**
   * An ephemeral box made by hand: no run ended on it to reap it, so it is deleted once it has
   * gone unused for the stopped-box grace period (a run attached meanwhile cancels that).
   */
  deleteIfUnused?: boolean;
  /** What a `POST /api/sandboxes` with an Idempotency-Key asked for: a retry of it gets this box. */
  requestFingerprint?: string;
  /**
   * The environment a shared box is made for, which has not taken it yet (claimSharedBox): until
   * the box is told it was taken (`claimed`), its alarm asks the house whether the environment names
   * it, and retires it if not. A box whose claim and retire both fail (the house and the box's
   * actor unreachable at once) is then not left live with nothing to reap it.
   */
  claimFor?: string;
};

export type BoxView = {
  id: string;
  houseId: string;
  provider: string;
  providerRef: string;
  ephemeral: boolean;
  state: BoxState;
  labels: Record<string, string>;
  generation: string;
  threads: string[];
  deleteAttempts: number;
  lastError: string | null;
  createdAt: string;
  updatedAt: string;
};

/** The stop script for a thread, or a client error for an id that cannot go into a script. */
function stopScriptFor(threadId: string, signal: "TERM" | "KILL"): string {
  const script = stopScript(threadId, signal);
  if (script === null) throw new ApiError("bad_request", "invalid thread id");
  return script;
}

/**
 * When a shared box not yet known to be taken first asks the house about its claim: later than the
 * claim that follows its register takes, which would otherwise be raced. Then with backoff.
 */
const CLAIM_CHECK_MS = 10 * 60_000;
const CLAIM_CHECK_MAX_MS = 60 * 60_000;

/** How long past its own timeout a command holds the box (the provider's answer may come late). */
const EXEC_LEASE_MARGIN_S = 60;

export type ProbeAnswer = { verdict: ProbeVerdict; confirmedDead: boolean; state: BoxState };

/**
 * One per box. The box's lifetime is its own: runs attach and detach; an ephemeral box with no
 * running thread is deleted (with retries), a shared box never is; death is confirmed twice.
 */
export class SandboxActor extends DurableObject<Env> {
  protected readonly clock: Clock;
  /** A delete is being decided or carried out (its checks and the provider call wait on others): no new reservation. */
  private deleting = false;
  /** The provider is deleting it: nothing may attach. */
  private deletingAtProvider = false;
  /** Due deletes in a row whose checks failed: the next waits longer. */
  private failedDeleteChecks = 0;
  /** Claim checks in a row that could not reach the house: the next waits longer. */
  private failedClaimChecks = 0;
  /** Only in an actor named by lateBoxWatchId, which has no box row. */
  private readonly lateBox: LateBoxWatch;

  constructor(ctx: DurableObjectState, env: Env, clock: Clock = systemClock) {
    super(ctx, env);
    this.clock = clock;
    const sql = ctx.storage.sql;
    sql.exec(`create table if not exists box (
      id integer primary key check (id = 1), box_id text not null, house_id text not null, provider text not null,
      provider_ref text not null, ephemeral integer not null, state text not null, labels text not null,
      generation text not null, delete_attempts integer not null default 0, next_delete_at integer,
      dead_streak integer not null default 0, last_probe_at integer, last_error text,
      created_at integer not null, updated_at integer not null)`);
    sql.exec(`create table if not exists box_threads (thread_id text primary key, handle text)`);
    // A launch that picked this box, before its thread is attached (see reserve).
    sql.exec(`create table if not exists box_reservations (thread_id text primary key, run_id text not null)`);
    // A command running on the box (`run_command` on a shared box), until it ends or `until` passes.
    sql.exec(`create table if not exists box_execs (id text primary key, until integer not null)`);
    // Set while a box whose run ended waits for its runner to exit (see holdForRunner).
    addColumnIfMissing(sql, "box", "drain_handle", "text");
    addColumnIfMissing(sql, "box", "drain_until", "integer");
    addColumnIfMissing(sql, "box", "request_fingerprint", "text");
    // A shared box its environment has not been seen to take (see RegisterBoxInput.claimFor).
    addColumnIfMissing(sql, "box", "claim_environment_id", "text");
    addColumnIfMissing(sql, "box", "claim_check_at", "integer");
    this.lateBox = new LateBoxWatch({
      sql,
      now: () => this.clock.now(),
      provider: (name) => providerFor(this.env, name),
      setAlarm: async (at) => {
        if (at === null) await ctx.storage.deleteAlarm();
        else await ctx.storage.setAlarm(at);
      },
    });
  }

  /** Deletes the box a failed create may still bring once it appears (see createBox). */
  async watchLateBox(houseId: string, provider: string, name: string) {
    return settle(() => this.lateBox.start(houseId, provider, name));
  }

  /** What this actor is watching for, if it is a late box's watch. */
  async lateBoxWatch() {
    return settle(() => this.lateBox.watching());
  }

  // ---- RPC ----

  async register(input: RegisterBoxInput) {
    return settle(async () => {
      if (!this.row()) {
        const now = this.clock.now();
        this.ctx.storage.sql.exec(
          `insert into box (id, box_id, house_id, provider, provider_ref, ephemeral, state, labels, generation, created_at, updated_at)
           values (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
          input.boxId, input.houseId, input.provider, input.providerRef, input.ephemeral ? 1 : 0, input.state ?? "live",
          JSON.stringify(input.labels), crypto.randomUUID(), now, now,
        );
        if (input.requestFingerprint) this.ctx.storage.sql.exec(`update box set request_fingerprint = ? where id = 1`, input.requestFingerprint);
        if (input.ephemeral && input.deleteIfUnused) {
          this.ctx.storage.sql.exec(`update box set next_delete_at = ? where id = 1`, now + this.stoppedBoxGraceMs());
          await this.recomputeAlarm();
        }
        if (input.claimFor) {
          this.ctx.storage.sql.exec(`update box set claim_environment_id = ?, claim_check_at = ? where id = 1`, input.claimFor, now + CLAIM_CHECK_MS);
          await this.recomputeAlarm();
        }
        // The box is registered once its row is written: an index that cannot be told now learns
        // of it at the box's next change (its run attaching). Failing here would fail the launch
        // that made the box before the box is its run's, and nothing would ever reap it.
        await this.syncIndex().catch((err) => logEvent("box_index_sync_failed", { boxId: input.boxId, error: errorMessage(err) }, "warn"));
      } else if (input.requestFingerprint) {
        this.assertSameRequest(input.requestFingerprint);
      }
      return this.viewOf(input.houseId);
    });
  }

  /**
   * The box an earlier `POST /api/sandboxes` with the same Idempotency-Key made (its id derives
   * from the key), or null when none did; the same key with another body is a 409.
   */
  async replayedCreate(houseId: string, requestFingerprint: string) {
    return settle(() => {
      if (!this.row()) return null;
      this.requireRow(houseId);
      this.assertSameRequest(requestFingerprint);
      return this.viewOf(houseId);
    });
  }

  private assertSameRequest(requestFingerprint: string): void {
    if (this.row()!.request_fingerprint !== requestFingerprint) throw new ApiError("conflict", "this Idempotency-Key was used for a different request");
  }

  private viewOf(houseId: string): BoxView {
    const r = this.requireRow(houseId);
    const threads = this.ctx.storage.sql.exec(`select thread_id from box_threads order by thread_id`).toArray().map((t) => t.thread_id as string);
    return {
      id: r.box_id as string,
      houseId: r.house_id as string,
      provider: r.provider as string,
      providerRef: r.provider_ref as string,
      ephemeral: r.ephemeral === 1,
      state: r.state as BoxState,
      labels: JSON.parse(r.labels as string),
      generation: r.generation as string,
      threads,
      deleteAttempts: r.delete_attempts as number,
      lastError: r.last_error as string | null,
      createdAt: new Date(r.created_at as number).toISOString(),
      updatedAt: new Date(r.updated_at as number).toISOString(),
    };
  }

  /**
   * A launch of run `runId` picked this box (a resume's, a shared one): until its thread is
   * attached, a plain delete is refused and a pending idle delete waits, as long as that run is
   * its thread's current one. Asked lazily, so a launch that never got further holds nothing.
   */
  async reserve(houseId: string, threadId: string, runId: string) {
    return settle(async () => {
      const r = this.requireRow(houseId);
      if (r.state !== "live" && r.state !== "provisioning") throw new ApiError("conflict", `box is ${r.state}`);
      // A delete under way (or one that failed and will be tried again) is not taken back.
      if (this.deleting || (r.delete_attempts as number) > 0) throw new ApiError("conflict", "box is being deleted");
      this.ctx.storage.sql.exec(`insert into box_reservations (thread_id, run_id) values (?, ?) on conflict(thread_id) do update set run_id = excluded.run_id`, threadId, runId);
      this.ctx.storage.sql.exec(`update box set next_delete_at = null, drain_handle = null, drain_until = null where id = 1 and delete_attempts = 0`);
      await this.recomputeAlarm();
    });
  }

  /**
   * A command is about to run on this box: a retire (the environment replaced it) or an idle reap
   * waits for it, up to `timeoutSec` and a margin. Refused while the box is going.
   */
  async beginExec(houseId: string, timeoutSec: number) {
    return settle(async () => {
      const r = this.requireRow(houseId);
      if (r.state !== "live") throw new ApiError("conflict", `box is ${r.state}`);
      if (this.deleting || this.deletingAtProvider || (r.delete_attempts as number) > 0) throw new ApiError("conflict", "box is being deleted");
      const id = crypto.randomUUID();
      this.ctx.storage.sql.exec(`insert into box_execs (id, until) values (?, ?)`, id, this.clock.now() + (timeoutSec + EXEC_LEASE_MARGIN_S) * 1000);
      return id;
    });
  }

  /** The command is done; a box retired meanwhile goes now if nothing else is on it. */
  async endExec(houseId: string, execId: string) {
    return settle(async () => {
      this.requireRow(houseId);
      this.ctx.storage.sql.exec(`delete from box_execs where id = ?`, execId);
      const r = this.row()!;
      if (r.ephemeral === 1 && r.state === "live" && this.threadIds().length === 0 && this.execsUntil() === null && r.next_delete_at !== null && !this.deleting) {
        // The delete a retire put off for this command: due now.
        this.ctx.storage.sql.exec(`update box set next_delete_at = ? where id = 1 and delete_attempts = 0`, this.clock.now());
        await this.recomputeAlarm();
      }
    });
  }

  async attach(houseId: string, threadId: string, handle?: DetachedHandle) {
    return settle(async () => {
      const r = this.requireRow(houseId);
      if (r.state !== "live" && r.state !== "provisioning") throw new ApiError("conflict", `box is ${r.state}`);
      if (this.deletingAtProvider) throw new ApiError("conflict", "box is being deleted");
      this.ctx.storage.sql.exec(`delete from box_reservations where thread_id = ?`, threadId);
      this.ctx.storage.sql.exec(
        `insert into box_threads (thread_id, handle) values (?, ?) on conflict(thread_id) do update set handle = coalesce(excluded.handle, handle)`,
        threadId, handle ? JSON.stringify(handle) : null,
      );
      // A box kept after a stop is busy again: cancel its pending idle reap.
      this.ctx.storage.sql.exec(`update box set next_delete_at = null where id = 1 and delete_attempts = 0`);
      await this.recomputeAlarm();
      this.touch();
      await this.syncIndex();
      return this.viewOf(houseId);
    });
  }

  /**
   * A run on this box ended. Idempotent: detaching twice deletes the box at most once. A stopped
   * run keeps its box for a grace period (to inspect it or resume on it); then idle reaping applies.
   */
  async detach(houseId: string, threadId: string, opts: { keepBox?: boolean } = {}) {
    return settle(async () => {
      this.requireRow(houseId);
      const handle = this.ctx.storage.sql.exec(`select handle from box_threads where thread_id = ?`, threadId).toArray()[0]?.handle as string | null | undefined;
      this.ctx.storage.sql.exec(`delete from box_threads where thread_id = ?`, threadId);
      this.touch();
      if (opts.keepBox) {
        const r = this.row()!;
        if (r.ephemeral === 1 && this.threadIds().length === 0 && r.next_delete_at === null) {
          this.ctx.storage.sql.exec(`update box set next_delete_at = ? where id = 1`, this.clock.now() + this.stoppedBoxGraceMs());
          await this.recomputeAlarm();
        }
      } else if (!(await this.holdForRunner(handle ? (JSON.parse(handle) as DetachedHandle) : null))) {
        await this.reapIfIdle();
      }
      await this.syncIndex();
      return this.viewOf(houseId);
    });
  }

  /** Asks the provider; two `dead` answers in a row tombstone the box and orphan its threads. */
  async probe(houseId: string) {
    return settle(async () => {
      const r = this.requireRow(houseId);
      const state = r.state as BoxState;
      if (state === "deleted" || state === "dead") return { verdict: "dead", confirmedDead: true, state };
      let verdict: ProbeVerdict;
      try {
        verdict = await this.provider().probe(r.provider_ref as string);
      } catch (err) {
        logEvent("box_probe_failed", { boxId: r.box_id, error: errorMessage(err) }, "warn");
        verdict = "unknown";
      }
      const { next, confirmedDead } = foldProbe(
        { lastProbeAt: r.last_probe_at as number | null, deadStreak: r.dead_streak as number }, verdict, this.clock.now(),
      );
      this.ctx.storage.sql.exec(`update box set dead_streak = ?, last_probe_at = ? where id = 1`, next.deadStreak, next.lastProbeAt);
      if (confirmedDead) await this.markDead(`provider reports the box gone (${r.provider_ref})`);
      return { verdict, confirmedDead, state: this.row()!.state as BoxState };
    });
  }

  /**
   * Ends a run from outside, gracefully first: SIGTERM to the runner (which stops the harness and
   * lets it clean up), then, after a grace period, SIGKILL to every process of the thread's run
   * and the end of its session. The box itself stays.
   */
  async stopRun(houseId: string, threadId: string, runId?: string) {
    return settle(async () => {
      const r = this.requireRow(houseId);
      if (r.state === "dead" || r.state === "deleted") return { signalled: false }; // nothing left to stop
      const t = this.ctx.storage.sql.exec(`select handle from box_threads where thread_id = ?`, threadId).toArray()[0];
      const ref = r.provider_ref as string;
      const provider = this.provider();
      const handle = t?.handle ? (JSON.parse(t.handle as string) as DetachedHandle) : null;
      const quiet = async (what: string, p: Promise<unknown>) => {
        try {
          await p;
        } catch (err) {
          logEvent("stop_step_failed", { boxId: r.box_id, threadId, step: what, error: errorMessage(err) }, "warn");
        }
      };
      await quiet("SIGTERM", provider.exec(ref, stopScriptFor(threadId, "TERM"), { timeoutSec: 30 }));
      const graceMs = intVar(this.env, "STOP_GRACE_MS", 10_000);
      // A real wait on the box's processes: wall time, whatever this actor's clock says.
      const deadline = Date.now() + graceMs;
      while (handle && Date.now() < deadline) {
        const status = await provider.detachedStatus(handle).catch((err) => {
          logEvent("stop_status_unknown", { boxId: r.box_id, threadId, error: errorMessage(err) }, "warn");
          return { running: false };
        });
        if (!status.running) break;
        await new Promise((res) => setTimeout(res, 500));
      }
      await quiet("SIGKILL sweep", provider.exec(ref, stopScriptFor(threadId, "KILL"), { timeoutSec: 30 }));
      const cleanup = runId === undefined ? null : tokenCleanupScript(runId);
      if (cleanup) await quiet("token cleanup", provider.exec(ref, cleanup, { timeoutSec: 30 }));
      if (handle) await quiet("session end", provider.killDetached(handle));
      return { signalled: true };
    });
  }

  /**
   * The box is no longer its environment's shared box (the environment changed what its box is
   * made with, or keeps none): from now on it is reaped as an ephemeral box is — at once if nothing
   * runs or launches on it, else when its last run ends.
   */
  async retire(houseId: string) {
    return settle(async () => {
      this.requireRow(houseId);
      await this.retireNow();
      // Also for a box already gone: a retire tried again (the index was not reached the first
      // time) puts the house's listing right.
      await this.syncIndex();
      return this.viewOf(houseId);
    });
  }

  private async retireNow(): Promise<void> {
    const r = this.row()!;
    // Retired, it is no environment's box whatever its claim: nothing is left to ask the house.
    this.ctx.storage.sql.exec(`update box set claim_environment_id = null, claim_check_at = null where id = 1`);
    if (r.state !== "dead" && r.state !== "deleted") {
      const now = this.clock.now();
      this.ctx.storage.sql.exec(`update box set ephemeral = 1, updated_at = ? where id = 1`, now);
      if (this.threadIds().length === 0) {
        // A pending delete, with its alarm, before anything that can fail: a retire cut short (a
        // thread that cannot be asked whether its launch uses the box, an eviction) is carried
        // out by the alarm, which retries until the provider confirms the box gone.
        this.ctx.storage.sql.exec(`update box set next_delete_at = coalesce(next_delete_at, ?) where id = 1`, now);
        await this.recomputeAlarm();
        if (!this.deleting) await this.dueDelete();
        return;
      }
    }
    await this.recomputeAlarm();
  }

  /** The house took this box as its environment's shared box (see RegisterBoxInput.claimFor). */
  async claimed(houseId: string) {
    return settle(async () => {
      this.requireRow(houseId);
      this.ctx.storage.sql.exec(`update box set claim_environment_id = null, claim_check_at = null where id = 1`);
      await this.recomputeAlarm();
    });
  }

  /**
   * A shared box not known to be taken: kept when its environment names it, else retired (no
   * environment would use or delete it, and a shared box is never reaped). A house that cannot be
   * asked now is asked again later.
   */
  private async checkClaim(): Promise<void> {
    const r = this.row()!;
    const environmentId = r.claim_environment_id as string;
    try {
      const e = (await unwrapRpc(houseStub(this.env, r.house_id as string).getEnvironment(environmentId))) as Environment | null;
      this.failedClaimChecks = 0;
      if (claimCheckDecision(e, r.box_id as string) === "keep") {
        this.ctx.storage.sql.exec(`update box set claim_environment_id = null, claim_check_at = null where id = 1`);
      } else {
        logEvent("shared_box_unclaimed", { boxId: r.box_id, environmentId, environmentNames: e?.sharedBoxId ?? null }, "warn");
        await this.retireNow();
      }
    } catch (err) {
      this.failedClaimChecks++;
      const at = this.clock.now() + backoffDelayMs(this.failedClaimChecks, CLAIM_CHECK_MS, CLAIM_CHECK_MAX_MS);
      logEvent("shared_box_claim_check_failed", { boxId: r.box_id, environmentId, retryAt: at, error: errorMessage(err) }, "warn");
      this.ctx.storage.sql.exec(`update box set claim_check_at = ? where id = 1`, at);
    }
    await this.recomputeAlarm();
  }

  /**
   * Explicit delete. Refused while threads run on the box or a command runs there (the box would
   * go from under it: killed, its output lost) unless forced (which orphans the threads).
   */
  async destroy(houseId: string, force: boolean) {
    return settle(async () => {
      const row = this.requireRow(houseId);
      const running = () => {
        const threads = this.threadIds();
        if (threads.length > 0 && !force) throw new ApiError("conflict", `${threads.length} thread(s) are running on this box`);
        return threads;
      };
      running();
      if (!force && row.state === "live" && this.execsUntil() !== null) throw new ApiError("conflict", "a command is running on this box (wait for it to end, or delete with force=true)");
      // From here on a launch cannot reserve it: the checks below wait on other actors.
      this.deleting = true;
      try {
        if (!force && ((await this.launchingOn(houseId, JSON.parse(row.labels as string))) || (await this.reservedByCurrentRun(houseId)))) {
          throw new ApiError("conflict", "a run is launching on this box (stop it, or delete with force=true)");
        }
        // A launch that reserved it earlier may have attached its run while those checks waited,
        // or while the runs already on it were told: every run found on it is told before it goes.
        const told = new Set<string>();
        for (let threads = running(); threads.some((t) => !told.has(t)); threads = running()) {
          for (const threadId of threads) {
            if (told.has(threadId)) continue;
            told.add(threadId);
            await this.orphanThread(threadId, "box deleted by request");
          }
        }
        this.ctx.storage.sql.exec(`delete from box_threads`);
        await this.deleteNow();
      } finally {
        this.deleting = false;
      }
      await this.syncIndex();
      return this.viewOf(houseId);
    });
  }

  /**
   * A box a launch made is registered before its thread is attached to it: the run named in its
   * labels, while still its thread's running run, is using it already.
   */
  private async launchingOn(houseId: string, labels: Record<string, string>): Promise<boolean> {
    const threadId = labels[LABEL_THREAD];
    const runId = labels[LABEL_RUN];
    return !!threadId && !!runId && (await this.runIsCurrent(houseId, threadId, runId));
  }

  /** Whether `runId` is `threadId`'s running run; a thread that is gone runs nothing. */
  private async runIsCurrent(houseId: string, threadId: string, runId: string): Promise<boolean> {
    try {
      return (await unwrapRpc(threadStub(this.env, threadId).runIsCurrent(houseId, runId))) === true;
    } catch (err) {
      if (err instanceof ApiError && err.code === "not_found") return false;
      throw err;
    }
  }

  /**
   * Whether a launch that reserved this box (of a thread other than `exceptThreadId`, when given) is
   * still its thread's current run; reservations of runs that are not are dropped.
   */
  private async reservedByCurrentRun(houseId: string, exceptThreadId?: string): Promise<boolean> {
    const reservations = exceptThreadId === undefined
      ? this.ctx.storage.sql.exec(`select thread_id, run_id from box_reservations`).toArray()
      : this.ctx.storage.sql.exec(`select thread_id, run_id from box_reservations where thread_id != ?`, exceptThreadId).toArray();
    for (const r of reservations) {
      const threadId = r.thread_id as string;
      if (await this.runIsCurrent(houseId, threadId, r.run_id as string)) return true;
      this.ctx.storage.sql.exec(`delete from box_reservations where thread_id = ? and run_id = ?`, threadId, r.run_id as string);
    }
    return false;
  }

  async alarm(): Promise<void> {
    const r = this.row();
    if (!r) return this.lateBox.alarm();
    const decision = boxAlarmDecision(
      { state: r.state as BoxState, nextDeleteAt: r.next_delete_at as number | null, runningThreads: this.threadIds().length },
      this.clock.now(),
    );
    if (decision === "cancel") this.ctx.storage.sql.exec(`update box set next_delete_at = null, drain_handle = null, drain_until = null where id = 1`);
    else if (decision === "delete") await this.dueDelete();
    const claimCheckAt = this.row()!.claim_check_at as number | null;
    if (claimCheckAt !== null && claimCheckAt <= this.clock.now()) await this.checkClaim();
    await this.recomputeAlarm();
    await this.syncIndex();
  }

  /**
   * A pending delete that is due: carried out unless the box is in use (a launch reserved it, a
   * command or a runner is still on it). Never throws: a check that fails is tried again later.
   */
  private async dueDelete(): Promise<void> {
    const r = this.row()!;
    // Decided: a launch asking for it from now on is told it is going (it takes a fresh box).
    this.deleting = true;
    try {
      // A launch picked it before: it is in use, not idle.
      const execsUntil = this.execsUntil();
      if (await this.reservedByCurrentRun(r.house_id as string)) this.ctx.storage.sql.exec(`update box set next_delete_at = null, drain_handle = null, drain_until = null where id = 1`);
      else if (execsUntil !== null) this.ctx.storage.sql.exec(`update box set next_delete_at = ? where id = 1`, execsUntil);
      else if (!(await this.stillDraining())) await this.deleteNow();
      this.failedDeleteChecks = 0;
    } catch (err) {
      // A thread that cannot be asked now whether its launch uses the box is asked again later:
      // an alarm that throws is given up by the runtime after a few tries, and the box leaked.
      this.failedDeleteChecks++;
      const at = this.clock.now() + deleteRetryDelayMs(this.failedDeleteChecks);
      logEvent("box_delete_check_failed", { boxId: r.box_id, retryAt: at, error: errorMessage(err) }, "warn");
      this.ctx.storage.sql.exec(`update box set next_delete_at = ? where id = 1`, at);
    } finally {
      this.deleting = false;
    }
    await this.recomputeAlarm();
  }

  async view(houseId: string) {
    return settle(() => this.viewOf(houseId));
  }

  /**
   * Whether a run of a thread other than `threadId` is on this box or launching onto it. A
   * reservation whose run is no longer its thread's current one (a launch that failed or was
   * stopped) is dropped, or a shared box, never deleted, would count it for good.
   */
  async runsOfOtherThreads(houseId: string, threadId: string) {
    return settle(async () => {
      this.requireRow(houseId);
      if (this.threadIds().some((t) => t !== threadId)) return true;
      // A thread that cannot answer now counts as running: at worst a moved file stays a while longer.
      return this.reservedByCurrentRun(houseId, threadId).catch(() => true);
    });
  }

  /** A signed URL to a port served inside this box; only while the box is live. */
  async previewLink(houseId: string, port: number, expiresInSeconds: number) {
    return settle(async () => {
      const r = this.requireRow(houseId);
      if (r.state !== "live") throw new ApiError("conflict", `box is ${r.state}: a preview needs a live box`);
      let link;
      try {
        link = await this.provider().previewLink(r.provider_ref as string, port, expiresInSeconds);
      } catch (err) {
        // Deleted out of band (its probes settle it later): the box is gone, the provider is up.
        if (err instanceof ProviderError && err.code === "not_found") throw new ApiError("conflict", `box ${r.box_id} is gone: the provider no longer has it, so there is nothing to preview`);
        // The provider is up and will not open that port of this box (the local host refuses one whose network is closed).
        if (err instanceof ProviderError && err.code === "conflict") throw new ApiError("conflict", `the sandbox provider cannot open port ${port} of box ${r.box_id} (the local sandbox host cannot for a box whose egress is closed)`);
        throw providerApiError(err);
      }
      return { boxId: r.box_id as string, port, ...link };
    });
  }

  // ---- internals ----

  private provider(): SandboxProvider {
    return providerFor(this.env, this.row()!.provider as string);
  }

  private row() {
    return this.ctx.storage.sql.exec(`select * from box where id = 1`).toArray()[0] ?? null;
  }

  private requireRow(houseId: string) {
    const r = this.row();
    if (!r || r.house_id !== houseId) throw new ApiError("not_found", "box not found");
    return r;
  }

  private threadIds(): string[] {
    return this.ctx.storage.sql.exec(`select thread_id from box_threads`).toArray().map((t) => t.thread_id as string);
  }

  /** When the last command running on the box may end at the latest; null when none runs. */
  private execsUntil(): number | null {
    const now = this.clock.now();
    this.ctx.storage.sql.exec(`delete from box_execs where until <= ?`, now);
    const at = this.ctx.storage.sql.exec(`select max(until) as at from box_execs`).toArray()[0]?.at;
    return typeof at === "number" ? at : null;
  }

  private touch(): void {
    this.ctx.storage.sql.exec(`update box set updated_at = ? where id = 1`, this.clock.now());
  }

  private async reapIfIdle(): Promise<void> {
    if (!this.reapable() || this.deleting) return;
    await this.deleteUnlessInUse(this.row()!.house_id as string);
  }

  /** Deletes the box now, unless a command still runs on it or a launch that picked it still goes on. */
  private async deleteUnlessInUse(houseId: string): Promise<void> {
    const execsUntil = this.execsUntil();
    if (execsUntil !== null) {
      // A command still runs on it: it goes when that ends (endExec), or when its time is up.
      this.ctx.storage.sql.exec(`update box set next_delete_at = ? where id = 1 and delete_attempts = 0`, execsUntil);
      await this.recomputeAlarm();
      return;
    }
    // Decided: a launch asking for it from now on is told it is going (it takes a fresh box).
    this.deleting = true;
    try {
      // A launch that picked it and has not attached its run yet is using it: that run's end reaps it.
      if (!(await this.reservedByCurrentRun(houseId))) await this.deleteNow();
    } finally {
      this.deleting = false;
    }
  }

  /** Whether the box is one to delete now that no thread runs on it (see shouldReap). */
  private reapable(): boolean {
    const r = this.row()!;
    return shouldReap({
      ephemeral: r.ephemeral === 1, state: r.state as BoxState, runningThreads: this.threadIds().length,
      deletePending: r.next_delete_at !== null,
    });
  }

  /**
   * A box about to be reaped whose runner is still running (it posts the run's artifacts after a
   * failure the mirror reported first) is held for it: its delete becomes a pending one that the
   * alarm retries until the runner has exited or RUNNER_DRAIN_MS has passed. True if held.
   */
  private async holdForRunner(handle: DetachedHandle | null): Promise<boolean> {
    if (!handle || !this.reapable() || !(await this.runnerRunning(handle))) return false;
    const now = this.clock.now();
    this.ctx.storage.sql.exec(
      `update box set drain_handle = ?, drain_until = ?, next_delete_at = ? where id = 1`,
      JSON.stringify(handle), now + intVar(this.env, "RUNNER_DRAIN_MS", 60_000), now + RUNNER_DRAIN_POLL_MS,
    );
    await this.recomputeAlarm();
    return true;
  }

  /** On a due delete of a held box: true (and the next look is scheduled) while its runner still runs. */
  private async stillDraining(): Promise<boolean> {
    const r = this.row()!;
    if (!r.drain_handle) return false;
    const runnerRunning = await this.runnerRunning(JSON.parse(r.drain_handle as string) as DetachedHandle);
    const now = this.clock.now();
    if (releaseDecision({ runnerRunning, drainUntilMs: r.drain_until as number }, now) === "wait") {
      this.ctx.storage.sql.exec(`update box set next_delete_at = ? where id = 1`, now + RUNNER_DRAIN_POLL_MS);
      return true;
    }
    this.ctx.storage.sql.exec(`update box set drain_handle = null, drain_until = null where id = 1`);
    return false;
  }

  /** Whether the run's detached runner is still alive; an unknown answer counts as exited. */
  private async runnerRunning(handle: DetachedHandle): Promise<boolean> {
    try {
      return (await this.provider().detachedStatus(handle)).running;
    } catch (err) {
      logEvent("runner_status_unknown", { boxId: this.row()!.box_id, error: errorMessage(err) }, "warn");
      return false;
    }
  }

  private async markDead(reason: string): Promise<void> {
    this.ctx.storage.sql.exec(`update box set state = 'dead', last_error = ?, updated_at = ? where id = 1`, reason, this.clock.now());
    for (const threadId of this.threadIds()) await this.orphanThread(threadId, reason);
    this.ctx.storage.sql.exec(`delete from box_threads`);
    // A dead box may still hold resources at the provider (error state): delete it too.
    await this.deleteNow();
    await this.syncIndex();
  }

  private async orphanThread(threadId: string, reason: string): Promise<void> {
    const houseId = this.row()!.house_id as string;
    try {
      await unwrapRpc(threadStub(this.env, threadId).boxDied(houseId, this.row()!.box_id as string, reason));
    } catch (err) {
      // The thread's own silence alarm still settles it if this call is lost.
      logEvent("box_death_not_delivered", { boxId: this.row()!.box_id, threadId, error: errorMessage(err) }, "warn");
    }
  }

  /** Deletes at the provider; already-gone counts as done; a failure retries by alarm with backoff. */
  private async deleteNow(): Promise<void> {
    const r = this.row()!;
    if (r.state === "deleted") return;
    this.deletingAtProvider = true;
    try {
      await this.provider().delete(r.provider_ref as string);
      this.ctx.storage.sql.exec(`update box set state = 'deleted', next_delete_at = null, updated_at = ? where id = 1`, this.clock.now());
    } catch (err) {
      if (err instanceof ProviderError && err.code === "not_found") {
        this.ctx.storage.sql.exec(`update box set state = 'deleted', next_delete_at = null, updated_at = ? where id = 1`, this.clock.now());
        await this.recomputeAlarm();
        return;
      }
      const attempts = (r.delete_attempts as number) + 1;
      const at = this.clock.now() + deleteRetryDelayMs(attempts);
      const message = errorMessage(err);
      logEvent("box_delete_failed", { boxId: r.box_id, attempts, retryAt: at, error: message }, "warn");
      this.ctx.storage.sql.exec(`update box set delete_attempts = ?, next_delete_at = ?, last_error = ?, updated_at = ? where id = 1`, attempts, at, `delete failed: ${message}`, this.clock.now());
    } finally {
      this.deletingAtProvider = false;
    }
    await this.recomputeAlarm();
  }

  private stoppedBoxGraceMs(): number {
    return intVar(this.env, "STOPPED_BOX_GRACE_MS", 15 * 60_000);
  }

  /** A box's deadlines are a pending delete (or its retry) and a claim check; the alarm always mirrors the earlier. */
  private async recomputeAlarm(): Promise<void> {
    const r = this.row();
    const due = [r?.next_delete_at, r?.claim_check_at].filter((at): at is number => typeof at === "number");
    if (due.length > 0) await this.ctx.storage.setAlarm(Math.min(...due));
    else await this.ctx.storage.deleteAlarm();
  }

  private async syncIndex(): Promise<void> {
    const r = this.row();
    if (!r) return;
    const v = this.viewOf(r.house_id as string);
    await unwrapRpc(houseStub(this.env, v.houseId).upsertBox(v));
  }
}
