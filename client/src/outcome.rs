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

/// Failure reasons after which the same prompt may simply be sent again
/// (PROTOCOL Part 4, "A failed turn": `recoverable`).
const RECOVERABLE: &[&str] = &[
    "host_crash",
    "host_timeout",
    "host_unavailable",
    "gateway_restart",
    "gateway_shutdown",
];

/// What a failure reason means, in words.
fn meaning(reason: &str) -> Option<&'static str> {
    Some(match reason {
        "host_crash" => "the compute host died",
        "host_timeout" => "the turn ran past its deadline",
        "host_unavailable" => "no compute host could take it",
        "gateway_restart" => "the gateway stopped mid-turn and was restarted",
        "gateway_shutdown" => "the gateway was shut down",
        "engine_error" => "the engine failed",
        "host_line_too_long" => "the host wrote a line over the limit",
        "host_protocol_error" => "the host broke the host protocol",
        _ => return None,
    })
}

/// The bracketed text for a turn that ended with `status` (`complete`,
/// `error`, `interrupted`) and `reason` (its `failure_reason`), or `None`
/// for one that completed. `error` is the message of the turn's `error`
/// event (live) or the transcript entry's `error`, when there was one.
pub fn line(status: &str, reason: Option<&str>, error: Option<&str>) -> Option<String> {
    let hint = match reason {
        Some(r) if RECOVERABLE.contains(&r) => "; send it again",
        _ => "",
    };
    let why = |fallback: &str| -> String {
        let words = error
            .filter(|e| !e.is_empty())
            .map(str::to_string)
            .or_else(|| reason.and_then(meaning).map(str::to_string))
            .unwrap_or_else(|| fallback.to_string());
        match reason {
            Some(r) => format!("{words} ({r}){hint}"),
            None => words,
        }
    };
    match status {
        "complete" => None,
        "interrupted" => Some(match reason {
            None => "interrupted".to_string(),
            Some("dequeued") => "dropped from the queue before it ran (dequeued)".to_string(),
            Some(_) => format!("interrupted: {}", why("interrupted")),
        }),
        "error" => Some(format!("turn failed: {}", why("unknown error"))),
        other => Some(format!("turn ended: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::line;

    #[test]
    fn every_ending_but_complete_has_a_line() {
        assert_eq!(line("complete", None, None), None);
        assert_eq!(
            line("interrupted", None, None).as_deref(),
            Some("interrupted")
        );
        assert_eq!(
            line("interrupted", Some("dequeued"), None).as_deref(),
            Some("dropped from the queue before it ran (dequeued)")
        );
        assert_eq!(
            line("interrupted", Some("gateway_shutdown"), None).as_deref(),
            Some("interrupted: the gateway was shut down (gateway_shutdown); send it again")
        );
        assert_eq!(
            line("error", Some("gateway_restart"), None).as_deref(),
            Some(
                "turn failed: the gateway stopped mid-turn and was restarted \
                 (gateway_restart); send it again"
            )
        );
        assert_eq!(
            line("error", Some("engine_error"), Some("boom")).as_deref(),
            Some("turn failed: boom (engine_error)")
        );
        assert_eq!(
            line("error", Some("something_new"), None).as_deref(),
            Some("turn failed: unknown error (something_new)")
        );
    }
}
