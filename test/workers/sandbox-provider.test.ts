// DaytonaProvider inside workerd (the runtime the Durable Objects use), talking to the local
// sandbox host over loopback through the real SDK in polling mode.
import { env } from "cloudflare:test";
import { describe, expect, inject, it } from "vitest";
import { createDaytonaProvider } from "../../src/sandbox/daytona-provider";
import { LABEL_HOUSE } from "../../src/sandbox/provider";
import { call, errorCode, houseToken } from "./helpers";

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

describe("POST /api/sandboxes with an Idempotency-Key, against the local host", () => {
  it("a retry with the same key answers the box the first request made; the host holds one box; the same key with another body is 409", async () => {
    const house = `wh-idem-${crypto.randomUUID().slice(0, 8)}`;
    const token = await houseToken(house);
    const create = (key: string, body: unknown = { ephemeral: false }) =>
      call("/api/sandboxes", { method: "POST", token, json: body, headers: { "idempotency-key": key } });
    const first = await create("box-once");
    expect(first.status).toBe(201);
    const box = (await first.json()) as { id: string; providerRef: string };
    const retry = await create("box-once");
    expect(retry.status).toBe(200);
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(retry.headers.get("location")).toBe(`/api/sandboxes/${box.id}`);
    expect(((await retry.json()) as { id: string; providerRef: string })).toMatchObject({ id: box.id, providerRef: box.providerRef });
    const atHost = async () => (await provider().list({ [LABEL_HOUSE]: house })).map((b) => b.ref);
    expect(await atHost()).toEqual([box.providerRef]);
    // The same key with another body is refused, and makes nothing.
    const other = await create("box-once", { ephemeral: true });
    expect(other.status).toBe(409);
    expect(await errorCode(other)).toBe("conflict");
    // Another key is another box; no key, a box each time.
    const second = await create("box-twice");
    expect(second.status).toBe(201);
    expect(((await second.json()) as { id: string }).id).not.toBe(box.id);
    const listed = (await (await call("/api/sandboxes", { token })).json()) as { sandboxes: { id: string }[] };
    expect(listed.sandboxes).toHaveLength(2);
    expect(await atHost()).toHaveLength(2);
    for (const b of listed.sandboxes) expect((await call(`/api/sandboxes/${b.id}`, { method: "DELETE", token })).status).toBe(200);
  });
});

