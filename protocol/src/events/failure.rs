//! The `failure_reason`s of `message.complete` (PROTOCOL 1.5, "Failure
//! reasons"): the closed list of reasons the gateway itself gives a turn
//! that did not complete, and which of them may simply be sent again.
//!
//! Clients that show an ending (the terminal client, the web console) walk
//! [`FailureReason::ALL`] in their tests, so a reason added here without
//! words for it in every client fails there. A host's engine may give a
//! reason of its own (`turn.error`'s `reason`), passed through as written;
//! it is none of these and never recoverable.

use super::CompleteStatus;

wire_enum! {
    /// A `failure_reason` the gateway assigns.
    pub enum FailureReason {
        /// The compute host died while running the turn.
        HostCrash = "host_crash",
        /// The turn ran past `--turn-deadline-s`.
        HostTimeout = "host_timeout",
        /// No compute host was up, or could come up, to run the turn.
        HostUnavailable = "host_unavailable",
        /// A line the host wrote for the turn was over the host line cap.
        HostLineTooLong = "host_line_too_long",
        /// The host broke the host protocol for the turn: a line nested
        /// deeper than the gateway accepts, or an `interrupted` ending the
        /// gateway did not ask for.
        HostProtocolError = "host_protocol_error",
        /// The gateway stopped while the turn ran; written at its next start.
        GatewayRestart = "gateway_restart",
        /// The gateway was told to stop (SIGTERM/SIGINT) while the turn ran.
        GatewayShutdown = "gateway_shutdown",
        /// The cluster node that ran the turn died; written by the node that
        /// took the session over.
        NodeLost = "node_lost",
        /// A durable event of the turn could not be stored (the database
        /// unreachable or failing): the turn is stopped rather than
        /// completed with events missing.
        StorageUnavailable = "storage_unavailable",
        /// A queued prompt dropped by an interrupt before it ran.
        Dequeued = "dequeued",
        /// The running turn was stopped by a prompt sent with `multitask`
        /// `interrupt` or `rollback`.
        Superseded = "superseded",
        /// The session was closed (`session.close`, or a
        /// `close_on_disconnect` session's last peer left) while the turn
        /// ran or waited in the queue.
        SessionClosed = "session_closed",
        /// The engine failed (`turn.error` without a reason of its own).
        EngineError = "engine_error",
    }
}

impl FailureReason {
    /// The `status` of a `message.complete` with this reason: the turns a
    /// drain or an interrupt cut are `interrupted`, every other `error`.
    pub fn status(self) -> CompleteStatus {
        match self {
            FailureReason::GatewayShutdown
            | FailureReason::Dequeued
            | FailureReason::Superseded
            | FailureReason::SessionClosed => CompleteStatus::Interrupted,
            FailureReason::HostCrash
            | FailureReason::HostTimeout
            | FailureReason::HostUnavailable
            | FailureReason::HostLineTooLong
            | FailureReason::HostProtocolError
            | FailureReason::GatewayRestart
            | FailureReason::NodeLost
            | FailureReason::StorageUnavailable
            | FailureReason::EngineError => CompleteStatus::Error,
        }
    }

    /// `message.complete`'s `recoverable`: the same prompt may simply be
    /// sent again (the failure was the gateway's or the host's, not the
    /// prompt's). A dequeued prompt is not: it was dropped on purpose, by
    /// an interrupt, and only its sender knows whether it is still wanted.
    pub fn recoverable(self) -> bool {
        match self {
            FailureReason::HostCrash
            | FailureReason::HostTimeout
            | FailureReason::HostUnavailable
            | FailureReason::GatewayRestart
            | FailureReason::GatewayShutdown
            | FailureReason::NodeLost
            | FailureReason::StorageUnavailable => true,
            FailureReason::HostLineTooLong
            | FailureReason::HostProtocolError
            | FailureReason::Dequeued
            | FailureReason::Superseded
            | FailureReason::SessionClosed
            | FailureReason::EngineError => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FailureReason;

    #[test]
    fn every_reason_reads_back_and_only_an_engines_own_reason_is_unknown() {
        for reason in FailureReason::ALL {
            assert_eq!(FailureReason::parse(reason.as_str()), Some(*reason));
        }
        assert_eq!(FailureReason::parse("rate_limited"), None);
        let recoverable: Vec<&str> = FailureReason::ALL
            .iter()
            .filter(|r| r.recoverable())
            .map(|r| r.as_str())
            .collect();
        assert_eq!(
            recoverable,
            [
                "host_crash",
                "host_timeout",
                "host_unavailable",
                "gateway_restart",
                "gateway_shutdown",
                "node_lost",
                "storage_unavailable"
            ]
        );
    }
}
