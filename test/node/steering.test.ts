import { describe, expect, it } from "vitest";
import { PassThrough } from "node:stream";
import { endsWhenSettled, RunCursor, steerAction } from "../../src/runner/steering";
import { PiRpc } from "../../src/runner/pi-rpc";

describe("what a running agent takes from its thread", () => {
  it("a chat is a message; control-plane chat, empty chat and other entries are not; an interrupt names its run", () => {
    expect(steerAction({ id: "c1", payload: { type: "chat", text: "also do X" } }, "r1")).toEqual({ kind: "message", entryId: "c1", text: "also do X" });
    expect(steerAction({ id: "p", payload: { type: "chat", text: "the task", dispatch: false } }, "r1").kind).toBe("none");
    expect(steerAction({ id: "e", payload: { type: "chat", text: "  " } }, "r1").kind).toBe("none");
    expect(steerAction({ id: "x", payload: { type: "pi.assistant", text: "hi" } }, "r1").kind).toBe("none");
    expect(steerAction({ id: "i", payload: { type: "signal.run.interrupt", runId: "r1" } }, "r1")).toEqual({ kind: "interrupt", entryId: "i" });
    expect(steerAction({ id: "i2", payload: { type: "signal.run.interrupt", runId: "r0" } }, "r1").kind).toBe("none");
  });

  it("a finished-signal of this run (or one naming no run) ends what the run takes; another run's, or a claim, does not", () => {
    const status = (status: string, runId?: string) => ({ id: "s", payload: { type: "signal.thread.status_changed", status, ...(runId ? { runId } : {}) } });
    for (const s of ["stopped", "pi_failed", "pi_session_orphaned", "completed"]) expect(steerAction(status(s, "r1"), "r1"), s).toEqual({ kind: "ended" });
    expect(steerAction(status("stopped"), "r1").kind).toBe("ended");
    expect(steerAction(status("stopped", "r0"), "r1").kind).toBe("none");
    expect(steerAction(status("running", "r1"), "r1").kind).toBe("none");
  });

  it("only entries after the run's own prompt count; without one, only new entries", () => {
    const c = new RunCursor("r2");
    const page = [
      { id: "old", payload: { type: "chat", text: "before" } },
      { id: "prompt:r2", payload: { type: "chat", text: "task", dispatch: false } },
      { id: "new", payload: { type: "chat", text: "after" } },
    ];
    expect(c.catchUp(page).map((e) => e.id)).toEqual(["new"]);
    expect(c.catchUp([{ id: "more", payload: { type: "chat", text: "x" } }]).map((e) => e.id)).toEqual(["more"]);
    const fresh = new RunCursor("r3");
    expect(fresh.catchUp(page)).toEqual([]);
    fresh.caughtUp();
    expect(fresh.catchUp(page)).toHaveLength(3);
  });

  it("the run ends when pi settles with nothing waiting, not right after an interrupt", () => {
    expect(endsWhenSettled({ queued: 0, interruptedSincePrompt: false })).toBe(true);
    expect(endsWhenSettled({ queued: 1, interruptedSincePrompt: false })).toBe(false);
    expect(endsWhenSettled({ queued: 0, interruptedSincePrompt: true })).toBe(false);
  });
});

describe("driving pi over RPC", () => {
  function harness() {
    const stdin = new PassThrough();
    const sent: any[] = [];
    stdin.on("data", (d) => String(d).split("\n").filter(Boolean).forEach((l) => sent.push(JSON.parse(l))));
    const delivered: [string, string][] = [];
    const refused: string[] = [];
    const rpc = new PiRpc(stdin, { onDelivered: (id, mode) => delivered.push([id, mode]), onRefused: (e) => refused.push(e), log: () => {} });
    let ended = false;
    stdin.on("finish", () => (ended = true));
    return { rpc, sent, delivered, refused, ended: () => ended, tick: () => new Promise((r) => setImmediate(r)) };
  }

  /** A run whose first turn was interrupted and has settled: it waits `idleMs` for a message. */
  function interruptedRun(idleMs: number) {
    const stdin = new PassThrough();
    const sent: { id: string; type: string }[] = [];
    stdin.on("data", (d) => String(d).split("\n").filter(Boolean).forEach((l) => sent.push(JSON.parse(l))));
    let ended = false;
    stdin.on("finish", () => (ended = true));
    const idled: number[] = [];
    const rpc = new PiRpc(stdin, { onDelivered: () => {}, onRefused: () => {}, log: () => {}, onIdleAfterInterrupt: (ms) => void idled.push(ms) }, idleMs);
    rpc.start("the task");
    rpc.onRecord({ type: "response", id: "tb-1", success: true });
    rpc.onRecord({ type: "agent_start" });
    rpc.interrupt();
    rpc.onRecord({ type: "agent_settled" });
    return { rpc, sent, idled, ended: () => ended };
  }

  it("task as the first prompt; a message while busy is a steer, marked once pi accepts it; settling with nothing waiting ends", async () => {
    const h = harness();
    h.rpc.start("the task");
    h.rpc.message("c1", "steer me");
    h.rpc.message("c1", "steer me"); // the same entry twice (a re-read) is delivered once
    h.rpc.message("c2", "and me");
    await h.tick();
    // Nothing more until pi has answered the task: two prompts pi reads at once both start a turn.
    expect(h.sent.map((c) => c.type)).toEqual(["prompt"]);
    h.rpc.onRecord({ type: "response", id: h.sent[0].id, success: true });
    await h.tick();
    // pi steers with a prompt that comes while it works (and runs one that comes after as a new turn)
    expect(h.sent.map((c) => [c.type, c.message, c.streamingBehavior])).toEqual([["prompt", "the task", undefined], ["prompt", "steer me", "steer"]]);
    h.rpc.onRecord({ type: "response", id: h.sent[1].id, success: true });
    await h.tick();
    expect(h.sent.map((c) => c.message).at(-1)).toBe("and me");
    h.rpc.onRecord({ type: "response", id: h.sent[2].id, success: true });
    expect(h.delivered).toEqual([["c1", "steer"], ["c2", "steer"]]);
    h.rpc.onRecord({ type: "agent_settled" });
    await h.tick();
    expect(h.ended()).toBe(true);
    expect(h.rpc.message("c2", "too late")).toBe(false);
  });

  it("interrupt aborts; the run waits; the next message is a new prompt", async () => {
    const h = harness();
    h.rpc.start("the task");
    h.rpc.onRecord({ type: "response", id: "tb-1", success: true });
    h.rpc.onRecord({ type: "agent_start" });
    h.rpc.interrupt();
    h.rpc.onRecord({ type: "agent_settled" });
    await h.tick();
    expect(h.ended()).toBe(false);
    h.rpc.message("c3", "do this instead");
    await h.tick();
    expect(h.sent.map((c) => c.type)).toEqual(["prompt", "abort", "prompt"]);
    h.rpc.onRecord({ type: "response", id: h.sent[2].id, success: true });
    expect(h.delivered).toEqual([["c3", "prompt"]]);
    h.rpc.onRecord({ type: "agent_settled" });
    await h.tick();
    expect(h.ended()).toBe(true);
  });

  it("interrupted and left without a message for idleAfterInterruptMs, the run ends; a message in time keeps it going", async () => {
    const { rpc, sent, idled, ended } = interruptedRun(60);
    await new Promise((r) => setTimeout(r, 30));
    rpc.message("c1", "in time");
    await new Promise((r) => setTimeout(r, 80));
    rpc.onRecord({ type: "response", id: sent.find((c) => c.type === "prompt" && sent.indexOf(c) > 0)!.id, success: true });
    expect([ended(), idled]).toEqual([false, []]);
    // That prompt's turn is interrupted too, and this time nobody comes back.
    rpc.onRecord({ type: "agent_start" });
    rpc.interrupt();
    rpc.onRecord({ type: "agent_settled" });
    await new Promise((r) => setTimeout(r, 120));
    expect([ended(), idled]).toEqual([true, [60]]);
    expect(rpc.message("c2", "too late")).toBe(false);
  });

  it("a message that arrives while the abort is still settling waits for it and goes in as the next prompt; that turn settling ends the run", async () => {
    const h = harness();
    h.rpc.start("the task");
    h.rpc.onRecord({ type: "response", id: "tb-1", success: true });
    h.rpc.onRecord({ type: "agent_start" });
    h.rpc.interrupt();
    h.rpc.message("c4", "do this instead"); // before pi has settled the aborted turn
    h.rpc.message("c4b", "and this");
    await h.tick();
    expect(h.sent.map((c) => c.type)).toEqual(["prompt", "abort"]);
    h.rpc.onRecord({ type: "agent_settled" });
    await h.tick();
    expect(h.sent.map((c) => [c.type, c.message])).toEqual([["prompt", "the task"], ["abort", undefined], ["prompt", "do this instead"]]);
    expect(h.ended()).toBe(false);
    h.rpc.onRecord({ type: "response", id: h.sent[2].id, success: true });
    await h.tick();
    // The second goes out once pi has taken the first: it steers the turn the first started.
    expect(h.sent.map((c) => [c.type, c.message, c.streamingBehavior]).at(-1)).toEqual(["prompt", "and this", "steer"]);
    h.rpc.onRecord({ type: "agent_start" });
    h.rpc.onRecord({ type: "response", id: h.sent[3].id, success: true });
    expect(h.delivered).toEqual([["c4", "prompt"], ["c4b", "steer"]]);
    h.rpc.onRecord({ type: "agent_settled" });
    await h.tick();
    expect(h.ended()).toBe(true);
  });

  it("a prompt pi answers only after its turn has settled still ends the run", async () => {
    const h = harness();
    h.rpc.start("the task");
    h.rpc.onRecord({ type: "response", id: "tb-1", success: true });
    h.rpc.onRecord({ type: "agent_start" });
    h.rpc.interrupt();
    h.rpc.onRecord({ type: "agent_settled" });
    h.rpc.message("c5", "again");
    await h.tick();
    h.rpc.onRecord({ type: "agent_start" });
    h.rpc.onRecord({ type: "agent_settled" }); // before the prompt's response
    await h.tick();
    expect(h.ended()).toBe(false);
    h.rpc.onRecord({ type: "response", id: h.sent[2].id, success: true });
    await h.tick();
    expect(h.ended()).toBe(true);
  });

  it("an interrupt before pi has begun its turn (the run just started) aborts the turn once it begins", async () => {
    const h = harness();
    h.rpc.start("the task");
    h.rpc.onRecord({ type: "response", id: "tb-1", success: true });
    h.rpc.interrupt(); // replayed from the thread right after the start
    await h.tick();
    expect(h.sent.map((c) => c.type)).toEqual(["prompt"]);
    h.rpc.onRecord({ type: "agent_start" });
    await h.tick();
    expect(h.sent.map((c) => c.type)).toEqual(["prompt", "abort"]);
    h.rpc.onRecord({ type: "message_end", message: { role: "assistant", stopReason: "aborted" } });
    h.rpc.onRecord({ type: "agent_settled" });
    await h.tick();
    expect(h.ended()).toBe(false); // waits for what to do instead
    // That abort is spent: the next prompt's turn is not cut short by it.
    h.rpc.message("c6", "now this");
    h.rpc.onRecord({ type: "agent_start" });
    await h.tick();
    expect(h.sent.map((c) => c.type)).toEqual(["prompt", "abort", "prompt"]);
    h.rpc.onRecord({ type: "response", id: h.sent[2].id, success: true });
    h.rpc.onRecord({ type: "message_end", message: { role: "assistant", stopReason: "stop" } });
    h.rpc.onRecord({ type: "agent_settled" });
    await h.tick();
    expect(h.ended()).toBe(true);
  });

  it("an interrupt that came too late to cut the turn short does not hold the finished run open", async () => {
    const h = harness();
    h.rpc.start("the task");
    h.rpc.onRecord({ type: "response", id: "tb-1", success: true });
    h.rpc.onRecord({ type: "agent_start" });
    h.rpc.onRecord({ type: "message_end", message: { role: "assistant", stopReason: "stop" } });
    h.rpc.interrupt(); // the answer is already complete
    h.rpc.onRecord({ type: "agent_settled" });
    await h.tick();
    expect(h.ended()).toBe(true);
  });

  it("a message sent to steer that pi reads only after it settled starts a new turn, and the run ends after that turn", async () => {
    const h = harness();
    h.rpc.start("the task");
    h.rpc.onRecord({ type: "response", id: "tb-1", success: true });
    h.rpc.onRecord({ type: "agent_start" });
    h.rpc.message("c7", "one more thing"); // the runner has not yet read that pi settled
    h.rpc.onRecord({ type: "message_end", message: { role: "assistant", stopReason: "stop" } });
    h.rpc.onRecord({ type: "agent_settled" });
    await h.tick();
    expect(h.ended()).toBe(false);
    h.rpc.onRecord({ type: "response", id: h.sent[1].id, success: true });
    expect(h.delivered).toEqual([["c7", "prompt"]]);
    // Until that turn begins, an interrupt waits for it rather than being lost.
    h.rpc.interrupt();
    await h.tick();
    expect(h.sent.map((c) => c.type)).toEqual(["prompt", "prompt"]);
    h.rpc.onRecord({ type: "agent_start" });
    await h.tick();
    expect(h.sent.map((c) => c.type)).toEqual(["prompt", "prompt", "abort"]);
    h.rpc.onRecord({ type: "agent_settled" });
    await h.tick();
    expect(h.ended()).toBe(false); // interrupted: waits for what to do instead
  });

  it("an interrupt after a message pi reads only once it settled aborts the turn that message starts; the run then waits", async () => {
    const h = harness();
    h.rpc.start("the task");
    h.rpc.onRecord({ type: "response", id: "tb-1", success: true });
    h.rpc.onRecord({ type: "agent_start" });
    h.rpc.message("c10", "one more thing"); // sent to steer; pi settles before it reads it
    h.rpc.onRecord({ type: "message_end", message: { role: "assistant", stopReason: "stop" } });
    h.rpc.onRecord({ type: "agent_settled" });
    h.rpc.interrupt(); // the person stops what they just asked for
    h.rpc.onRecord({ type: "response", id: h.sent[1].id, success: true }); // pi runs it as a new turn
    h.rpc.onRecord({ type: "agent_start" });
    await h.tick();
    expect(h.sent.map((c) => c.type)).toEqual(["prompt", "prompt", "abort"]);
    h.rpc.onRecord({ type: "message_end", message: { role: "assistant", stopReason: "aborted" } });
    h.rpc.onRecord({ type: "agent_settled" });
    await h.tick();
    expect(h.ended()).toBe(false); // interrupted: waits for what to do instead
  });

  it("an interrupt after a message pi then refuses, once settled, does not hold back the next message", async () => {
    const h = harness();
    h.rpc.start("the task");
    h.rpc.onRecord({ type: "response", id: "tb-1", success: true });
    h.rpc.onRecord({ type: "agent_start" });
    h.rpc.message("c11", "one more thing");
    h.rpc.onRecord({ type: "agent_settled" });
    h.rpc.interrupt();
    h.rpc.onRecord({ type: "response", id: h.sent[1].id, success: false, error: "an input handler failed" });
    h.rpc.message("c12", "this then");
    await h.tick();
    expect(h.sent.map((c) => c.type)).toEqual(["prompt", "prompt", "prompt"]);
    expect(h.ended()).toBe(false);
  });

  it("a message pi refuses after the run went idle does not hold the run open without its idle timer", async () => {
    const { rpc, sent, idled, ended } = interruptedRun(60);
    rpc.message("c8", "do this");
    await new Promise((r) => setImmediate(r));
    rpc.onRecord({ type: "response", id: sent[2].id, success: false, error: "Cannot submit a prompt while compaction is in progress." });
    await new Promise((r) => setTimeout(r, 120));
    expect([ended(), idled]).toEqual([true, [60]]);
  });

  it("an interrupt for a prompt pi then refuses is spent: the next message goes in as a prompt", async () => {
    const { rpc, sent, ended } = interruptedRun(60_000);
    rpc.message("c8", "do this");
    await new Promise((r) => setImmediate(r));
    rpc.interrupt(); // before pi has answered: it waits for the turn to begin
    rpc.onRecord({ type: "response", id: sent[2].id, success: false, error: "an input handler failed" });
    rpc.message("c9", "then do this instead");
    await new Promise((r) => setImmediate(r));
    // No turn began, so there is nothing to abort and nothing to wait for.
    expect(sent.map((c) => c.type)).toEqual(["prompt", "abort", "prompt", "prompt"]);
    rpc.onRecord({ type: "response", id: sent[3].id, success: true });
    rpc.onRecord({ type: "agent_start" });
    await new Promise((r) => setImmediate(r));
    expect(sent.map((c) => c.type)).toEqual(["prompt", "abort", "prompt", "prompt"]); // not cut short by the spent interrupt
    rpc.onRecord({ type: "message_end", message: { role: "assistant", stopReason: "stop" } });
    rpc.onRecord({ type: "agent_settled" });
    await new Promise((r) => setImmediate(r));
    expect(ended()).toBe(true);
  });

  it("pi refusing the task (no API key) ends the run with pi's words", async () => {
    const h = harness();
    h.rpc.start("the task");
    await h.tick();
    h.rpc.onRecord({ type: "response", id: h.sent[0].id, success: false, error: "No API key found for the selected model." });
    await h.tick();
    expect(h.refused).toEqual(["No API key found for the selected model."]);
    expect(h.ended()).toBe(true);
  });
});
