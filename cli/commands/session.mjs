// login / logout: where the CLI keeps its server URL and house token.
import { createApi } from "../lib/api.mjs";
import { askingAgain } from "../lib/ask-again.mjs";
import { configPath, DEFAULT_URL, loadConfig, parseSignInLink, removeConfig, saveConfig, serverUrl, tokenClaims } from "../lib/config.mjs";
import { CliError } from "../lib/errors.mjs";
import { safe } from "../lib/render.mjs";
import { promptHidden, readStdin } from "../lib/term.mjs";

/** The token for `login`: from the link, stdin, THREADBOX_TOKEN, or a prompt that does not echo. */
async function tokenFor(linkToken, opts) {
  if (linkToken) return linkToken;
  if (opts.tokenStdin) return (await readStdin()).trim();
  if (process.env.THREADBOX_TOKEN) return process.env.THREADBOX_TOKEN;
  if (process.stdin.isTTY) return (await promptHidden("house token: ")).trim();
  throw new CliError("usage", "no token: pass a sign-in link (URL#token=…), --token-stdin, or THREADBOX_TOKEN");
}

export function registerSession(program, ctxOf) {
  program
    .command("login")
    .description("store the server URL and a house token (the sign-in link `npm run dev` prints works as is)")
    .argument("[link]", "server URL, or a sign-in link http://HOST:PORT/#token=TOKEN")
    .option("--token-stdin", "read the token from stdin")
    .action(async (link, opts, cmd) => {
      const ctx = ctxOf(cmd);
      const parsed = link ? parseSignInLink(link) : { url: undefined, token: undefined };
      const path = configPath();
      // login is how a broken stored file gets fixed: what cannot be read is replaced, not in the way.
      let stored = {};
      try {
        stored = loadConfig(path);
      } catch {
        stored = {};
      }
      const url = parsed.url ?? serverUrl(ctx.globals.url ? ["--url", ctx.globals.url] : process.env.THREADBOX_URL ? ["THREADBOX_URL", process.env.THREADBOX_URL]
        : stored.url ? [`the url stored in ${path}`, stored.url] : ["the default", DEFAULT_URL]);
      const token = await tokenFor(parsed.token, opts);
      if (!token) throw new CliError("usage", "empty token");
      // A token is kept only once the server accepts it (and answers as threadbox does: the client checks that).
      await ctx.wait(`checking the token with ${url}`, () => createApi({ url, token }, { onRetry: askingAgain(ctx) }).get("/api/threads?limit=1"));
      saveConfig({ ...stored, url, token }, path);
      const claims = tokenClaims(token);
      ctx.print({ url, house: claims.house ?? null, subject: claims.sub ?? null, role: claims.role ?? null, config: path }, () =>
        safe`logged in to ${url}` + (claims.house ? safe` as ${claims.sub} in house ${claims.house}` : "") + safe` (saved in ${path})`);
    });

  program
    .command("logout")
    .description("forget the stored URL and token")
    .action((_opts, cmd) => {
      const path = configPath();
      const removed = removeConfig(path);
      ctxOf(cmd).print({ removed: removed ? path : null }, () => (removed ? `removed ${path}` : `not logged in (nothing stored at ${path})`));
    });
}
