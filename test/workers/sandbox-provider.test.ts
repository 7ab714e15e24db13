// DaytonaProvider inside workerd (the runtime the Durable Objects use), talking to the local
// sandbox host over loopback through the real SDK in polling mode.
import { env } from "cloudflare:test";
import { describe, expect, inject, it } from "vitest";
import { createDaytonaProvider } from "../../src/sandbox/daytona-provider";
import { LABEL_HOUSE } from "../../src/sandbox/provider";

const bindings = env as unknown as { DAYTONA_API_URL: string; DAYTONA_API_KEY: string; DAYTONA_TARGET?: string };
const provider = () => createDaytonaProvider({ apiUrl: bindings.DAYTONA_API_URL, apiKey: bindings.DAYTONA_API_KEY, target: bindings.DAYTONA_TARGET });

describe("DaytonaProvider in workerd against the local host", () => {
  it("reads the host from worker bindings", () => {
    expect(bindings.DAYTONA_API_URL).toBe(inject("sandboxHostApiUrl"));
  });

  it("create -> exec -> upload/download -> clone -> live detached logs -> list -> delete -> 404", async () => {
    const p = provider();
    const house = `wh-${crypto.randomUUID()}`;
    const box = await p.create({ labels: { house, thread: "t" }, ephemeral: true, env: { FROM_WORKER: "yes" } });
    expect(box.state).toBe("started");

    expect(await p.exec(box.ref, "echo $FROM_WORKER; echo err >&2; exit 2")).toEqual({ exitCode: 2, output: "yes\nerr\n" });

    const bytes = new Uint8Array([9, 8, 7, 0, 255]);
    await p.upload(box.ref, [
      { path: "w/bytes.bin", content: bytes },
      { path: "w/t.txt", content: "text" },
    ]);
    expect([...(await p.download(box.ref, "w/bytes.bin"))]).toEqual([...bytes]);

    await p.clone(box.ref, { url: `file://${inject("sandboxHostRepoPath")}`, path: "repo" });
    expect((await p.exec(box.ref, "cat repo/hello.txt")).output).toBe("from the repo\n");

    const h = await p.startDetached(box.ref, "for i in 1 2 3; do echo o$i; echo e$i >&2; sleep 0.1; done");
    const out: string[] = [];
    const err: string[] = [];
    await p.followDetached(h, { onStdout: (s) => out.push(s), onStderr: (s) => err.push(s) });
    expect(out.join("")).toBe("o1\no2\no3\n");
    expect(err.join("")).toBe("e1\ne2\ne3\n");
    expect(await p.detachedStatus(h)).toEqual({ running: false, exitCode: 0 });

    expect((await p.list({ [LABEL_HOUSE]: house })).map((b) => b.ref)).toEqual([box.ref]);
    await p.delete(box.ref, { wait: true });
    await expect(p.get(box.ref)).rejects.toMatchObject({ code: "not_found" });
    expect(await p.probe(box.ref)).toBe("dead");
    await p.delete(box.ref); // idempotent
  });

  it("probe: out-of-band delete -> dead; host down -> unknown", async () => {
    const p = provider();
    const box = await p.create({ labels: { house: "wh-faults" }, ephemeral: true });
    expect(await p.probe(box.ref)).toBe("live");
    await createDaytonaProvider({ apiUrl: bindings.DAYTONA_API_URL, apiKey: bindings.DAYTONA_API_KEY }).delete(box.ref, { wait: true });
    expect(await p.probe(box.ref)).toBe("dead");

    const down = createDaytonaProvider({ apiUrl: inject("sandboxHostDeadApiUrl"), apiKey: "k", requestTimeoutMs: 3000 });
    expect(await down.probe(box.ref)).toBe("unknown");
  });
});
