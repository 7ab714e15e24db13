import { describe, expect, it } from "vitest";
import { call, chat, createThread, houseToken, post, readAll } from "./helpers";
import { createAgent, decisions, MODEL_KEY, modelEnvironment, scriptedModel, waitForEntries } from "./dispatch-helpers";
import { sharedTestProvider } from "../../src/sandbox/providers";

const chatsBy = (es: { authorId?: string; payload: { type: string } }[], author: string) => es.filter((e) => e.payload.type === "chat" && e.authorId === author);

describe("dispatch: a bot's turn", () => {
  it("mention -> tool round persisted as pi.assistant + pi.tool_result, then one chat reply by the bot at depth 1", async () => {
    const token = await houseToken("house-turn-1");
    const model = await scriptedModel([
      { toolCalls: [{ id: "c1", name: "run_command", arguments: { command: "cat hello.txt" } }] },
      { text: "The file says hi." },
    ]);
    sharedTestProvider().execHandler = (_box, command) => ({ exitCode: 0, output: `ran: ${command}` });
    const envId = await modelEnvironment(token, model.baseUrl);
    const coder = await createAgent(token, { name: "Coder", handle: "coder", systemPrompt: "Be brief." });
    const thread = await createThread(token, { environmentId: envId });
    const r = await post(token, thread.id, chat("@coder what is in hello.txt?"));
    expect(r.status).toBe(201);

    const es = await waitForEntries(token, thread.id, (es) => chatsBy(es, coder.id).length === 1, "the reply");
    const turn = es.filter((e) => e.authorId === coder.id);
    expect(turn.map((e) => e.payload.type)).toEqual(["pi.assistant", "pi.tool_result", "pi.assistant", "chat"]);
    expect(turn.every((e) => e.payload.depth === 1)).toBe(true);
    expect(turn[0].payload.toolCalls).toEqual([{ id: "c1", name: "run_command", args: { command: "cat hello.txt" } }]);
    expect(turn[1].payload.output).toContain("ran: cat hello.txt");
    expect(turn[3].payload.text).toBe("The file says hi.");

    const reqs = await model.requests();
    expect(reqs).toHaveLength(2);
    expect(reqs[0].headers.authorization).toBe(`Bearer ${MODEL_KEY}`);
    expect(JSON.stringify(reqs[0].body.messages)).toContain("@coder what is in hello.txt?");
    expect(JSON.stringify(reqs[0].body.messages)).toContain("Be brief.");
    expect(reqs[0].body.tools.map((t: any) => t.function.name).sort()).toEqual(["create_agent", "create_thread", "delegate_task", "list_threads", "post_to_thread", "run_command"]);
    expect(JSON.stringify(reqs[1].body.messages)).toContain("ran: cat hello.txt");
    expect(JSON.stringify(es)).not.toContain(MODEL_KEY);

    const ds = await decisions(token, thread.id);
    expect(ds.find((d) => d.agentId === coder.id && d.reason === "mentioned")).toBeTruthy();
    // The reply is itself a trigger; its author does not answer itself.
    expect(ds.find((d) => d.agentId === coder.id && d.reason === "author")).toBeTruthy();
  });
});
