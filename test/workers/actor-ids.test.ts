import { describe, expect, it } from "vitest";
import { env } from "cloudflare:test";
import { ID_CACHE_NAMES, idFor } from "../../src/actors/stubs";
import { call, createThread, houseToken } from "./helpers";

const E = env as unknown as { THREADS: DurableObjectNamespace; HOUSES: DurableObjectNamespace };

describe("actor ids kept between requests", () => {
  it("a name keeps its id, the id idFromName gives, per namespace", () => {
    const name = `thread:ids-${crypto.randomUUID()}`;
    const first = idFor(E.THREADS, name);
    expect(idFor(E.THREADS, name)).toBe(first);
    expect(first.equals(E.THREADS.idFromName(name))).toBe(true);
    // The same name in another namespace is another actor.
    expect(idFor(E.HOUSES, name).equals(E.HOUSES.idFromName(name))).toBe(true);
    expect(idFor(E.HOUSES, name)).not.toBe(first);
  });

  it("holds at most ID_CACHE_NAMES names: the oldest is computed again, to the same id", () => {
    const oldest = `thread:oldest-${crypto.randomUUID()}`;
    const kept = idFor(E.THREADS, oldest);
    for (let i = 0; i < ID_CACHE_NAMES; i++) idFor(E.THREADS, `thread:filler-${i}-${crypto.randomUUID()}`);
    const again = idFor(E.THREADS, oldest);
    expect(again).not.toBe(kept);
    expect(again.equals(kept)).toBe(true);
  });

  it("a thread reached through kept ids, over many requests, is the same thread", async () => {
    const token = await houseToken("house-ids");
    const t = await createThread(token);
    for (let i = 0; i < 3; i++) {
      const r = await call(`/api/stream/thread-${t.id}`, { method: "POST", token, json: { payload: { type: "chat", text: `m${i}` } } });
      expect(r.status).toBe(204);
    }
    const read = await call(`/api/stream/thread-${t.id}?offset=-1`, { token });
    const entries = (await read.json()) as { payload: { text?: string } }[];
    expect(entries.map((e) => e.payload.text).filter(Boolean)).toEqual(["m0", "m1", "m2"]);
  });
});
