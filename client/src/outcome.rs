//! How a turn ended, as one line a person can act on.
//!
//! A turn that completes shows its reply and needs nothing more. One that
//! did not (an error, an interrupt, a crash of the host or of the gateway,
//! a prompt dropped from the queue) must say so wherever it is seen: live,
//! after a reconnect (the `message.complete` of a turn cut by a gateway
//! restart is written by the next gateway, so it only ever arrives in a
//! replay) and in a transcript read later (a `Message`'s `status`,
//! `failure_reason` and `error`). Both paths come here, so the same ending reads the
//! same way in all three.

use tether_protocol::FailureReason;

/// The advice of a reason after which the same prompt may simply be sent
/// again (PROTOCOL 1.5, "Failure reasons": `recoverable`).
const AGAIN: &str = "send it again";
/// The advice of an engine's own reason that is not `recoverable`.
const NOT_AGAIN: &str = "sending it again may fail the same way";

/// What a failure reason of the protocol means, in words, and whether
/// sending the prompt again helps. A match without a wildcard: a reason
/// added to the protocol does not build until it has words here.
fn words(reason: FailureReason) -> (&'static str, &'static str) {
    match reason {
        FailureReason::HostCrash => ("the compute host died", AGAIN),
        FailureReason::HostTimeout => ("the turn ran past its deadline", AGAIN),
        FailureReason::HostUnavailable => ("no compute host could take it", AGAIN),
        FailureReason::HostLineTooLong => (
            "the host wrote a line over the limit",
            "sending it again will fail the same way",
        ),
        FailureReason::HostProtocolError => (
            "the host broke the host protocol",
            "sending it again may fail the same way",
        ),
        FailureReason::GatewayRestart => ("the gateway stopped mid-turn and was restarted", AGAIN),
        FailureReason::GatewayShutdown => ("the gateway was shut down", AGAIN),
        FailureReason::NodeLost => (
            "the gateway node running it died and another took the session over",
            AGAIN,
        ),
        FailureReason::StorageUnavailable => (
            "an event of it could not be stored (the database was unreachable)",
            AGAIN,
        ),
        FailureReason::Dequeued => (
            "dropped from the queue before it ran",
            "send it again if you still want it",
        ),
        FailureReason::Superseded => (
            "stopped for a newer prompt",
            "the newer prompt answers instead",
        ),
        FailureReason::SessionClosed => (
            "the session was closed",
            "start a new session to send it again",
        ),
        FailureReason::EngineError => ("the engine failed", NOT_AGAIN),
    }
}

/// The bracketed text for a turn that ended with `status` (`complete`,
/// `error`, `interrupted`) and `reason` (its `failure_reason`), or `None`
/// for one that completed. `recoverable` is the `message.complete`'s, when
/// it is at hand (live, not in a transcript): it decides for an engine's
/// own reason, which the protocol's list does not know. `error` is the
/// message of the turn's `error` event (live) or the transcript entry's
/// `error`, when there was one: it says what happened better than the
/// reason's words.
pub fn line(
    status: &str,
    reason: Option<&str>,
    recoverable: Option<bool>,
    error: Option<&str>,
) -> Option<String> {
    let error = error.filter(|e| !e.is_empty());
    if status == "complete" {
        return None;
    }
    let Some(reason) = reason.filter(|r| !r.is_empty()) else {
        return Some(match status {
            "interrupted" => "interrupted".to_string(),
            "error" => format!("turn failed: {}", error.unwrap_or("no reason given")),
            other => format!("turn ended: {other}"),
        });
    };
    let known = FailureReason::parse(reason);
    let (meaning, advice) = match known {
        Some(r) => words(r),
        None if recoverable == Some(true) => ("the engine failed", AGAIN),
        None => ("the engine failed", NOT_AGAIN),
    };
    if known == Some(FailureReason::Dequeued) {
        return Some(format!("{meaning} ({reason}); {advice}"));
    }
    let told = format!("{} ({reason}); {advice}", error.unwrap_or(meaning));
    Some(match status {
        "interrupted" => format!("interrupted: {told}"),
        "error" => format!("turn failed: {told}"),
        other => format!("turn ended ({other}): {told}"),
    })
}

#[cfg(test)]
mod tests {
    use super::line;
    use tether_protocol::FailureReason;

    #[test]
    fn every_ending_but_complete_has_a_line() {
        assert_eq!(line("complete", None, None, None), None);
        assert_eq!(
            line("interrupted", None, None, None).as_deref(),
            Some("interrupted")
        );
        assert_eq!(
            line("interrupted", Some("dequeued"), None, None).as_deref(),
            Some("dropped from the queue before it ran (dequeued); send it again if you still want it")
        );
        assert_eq!(
            line("interrupted", Some("gateway_shutdown"), Some(true), None).as_deref(),
            Some("interrupted: the gateway was shut down (gateway_shutdown); send it again")
        );
        assert_eq!(
            line("error", Some("gateway_restart"), None, None).as_deref(),
            Some(
                "turn failed: the gateway stopped mid-turn and was restarted \
                 (gateway_restart); send it again"
            )
        );
        assert_eq!(
            line("error", Some("node_lost"), Some(true), None).as_deref(),
            Some(
                "turn failed: the gateway node running it died and another took the \
                 session over (node_lost); send it again"
            )
        );
        assert_eq!(
            line("error", Some("engine_error"), Some(false), Some("boom")).as_deref(),
            Some("turn failed: boom (engine_error); sending it again may fail the same way")
        );
        assert_eq!(
            line("error", None, None, Some("boom")).as_deref(),
            Some("turn failed: boom")
        );
    }

    #[test]
    fn an_engines_own_reason_follows_the_events_recoverable() {
        assert_eq!(
            line("error", Some("rate_limited"), Some(true), Some("slow down")).as_deref(),
            Some("turn failed: slow down (rate_limited); send it again")
        );
        for flag in [Some(false), None] {
            assert_eq!(
                line("error", Some("rate_limited"), flag, None).as_deref(),
                Some("turn failed: the engine failed (rate_limited); sending it again may fail the same way")
            );
        }
    }

    /// Every reason the protocol defines, walked: each ending names it,
    /// says what happened in words of its own and whether sending the
    /// prompt again helps, the same whether the event's `recoverable` is at
    /// hand (live) or not (a transcript).
    #[test]
    fn every_failure_reason_of_the_protocol_says_what_happened_and_whether_to_send_it_again() {
        for reason in FailureReason::ALL {
            let r = reason.as_str();
            let status = reason.status().as_str();
            let flag = reason.recoverable().then_some(true);
            let shown = line(status, Some(r), flag, None).expect("an ending");
            for other in [None, Some(!reason.recoverable())] {
                assert_eq!(
                    line(status, Some(r), other, None).as_deref(),
                    Some(shown.as_str()),
                    "{r}: its words are the protocol's, not a guess from the flag"
                );
            }
            let (what, advice) = shown
                .split_once(&format!(" ({r}); "))
                .unwrap_or_else(|| panic!("{r}: not named, or no advice: {shown}"));
            assert!(!what.trim().is_empty(), "{r}: says nothing: {shown}");
            if reason.recoverable() {
                assert_eq!(advice, "send it again", "{r}: {shown}");
            } else {
                assert!(
                    !advice.is_empty() && advice != "send it again",
                    "{r}: {shown}"
                );
            }
        }
    }
}
