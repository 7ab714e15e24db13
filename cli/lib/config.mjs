// Where the CLI finds its server and token: flags, then THREADBOX_URL / THREADBOX_TOKEN, then the
// file `threadbox login` wrote (readable by the user only: it holds a bearer token).
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { CliError } from "./errors.mjs";

export const DEFAULT_URL = "http://127.0.0.1:8787";

/** The per-user config directory of this platform. */
export function configPath(env = process.env, platform = process.platform) {
  if (env.THREADBOX_CONFIG) return env.THREADBOX_CONFIG;
  const base = env.XDG_CONFIG_HOME
    || (platform === "win32" ? env.APPDATA || join(homedir(), "AppData", "Roaming")
      : platform === "darwin" ? join(homedir(), "Library", "Application Support")
        : join(homedir(), ".config"));
  return join(base, "threadbox", "config.json");
}

/** What went wrong with a file operation on the config path, in words. */
function fsProblem(err) {
  switch (err?.code) {
    case "EISDIR":
    case "ERR_FS_EISDIR":
      return "it is a directory";
    case "EEXIST":
    case "ENOTDIR":
      return "a part of its path is a file, not a directory";
    case "EACCES":
    case "EPERM":
      return "permission denied";
    case "EROFS":
      return "read-only file system";
    default:
      return err?.code ?? String(err?.message ?? err);
  }
}

export function loadConfig(path = configPath()) {
  let text;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    if (err?.code === "ENOENT" || err?.code === "ENOTDIR") return {}; // nothing stored there
    throw new CliError("bad_config", `cannot read ${path}: ${fsProblem(err)}`);
  }
  let parsed;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new CliError("bad_config", `${path} is not valid JSON: fix or delete it, then run \`threadbox login\``);
  }
  const wrong = !parsed || typeof parsed !== "object" || Array.isArray(parsed) ? "is not a JSON object"
    : ["url", "token"].filter((k) => parsed[k] !== undefined && typeof parsed[k] !== "string").map((k) => `has a ${k} that is not a string`)[0];
  if (wrong) throw new CliError("bad_config", `${path} ${wrong}: fix or delete it, then run \`threadbox login\``);
  return parsed;
}

export function saveConfig(config, path = configPath()) {
  try {
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    writeFileSync(path, JSON.stringify(config, null, 2) + "\n", { mode: 0o600 });
    chmodSync(path, 0o600); // an existing file keeps its old mode on write
  } catch (err) {
    throw new CliError("bad_config", `cannot write ${path}: ${fsProblem(err)}`);
  }
}

/** Removes the stored login; false when there was none. */
export function removeConfig(path = configPath()) {
  if (!existsSync(path)) return false;
  try {
    rmSync(path, { force: true });
  } catch (err) {
    throw new CliError("bad_config", `cannot remove ${path}: ${fsProblem(err)}`);
  }
  return true;
}

/** Trims a trailing slash so paths join cleanly. */
export const normalizeUrl = (url) => url.replace(/\/+$/, "");

/**
 * A server URL, checked before any request: fetch's own refusal reads as a server that cannot be
 * reached (`cannot reach notaurl: ERR_INVALID_URL`), and `localhost:8787` parses as a URL whose
 * scheme is `localhost:`. `source` names where it came from, for the message.
 * @param {[source: string, url: string]} given
 */
export function serverUrl([source, url]) {
  if (!httpUrl(url)) {
    throw new CliError("usage", `${source} ${url} is not a valid server URL (like ${DEFAULT_URL})`);
  }
  return normalizeUrl(url);
}

/** `text` as an http(s) URL, or null: `localhost:8787` parses, as a URL whose scheme is `localhost:`. */
function httpUrl(text) {
  let u;
  try {
    u = new URL(text);
  } catch {
    return null;
  }
  return u.protocol === "http:" || u.protocol === "https:" ? u : null;
}

/**
 * The server and token to use; `tokenFrom` says where the token came from, so a refusal of it can
 * say how to replace it.
 * @returns {{ url: string, token: string, tokenFrom: "THREADBOX_TOKEN" | "login" }}
 */
export function resolveTarget(opts = {}, env = process.env, config = undefined) {
  // The stored file is read only when the flags and environment leave something to find there: a
  // broken file must not stop a command given everything it needs.
  const stored = () => (config ??= loadConfig());
  const url = serverUrl(opts.url ? ["--url", opts.url] : env.THREADBOX_URL ? ["THREADBOX_URL", env.THREADBOX_URL]
    : stored().url ? [`the url stored in ${configPath(env)}`, stored().url] : ["the default", DEFAULT_URL]);
  const token = env.THREADBOX_TOKEN || stored().token;
  if (!token) {
    throw new CliError("not_logged_in", "no token: run `threadbox login` (npm run dev prints the line) or set THREADBOX_TOKEN");
  }
  return { url, token, tokenFrom: env.THREADBOX_TOKEN ? "THREADBOX_TOKEN" : "login" };
}

/**
 * Reads a sign-in link `http://host:port/#token=<token>` (the format `npm run dev` prints and the
 * web UI reads) into the server URL and the token; a plain URL gives no token.
 */
export function parseSignInLink(link) {
  const u = httpUrl(link);
  if (!u) {
    // A usage mistake like a bad --url; the token in it is not repeated on the screen.
    const shown = link.replace(/(token=)[^&]+/, "$1…");
    throw new CliError("usage", `the link ${shown} is not a valid server URL or sign-in link (like ${DEFAULT_URL}/#token=…)`);
  }
  const token = new URLSearchParams(u.hash.replace(/^#/, "")).get("token") || undefined;
  u.hash = "";
  u.search = "";
  return { url: normalizeUrl(u.toString()), token };
}

/** The claims of a JWT, read without verifying it: only to show who a token is for. */
export function tokenClaims(token) {
  try {
    return JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString("utf8"));
  } catch {
    return {};
  }
}
