import { ApiError } from "../errors";
import { ProviderError } from "./errors";
import { logEvent } from "../domain/log-event";

/**
 * The one mapping from a sandbox provider's failure to what an API client sees. The provider's
 * own message stays in the logs (it may name hosts or refs); the client gets the stable code.
 * Anything that is not a provider error is returned unchanged.
 */
export function providerApiError(err: unknown, opts: { timeoutSec?: number; clientInput?: string } = {}): unknown {
  if (!(err instanceof ProviderError)) return err;
  logEvent("provider_error", { code: err.code, status: err.status, error: err.message }, "warn");
  if (err.code === "timeout" && opts.timeoutSec !== undefined) {
    return new ApiError("command_timeout", `command did not finish within ${opts.timeoutSec}s`);
  }
  // The provider refused what the client chose (a cwd outside the box, or one that does not
  // exist there): the client's 400. The callers have just made sure the box itself is there.
  if ((err.code === "bad_request" || err.code === "not_found") && opts.clientInput) {
    return new ApiError("bad_request", `the sandbox refused the request: check ${opts.clientInput}`);
  }
  // The box's settings were refused (say, an egress allow-list the local host cannot enforce):
  // the caller can act on that only by reading why, which the box's own launch also shows.
  if (err.code === "bad_request" && err.createRefused) {
    const why = err.message.length > 1000 ? `${err.message.slice(0, 1000)}…` : err.message;
    return new ApiError("bad_request", `the sandbox provider refused to create the box: ${why}`);
  }
  return new ApiError("provider_unavailable", `sandbox provider: ${err.code}`);
}
