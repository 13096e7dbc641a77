//! What sessions and the host supervisor say to each other about turns and
//! control requests.
//!
//! A session never talks to a host process directly: it asks the
//! `HostSupervisor` to start a turn (or a control request) and from then on
//! receives the turn's host frames as [`TurnUpdate`]s in its own mailbox. A
//! crashed or vanished host becomes an ordinary `Error` update, so the
//! session's one code path for ending a turn covers every failure.

use serde_json::Value;
use tether_protocol::{HostEvent, TurnEndStatus};

/// What happens to a running turn, as the supervisor reports it.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnUpdate {
    /// `turn.start` was written to host slot `host_id`.
    Started { host_id: u32 },
    /// Host `event` frames for the turn, in order.
    Events(Vec<HostEvent>),
    /// `turn.end` from the host (`usage`: its token counts, if any).
    End {
        status: TurnEndStatus,
        text: String,
        usage: Option<Value>,
    },
    /// `turn.error` from the host, or a failure the supervisor detected
    /// (`host_crash`, `host_unavailable`).
    Error { reason: String, message: String },
}

/// The answer to a control request within its wait.
#[derive(Debug, Clone, PartialEq)]
pub enum ControlOutcome {
    /// `control.ack` with its `result`.
    Ack(Value),
    /// `control.error` (from the host, or synthetic: crash, eviction, no host).
    Error(String),
    /// No answer within the wait: a late handler now holds the request and
    /// will deliver the answer as `SessionMsg::ControlLate`.
    Pending,
}
