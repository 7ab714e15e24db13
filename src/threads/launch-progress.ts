import type { DetachedHandle } from "../sandbox/provider";
import type { CopiedFolder } from "../workspace/folders";
import { LazySchema, type Schema } from "../domain/sql-schema";

export const LAUNCH_PROGRESS_SCHEMA: Schema = { name: "launch_progress", ddl: `create table if not exists launch_progress (run_id text primary key, state text not null)` };

/**
 * How far a run's launch got, persisted after each step so a launch retried after a crash (the
 * alarm dying mid-launch) continues where it stopped instead of making a second box or a second
 * runner. Keyed by run id.
 */
export type LaunchProgress = {
  /**
   * The provider the run's own box is made at, recorded before it is made: a retry, or the release
   * of a box an attempt made and never recorded, goes there even once the environment is gone.
   */
  provider?: string;
  /** The provider's box for this run (found by its run label, or created). */
  providerRef?: string;
  /** The box actor registered for it (deterministic per run: launchBoxId). */
  boxId?: string;
  /** The box is the previous run's, reused on resume, or the environment's shared box. */
  sameBox?: boolean;
  /** The box is the environment's shared box: its checkouts are reconciled, not recloned. */
  shared?: boolean;
  /** This launch made the shared box (it was the environment's first run there, or the box was lost). */
  sharedCreated?: boolean;
  /** The repository is in place (a half-done clone is removed before cloning again). */
  cloned?: boolean;
  session?: "new" | "continued" | "rebuilt";
  /** The environment's packages are checked (and installed where missing): `manager:spec` installed. */
  packagesInstalled?: string[];
  /** The environment's folders are in the working directory. */
  folders?: CopiedFolder[];
  /** The runner is started: a retry only records it. */
  handle?: DetachedHandle;
};

export type LaunchStep = "box_created" | "box_registered" | "box_chosen" | "runner_spawned" | "runner_started";

export class LaunchProgressStore {
  /** A thread that never runs has no launches to keep. */
  private readonly table: LazySchema;

  constructor(private readonly sql: SqlStorage) {
    this.table = new LazySchema(sql, LAUNCH_PROGRESS_SCHEMA);
  }

  get(runId: string): LaunchProgress {
    if (!this.table.exists()) return {};
    const r = this.sql.exec(`select state from launch_progress where run_id = ?`, runId).toArray()[0];
    return r ? (JSON.parse(r.state as string) as LaunchProgress) : {};
  }

  save(runId: string, patch: LaunchProgress): LaunchProgress {
    const next = { ...this.get(runId), ...patch };
    this.table.ensure();
    this.sql.exec(
      `insert into launch_progress (run_id, state) values (?, ?) on conflict(run_id) do update set state = excluded.state`,
      runId, JSON.stringify(next),
    );
    return next;
  }

  clear(runId: string): void {
    if (this.table.exists()) this.sql.exec(`delete from launch_progress where run_id = ?`, runId);
  }
}

/** The box actor id of the box made for a run: the same on every retry of its launch. */
export function launchBoxId(runId: string): string {
  return `box_${runId.replace(/[^A-Za-z0-9]/g, "").slice(0, 24)}`;
}
