// `npm ci` runs a dependency's install script only if package.json's `allowScripts` covers it: npm
// 11.19 warns about the others and fails under --strict-allow-scripts, and its help says they are
// blocked by default. Node 22 (node_modules/.bin/node), workerd and deno come from install scripts,
// so a new dependency with one has to be reviewed into that list before it lands.
import { execFileSync } from "node:child_process";
import path from "node:path";
import { expect, it } from "vitest";

const ROOT = path.resolve(__dirname, "../..");

it("every installed dependency with an install script is approved or denied in allowScripts", (ctx) => {
  let out: string;
  try {
    out = execFileSync("npm", ["install-scripts", "ls", "--json"], { cwd: ROOT, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (err) {
    const stderr = String((err as { stderr?: unknown }).stderr ?? "");
    // An npm without install-script approvals runs every script anyway: nothing to check there.
    if (/unknown command/i.test(stderr)) ctx.skip();
    throw err;
  }
  expect(JSON.parse(out).allowScripts).toEqual([]);
});
