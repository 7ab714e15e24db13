import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = join(__dirname, "..", "..");
const read = (p: string) => readFileSync(join(ROOT, p), "utf8");

/** The variables the worker reads: the string fields of `Env` (bindings are namespaces). */
function workerVariables(): string[] {
  const body = read("src/env.ts").match(/export interface Env \{([\s\S]*?)\n\}/)![1];
  return [...body.matchAll(/^\s+([A-Z][A-Z0-9_]*)\?: string;/gm)].map((m) => m[1]);
}

describe("configuration docs", () => {
  it("every variable the worker reads is in .dev.vars.example and in the README's Configuration table", () => {
    const vars = workerVariables();
    expect(vars.length).toBeGreaterThan(10);
    const example = read(".dev.vars.example");
    const configuration = read("README.md").split("## Configuration")[1].split("\n## ")[0];
    expect(vars.filter((v) => !new RegExp(`^${v}=`, "m").test(example))).toEqual([]);
    expect(vars.filter((v) => !configuration.includes(`\`${v}\``))).toEqual([]);
  });
});
