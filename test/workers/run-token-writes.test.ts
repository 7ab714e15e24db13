/**
 * A run's token (the one its box holds; it names the run) writes to its thread while that run is
 * the thread's current one. Once the run is over only what its box still owes the thread (its
 * mirror's last `pi.*` entries, its artifacts, its end) is taken, and nothing that starts,
 * claims or wakes anything.
 */
import { SELF, env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { ThreadActor } from "./test-worker";
import { StreamWriter } from "../../src/runner/stream-writer";
import { BASE, call, chat, createThread, errorCode, houseToken, post, readAll, runToken } from "./helpers";

const E = env as unknown as { THREADS: DurableObjectNamespace<ThreadActor> };
const threadStub = (id: string) => E.THREADS.get(E.THREADS.idFromName(`thread:${id}`));
const selfFetch: typeof fetch = (input, init) => SELF.fetch(input as RequestInfo, init);

const STATUS = "signal.thread.status_changed";
const status = (s: string, extra: Record<string, unknown> = {}) => ({ payload: { type: STATUS, status: s, ...extra } });

async function row(token: string, id: string) {
  return (await (await call(`/api/threads/${id}`, { token })).json()) as { status: string; reason: string | null; runId: string | null; lastLivenessAt: string | null };
}

/** A thread whose run `runId` is on, started as a run driven from outside starts (its token writes its prompt and claim). */
async function runningThread(house: string, runId: string) {
  const owner = await houseToken(house);
  const t = await createThread(owner);
  const token = await runToken(house, t.id, runId);
  const start = await post(token, t.id, [
    { id: `prompt:${runId}`, payload: { type: "chat", text: "the task", origin: "task", runId } },
    { id: `claim:${runId}`, ...status("running", { runId }) },
  ]);
  expect(start.status).toBe(201);
  expect((await row(owner, t.id)).status).toBe("running");
  return { owner, t, token };
}

/** The same write on the stream path (what the box's StreamWriter sends), as the answer's status and code. */
async function viaStream(token: string, threadId: string, body: unknown, producer?: { id: string; seq: number }) {
  const headers: Record<string, string> = { authorization: `Bearer ${token}`, "content-type": "application/json" };
  if (producer) Object.assign(headers, { "producer-id": producer.id, "producer-epoch": "0", "producer-seq": String(producer.seq) });
  const r = await SELF.fetch(`${BASE}/api/stream/thread-${threadId}`, { method: "POST", headers, body: JSON.stringify(body) });
  return { status: r.status, code: r.status >= 400 ? await errorCode(r) : "" };
}

describe("a run's token once its run has ended", () => {
  it("cannot post a chat (403 run_ended), on either write path, whether the run was stopped, completed or orphaned", async () => {
    for (const [how, end] of [
      ["stopped", async (owner: string, id: string) => expect((await call(`/api/threads/${id}/stop`, { method: "POST", token: owner })).status).toBe(200)],
      ["completed", async (owner: string, id: string) => expect((await post(owner, id, status("completed", { reason: "done" }))).status).toBe(201)],
      ["orphaned", async (owner: string, id: string) => expect((await post(owner, id, status("pi_session_orphaned", { reason: "silent" }))).status).toBe(201)],
    ] as const) {
      const { owner, t, token } = await runningThread("house-rtw-ended", `run-${how}`);
      await end(owner, t.id);
      expect((await row(owner, t.id)).status, how).not.toBe("running");
      const r = await post(token, t.id, chat(`written after the run was ${how}`));
      expect(r.status, how).toBe(403);
      expect(await errorCode(r), how).toBe("run_ended");
      expect(await viaStream(token, t.id, chat(`streamed after the run was ${how}`)), how).toEqual({ status: 403, code: "run_ended" });
      const texts = (await readAll(owner, t.id)).entries.filter((e) => e.payload.type === "chat").map((e) => e.payload.text);
      expect(texts, how).toEqual(["the task"]);
    }
  });

  it("cannot claim anything: not its thread again, nor a run that never was (the start of a run from outside is its first write only)", async () => {
    const { owner, t, token } = await runningThread("house-rtw-claim", "run-once");
    expect((await post(owner, t.id, status("completed", { reason: "done" }))).status).toBe(201);
    // Its own claim again is the entry already on the thread: a duplicate, which starts nothing.
    const again = await post(token, t.id, { id: "claim:run-once", ...status("running", { runId: "run-once" }) });
    expect(again.status).toBe(201);
    expect(((await again.json()) as { entries: { duplicate: boolean }[] }).entries[0].duplicate).toBe(true);
    expect((await row(owner, t.id)).status).toBe("completed");
    // A run token for a run that has not run, while another run is on, starts nothing and says nothing.
    const next = await runningThread("house-rtw-claim", "run-on");
    const stranger = await runToken("house-rtw-claim", next.t.id, "run-never");
    const start = await post(stranger, next.t.id, [
      { id: "prompt:run-never", payload: { type: "chat", text: "me too", origin: "task", runId: "run-never" } },
      { id: "claim:run-never", ...status("running", { runId: "run-never" }) },
    ]);
    expect([start.status, await errorCode(start)]).toEqual([403, "run_ended"]);
  });

  it("still lands what its box owes the thread: the mirror's last entries, live output, delivery marks, stderr, artifacts and its own finished-signal", async () => {
    const { owner, t, token } = await runningThread("house-rtw-late", "run-late");
    // While it runs: a tool call whose live output comes late.
    expect((await post(token, t.id, [
      chat("a chat while the run is on"),
      { id: `${t.id}:m:s1:0`, payload: { type: "pi.tool_call", toolCallId: "call-1", name: "bash", args: { command: "make" } } },
    ])).status).toBe(201);
    // The alarm settled the run as orphaned while the box was only slow; then its writers flush.
    expect((await post(owner, t.id, status("pi_session_orphaned", { reason: "silent", runId: "run-late" }))).status).toBe(201);
    const url = `${BASE}/api/stream/thread-${t.id}`;
    const logged: string[] = [];
    const w = new StreamWriter({ url, token, producerId: "mirror-late", fetchImpl: selfFetch, baseDelayMs: 10, log: (m) => logged.push(m) });
    w.append(
      { id: `${t.id}:m:s1:1`, payload: { type: "pi.tool_result", toolCallId: "call-1", output: "ok" } },
      { id: `${t.id}:live:p:0`, payload: { type: "signal.exec.output", execId: "call-1", stream: "stdout", text: "ok\n" } },
      { id: `${t.id}:m:s1:2`, payload: { type: "pi.assistant", text: "done", stopReason: "stop" } },
      { id: `${t.id}:delivered:run-late:x`, payload: { type: "signal.run.message_delivered", runId: "run-late", entryId: "x", mode: "steer" } },
      { id: `${t.id}:artifacts:run-late:files`, payload: { type: "artifact.files", runId: "run-late", files: [], truncated: false } },
      { id: `${t.id}:stderr:run-late`, payload: { type: "signal.run.stderr", runId: "run-late", text: "bye", truncated: false } },
      { id: `${t.id}:finished:run-late`, ...status("completed", { runId: "run-late", reason: "done" }) },
    );
    expect(await w.flush(10_000)).toBe(true);
    expect([w.dropped, logged]).toEqual([0, []]);
    // A heartbeat is taken too (the runner beats until it ends), and changes nothing.
    expect(await viaStream(token, t.id, { payload: { type: "signal.heartbeat" } })).toEqual({ status: 204, code: "" });
    const ids = (await readAll(owner, t.id)).entries.map((e) => e.id);
    for (const id of [`${t.id}:m:s1:1`, `${t.id}:live:p:0`, `${t.id}:m:s1:2`, `${t.id}:delivered:run-late:x`, `${t.id}:artifacts:run-late:files`, `${t.id}:stderr:run-late`, `${t.id}:finished:run-late`]) {
      expect(ids).toContain(id);
    }
    // The run stays as the thread settled it: its late end changes nothing.
    const r = await row(owner, t.id);
    expect([r.status, r.reason]).toEqual(["failed", "pi_session_orphaned"]);
  });

  it("gets its success again for a write taken while the run was on (a retry whose answer was lost)", async () => {
    const { owner, t, token } = await runningThread("house-rtw-retry", "run-retry");
    const producer = { id: "mirror-retry", seq: 0 };
    // A producer's entries need no ids: its headers make the POST idempotent.
    const batch = [{ id: `${t.id}:m:s:0`, payload: { type: "pi.assistant", text: "hi", stopReason: "stop" } }, chat("a chat from the box", "box-chat-1"), chat("a chat without an id")];
    expect(await viaStream(token, t.id, batch, producer)).toEqual({ status: 200, code: "" });
    const rest = await post(token, t.id, chat("a chat by REST", "box-chat-2"));
    expect(rest.status).toBe(201);
    expect((await call(`/api/threads/${t.id}/stop`, { method: "POST", token: owner })).status).toBe(200);
    // The same POST again (same producer, epoch and seq): acknowledged as the duplicate it is.
    expect(await viaStream(token, t.id, batch, producer)).toEqual({ status: 204, code: "" });
    // The same entry by REST again: answered with the entry already there.
    const again = await post(token, t.id, chat("a chat by REST", "box-chat-2"));
    expect(again.status).toBe(201);
    expect(((await again.json()) as { entries: { id: string; duplicate: boolean }[] }).entries).toEqual([expect.objectContaining({ id: "box-chat-2", duplicate: true })]);
    // A new chat from that producer is not a retry.
    expect(await viaStream(token, t.id, [chat("a new one", "box-chat-3")], { id: "mirror-retry", seq: 1 })).toEqual({ status: 403, code: "run_ended" });
    const chats = (await readAll(owner, t.id)).entries.filter((e) => e.payload.type === "chat").map((e) => e.payload.text);
    expect(chats).toEqual(["the task", "a chat from the box", "a chat without an id", "a chat by REST"]);
  });
});

describe("a run's token while its run is on", () => {
  it("writes chat and pi entries as before", async () => {
    const { owner, t, token } = await runningThread("house-rtw-live", "run-live");
    expect((await post(token, t.id, [chat("from the box"), { payload: { type: "pi.assistant", text: "working", stopReason: "stop" } }])).status).toBe(201);
    expect(await viaStream(token, t.id, [chat("streamed from the box")])).toEqual({ status: 204, code: "" });
    const types = (await readAll(owner, t.id)).entries.map((e) => e.payload.type);
    expect(types.filter((x) => x === "chat")).toHaveLength(3);
    expect(types).toContain("pi.assistant");
  });
});

describe("a resumed thread", () => {
  it("the previous run's token cannot write as the thread's new run, nor post a chat into it; the new run's token can", async () => {
    const { owner, t, token: first } = await runningThread("house-rtw-resume", "run-1");
    expect((await call(`/api/threads/${t.id}/stop`, { method: "POST", token: owner })).status).toBe(200);
    // The resume: a new run, with a token minted for it.
    const second = await runToken("house-rtw-resume", t.id, "run-2");
    expect((await post(owner, t.id, status("running", { runId: "run-2" }))).status).toBe(201);
    expect((await row(owner, t.id)).runId).toBe("run-2");
    const chatByFirst = await post(first, t.id, chat("from the stopped run's box"));
    expect([chatByFirst.status, await errorCode(chatByFirst)]).toEqual([403, "run_ended"]);
    // Its status changes name its own run only; the new run's end is not its to write.
    const endSecond = await post(first, t.id, status("completed", { runId: "run-2", reason: "done" }));
    expect([endSecond.status, await errorCode(endSecond)]).toEqual([403, "forbidden"]);
    expect((await post(first, t.id, { id: `${t.id}:finished:run-2`, ...status("completed", { runId: "run-1", reason: "done" }) })).status).toBe(403);
    expect((await row(owner, t.id)).status).toBe("running");
    expect((await post(second, t.id, chat("from the new run's box"))).status).toBe(201);
  });

  it("the previous run's heartbeats do not keep the new run alive", async () => {
    const { owner, t, token: first } = await runningThread("house-rtw-beat", "run-1");
    expect((await call(`/api/threads/${t.id}/stop`, { method: "POST", token: owner })).status).toBe(200);
    expect((await post(owner, t.id, status("running", { runId: "run-2" }))).status).toBe(201);
    const stub = threadStub(t.id);
    // The new run says nothing; the old run's box beats on, through both write paths.
    for (let i = 0; i < 8; i++) {
      await runInDurableObject(stub, (a: ThreadActor) => { a.advanceClock(60_000); });
      expect((await post(first, t.id, { payload: { type: "signal.heartbeat" } })).status).toBe(201);
      expect((await viaStream(first, t.id, { payload: { type: "signal.heartbeat" } })).status).toBe(204);
      expect((await post(first, t.id, { payload: { type: "pi.assistant", text: `late ${i}`, stopReason: "stop" } })).status).toBe(201);
      await runDurableObjectAlarm(stub);
    }
    const r = await row(owner, t.id);
    expect([r.status, r.reason]).toEqual(["failed", "pi_session_orphaned"]);
  });
});
