/** An error the CLI reports as `error <code>: <message>`; `code` is the API's when it came from the API. */
export class CliError extends Error {
  /**
   * @param {string} code
   * @param {string} message
   * @param {{ status?: number, details?: unknown, repeatable?: boolean }} [extra] `repeatable`: the
   *   request that got no answer may be sent again as it was (see `safeToRepeat` in api.mjs)
   */
  constructor(code, message, extra = {}) {
    super(message);
    this.code = code;
    this.status = extra.status;
    this.details = extra.details;
    this.repeatable = extra.repeatable === true;
  }
}

/** Exit codes: a watched run that failed is 1; any error (API, network, usage) is 2; Ctrl-C while waiting for a run is 130. */
export const EXIT = { ok: 0, runFailed: 1, error: 2, interrupted: 130, terminated: 143 };

/** Ctrl-C at a prompt: the user's choice to stop, ended with the exit code of an interrupt and no message. */
export class Interrupted extends CliError {
  constructor() {
    super("interrupted", "interrupted");
  }
}
