// What every command gets: the global options, the API client, colours, and one way to print a
// result (JSON with --json, else the command's human lines).
import { createApi } from "./api.mjs";
import { askingAgain } from "./ask-again.mjs";
import { resolveTarget } from "./config.mjs";
import { colourEnabled, palette, withSpinner } from "./term.mjs";

/** @param {{ json?: boolean, url?: string }} globals */
export function createContext(globals) {
  const json = Boolean(globals.json);
  const c = palette(!json && colourEnabled(process.stdout));
  let api = null;
  const ctx = {
    json,
    c,
    globals,
    /** The API client, resolved on first use (so `login` and `--help` need no token); its GETs asked again while the server is away, saying so. */
    api() {
      api ??= createApi(resolveTarget({ url: globals.url }), { onRetry: askingAgain(ctx) });
      return api;
    },
    /** Runs a request with a spinner (human mode only). */
    wait(label, fn) {
      return json ? fn() : withSpinner(label, fn);
    },
    /**
     * @param {unknown} value what --json prints
     * @param {() => string | string[] | null | undefined} human lines for people
     */
    print(value, human) {
      if (json) {
        process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
        return;
      }
      const lines = human();
      if (lines === null || lines === undefined) return;
      const text = Array.isArray(lines) ? lines.join("\n") : lines;
      if (text) process.stdout.write(`${text}\n`);
    },
  };
  return ctx;
}
