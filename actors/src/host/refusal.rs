//! Why a host line is refused whole at the host edge, and what the turn
//! or control request it named is told: a line over the host line cap is
//! never held, and a line nested deeper than a client frame may be is
//! never parsed (PROTOCOL Part 4, "The host edge").

use tether_protocol::FailureReason;

/// Why a host line was refused whole, ending what it named.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// Over the host line cap (`cap` bytes); `bytes` is the line's length
    /// without its newline.
    TooLong { bytes: u64, cap: usize },
    /// Nested deeper than `limit` levels.
    TooDeep { limit: usize },
}

impl Refusal {
    /// The `failure_reason` of a turn the line named.
    pub fn reason(&self) -> FailureReason {
        match self {
            Refusal::TooLong { .. } => FailureReason::HostLineTooLong,
            Refusal::TooDeep { .. } => FailureReason::HostProtocolError,
        }
    }

    /// The `error` frame's message to the host.
    pub fn answer(&self) -> String {
        match self {
            Refusal::TooLong { bytes, cap } => {
                format!("line of {bytes} bytes is over the host line cap of {cap} bytes")
            }
            Refusal::TooDeep { limit } => format!("line nested deeper than {limit} levels"),
        }
    }

    /// What the turn's `error` event (or the failed request) says.
    pub fn message(&self) -> String {
        match self {
            Refusal::TooLong { bytes, cap } => format!(
                "the compute host wrote a line of {bytes} bytes, over the host line cap of {cap} bytes"
            ),
            Refusal::TooDeep { limit } => format!(
                "the compute host wrote a line nested deeper than {limit} levels"
            ),
        }
    }
}
