import { describe, expect, it } from "vitest";
import { call, houseToken } from "./helpers";
import { tarArchive } from "../support/tar";

/** A 201's Location, fetched with the same token: the resource the POST created. */
async function follow(r: Response, token: string): Promise<Response> {
  expect(r.status).toBe(201);
  const location = r.headers.get("location");
  expect(location, `${r.url} answered 201 without a Location`).toBeTruthy();
  return call(location!, { token });
}

describe("a POST that creates a resource names it in Location", () => {
  it("threads, agents, environments, boxes and folder versions", async () => {
    const token = await houseToken("house-created-location");

    const thread = await call("/api/threads", { method: "POST", token, json: { title: "t" } });
    const { id: threadId } = (await thread.clone().json()) as { id: string };
    expect(((await (await follow(thread, token)).json()) as { id: string }).id).toBe(threadId);

    const agent = await call("/api/agents", { method: "POST", token, json: { name: "A", handle: "a", model: "local/m" } });
    const { id: agentId } = (await agent.clone().json()) as { id: string };
    expect(((await (await follow(agent, token)).json()) as { id: string }).id).toBe(agentId);

    // An id of the caller's may hold characters a path segment keeps as they are (`.`, `:`).
    const environment = await call("/api/environments", { method: "POST", token, json: { id: "team.env:1", name: "e", provider: "test" } });
    const gotEnvironment = await follow(environment, token);
    expect(gotEnvironment.status).toBe(200);
    expect(((await gotEnvironment.json()) as { id: string }).id).toBe("team.env:1");

    const box = await call("/api/sandboxes", { method: "POST", token, json: { provider: "test", ephemeral: false } });
    const { id: boxId } = (await box.clone().json()) as { id: string };
    const gotBox = await follow(box, token);
    expect(gotBox.status).toBe(200);
    expect(((await gotBox.json()) as { id: string }).id).toBe(boxId);

    await call("/api/environments/team.env:1/folders?name=notes", { method: "POST", token, body: tarArchive({ "a.txt": "one\n" }), headers: { "content-type": "application/x-tar" } });
    const v2 = tarArchive({ "a.txt": "two\n" });
    const folder = await call("/api/environments/team.env:1/folders?name=notes", { method: "POST", token, body: v2, headers: { "content-type": "application/x-tar" } });
    const gotFolder = await follow(folder, token);
    expect(gotFolder.status).toBe(200);
    expect(gotFolder.headers.get("folder-version")).toBe("2");
    expect(new Uint8Array(await gotFolder.arrayBuffer())).toEqual(v2);
  });
});
