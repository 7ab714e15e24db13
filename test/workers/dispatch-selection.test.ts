import { describe, expect, it } from "vitest";
import { afterGate, entryDepth, isTriggerable, mentionedHandles, selectResponders, type Candidate, type Trigger } from "../../src/dispatch/selection";
import { DEFAULT_DISPATCH_CONFIG, initialDispatchConfig, mergeDispatchConfig, MAX_DEPTH, type DispatchConfig } from "../../src/dispatch/config";

const coder: Candidate = { id: "ag_coder", handle: "coder", triggerMode: "mention" };
const helper: Candidate = { id: "ag_helper", handle: "helper", triggerMode: "always" };
const watcher: Candidate = { id: "ag_watch", handle: "watcher", triggerMode: "ambient" };
const NOW = 1_000_000;

function pick(trigger: Partial<Trigger>, agents: Candidate[], config: Partial<DispatchConfig> = {}, lastReplyAt: Record<string, number> = {}) {
  const t: Trigger = { entryId: "e1", authorId: "alice", text: "", depth: 0, ...trigger };
  const decisions = selectResponders({ trigger: t, agents, config: { ...DEFAULT_DISPATCH_CONFIG, ...config }, lastReplyAt, nowMs: NOW });
  return Object.fromEntries(decisions.map((d) => [d.agentId, d]));
}

describe("selection", () => {
  it("mention: a bot reacts to its @handle and not otherwise", () => {
    expect(pick({ text: "@coder write hello.txt" }, [coder]).ag_coder).toMatchObject({ verdict: "react", reason: "mentioned", depth: 1, runAt: NOW });
    expect(pick({ text: "hello coder" }, [coder]).ag_coder).toMatchObject({ verdict: "skip", reason: "not_mentioned" });
    expect(pick({ text: "mail me at bob@coder" }, [coder]).ag_coder.reason).toBe("not_mentioned");
    expect(pick({ text: "ping @coders" }, [coder]).ag_coder.reason).toBe("not_mentioned");
    expect(pick({ text: "(@coder)" }, [coder]).ag_coder.reason).toBe("mentioned");
    expect(pick({ text: "x", mentions: ["coder"] }, [coder]).ag_coder.reason).toBe("mentioned");
  });

  it("the author never reacts to itself, even when it mentions itself or is an always bot", () => {
    expect(pick({ authorId: "ag_helper", text: "@helper" }, [helper]).ag_helper).toMatchObject({ verdict: "skip", reason: "author" });
  });

  it("always: reacts without a mention, but not within the cooldown of its last reply", () => {
    expect(pick({ text: "hi" }, [helper]).ag_helper).toMatchObject({ verdict: "react", reason: "always" });
    expect(pick({ text: "hi" }, [helper], { cooldownMs: 10_000 }, { ag_helper: NOW - 5_000 }).ag_helper).toMatchObject({ verdict: "skip", reason: "cooldown" });
    expect(pick({ text: "hi" }, [helper], { cooldownMs: 10_000 }, { ag_helper: NOW - 10_000 }).ag_helper.reason).toBe("always");
  });

  it("ambient: waits ambientDelayMs after a person, not after a bot, then asks the gate", () => {
    expect(pick({ text: "anyone?" }, [watcher], { ambientDelayMs: 2_500 }).ag_watch).toMatchObject({ verdict: "gate", reason: "ambient_wait", runAt: NOW + 2_500 });
    const fromBot = pick({ authorId: "ag_helper", text: "done", depth: 1 }, [watcher, helper], { ambientDelayMs: 2_500 }).ag_watch;
    expect(fromBot).toMatchObject({ verdict: "gate", runAt: NOW, depth: 2 });
    expect(afterGate(fromBot, true)).toMatchObject({ verdict: "react", reason: "gated_yes" });
    expect(afterGate(fromBot, false)).toMatchObject({ verdict: "skip", reason: "gated_no" });
  });

  it("thread config overrides an agent's own trigger mode", () => {
    const cfg = mergeDispatchConfig(DEFAULT_DISPATCH_CONFIG, { perAgent: { ag_coder: { triggerMode: "always" } } });
    expect(pick({ text: "hi" }, [coder], cfg).ag_coder.reason).toBe("always");
    const back = mergeDispatchConfig(cfg, { perAgent: { ag_coder: null } });
    expect(pick({ text: "hi" }, [coder], back).ag_coder.reason).toBe("not_mentioned");
  });

  it("DM threads seed the agent as always, so it replies without a mention", () => {
    const dm = initialDispatchConfig({ kind: "agent", id: "ag_coder" });
    expect(dm!.perAgent).toEqual({ ag_coder: { triggerMode: "always" } });
    expect(pick({ text: "hey" }, [coder], dm!).ag_coder.reason).toBe("always");
    expect(initialDispatchConfig({ kind: "none", id: null })).toBeUndefined();
  });

  it("depth cap: nothing reacts to an entry at depth 8; depth 7 still gets a reply at depth 8", () => {
    expect(pick({ authorId: "ag_x", text: "@coder", depth: MAX_DEPTH }, [coder, helper]).ag_coder).toMatchObject({ verdict: "skip", reason: "depth_cap" });
    expect(pick({ authorId: "ag_x", text: "@coder", depth: MAX_DEPTH }, [coder, helper]).ag_helper.reason).toBe("depth_cap");
    expect(pick({ authorId: "ag_x", text: "@coder", depth: MAX_DEPTH - 1 }, [coder]).ag_coder).toMatchObject({ verdict: "react", depth: MAX_DEPTH });
  });

  it("width cap: at most widthCap bots react, mentioned ones first in the order named", () => {
    const bots: Candidate[] = Array.from({ length: 5 }, (_, i) => ({ id: `ag_${i}`, handle: `b${i}`, triggerMode: "always" as const }));
    const d = pick({ text: "@b4 and @b3 please" }, bots, { widthCap: 3 });
    expect(Object.values(d).filter((x) => x.verdict === "react").map((x) => x.agentId).sort()).toEqual(["ag_0", "ag_3", "ag_4"]);
    expect(["ag_1", "ag_2"].map((id) => d[id].reason)).toEqual(["width_cap", "width_cap"]);
    expect(Object.values(pick({ text: "@b1" }, bots, { widthCap: 0 })).every((x) => x.verdict === "skip")).toBe(true);
  });

  it("a bot's message wakes at most one bot it did not name, so always-bots do not fan out bots^depth turns; those it names still react", () => {
    const bots: Candidate[] = Array.from({ length: 4 }, (_, i) => ({ id: `ag_${i}`, handle: `b${i}`, triggerMode: "always" as const }));
    const fromBot = pick({ authorId: "ag_0", text: "my answer", depth: 1 }, bots, { widthCap: 3 });
    expect(Object.values(fromBot).filter((x) => x.verdict === "react").map((x) => x.agentId)).toEqual(["ag_1"]);
    expect(["ag_2", "ag_3"].map((id) => fromBot[id].reason)).toEqual(["width_cap", "width_cap"]);
    const naming = pick({ authorId: "ag_0", text: "@b2 @b3 what do you think?", depth: 1 }, bots, { widthCap: 3 });
    expect(Object.values(naming).filter((x) => x.verdict === "react").map((x) => x.agentId).sort()).toEqual(["ag_1", "ag_2", "ag_3"]);
    // A person's message is not limited this way.
    expect(Object.values(pick({ text: "hello all" }, bots, { widthCap: 3 })).filter((x) => x.verdict === "react")).toHaveLength(3);
  });

  it("dispatch:false chats (child_finished notifications) never trigger", () => {
    expect(isTriggerable({ type: "chat", dispatch: false })).toBe(false);
    expect(isTriggerable({ type: "chat" })).toBe(true);
    expect(isTriggerable({ type: "pi.assistant" })).toBe(false);
    expect(pick({ text: "@coder", dispatch: false }, [coder, helper])).toEqual({});
  });

  it("depth from an entry: only non-negative integers count, capped", () => {
    expect([entryDepth({}), entryDepth({ depth: 3 }), entryDepth({ depth: -1 }), entryDepth({ depth: "5" }), entryDepth({ depth: 99 })]).toEqual([0, 3, 0, 0, MAX_DEPTH]);
    expect([...mentionedHandles("@a, @b-c and @a")]).toEqual(["a", "b-c"]);
  });

  it("a mention is a handle in any letter case, standing on its own, never inside a word or an address", () => {
    expect([...mentionedHandles("@Coder and @SB, hi")]).toEqual(["coder", "sb"]);
    expect([...mentionedHandles("mail x@coder.io or é@coder or ü@sb")]).toEqual([]);
    expect([...mentionedHandles("(@coder) «@sb»")]).toEqual(["coder", "sb"]);
    // A package scope or a path is no mention: "install @types/node" does not wake @types.
    expect([...mentionedHandles("npm i @types/node, see https://x.example/@coder or ./@sb/x")]).toEqual([]);
    expect([...mentionedHandles("@types: install @types/node")]).toEqual(["types"]);
    expect([...mentionedHandles("", ["SB", "ag_Ab12"])].sort()).toEqual(["SB", "ag_Ab12", "ag_ab12", "sb"].sort());
  });

  it("a mention in Markdown emphasis or followed by a dash counts: the underscores and the dash are punctuation", () => {
    expect([...mentionedHandles("_@coder_ please look")]).toEqual(["coder"]);
    expect([...mentionedHandles("__@coder__, *@sb*")]).toEqual(["coder", "sb"]);
    expect([...mentionedHandles("@coder- see the log")]).toEqual(["coder"]);
    expect([...mentionedHandles("@coder_: and @sb--")]).toEqual(["coder", "sb"]);
    // Inside a word or an address it is still none, and a longer handle is still its own.
    expect([...mentionedHandles("snake_@coder x_@sb_ é@coder x@sb @coder_bot @sb-2")]).toEqual(["coder_bot", "sb-2"]);
    // Handles may end in - or _: a bot with such a handle is named as written.
    expect([...mentionedHandles("@coder- see", [], new Set(["coder", "coder-"]))]).toEqual(["coder-"]);
    expect([...mentionedHandles("@coder- see", [], new Set(["coder"]))]).toEqual(["coder"]);
  });

  it("the selection wakes the bot a chat user means by `_@coder_` and `@coder- see`", () => {
    expect(pick({ text: "_@coder_ please look" }, [coder]).ag_coder.reason).toBe("mentioned");
    expect(pick({ text: "@coder- see the log" }, [coder]).ag_coder.reason).toBe("mentioned");
    const dashed: Candidate = { id: "ag_dashed", handle: "coder-", triggerMode: "mention" };
    const both = pick({ text: "@coder- see the log" }, [coder, dashed]);
    expect([both.ag_dashed.reason, both.ag_coder.reason]).toEqual(["mentioned", "not_mentioned"]);
    expect(pick({ text: "é@coder and x@coder" }, [coder]).ag_coder.reason).toBe("not_mentioned");
  });

  it("a dotted or @-joined name is another name (a domain, a handle elsewhere); a full stop after a mention is punctuation", () => {
    expect([...mentionedHandles("see @coder.io and @coder.dev/x or @sb@example.social")]).toEqual([]);
    expect([...mentionedHandles("thanks @coder. And @sb...")]).toEqual(["coder", "sb"]);
    expect([...mentionedHandles("ask @coder.")]).toEqual(["coder"]);
    expect(pick({ text: "is @coder.io up?" }, [coder]).ag_coder.reason).toBe("not_mentioned");
  });

  it("in scripts written without spaces between words (Chinese, Japanese), a mention needs none around it either", () => {
    expect([...mentionedHandles("请@coder帮我写个文件")]).toEqual(["coder"]);
    // An input method in full-width mode writes the sign and the letters full-width.
    expect([...mentionedHandles("＠coder 見て、＠ｓｂ、お願い。﹫Ｃｏｄｅｒ")]).toEqual(["coder", "sb"]);
    expect([...mentionedHandles("x＠coder.io ＠＠sb")]).toEqual([]);
    expect(pick({ text: "＠ｃｏｄｅｒさん、これを見て" }, [coder]).ag_coder.reason).toBe("mentioned");
    expect([...mentionedHandles("@coderさん、これを見て。@sbにも")]).toEqual(["coder", "sb"]);
    expect([...mentionedHandles("コーダー@coder")]).toEqual(["coder"]);
    // Other letters still make it a word or an address.
    expect([...mentionedHandles("é@coder @coderé x@sb")]).toEqual([]);
  });
});
