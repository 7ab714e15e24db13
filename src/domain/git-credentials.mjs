// Plain JS so the worker (bundled) and the local sandbox host (plain node) share one definition.

/**
 * Credentials for one git command, from the environment only: a credential helper configured by
 * `GIT_CONFIG_*` variables answers with `TB_GIT_USERNAME` / `TB_GIT_PASSWORD`. Nothing reaches the
 * command line (which logs and process lists show) or the checkout's `.git/config`.
 * @param {string} username
 * @param {string} password
 * @returns {Record<string, string>}
 */
export function gitCredentialEnv(username, password) {
  return {
    GIT_TERMINAL_PROMPT: "0",
    GIT_CONFIG_COUNT: "2",
    // An empty helper first: no helper configured elsewhere in the box is asked or told the secret.
    GIT_CONFIG_KEY_0: "credential.helper",
    GIT_CONFIG_VALUE_0: "",
    GIT_CONFIG_KEY_1: "credential.helper",
    GIT_CONFIG_VALUE_1: '!f() { test "$1" = get || exit 0; echo "username=$TB_GIT_USERNAME"; echo "password=$TB_GIT_PASSWORD"; }; f',
    TB_GIT_USERNAME: username,
    TB_GIT_PASSWORD: password,
  };
}
