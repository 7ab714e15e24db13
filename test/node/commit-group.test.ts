import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { CommitGroup } from "../../src/streams/commit-group";

/** A body read the test finishes (or fails) when it wants. */
function pendingBody<T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { read: () => promise, resolve, reject };
}

// Appends arriving together must write in one turn (one commit), in the order their bodies came
// in; an append alone must not wait; a slow or failed read must never hold the others for long.
describe("CommitGroup", () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it("lets an append that is alone write at once, with no timer", async () => {
    const group = new CommitGroup(5);
    expect(await group.read(async () => "body")).toBe("body");
    expect(group.size).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("holds an append while another is still reading, then releases both in one turn, in arrival order", async () => {
    const group = new CommitGroup(1000);
    const a = pendingBody<string>();
    const b = pendingBody<string>();
    const c = pendingBody<string>();
    const wrote: string[] = [];
    const write = (p: Promise<string>) => p.then((body) => wrote.push(body));
    const all = [write(group.read(a.read)), write(group.read(b.read)), write(group.read(c.read))];
    b.resolve("b");
    a.resolve("a");
    await vi.advanceTimersByTimeAsync(0);
    expect(wrote).toEqual([]);
    expect(group.size).toBe(2);
    c.resolve("c");
    await Promise.all(all);
    expect(wrote).toEqual(["b", "a", "c"]);
    expect(group.size).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("never holds an append longer than the wait bound for a read that does not finish", async () => {
    const group = new CommitGroup(3);
    const slow = pendingBody<string>();
    const slowRead = group.read(slow.read);
    let done = false;
    const quick = group.read(async () => "quick").then((b) => {
      done = true;
      return b;
    });
    await vi.advanceTimersByTimeAsync(2);
    expect(done).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(await quick).toBe("quick");
    // The slow one, once in, is alone and writes at once.
    slow.resolve("slow");
    expect(await slowRead).toBe("slow");
    expect(vi.getTimerCount()).toBe(0);
  });

  it("releases the waiting appends when the last read fails, and passes the failure to its own caller only", async () => {
    const group = new CommitGroup(1000);
    const failing = pendingBody<string>();
    const failed = group.read(failing.read);
    const waiting = group.read(async () => "ok");
    await vi.advanceTimersByTimeAsync(0);
    expect(group.size).toBe(1);
    failing.reject(new Error("client went away"));
    await expect(failed).rejects.toThrow("client went away");
    expect(await waiting).toBe("ok");
    expect(group.size).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
  });
});
