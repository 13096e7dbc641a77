//! Server-to-client events (PROTOCOL 1.2, 1.3, 1.5).
//!
//! An event frame is `{"jsonrpc":"2.0","method":"event","params":{...}}`.
//! Events are the hot path: one durable event may go to many peers, into the
//! replay ring and into `session.events.since` replies. So the params object
//! is serialized exactly once into a [`RawValue`] ([`encode_event_params`]),
//! and everything downstream splices that text ([`encode_event_frame`],
//! `ResumeResult::events`) instead of re-serializing.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::ids::{PeerId, SessionId, TraceId, TurnId};

mod failure;
pub use failure::FailureReason;

wire_enum! {
    /// Every event type, with its dotted wire name.
    pub enum EventType {
        SessionCreated = "session.created",
        MessageUser = "message.user",
        MessageSystem = "message.system",
        MessageStart = "message.start",
        MessageDelta = "message.delta",
        ReasoningDelta = "reasoning.delta",
        ToolStart = "tool.start",
        ToolComplete = "tool.complete",
        TodoUpdated = "todo.updated",
        MessageComplete = "message.complete",
        StatusUpdate = "status.update",
        SessionCompacted = "session.compacted",
        SessionInfo = "session.info",
        SessionClosed = "session.closed",
        Error = "error",
        SessionReclaimed = "session.reclaimed",
        /// The session was erased (`session.delete`, retention, an operator's
        /// erase): the last frame of it a peer gets.
        SessionDeleted = "session.deleted",
        /// The first frame of every connection (1.3).
        GatewayReady = "gateway.ready",
        /// Peers attached to the session (transient, coalesced).
        PresenceJoined = "presence.joined",
        /// Peers that left the session (transient, coalesced).
        PresenceLeft = "presence.left",
    }
}

impl EventType {
    /// Durable events get a `seq`, are stored before any peer sees them and
    /// are replayed; the others are live-only and may be coalesced or dropped
    /// for a slow peer.
    pub fn is_durable(&self) -> bool {
        !matches!(
            self,
            EventType::MessageDelta
                | EventType::ReasoningDelta
                | EventType::SessionReclaimed
                | EventType::SessionDeleted
                | EventType::GatewayReady
                | EventType::PresenceJoined
                | EventType::PresenceLeft
        )
    }

    /// What a transcript is read from: its own events
    /// ([`EventType::is_transcript`]) and `error`, whose message a failed
    /// turn's entry carries (`Message.error`). The store reads a segment by
    /// it and a branch copies by it, so both see a turn's error.
    pub fn feeds_transcript(&self) -> bool {
        self.is_transcript() || *self == EventType::Error
    }

    /// Transcript events: what a resume's `messages` and a turn's history are
    /// derived from (`message.user`, `message.system`, `message.complete`,
    /// `tool.complete`, and `session.compacted`, whose summary opens a new
    /// history segment). The one list: the session counts and keeps
    /// messages by it ([`EventType::feeds_transcript`] adds what they are
    /// read with).
    pub fn is_transcript(&self) -> bool {
        matches!(
            self,
            EventType::MessageUser
                | EventType::MessageSystem
                | EventType::MessageComplete
                | EventType::ToolComplete
                | EventType::SessionCompacted
        )
    }
}

/// `session.created`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCreatedPayload {
    pub title: String,
    pub profile: String,
    pub parent_session_id: Option<SessionId>,
}

/// `message.user` and `message.system`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextPayload {
    pub text: String,
}

/// `message.user` of a prompt: with `replaces` (`prompt.submit`'s
/// `replaces`, or the running turn a `rollback` prompt stopped), from that
/// turn's first message on the history leaves out what came before this
/// prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserPayload {
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<crate::ids::TurnId>,
    /// The prompt's `dedupe_key`: kept with it so that whichever node
    /// owns the session next still knows the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedupe_key: Option<String>,
}

/// `message.start` (and any event whose payload is `{}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmptyPayload {}

/// `message.delta` and `reasoning.delta`. `offset` is computed by the
/// gateway (bytes of the turn's text before this delta), so a client can
/// apply deltas idempotently after a resume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeltaPayload {
    pub text: String,
    pub offset: u64,
}

/// `tool.start`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolStartPayload {
    pub tool_id: String,
    pub name: String,
    pub args: Value,
}

/// `tool.complete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCompletePayload {
    pub tool_id: String,
    pub name: String,
    pub result: Value,
    pub is_error: bool,
}

// `todo.updated`'s payload is `Todos` (methods/results.rs): the snapshot a
// resume reports, so it has one type.

wire_enum! {
    /// How a turn ended.
    pub enum CompleteStatus {
        Complete = "complete",
        Error = "error",
        Interrupted = "interrupted",
    }
}

/// `message.complete`: exactly one per accepted turn, always its last event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageCompletePayload {
    pub text: String,
    pub status: CompleteStatus,
    /// One of [`FailureReason`] (`host_crash`, `gateway_restart`, ...), or
    /// an engine's own reason, passed through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recoverable: Option<bool>,
    /// The `usage` object of the host's `turn.end` (token counts), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
}

/// `status.update`, kinds `queued`, `compacting`, `compacted`, `ready`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusUpdatePayload {
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// `session.compacted`: starts a new history segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCompactedPayload {
    pub history_version: u64,
    pub summary: String,
    pub removed: u64,
}

/// `session.info`: the `SessionInfo` fields that changed, durable so that a
/// client that was away learns them from its replay.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfoPayload {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// `session.closed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionClosedPayload {
    pub reason: String,
}

/// `session.deleted`: no fields (the session is gone, whoever erased it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionDeletedPayload {}

/// `error`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorPayload {
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i64>,
}

/// `session.reclaimed` (`orphan`, `ttl`, `lru`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReclaimedPayload {
    pub reason: String,
}

/// Limits announced in `gateway.ready`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub max_frame_bytes: u64,
}

/// `gateway.ready`, the first frame of every connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayReadyPayload {
    pub server: String,
    pub version: String,
    pub protocol: u32,
    /// Names the event store; a change means "drop your watermarks".
    pub epoch: String,
    pub peer_id: PeerId,
    pub profile: String,
    pub heartbeat_s: u64,
    pub limits: Limits,
}

/// The params object of an event frame, borrowing everything so that
/// building it costs nothing; serialize it once with [`encode_event_params`].
/// Field order on the wire: type, session_id, seq, turn_id, trace_id, ts,
/// payload.
#[derive(Debug, Clone, Serialize)]
pub struct EventParams<'a> {
    #[serde(rename = "type")]
    pub kind: EventType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<&'a SessionId>,
    /// Durable events only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<&'a TurnId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<&'a TraceId>,
    pub ts: &'a str,
    pub payload: &'a RawValue,
}

/// Serializes an event's params object once, for sharing.
pub fn encode_event_params(p: &EventParams) -> Box<RawValue> {
    to_raw(p)
}

/// Wraps an encoded params object into an event frame by concatenation
/// (no re-serialization of the params).
pub fn encode_event_frame(params: &RawValue) -> String {
    const HEAD: &str = r#"{"jsonrpc":"2.0","method":"event","params":"#;
    let body = params.get();
    let mut s = String::with_capacity(HEAD.len() + body.len() + 1);
    s.push_str(HEAD);
    s.push_str(body);
    s.push('}');
    s
}

/// Serializes a payload to a [`RawValue`].
///
/// Serialization into JSON text fails only for values serde_json cannot
/// express (a map with non-string keys): a programming error in the
/// payload's type, never a property of input. Rather than panic on the hot
/// path, such a payload degrades to `{}` (payloads are always objects);
/// use [`try_to_raw`] to see the error.
pub fn to_raw<T: Serialize + ?Sized>(v: &T) -> Box<RawValue> {
    match try_to_raw(v) {
        Ok(raw) => raw,
        Err(_) => {
            debug_assert!(false, "payload failed to serialize");
            empty_object()
        }
    }
}

/// Serializes a value to a [`RawValue`], reporting failure.
pub fn try_to_raw<T: Serialize + ?Sized>(v: &T) -> Result<Box<RawValue>, serde_json::Error> {
    serde_json::value::to_raw_value(v)
}

/// `{}` as a `RawValue`.
fn empty_object() -> Box<RawValue> {
    RawValue::from_string("{}".to_owned()).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

/// An event's params object in owned form, for clients and tests that read
/// frames (the gateway itself encodes with [`EventParams`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventFrameParams {
    /// The dotted type name, kept as a string so a client survives new types.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<TraceId>,
    pub ts: String,
    #[serde(default)]
    pub payload: Value,
}

impl EventFrameParams {
    /// The type as an [`EventType`], `None` for a type this crate does not know.
    pub fn event_type(&self) -> Option<EventType> {
        EventType::parse(&self.kind)
    }
}

#[cfg(test)]
mod tests;
