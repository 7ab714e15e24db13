import { describe, expect, it } from "vitest";
import { call, createThread, errorCode, houseToken, post, runToken, streamToken } from "./helpers";

const files = (runId: string, threadId: string) => ({
  id: `${threadId}:artifacts:${runId}:files`,
  payload: { type: "artifact.files", runId, files: [{ path: "hello.txt", status: "added", size: 3, binary: false, content: "hi\n" }], truncated: false },
});

describe("GET /api/threads/:id/artifacts", () => {
  it("lists a run's artifact entries, newest first, filtered by run", async () => {
    const token = await houseToken("house-art-1");
    const t = await createThread(token, {});
    expect((await post(await runToken("house-art-1", t.id, "run1"), t.id, files("run1", t.id))).status).toBe(201);
    expect((await post(await runToken("house-art-1", t.id, "run2"), t.id, files("run2", t.id))).status).toBe(201);
    // An entry of another type cannot take a run's artifact ids.
    expect((await post(token, t.id, { id: `${t.id}:artifacts:run3:files`, payload: { type: "chat", text: "not an artifact" } })).status).toBe(403);

    const all = await call(`/api/threads/${t.id}/artifacts`, { token });
    expect(all.status).toBe(200);
    const body = (await all.json()) as { artifacts: { payload: { runId: string; files: { content: string }[] } }[] };
    expect(body.artifacts.map((a) => a.payload.runId)).toEqual(["run2", "run1"]);
    expect(body.artifacts[0].payload.files[0].content).toBe("hi\n");

    const one = (await (await call(`/api/threads/${t.id}/artifacts?runId=run1`, { token })).json()) as typeof body;
    expect(one.artifacts.map((a) => a.payload.runId)).toEqual(["run1"]);
    const limited = (await (await call(`/api/threads/${t.id}/artifacts?limit=1`, { token })).json()) as typeof body;
    expect(limited.artifacts).toHaveLength(1);
  });

  it("pages past the limit: before=<offset of the last artifact you got> lists the older ones, until none are left", async () => {
    const house = "house-art-pages";
    const token = await houseToken(house);
    const t = await createThread(token, {});
    // One run's box posts 250 artifacts, more than one page holds (limit at most 200).
    const run = await runToken(house, t.id, "runP");
    expect((await post(run, t.id, { id: "claim:runP", payload: { type: "signal.thread.status_changed", status: "running", runId: "runP" } })).status).toBe(201);
    const many = Array.from({ length: 250 }, (_, i) => ({
      id: `${t.id}:artifacts:runP:files-${String(i).padStart(3, "0")}`,
      payload: { type: "artifact.files", runId: "runP", files: [{ path: `f${i}.txt`, status: "added", size: 1, binary: false, content: "x" }], truncated: false },
    }));
    expect((await post(run, t.id, many)).status).toBe(201);
    type Page = { artifacts: { id: string; offset: string }[] };
    const seen: string[] = [];
    let before: string | undefined;
    for (let pages = 0; pages < 10; pages++) {
      const r = await call(`/api/threads/${t.id}/artifacts?runId=runP&limit=200${before ? `&before=${before}` : ""}`, { token });
      expect(r.status).toBe(200);
      const page = (await r.json()) as Page;
      if (page.artifacts.length === 0) break;
      seen.push(...page.artifacts.map((a) => a.id));
      before = page.artifacts[page.artifacts.length - 1].offset;
    }
    expect(seen).toEqual(many.map((m) => m.id).reverse());
    // Without a runId too, and a cursor that is no offset is a 400.
    const first = (await (await call(`/api/threads/${t.id}/artifacts?limit=200`, { token })).json()) as Page;
    const rest = (await (await call(`/api/threads/${t.id}/artifacts?limit=200&before=${first.artifacts[199].offset}`, { token })).json()) as Page;
    expect([...first.artifacts, ...rest.artifacts].map((a) => a.id)).toEqual(many.map((m) => m.id).reverse());
    const bad = await call(`/api/threads/${t.id}/artifacts?before=yesterday`, { token });
    expect(bad.status).toBe(400);
    expect(await errorCode(bad)).toBe("invalid_offset");
  });

  it("a runId the thread has no run of is a 404; a run that left nothing is an empty list", async () => {
    const house = "house-art-norun";
    const token = await houseToken(house);
    const t = await createThread(token, {});
    const bogus = await call(`/api/threads/${t.id}/artifacts?runId=bogus`, { token });
    expect(bogus.status).toBe(404);
    expect(((await bogus.json()) as { error: { code: string; message: string } }).error).toEqual({ code: "not_found", message: "no run bogus on this thread" });
    // A run's box claims its run under claim:<runId>, as every run starts.
    const claim = { id: "claim:run7", payload: { type: "signal.thread.status_changed", status: "running", runId: "run7" } };
    expect((await post(await runToken(house, t.id, "run7"), t.id, claim)).status).toBe(201);
    const none = await call(`/api/threads/${t.id}/artifacts?runId=run7`, { token });
    expect(none.status).toBe(200);
    expect(await none.json()).toEqual({ artifacts: [] });
  });

  it("filters by a real run id (a UUID) on a real thread id: no pattern too long for the runtime's SQLite", async () => {
    const token = await houseToken("house-art-uuid");
    const t = await createThread(token, {});
    const runA = crypto.randomUUID();
    const runB = crypto.randomUUID();
    expect((await post(await runToken("house-art-uuid", t.id, runA), t.id, files(runA, t.id))).status).toBe(201);
    expect((await post(await runToken("house-art-uuid", t.id, runB), t.id, files(runB, t.id))).status).toBe(201);
    const r = await call(`/api/threads/${t.id}/artifacts?runId=${runA}`, { token });
    expect(r.status).toBe(200);
    expect(((await r.json()) as { artifacts: { payload: { runId: string } }[] }).artifacts.map((a) => a.payload.runId)).toEqual([runA]);
  });

  it("only the run's own box writes its artifacts: nobody can add to them or take their ids first", async () => {
    const house = "house-art-forge";
    const token = await houseToken(house, "alice", "admin");
    const t = await createThread(token, {});
    const forged = { id: `${t.id}:artifacts:run1:files`, payload: { type: "artifact.files", runId: "run1", files: [{ path: "FORGED.txt", status: "added", size: 1, binary: false, content: "x" }], truncated: false } };
    const writers = [token, await streamToken(house, t.id), await runToken(house, t.id, "run2")];
    for (const w of writers) {
      const r = await post(w, t.id, forged);
      expect(r.status).toBe(403);
      expect(await errorCode(r)).toBe("forbidden");
      // Nor under the run's id with another type, which would make the real entry a duplicate.
      expect((await post(w, t.id, { id: forged.id, payload: { type: "chat", text: "first!" } })).status).toBe(403);
    }
    // The run's own box posts them on the stream protocol's path, as the runner does.
    const runnerPost = await call(`/api/stream/thread-${t.id}`, {
      method: "POST", token: await runToken(house, t.id, "run9"), json: [files("run9", t.id)],
      headers: { "Producer-Id": "runner-run9", "Producer-Epoch": "0", "Producer-Seq": "0" },
    });
    expect(runnerPost.status).toBe(200);
    await runnerPost.body?.cancel();
    // That path refuses the others alike.
    const viaStream = await call(`/api/stream/thread-${t.id}`, { method: "POST", token: await streamToken(house, t.id), json: forged });
    expect(viaStream.status).toBe(403);
    await viaStream.body?.cancel();
    expect((await post(await runToken(house, t.id, "run1"), t.id, files("run1", t.id))).status).toBe(201);
    const listed = (await (await call(`/api/threads/${t.id}/artifacts`, { token })).json()) as { artifacts: { payload: { files: { path: string }[] } }[] };
    expect(listed.artifacts.map((a) => a.payload.files[0]!.path)).toEqual(["hello.txt", "hello.txt"]);
  });

  it("refuses bad queries with 400 and needs a token", async () => {
    const token = await houseToken("house-art-2");
    const t = await createThread(token, {});
    for (const q of ["limit=0", "limit=abc", "limit=201", "runId=%20x", "color=red", "limit=1&limit=2"]) {
      const r = await call(`/api/threads/${t.id}/artifacts?${q}`, { token });
      expect(r.status, q).toBe(400);
    }
    expect((await call(`/api/threads/${t.id}/artifacts`)).status).toBe(401);
    expect((await call(`/api/threads/th_nope/artifacts`, { token })).status).toBe(404);
  });
});

describe("a run's artifact streams", () => {
  it("a run's stream token writes its thread's artifact stream, and nothing else", async () => {
    const token = await houseToken("house-art-3");
    const t = await createThread(token, {});
    const other = await createThread(token, {});
    const st = await runToken("house-art-3", t.id, "run1");
    const name = `thread-${t.id}/artifacts/run1/diff`;
    const put = await call(`/api/stream/${name}`, { method: "PUT", token: st, headers: { "content-type": "text/plain" } });
    expect(put.status).toBe(201);
    expect((await call(`/api/stream/${name}`, { method: "POST", token: st, headers: { "content-type": "text/plain" }, body: "diff --git a b\n" })).status).toBe(204);
    // The house reads it as one of its plain streams.
    const read = await call(`/api/stream/${name}?offset=-1`, { token });
    expect(read.status).toBe(200);
    expect(await read.text()).toBe("diff --git a b\n");

    const denied = [
      `thread-${other.id}/artifacts/run1/diff`, // another thread's artifacts
      "payroll", // any other plain stream
      `thread-${t.id}/notes`, // not under artifacts/
      `thread-${t.id}/artifacts/run2/diff`, // another run's artifacts
    ];
    for (const n of denied) {
      const r = await call(`/api/stream/${n}`, { method: "PUT", token: st, headers: { "content-type": "text/plain" } });
      expect(r.status, n).toBe(403);
    }
    const fork = await call(`/api/stream/thread-${t.id}/artifacts/run2/diff`, { method: "PUT", token: st, headers: { "content-type": "text/plain", "Stream-Forked-From": "/api/stream/payroll" } });
    expect(fork.status).toBe(403);
    // Neither a house token nor a thread token that names no run writes there.
    for (const w of [token, await streamToken("house-art-3", t.id)]) {
      const r = await call(`/api/stream/${name}`, { method: "POST", token: w, headers: { "content-type": "text/plain" }, body: "forged\n" });
      expect(r.status).toBe(403);
      await r.body?.cancel();
    }
    expect(await (await call(`/api/stream/${name}?offset=-1`, { token })).text()).toBe("diff --git a b\n");
  });
});
