// How a turn ended, as one line a person can act on: what happened, and
// whether sending the prompt again helps. The same words as the terminal
// client's (client/src/outcome.rs).
//
// REASONS holds every `failure_reason` the protocol defines
// (protocol/src/events/failure.rs, docs/PROTOCOL.md "Failure reasons");
// tests/ending_words.rs walks that list through `ending`, so a reason added
// to the protocol without words here fails there. A reason that is none of
// them is an engine's own, passed through: the event's `recoverable` says
// whether to send it again.

const AGAIN = "send it again";
const NOT_AGAIN = "sending it again may fail the same way";

// failure_reason → what happened, and what to do about it.
export const REASONS = {
  host_crash: { what: "the compute host died", advice: AGAIN },
  host_timeout: { what: "the turn ran past its deadline", advice: AGAIN },
  host_unavailable: { what: "no compute host could take it", advice: AGAIN },
  host_line_too_long: {
    what: "the host wrote a line over the limit",
    advice: "sending it again will fail the same way",
  },
  host_protocol_error: { what: "the host broke the host protocol", advice: NOT_AGAIN },
  gateway_restart: { what: "the gateway stopped mid-turn and was restarted", advice: AGAIN },
  gateway_shutdown: { what: "the gateway was shut down", advice: AGAIN },
  node_lost: { what: "the gateway node running it died and another took the session over", advice: AGAIN },
  storage_unavailable: { what: "an event of it could not be stored (the database was unreachable)", advice: AGAIN },
  dequeued: { what: "dropped from the queue before it ran", advice: "send it again if you still want it" },
  superseded: { what: "stopped for a newer prompt", advice: "the newer prompt answers instead" },
  session_closed: { what: "the session was closed", advice: "start a new session to send it again" },
  engine_error: { what: "the engine failed", advice: NOT_AGAIN },
};

// The line for a `message.complete` payload `p` (`status`,
// `failure_reason`, `recoverable`); null for a turn that completed. The
// turn's `error` event, drawn above it, says more where there was one.
export function ending(p) {
  const status = p.status || "complete";
  if (status === "complete") {
    return null;
  }
  const reason = typeof p.failure_reason === "string" ? p.failure_reason : "";
  if (!reason) {
    return status === "interrupted" ? "interrupted" : "turn failed";
  }
  const known = Object.prototype.hasOwnProperty.call(REASONS, reason) ? REASONS[reason] : null;
  // A reason not listed is an engine's own: its `recoverable` decides.
  const what = known ? known.what : "the engine failed";
  const advice = known ? known.advice : (p.recoverable ? AGAIN : NOT_AGAIN);
  const told = what + " (" + reason + "); " + advice;
  if (reason === "dequeued") {
    return told;
  }
  return (status === "interrupted" ? "interrupted: " : "turn failed: ") + told;
}
