import { afterEach, describe, expect, it } from "vitest";
import { spawn, type ChildProcess } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { HARNESS_MARK_ENV, killLeftovers } from "../../src/runner/leftovers";

const started: ChildProcess[] = [];

/** A process in a group (and session) of its own, as a harness, or a command pi's bash tool runs, is. */
function leader(command: string, env: Record<string, string> = {}): number {
  const child = spawn("bash", ["-c", command], { detached: true, stdio: "ignore", env: { ...process.env, ...env } });
  started.push(child);
  return child.pid!;
}

function alive(pid: number): boolean {
  try {
    return !/^\S+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "latin1"));
  } catch {
    return false;
  }
}

/** The live pids in group `pgid`. */
function members(pgid: number): number[] {
  return readdirSync("/proc").filter((e) => /^\d+$/.test(e)).map(Number).filter((pid) => {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
      return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[2]) === pgid && alive(pid);
    } catch {
      return false;
    }
  });
}

async function until(what: () => boolean): Promise<void> {
  const t0 = Date.now();
  while (!what() && Date.now() - t0 < 5_000) await new Promise((r) => setTimeout(r, 20));
}

afterEach(() => {
  for (const c of started.splice(0)) try { process.kill(-c.pid!, "SIGKILL"); } catch { /* gone */ }
});

describe("a run's leftovers", () => {
  it("the group id of a harness that exited long ago, taken since by another run's process, is not signalled; one that still holds the run's processes is", async () => {
    const mark = `mark-${process.pid}-${Date.now()}`;
    // Another run's command, in a group whose id an earlier harness of this run once had.
    const other = leader("sleep 60");
    // An earlier harness's group still holding what it started, one of them without the mark.
    const earlier = leader(`env -u ${HARNESS_MARK_ENV} sleep 61 & sleep 62; wait`, { [HARNESS_MARK_ENV]: mark });
    // The harness that just exited: what is left in its group.
    const last = leader("sleep 63", { [HARNESS_MARK_ENV]: mark });
    await until(() => members(earlier).length >= 3);
    expect(members(earlier).length).toBeGreaterThanOrEqual(3);
    killLeftovers(mark, [other, earlier, last]);
    await until(() => members(earlier).length === 0 && !alive(last));
    expect([alive(other), members(earlier), alive(last)]).toEqual([true, [], false]);
  });
});
