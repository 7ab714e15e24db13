// What a run's token may write, by where its run stands: the pure rule (src/threads/run-writes.ts).
import { describe, expect, it } from "vitest";
import { runStanding, runWriteRefusal, showsRunAlive, type RunStanding } from "../../src/threads/run-writes";

const STATUS = "signal.thread.status_changed";
const never = () => false;
const refused = (standing: RunStanding, entry: { id?: string; payload: { type: string; status?: unknown } }, onLog: (id: string) => boolean = never) =>
  runWriteRefusal(standing, "r1", entry, onLog) !== null;

/** What a run's box writes around its end (the mirror, the runner's writers, its artifacts and its end). */
const BOX_LATE_WRITES = [
  { id: "th:m:s:3", payload: { type: "pi.assistant" } },
  { id: "th:m:s:4", payload: { type: "pi.tool_result" } },
  { id: "th:h:r1:0", payload: { type: "pi.user" } },
  { id: "th:live:p:0", payload: { type: "signal.exec.output" } },
  { id: "th:delivered:r1:e", payload: { type: "signal.run.message_delivered" } },
  { id: "th:artifacts:r1:files", payload: { type: "artifact.files" } },
  { id: "th:artifacts:r1:diff", payload: { type: "artifact.diff" } },
  { id: "th:stderr:r1", payload: { type: "signal.run.stderr" } },
  { id: "th:finished:r1", payload: { type: STATUS, status: "completed" } },
  { payload: { type: "signal.heartbeat" } },
];

describe("runStanding", () => {
  it("is current only while the thread runs that very run", () => {
    expect(runStanding({ status: "running", runId: "r1" }, "r1", never)).toBe("current");
    expect(runStanding({ status: "running", runId: "r2" }, "r1", never)).toBe("over");
    expect(runStanding({ status: "running", runId: null }, "r1", never)).toBe("over");
  });

  it("is over once the run settled, and for a run whose claim is on the thread", () => {
    for (const status of ["completed", "failed"] as const) expect(runStanding({ status, runId: "r1" }, "r1", never)).toBe("over");
    expect(runStanding({ status: "completed", runId: "r2" }, "r1", () => true)).toBe("over");
  });

  it("is unstarted for a run that has not run while nothing runs", () => {
    expect(runStanding({ status: "idle", runId: null }, "r1", never)).toBe("unstarted");
    expect(runStanding({ status: "completed", runId: "r0" }, "r1", never)).toBe("unstarted");
  });
});

describe("runWriteRefusal", () => {
  it("refuses nothing to the current run's token", () => {
    expect(refused("current", { payload: { type: "chat" } })).toBe(false);
    expect(refused("current", { payload: { type: "signal.custom" } })).toBe(false);
  });

  it("refuses a chat, a claim and anything else that is not a box's late write once the run is over", () => {
    expect(refused("over", { payload: { type: "chat" } })).toBe(true);
    expect(refused("over", { id: "c1", payload: { type: "chat" } })).toBe(true);
    expect(refused("over", { id: "claim:r1", payload: { type: STATUS, status: "running" } })).toBe(true);
    expect(refused("over", { id: "prompt:r1", payload: { type: "chat" } })).toBe(true);
    expect(refused("over", { payload: { type: "signal.custom" } })).toBe(true);
    expect(refused("over", { payload: { type: "signal.dispatch.error" } })).toBe(true);
  });

  it("takes what a run's box writes around its end, whether the run is over or has not started", () => {
    for (const standing of ["over", "unstarted"] as const) {
      for (const entry of BOX_LATE_WRITES) expect(refused(standing, entry), `${standing} ${entry.payload.type}`).toBe(false);
    }
  });

  it("takes an entry already on the thread again (a retry, dropped as a duplicate)", () => {
    const onLog = (id: string) => id === "c1";
    expect(refused("over", { id: "c1", payload: { type: "chat" } }, onLog)).toBe(false);
    expect(refused("over", { id: "c2", payload: { type: "chat" } }, onLog)).toBe(true);
  });

  it("takes the start of a run driven from outside only while it has not started", () => {
    expect(refused("unstarted", { id: "prompt:r1", payload: { type: "chat" } })).toBe(false);
    expect(refused("unstarted", { id: "claim:r1", payload: { type: STATUS, status: "running" } })).toBe(false);
    expect(refused("unstarted", { id: "prompt:r2", payload: { type: "chat" } })).toBe(true);
    expect(refused("unstarted", { payload: { type: "chat" } })).toBe(true);
    expect(refused("unstarted", { id: "claim:r2", payload: { type: STATUS, status: "running" } })).toBe(true);
  });
});

describe("showsRunAlive", () => {
  it("a write with another run's token does not; any other write does", () => {
    expect(showsRunAlive({ runId: "r2" }, "r1")).toBe(false);
    expect(showsRunAlive({ runId: null }, "r1")).toBe(false);
    expect(showsRunAlive({ runId: "r1" }, "r1")).toBe(true);
    expect(showsRunAlive({ runId: "r1" }, undefined)).toBe(true);
  });
});
