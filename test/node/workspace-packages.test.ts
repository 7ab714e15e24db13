import { describe, expect, it } from "vitest";
import { execFileSync } from "node:child_process";
import { packagesSchema, packageInstallCommands, parseInstalled, bareName } from "../../src/workspace/packages";
import { environmentInputSchema } from "../../src/environments";

describe("environment packages", () => {
  it("takes names with pinned versions per manager", () => {
    const p = packagesSchema.parse({ apt: ["ripgrep", "jq=1.6-2.1"], npm: ["typescript@5.6.3", "@types/node@22.0.0"], pip: ["requests==2.32.3", "uvicorn[standard]>=0.30"] });
    expect(p.npm).toEqual(["typescript@5.6.3", "@types/node@22.0.0"]);
    expect(bareName("npm", "@types/node@22.0.0")).toBe("@types/node");
    expect(bareName("pip", "uvicorn[standard]>=0.30")).toBe("uvicorn");
    expect(bareName("apt", "jq=1.6-2.1")).toBe("jq");
  });

  it("refuses names that are not a package (shell metacharacters, flags, spaces, unknown managers)", () => {
    for (const bad of [{ apt: ["jq; rm -rf /"] }, { npm: ["--prefix=/etc"] }, { pip: ["requests $(id)"] }, { apt: ["a b"] }, { brew: ["jq"] }]) {
      expect(packagesSchema.safeParse(bad).success, JSON.stringify(bad)).toBe(false);
    }
    expect(environmentInputSchema.safeParse({ name: "e", packages: { npm: ["x|y"] } }).success).toBe(false);
    expect(environmentInputSchema.parse({ name: "e", packages: { pip: ["requests==2.32.3"] } }).packages).toEqual({ pip: ["requests==2.32.3"] });
  });

  it("installs nothing and reports nothing when the box already has every package (real shell, real npm)", () => {
    const cmds = packageInstallCommands({ npm: ["npm"] });
    expect(cmds.map((c) => c.manager)).toEqual(["npm"]);
    const out = execFileSync("bash", ["-c", cmds[0].command], { encoding: "utf8" });
    expect(parseInstalled(out)).toEqual([]);
    expect(packageInstallCommands(undefined)).toEqual([]);
    expect(packageInstallCommands({ apt: [] })).toEqual([]);
  });

  it("reads the installed list from what the command printed, ignoring installer noise", () => {
    expect(parseInstalled("added 1 package\nnpm:typescript@5.6.3\npip:requests==2.32.3\n")).toEqual(["npm:typescript@5.6.3", "pip:requests==2.32.3"]);
  });
});
