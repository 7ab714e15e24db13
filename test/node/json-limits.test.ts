import { describe, expect, it } from "vitest";
import { MAX_JSON_DEPTH, TOO_DEEP_MARKER, jsonNestsDeeperThan, pruneDeepJson, scanJsonValues } from "../../src/entries/json-limits";

const bytes = (s: string) => new TextEncoder().encode(s);
const nested = (n: number, open = "[", close = "]") => open.repeat(n) + close.repeat(n);

describe("jsonNestsDeeperThan", () => {
  it("counts arrays and objects, and allows exactly the limit", () => {
    expect(jsonNestsDeeperThan(bytes(nested(MAX_JSON_DEPTH)))).toBe(false);
    expect(jsonNestsDeeperThan(bytes(nested(MAX_JSON_DEPTH + 1)))).toBe(true);
    expect(jsonNestsDeeperThan(bytes(`{"a":{"b":[{"c":[]}]}}`), 4)).toBe(true);
    expect(jsonNestsDeeperThan(bytes(`{"a":{"b":[{"c":1}]}}`), 4)).toBe(false);
    expect(jsonNestsDeeperThan(bytes(`[[1],[2],[3],[4]]`), 2)).toBe(false);
  });

  it("ignores brackets inside strings, including after escaped quotes and backslashes", () => {
    expect(jsonNestsDeeperThan(bytes(JSON.stringify({ s: nested(500) })), 2)).toBe(false);
    expect(jsonNestsDeeperThan(bytes(JSON.stringify({ s: `\\"${nested(500)}` })), 2)).toBe(false);
    expect(jsonNestsDeeperThan(bytes(JSON.stringify({ s: "ends in a backslash \\" , t: [[[]]] })), 3)).toBe(true);
    expect(jsonNestsDeeperThan(bytes(JSON.stringify({ s: "é ü 漢字 🎉 [[[" })), 1)).toBe(false);
  });

  it("never throws on malformed input", () => {
    expect(jsonNestsDeeperThan(bytes(`{"unterminated: [[[[`), 1)).toBe(false);
    expect(jsonNestsDeeperThan(bytes(`]]]]`), 1)).toBe(false);
  });
});

describe("pruneDeepJson", () => {
  it("replaces what lies below the limit with a marker and keeps the rest", () => {
    const value = JSON.parse(`{"type":"chat","deep":${nested(100)},"flat":[1,{"a":2}]}`);
    const pruned = pruneDeepJson(value, 3) as { type: string; deep: unknown; flat: unknown };
    expect(pruned.type).toBe("chat");
    expect(pruned.flat).toEqual([1, { a: 2 }]);
    expect(pruned.deep).toEqual([[TOO_DEEP_MARKER]]);
  });
});

describe("scanJsonValues", () => {
  const values = (s: string) => scanJsonValues(bytes(s)).values?.map((b) => new TextDecoder().decode(b)) ?? null;

  it("gives each top-level array element's own bytes, which parse to that element", () => {
    const cases = [
      `[1,"two",{"three":[3,{"x":"]"}]},[4,[5]],null,true,-6.5e3]`,
      ` [ {"a" : 1} ,  "s, with [brackets] and \\"quotes\\"" , [ ] ,{} ]  `,
      `[{"s":"ends in a backslash \\\\"},"é ü 漢字 🎉"]`,
      `[]`, `[ ]`,
    ];
    for (const text of cases) {
      const got = values(text)!;
      expect(got.map((v) => JSON.parse(v))).toEqual(JSON.parse(text));
      for (const v of got) expect(v).toBe(v.trim());
    }
    expect(values(`[{"a" : 1} , 2]`)).toEqual([`{"a" : 1}`, "2"]);
  });

  it("gives a non-array value whole, without surrounding whitespace", () => {
    expect(values(`  {"a":[1,2]}\t`)).toEqual([`{"a":[1,2]}`]);
    expect(values(`"x"`)).toEqual([`"x"`]);
  });

  it("declines text with line breaks or a byte-order mark, so those are re-serialized", () => {
    expect(values(`[1,\n2]`)).toBeNull();
    expect(values(`{"a":1}\r`)).toBeNull();
    expect(scanJsonValues(new Uint8Array([0xef, 0xbb, 0xbf, ...bytes(`[1]`)])).values).toBeNull();
  });

  it("tells text nested deeper than the limit, as jsonNestsDeeperThan does, in the same scan", () => {
    const texts = [nested(MAX_JSON_DEPTH), nested(MAX_JSON_DEPTH + 1), `[${nested(MAX_JSON_DEPTH)}]`, `[1,${nested(MAX_JSON_DEPTH - 1)}]`,
      JSON.stringify([{ s: nested(500) }]), `[{"a":{"b":[{"c":[]}]}}]`, `{"unterminated: [[[[`, `]]]]`, `[1,\n${nested(70)}]`];
    for (const text of texts) {
      expect(scanJsonValues(bytes(text)).tooDeep, text.slice(0, 40)).toBe(jsonNestsDeeperThan(bytes(text)));
      expect(scanJsonValues(bytes(text), 4).tooDeep, text.slice(0, 40)).toBe(jsonNestsDeeperThan(bytes(text), 4));
    }
  });
});
