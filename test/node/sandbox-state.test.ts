// Pure rules (liveness, error mapping, auto-stop) and the in-memory test provider.
import { describe, expect, it } from "vitest";
import { toProviderError } from "../../src/sandbox/errors";
import { autoStopMinutes, classifySandboxState, LABEL_HOUSE, ProviderError } from "../../src/sandbox/provider";
import { TestSandboxProvider } from "../../src/sandbox/test-provider";

describe("classifySandboxState", () => {
  it.each([
    [null, "dead"],
    [undefined, "dead"],
    [{ state: "destroyed" }, "dead"],
    [{ state: "destroying" }, "dead"],
    [{ state: "error" }, "dead"],
    [{ state: "error", recoverable: false }, "dead"],
    [{ state: "build_failed" }, "dead"],
    [{ state: "error", recoverable: true }, "unknown"],
    [{ state: "build_failed", recoverable: true }, "unknown"],
    [{ state: "started" }, "live"],
    [{ state: "stopped" }, "live"],
    [{ state: "archived" }, "live"],
    [{ state: "creating" }, "live"],
    [{ state: "STARTED" }, "live"],
    [{ state: "unknown" }, "unknown"],
    [{ state: "something_new" }, "unknown"],
    [{}, "unknown"],
  ] as const)("%j -> %s", (dto, want) => {
    expect(classifySandboxState(dto as never)).toBe(want);
  });
});

describe("toProviderError", () => {
  it.each([
    [404, "not_found"],
    [410, "not_found"],
    [409, "conflict"],
    [401, "unauthorized"],
    [403, "unauthorized"],
    [400, "bad_request"],
    [422, "bad_request"],
    [408, "timeout"],
    [429, "unavailable"],
    [500, "unavailable"],
    [503, "unavailable"],
  ] as const)("status %i -> %s", (statusCode, code) => {
    const message = statusCode === 404 || statusCode === 410 ? "Sandbox with ID or name x not found" : "x";
    expect(toProviderError(Object.assign(new Error(message), { statusCode }), "op").code).toBe(code);
  });
  it("a 404 that names nothing missing (a wrong base URL's 'no route', a proxy's page) is unavailable, not gone", () => {
    for (const message of ["no route for GET /sandbox/abc", "Cannot GET /sandbox/abc", "<html>404</html>", "<html><head><title>404 Not Found</title></head></html>",
      "404 Not Found", "Not Found", "Route GET:/sandbox/abc not found", "Request failed with status code 404"]) {
      const e = toProviderError(Object.assign(new Error(message), { statusCode: 404 }), "get sandbox");
      expect(e.code, message).toBe("unavailable");
      expect(e.message).toContain("DAYTONA_API_URL");
    }
    for (const message of ["Sandbox with ID or name abc not found", "file a/none not found", "session tb-run-1 not found", "Volume with name v1 not found"]) {
      expect(toProviderError(Object.assign(new Error(message), { statusCode: 404 }), "op").code, message).toBe("not_found");
    }
  });
  it("a 404 whose daemon code names the missing thing (GIT_REPO_NOT_FOUND, FILE_NOT_FOUND, ...) is not_found, whatever its message", () => {
    for (const code of ["GIT_REPO_NOT_FOUND", "GIT_BRANCH_NOT_FOUND", "FILE_NOT_FOUND", "PROCESS_NOT_FOUND"]) {
      const e = toProviderError(Object.assign(new Error("git clone failed: fatal: '/x' does not appear to be a git repository"), { statusCode: 404, code }), "clone");
      expect(e.code, code).toBe("not_found");
      expect(e.message).not.toContain("DAYTONA_API_URL");
    }
    // The generic code says nothing more than the status: still ambiguous.
    expect(toProviderError(Object.assign(new Error("Not Found"), { statusCode: 404, code: "NOT_FOUND" }), "op").code).toBe("unavailable");
  });
  it("network errors are unavailable, timeouts are timeout", () => {
    expect(toProviderError(new TypeError("fetch failed"), "op").code).toBe("unavailable");
    expect(toProviderError(new Error("connect ECONNREFUSED 127.0.0.1:1"), "op").code).toBe("unavailable");
    class DaytonaTimeoutError extends Error {}
    expect(toProviderError(new DaytonaTimeoutError("slow"), "op").code).toBe("timeout");
    const pe = new ProviderError("conflict", "c");
    expect(toProviderError(pe, "op")).toBe(pe);
  });
});

describe("autoStopMinutes", () => {
  it("clears the 3-day runaway guard and is never 0", () => {
    expect(autoStopMinutes()).toBe(3 * 24 * 60 + 60);
    expect(autoStopMinutes(0, 0)).toBe(1);
  });
});

describe("TestSandboxProvider", () => {
  it("supports kill, scripted probes, failing deletes and detached commands", async () => {
    const p = new TestSandboxProvider();
    const box = await p.create({ labels: { house: "h" }, ephemeral: true });
    expect(box.labels[LABEL_HOUSE]).toBe("h");
    expect(await p.probe(box.ref)).toBe("live");
    p.scriptProbe(box.ref, "unknown", "dead");
    expect(await p.probe(box.ref)).toBe("unknown");
    expect(await p.probe(box.ref)).toBe("dead");
    expect(await p.probe(box.ref)).toBe("live");

    p.execHandler = (_b, cmd) => ({ exitCode: cmd === "fail" ? 1 : 0, output: cmd });
    expect(await p.exec(box.ref, "fail")).toEqual({ exitCode: 1, output: "fail" });

    const h = await p.startDetached(box.ref, "runner");
    const out: string[] = [];
    const following = p.followDetached(h, { onStdout: (s) => out.push(s) });
    p.emitDetached(h, { stdout: "a" });
    p.finishDetached(h, 0);
    await following;
    expect(out).toEqual(["a"]);
    expect(await p.detachedStatus(h)).toEqual({ running: false, exitCode: 0 });

    p.failDeletes(2, "unavailable");
    await expect(p.delete(box.ref)).rejects.toMatchObject({ code: "unavailable" });
    await expect(p.delete(box.ref)).rejects.toMatchObject({ code: "unavailable" });
    await p.delete(box.ref);
    await p.delete(box.ref);
    expect(await p.probe(box.ref)).toBe("dead");
    await expect(p.get(box.ref)).rejects.toMatchObject({ code: "not_found" });

    const b2 = await p.create({ labels: { house: "h" }, ephemeral: false });
    p.kill(b2.ref);
    expect(await p.probe(b2.ref)).toBe("dead");
    p.setUnreachable(true);
    expect(await p.probe("any")).toBe("unknown");
    await expect(p.list({})).rejects.toMatchObject({ code: "unavailable" });
  });
});
