import type { Env } from "../../env";
import type { BoxInfo, CreateBoxOptions, SandboxProvider } from "../../sandbox/provider";
import { ApiError } from "../../errors";
import { ProviderError } from "../../sandbox/errors";
import { providerFor } from "../../sandbox/providers";
import { LazySchema, type Schema } from "../../domain/sql-schema";
import { backoffDelayMs } from "../../domain/backoff";
import { errorMessage, logEvent } from "../../domain/log-event";
import { unwrapRpc } from "../rpc";
import { sandboxStub } from "../stubs";

/**
 * How long a box a failed create may still bring is looked for. A provider that did not answer a
 * create may carry it out minutes later (its queue, a restart); one that has not in an hour is
 * taken not to.
 */
export const LATE_BOX_WATCH_MS = 60 * 60_000;
const FIRST_LOOK_MS = 10_000;
const MAX_LOOK_INTERVAL_MS = 5 * 60_000;

/** The actor that watches for the late box `name` of `provider` (never a box actor's id, which start `box_`). */
export function lateBoxWatchId(provider: string, name: string): string {
  return `late-box:${provider}:${name}`;
}

/**
 * Creates a box at the provider. A create that failed without an answer may still be carried out:
 * the box it would have made is then deleted when it appears (by its name, the only thing known of
 * it), by an actor that looks for it for `LATE_BOX_WATCH_MS`; nobody else ever learns of such a box.
 * When that watch cannot be started, what is thrown names the box that may still appear.
 */
export async function createBox(env: Env, houseId: string, providerName: string, opts: CreateBoxOptions): Promise<BoxInfo> {
  const provider = providerFor(env, providerName);
  try {
    return await provider.create(opts);
  } catch (err) {
    if (err instanceof ProviderError && err.code === "bad_request") err.createRefused = true;
    if (err instanceof ProviderError && err.lateBoxName) {
      const name = err.lateBoxName;
      try {
        await unwrapRpc(sandboxStub(env, lateBoxWatchId(providerName, name)).watchLateBox(houseId, providerName, name));
      } catch (watchErr) {
        logEvent("late_box_watch_failed", { houseId, provider: providerName, name, createError: errorMessage(err), error: errorMessage(watchErr) }, "error");
        throw new UnregisteredBoxLeftError(providerName, name, "late");
      }
    }
    throw err;
  }
}

/**
 * Deletes a box no box actor has (made by this code, then found not needed): now, or, when the
 * provider fails that, by a watch of it that retries with backoff until the provider confirms.
 * When neither is done, it throws `provider_unavailable` naming the box: nothing else knows of it,
 * so the caller must keep it (an actor's outbox tries again) or tell its client the box may be left.
 */
export async function deleteUnregisteredBox(env: Env, houseId: string, providerName: string, ref: string): Promise<void> {
  try {
    await providerFor(env, providerName).delete(ref);
    return;
  } catch (err) {
    if (err instanceof ProviderError && err.code === "not_found") return;
    logEvent("unregistered_box_delete_failed", { houseId, provider: providerName, ref, retriedBy: "late-box watch", error: errorMessage(err) }, "warn");
  }
  try {
    await unwrapRpc(sandboxStub(env, lateBoxWatchId(providerName, ref)).watchLateBox(houseId, providerName, ref));
  } catch (watchErr) {
    logEvent("late_box_watch_failed", { houseId, provider: providerName, name: ref, error: errorMessage(watchErr) }, "error");
    throw new UnregisteredBoxLeftError(providerName, ref);
  }
}

/**
 * A box no box actor has, that nothing will delete: `left`, its delete failed and its retry could
 * not be handed to a watch; `late`, its create was not answered and the watch for it could not be
 * started. Its client is the only one left to delete it.
 */
export class UnregisteredBoxLeftError extends ApiError {
  constructor(provider: string, providerRef: string, state: "left" | "late" = "left") {
    const what = state === "left"
      ? "could not be deleted and may be left running: delete it there"
      : "was not confirmed created and may still appear: delete it there if it does";
    super("provider_unavailable", `box ${providerRef} at sandbox provider ${provider} ${what}`, { provider, providerRef });
  }
}

export const LATE_BOX_SCHEMA: Schema = {
  name: "late_box",
  ddl: `create table if not exists late_box (
    id integer primary key check (id = 1), house_id text not null, provider text not null, name text not null,
    until integer not null, looks integer not null default 0, next_at integer not null)`,
};

export type LateBoxPorts = {
  sql: SqlStorage;
  now(): number;
  provider(name: string): SandboxProvider;
  setAlarm(at: number | null): Promise<void>;
};

/** The watch of one late box, in the actor named by `lateBoxWatchId` (a box actor never has one). */
export class LateBoxWatch {
  private readonly table: LazySchema;

  constructor(private readonly p: LateBoxPorts) {
    this.table = new LazySchema(p.sql, LATE_BOX_SCHEMA);
  }

  private row() {
    if (!this.table.exists()) return null;
    return this.p.sql.exec(`select * from late_box where id = 1`).toArray()[0] ?? null;
  }

  /** Starts the watch (a second call for the same name changes nothing). */
  async start(houseId: string, provider: string, name: string): Promise<void> {
    this.table.ensure();
    const now = this.p.now();
    this.p.sql.exec(
      `insert into late_box (id, house_id, provider, name, until, next_at) values (1, ?, ?, ?, ?, ?) on conflict(id) do nothing`,
      houseId, provider, name, now + LATE_BOX_WATCH_MS, now + FIRST_LOOK_MS,
    );
    await this.p.setAlarm(this.row()!.next_at as number);
  }

  watching(): { houseId: string; provider: string; name: string; until: number; nextAt: number } | null {
    const r = this.row();
    return r ? { houseId: r.house_id as string, provider: r.provider as string, name: r.name as string, until: r.until as number, nextAt: r.next_at as number } : null;
  }

  /**
   * One look: a box of that name is deleted and the watch ends; none yet, it looks again later. A
   * box found whose delete fails keeps the watch going (it is there, billed) for another watch period.
   */
  async alarm(): Promise<void> {
    const r = this.row();
    if (!r) return;
    const name = r.name as string;
    const fields = { houseId: r.house_id, provider: r.provider, name };
    const provider = this.p.provider(r.provider as string);
    try {
      await provider.get(name);
      this.p.sql.exec(`update late_box set until = max(until, ?) where id = 1`, this.p.now() + LATE_BOX_WATCH_MS);
      await provider.delete(name);
      logEvent("late_box_deleted", fields, "warn");
      return this.end();
    } catch (err) {
      if (!(err instanceof ProviderError && err.code === "not_found")) logEvent("late_box_look_failed", { ...fields, error: errorMessage(err) }, "warn");
    }
    const now = this.p.now();
    const until = this.row()!.until as number;
    if (now >= until) {
      logEvent("late_box_watch_ended", fields);
      return this.end();
    }
    const looks = (r.looks as number) + 1;
    const at = Math.min(until, now + backoffDelayMs(looks, FIRST_LOOK_MS, MAX_LOOK_INTERVAL_MS));
    this.p.sql.exec(`update late_box set looks = ?, next_at = ? where id = 1`, looks, at);
    await this.p.setAlarm(at);
  }

  private async end(): Promise<void> {
    this.p.sql.exec(`delete from late_box where id = 1`);
    await this.p.setAlarm(null);
  }
}
