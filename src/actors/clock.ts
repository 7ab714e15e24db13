/** The actors' time source, a port: production reads the wall clock; tests substitute their own. */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };
