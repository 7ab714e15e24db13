/**
 * A bot tool's answer in a thread without an environment when the call names none. The call is not
 * a failure (the model answers without it, or names an environment), but nothing ran: the web UI
 * and the CLI show it as not run, by this text's start.
 */
export const NO_SANDBOX = "no sandbox is bound to this thread (it has no environment): name one of this house's environments by environmentId or environmentName to work there, or answer without running anything";
