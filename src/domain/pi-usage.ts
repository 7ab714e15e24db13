/**
 * The usage record of an assistant message whose cost is unknown (a message rebuilt from the
 * thread, or history replayed to a bot's model): pi and pi-ai both require the field.
 */
export const EMPTY_USAGE = {
  input: 0,
  output: 0,
  cacheRead: 0,
  cacheWrite: 0,
  totalTokens: 0,
  cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 },
};
