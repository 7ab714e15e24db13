// Reads a `.dev.vars`-style file (dotenv syntax: KEY=VALUE lines, `#` comments, optional quotes,
// optional `export `), the format wrangler reads for `wrangler dev` and `npm run serve` reads too.
import { existsSync, readFileSync } from "node:fs";

/** @returns {Record<string, string>} */
export function parseVars(text) {
  const vars = {};
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    const m = /^(?:export\s+)?([A-Za-z_][A-Za-z0-9_.-]*)\s*=\s*(.*)$/.exec(line);
    if (!m) continue;
    let value = m[2];
    const quote = value[0];
    if ((quote === '"' || quote === "'" || quote === "`") && value.lastIndexOf(quote) > 0) {
      value = value.slice(1, value.lastIndexOf(quote));
      if (quote === '"') value = value.replace(/\\n/g, "\n").replace(/\\r/g, "\r");
    } else {
      value = value.replace(/\s+#.*$/, "").trim();
    }
    vars[m[1]] = value;
  }
  return vars;
}

/** The file's variables, or {} when it does not exist. */
export function readVarsFile(path) {
  return existsSync(path) ? parseVars(readFileSync(path, "utf8")) : {};
}
