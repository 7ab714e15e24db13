/**
 * How far the writer of a chat reaches, and so how far a bot it wakes may act. A house API token
 * reaches every thread of its house; a stream token (a shared collaborator link, the token a
 * run's box holds) reaches its one thread. A bot acts with no more reach than the writer who woke
 * it: otherwise a stream token could ask a bot to list, read or write the house's other threads.
 */
export type Reach = "house" | "thread";

/** The reach of a token's claims: only a house token reaches past its thread. */
export function reachOf(claims: { kind: "house" | "stream" }): Reach {
  return claims.kind === "house" ? "house" : "thread";
}

/** A reach read back from storage; anything else is taken as the narrower one. */
export function parseReach(v: unknown): Reach {
  return v === "house" ? "house" : "thread";
}

/**
 * The tools a turn woken by a thread-reach writer keeps: none of today's. A tool added later is
 * withheld from such a turn until it is shown to stay within the thread. Each reaches further:
 * - `list_threads`, `post_to_thread`, `create_thread`, `create_agent`: the house's other threads
 *   and its bots, by design.
 * - `run_command`, `preview_link`: the environment's shared box, which every thread of that
 *   environment shares (its runs' checkouts and what they left there, a server another thread
 *   started), and any other environment of the house by `environmentId`/`environmentName`; a
 *   stream token may not exec at all (`POST /api/environments/:id/exec` takes a house token).
 * - `delegate_task`: a new thread of the house and a coding agent with the environment's secrets
 *   (on the shared box, for `boxMode: "shared"`), in any environment of the house; a stream
 *   token may not delegate or start a run.
 */
export const THREAD_REACH_TOOLS: ReadonlySet<string> = new Set<string>();

/** Splits the tools a bot has into those a turn of this reach is offered and those withheld from it. */
export function withinReach<T extends { name: string }>(reach: Reach, tools: T[]): { offered: T[]; withheld: Set<string> } {
  if (reach === "house") return { offered: tools, withheld: new Set() };
  const offered = tools.filter((t) => THREAD_REACH_TOOLS.has(t.name));
  return { offered, withheld: new Set(tools.filter((t) => !THREAD_REACH_TOOLS.has(t.name)).map((t) => t.name)) };
}

/** The result a withheld tool's call gets: the model reads it and answers without it. */
export function withheldToolResult(name: string): string {
  return `The tool "${name}" is not available for this message: it was written with a token that reaches this thread only, `
    + `so a bot it wakes acts within this thread (tools that reach other threads, the house or its environments are withheld). Answer without it.`;
}

/** What the model is told of a thread-reach turn, so it can tell the user why it cannot do more. */
export const THREAD_REACH_NOTE = "The message you answer was written with access to this thread only: you have no tools that reach other threads, the house or its environments for it.";
