/**
 * A bot tool's answer in a thread without an environment. The call is not a failure (the model
 * answers without it), but nothing ran: the web UI and the CLI show it as not run, by this text.
 */
export const NO_SANDBOX = "no sandbox is bound to this thread (it has no environment); answer without running anything";
