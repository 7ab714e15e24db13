import { describe, expect, it } from "vitest";
import { hasRepeatedQuery } from "../../src/http/query";

/** What URLSearchParams says, the meaning every route reads the query by. */
const reference = (url: URL) => {
  const keys = [...url.searchParams.keys()];
  return new Set(keys).size !== keys.length;
};

describe("hasRepeatedQuery", () => {
  it.each([
    ["", false], ["?", false], ["?offset=-1", false], ["?offset=-1&live=long-poll&cursor=3", false],
    ["?offset=-1&offset=0", true], ["?a&a", true], ["?a=1&&b=2&", false], ["?=1&=2", true], ["?a==1&a=", true],
    // Escapes name the same key as their decoded form does.
    ["?a=1&%61=2", true], ["?a+b=1&a%20b=2", true], ["?%zz=1&%zz=2", true], ["?%C3%A9=1&\u00e9=2", true], ["?a%3D=1&a=2", false],
  ])("%s -> %s", (search, repeated) => {
    const url = new URL(`http://threadbox.test/v1/stream/s${search}`);
    expect(hasRepeatedQuery(url)).toBe(repeated);
    expect(reference(url)).toBe(repeated);
  });

  it("agrees with URLSearchParams on random queries", () => {
    const alphabet = ["a", "b", "=", "&", "%", "+", "2", "0", "6", "1", "\u00e9", "?"];
    let seed = 7;
    const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % alphabet.length;
    for (let i = 0; i < 5000; i++) {
      const length = 1 + (i % 12);
      const search = "?" + Array.from({ length }, () => alphabet[next()]).join("");
      const url = new URL(`http://threadbox.test/p${search}`);
      expect(hasRepeatedQuery(url), search).toBe(reference(url));
    }
  });
});
