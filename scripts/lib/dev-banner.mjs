// What `npm run dev` prints once everything is up: where to click and what to type.

/** The sign-in link the web UI reads: the house token in the fragment, which never reaches a server log. */
export const signInLink = (url, token) => `${url}/#token=${token}`;

/** Where `npm run dev` keeps the sign-in link, relative to the project root (.wrangler/ is gitignored). */
export const SIGN_IN_LINK_FILE = ".wrangler/sign-in-link";

/** One shell line from nothing to a finished agent run, with the CLI. */
export function cliLine(url, token) {
  return `npx threadbox login '${signInLink(url, token)}' && npx threadbox delegate "$(npx threadbox new hello --env demo)" "write hello.txt containing hi" --watch`;
}

/** @param {{ url: string, token: string, sandboxApiUrl: string, sandboxRoot: string, demoModelBaseUrl: string, seeded: { environments: string[], agents: string[], agentsSupported: boolean } }} o */
export function devBanner(o) {
  const bots = o.seeded.agentsSupported ? `, bots ${o.seeded.agents.join(", ")}` : "";
  return `
threadbox is running
  web           ${signInLink(o.url, o.token)}
  worker        ${o.url}
  sandbox host  ${o.sandboxApiUrl}   (a box's files: ${o.sandboxRoot}/boxes/<providerRef>/home)
  demo model    ${o.demoModelBaseUrl}   (offline, development only)
  house         dev: environments ${o.seeded.environments.join(", ")}${bots}

Open the web address to sign in, or from a terminal:
  ${cliLine(o.url, o.token)}

  export THREADBOX_URL=${o.url}
  export THREADBOX_TOKEN=${o.token}

Scrolled away? The sign-in link is also in ${SIGN_IN_LINK_FILE} (not in git):
  cat ${SIGN_IN_LINK_FILE}
`;
}
