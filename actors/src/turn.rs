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

/// Failure reasons the gateway itself assigns (PROTOCOL 1.5).
pub mod reasons {
    /// The host process died while running the turn.
    pub const HOST_CRASH: &str = "host_crash";
    /// The turn ran past `--turn-deadline-s`.
    pub const HOST_TIMEOUT: &str = "host_timeout";
    /// No host slot was up to take the turn.
    pub const HOST_UNAVAILABLE: &str = "host_unavailable";
    /// A line the host wrote for the turn was over the host line cap
    /// (`--max-host-line-bytes`); the line was refused and the turn ended.
    pub const HOST_LINE_TOO_LONG: &str = "host_line_too_long";
    /// The host broke the host protocol for the turn: it wrote a line of
    /// the turn nested deeper than the gateway accepts, or ended the turn
    /// `interrupted` though the gateway did not interrupt it.
    pub const HOST_PROTOCOL_ERROR: &str = "host_protocol_error";
    /// The gateway stopped while the turn ran; written at the next start.
    pub const GATEWAY_RESTART: &str = "gateway_restart";
    /// The gateway was told to stop (SIGTERM/SIGINT) while the turn ran;
    /// written and delivered during the drain.
    pub const GATEWAY_SHUTDOWN: &str = "gateway_shutdown";
    /// The node (gateway of a cluster) that ran the turn died; written by
    /// the node that took the session over.
    pub const NODE_LOST: &str = "node_lost";
    /// A queued prompt dropped by an interrupt.
    pub const DEQUEUED: &str = "dequeued";
    /// The running turn was stopped by a prompt sent with `multitask`
    /// `interrupt` or `rollback`.
    pub const SUPERSEDED: &str = "superseded";
    /// The session was closed while the turn ran.
    pub const SESSION_CLOSED: &str = "session_closed";
}

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
