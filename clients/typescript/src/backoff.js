// How long to wait before the next reconnect attempt: exponential, capped,
// with "equal jitter" (between half and all of the ceiling), so that the
// clients dropped by one gateway restart do not all come back in the same
// instant, and none waits less than half of what the doubling says.

export const DEFAULT_BACKOFF = Object.freeze({ initialMs: 250, maxMs: 5000 });

// `attempt` counts failed attempts since the last open connection, from 0.
export function backoffDelay(attempt, { initialMs, maxMs } = DEFAULT_BACKOFF, random = Math.random) {
  const ceiling = Math.min(maxMs, initialMs * 2 ** Math.min(attempt, 30));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}
