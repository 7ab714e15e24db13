import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { WaitHub } from "../../src/streams/wait-hub";

// Parked long-polls and SSE loops: every one ends exactly once, by a change, its own timeout or
// its client going away, and none is left behind in the hub.
describe("WaitHub", () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it("wakes every waiter on a change and leaves none parked", async () => {
    const hub = new WaitHub();
    const all = [hub.wait(1000), hub.wait(1000), hub.wait(1000)];
    expect(hub.size).toBe(3);
    hub.notify();
    expect(await Promise.all(all)).toEqual(["changed", "changed", "changed"]);
    expect(hub.size).toBe(0);
  });

  it("times each waiter out at its own deadline, not before", async () => {
    const hub = new WaitHub();
    const ended: string[] = [];
    void hub.wait(1000).then((r) => ended.push(`a:${r}`));
    await vi.advanceTimersByTimeAsync(400);
    void hub.wait(1000).then((r) => ended.push(`b:${r}`));
    void hub.wait(300).then((r) => ended.push(`c:${r}`));
    await vi.advanceTimersByTimeAsync(299);
    expect(ended).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(ended).toEqual(["c:timeout"]);
    await vi.advanceTimersByTimeAsync(300);
    expect(ended).toEqual(["c:timeout", "a:timeout"]);
    await vi.advanceTimersByTimeAsync(399);
    expect(ended).toEqual(["c:timeout", "a:timeout"]);
    await vi.advanceTimersByTimeAsync(1);
    expect(ended).toEqual(["c:timeout", "a:timeout", "b:timeout"]);
    expect(hub.size).toBe(0);
  });

  it("still times out waiters that park after a change woke the others", async () => {
    const hub = new WaitHub();
    const first = hub.wait(1000);
    hub.notify();
    expect(await first).toBe("changed");
    const second = hub.wait(500);
    await vi.advanceTimersByTimeAsync(500);
    expect(await second).toBe("timeout");
    expect(vi.getTimerCount()).toBe(0);
  });

  it("releases a waiter whose client went away, once, without waking the others", async () => {
    const hub = new WaitHub();
    const gone = new AbortController();
    const left = hub.wait(1000, gone.signal);
    const stays = hub.wait(1000);
    gone.abort();
    expect(await left).toBe("timeout");
    expect(hub.size).toBe(1);
    hub.notify();
    expect(await stays).toBe("changed");
    expect(hub.size).toBe(0);
  });

  it("shares one computation among the waiters of a change, and starts afresh after the next", () => {
    const hub = new WaitHub();
    let computed = 0;
    const page = () => hub.shared("page:1", () => ++computed);
    expect([page(), page(), page()]).toEqual([1, 1, 1]);
    hub.notify();
    expect(page()).toBe(2);
  });
});
