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

export function loadConfig(path = configPath()) {
  if (!existsSync(path)) return {};
  try {
    const parsed = JSON.parse(readFileSync(path, "utf8"));
    return parsed && typeof parsed === "object" ? parsed : {};
  } catch {
    throw new CliError("bad_config", `${path} is not valid JSON: fix or delete it, then run \`threadbox login\``);
  }
}

export function saveConfig(config, path = configPath()) {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  writeFileSync(path, JSON.stringify(config, null, 2) + "\n", { mode: 0o600 });
  chmodSync(path, 0o600); // an existing file keeps its old mode on write
}

/** Removes the stored login; false when there was none. */
export function removeConfig(path = configPath()) {
  if (!existsSync(path)) return false;
  rmSync(path, { force: true });
  return true;
}

/** Trims a trailing slash so paths join cleanly. */
export const normalizeUrl = (url) => url.replace(/\/+$/, "");

/**
 * The server and token to use.
 * @returns {{ url: string, token: string }}
 */
export function resolveTarget(opts = {}, env = process.env, config = loadConfig()) {
  const url = normalizeUrl(opts.url || env.THREADBOX_URL || config.url || DEFAULT_URL);
  const token = env.THREADBOX_TOKEN || config.token;
  if (!token) {
    throw new CliError("not_logged_in", "no token: run `threadbox login` (npm run dev prints the line) or set THREADBOX_TOKEN");
  }
  return { url, token };
}

/**
 * Reads a sign-in link `http://host:port/#token=<token>` (the format `npm run dev` prints and the
 * web UI reads) into the server URL and the token; a plain URL gives no token.
 */
export function parseSignInLink(link) {
  let u;
  try {
    u = new URL(link);
  } catch {
    throw new CliError("bad_request", `not a URL: ${link}`);
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
