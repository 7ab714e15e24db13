// Pure liveness rule for a provider's sandbox record. A box is dead only when the provider
// says so unambiguously; anything we do not recognise is `unknown`, which callers treat as a no-op.

export type Liveness = "live" | "dead" | "unknown";

export interface SandboxStateLike {
  state?: string | null;
  recoverable?: boolean | null;
}

const DEAD_STATES = new Set(["destroying", "destroyed"]);
const FAULT_STATES = new Set(["error", "build_failed"]);
/** The box exists (possibly stopped or mid-transition); a stopped box is still a box. */
const LIVE_STATES = new Set([
  "creating",
  "restoring",
  "started",
  "starting",
  "stopped",
  "stopping",
  "pending_build",
  "building_snapshot",
  "pulling_snapshot",
  "archived",
  "archiving",
  "resizing",
  "snapshotting",
  "forking",
  "pausing",
  "paused",
  "resuming",
]);

/** `null`/`undefined` stands for "the provider answered 404". */
export function classifySandboxState(dto: SandboxStateLike | null | undefined): Liveness {
  if (dto === null || dto === undefined) return "dead";
  const state = typeof dto.state === "string" ? dto.state.toLowerCase() : undefined;
  if (!state) return "unknown";
  if (DEAD_STATES.has(state)) return "dead";
  // A recoverable error can be brought back with `recover`: not dead, but not healthy either.
  if (FAULT_STATES.has(state)) return dto.recoverable === true ? "unknown" : "dead";
  if (LIVE_STATES.has(state)) return "live";
  return "unknown";
}
