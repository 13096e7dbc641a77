//! Compute-host frames (PROTOCOL Part 2): one JSON object per line over the
//! host's stdin/stdout, tagged by `"type"`.
//!
//! Any program in any language can be a compute host, so these types are the
//! whole contract; both the gateway and `tether host` use them.

use std::borrow::Cow;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::envelope::{exceeds_depth, MAX_JSON_DEPTH};
use crate::ids::{SessionId, TraceId, TurnId};
use crate::methods::Message;

/// Gateway → host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ToHost {
    /// Run a turn: the current segment's transcript plus the new prompt.
    #[serde(rename = "turn.start")]
    TurnStart(TurnStart),
    /// Stop a running turn.
    #[serde(rename = "interrupt")]
    Interrupt { turn_id: TurnId },
    /// A side request about a session, e.g. `op: "compress"`.
    #[serde(rename = "control")]
    Control(ControlRequest),
    #[serde(rename = "ping")]
    Ping { nonce: u64 },
    /// Forget the history held for a session (only to a host that keeps
    /// histories, PROTOCOL Part 2).
    #[serde(rename = "history.drop")]
    HistoryDrop { session_id: SessionId },
    /// Finish and exit.
    #[serde(rename = "shutdown")]
    Shutdown,
    /// The gateway's answer to a line it could not understand (either side
    /// may send one; it is otherwise ignored).
    #[serde(rename = "error")]
    Error { message: String },
}

/// `turn.start`: what a host needs to run a turn. One type for the whole
/// way: a session builds it, the host supervisor writes it to a host, and
/// `tether host` hands it to its engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnStart {
    pub turn_id: TurnId,
    pub session_id: SessionId,
    pub trace_id: TraceId,
    /// To a host that keeps histories: how many of the segment's messages
    /// it already holds for this session; `history` is then only the
    /// messages after them. Absent: `history` is the whole segment. A host
    /// hands its engine the whole segment either way (`None` there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_base: Option<u64>,
    /// The current segment's transcript, oldest first, kept as text from
    /// the session to the engine that reads it ([`History`]).
    pub history: History,
    pub prompt: String,
    /// The session's engine config (model, ...), opaque to the gateway and
    /// to the host loop.
    pub config: Map<String, Value>,
}

/// `control`: a side request about a session, e.g. `op: "compress"`. As
/// with [`TurnStart`], one type from the session that asks to the engine
/// that answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlRequest {
    pub request_id: String,
    pub op: String,
    pub session_id: SessionId,
    /// The current segment's transcript, oldest first.
    pub history: Vec<Message>,
    pub args: Value,
}

wire_enum! {
    /// How a turn ended on the host (errors are `turn.error`).
    pub enum TurnEndStatus {
        Complete = "complete",
        Interrupted = "interrupted",
    }
}

/// Host → gateway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum FromHost {
    /// The first line, within 10 s of the start.
    #[serde(rename = "hello")]
    Hello {
        protocol: u32,
        pid: u32,
        engine: String,
        version: String,
        /// The host keeps sessions' histories between turns, at most this
        /// many bytes of them as the gateway counts (PROTOCOL Part 2).
        /// Absent or 0: it is sent every turn's whole history.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        history_cache_bytes: Option<u64>,
    },
    /// Heartbeat: host liveness (not turn activity).
    #[serde(rename = "hb")]
    Hb { active_turns: u32, rss_kb: u64 },
    /// An event of a running turn.
    #[serde(rename = "event")]
    Event { turn_id: TurnId, event: HostEvent },
    #[serde(rename = "turn.end")]
    TurnEnd {
        turn_id: TurnId,
        status: TurnEndStatus,
        text: String,
        /// Token counts as the engine's model reported them (an object),
        /// passed on in `message.complete`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Value>,
    },
    #[serde(rename = "turn.error")]
    TurnError {
        turn_id: TurnId,
        reason: String,
        message: String,
    },
    #[serde(rename = "control.ack")]
    ControlAck { request_id: String, result: Value },
    #[serde(rename = "control.error")]
    ControlError { request_id: String, message: String },
    #[serde(rename = "pong")]
    Pong { nonce: u64 },
    #[serde(rename = "shutdown.ack")]
    ShutdownAck,
    /// The host's answer to a line it could not understand.
    #[serde(rename = "error")]
    Error { message: String },
}

/// The `turn.error` reason of a host that was sent a `history_base` it
/// does not hold (PROTOCOL Part 2). The gateway replaces such a host.
pub const HISTORY_MISMATCH: &str = "history_mismatch";

/// The event types a host may send in an `event` frame (PROTOCOL Part 2);
/// everything else a session emits is the gateway's own. The gateway
/// refuses the rest, and the `command` engine recognizes these in an
/// agent's output.
pub const HOST_EVENT_TYPES: [&str; 6] = [
    "message.delta",
    "reasoning.delta",
    "tool.start",
    "tool.complete",
    "todo.updated",
    "status.update",
];

/// The `status.update` kinds the gateway itself announces (a queued prompt,
/// a compression's progress, a handoff's transitions: PROTOCOL 1.5 and
/// Part 4). A host may send `status.update` with any other kind; one of
/// these from a host would tell clients of something that did not happen,
/// so the gateway refuses it.
pub const GATEWAY_STATUS_KINDS: [&str; 5] =
    ["queued", "compacting", "compacted", "ready", "handoff"];

/// An event inside a host `event` frame. The type stays a string: the
/// gateway decides which types a host may send and what to do with the rest
/// (offsets and revisions in the payload are recomputed by the gateway).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostEvent {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub payload: RawPayload,
}

/// A host event's payload as the JSON text the host wrote.
///
/// Events are most of what hosts send, and most event types go to the store
/// and to the peers unchanged: kept as text, a payload is parsed once (to
/// check it) and never rebuilt, where a [`Value`] cost a tree of allocations
/// to parse and a serialization to turn back into text. Two payloads are
/// equal when their texts are.
#[derive(Debug, Clone)]
pub struct RawPayload(Box<RawValue>);

impl RawPayload {
    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// Whether the payload is a JSON object (what every durable host event
    /// must carry).
    pub fn is_object(&self) -> bool {
        self.get().starts_with('{')
    }

    /// The payload as a [`RawValue`], without copying.
    pub fn into_raw(self) -> Box<RawValue> {
        self.0
    }
}

impl HostEvent {
    /// Why a host may not send this event, or `None` when it may: its type
    /// must be one of [`HOST_EVENT_TYPES`], and a `status.update` must not
    /// carry a kind of [`GATEWAY_STATUS_KINDS`]. (What else a payload must
    /// hold is checked where it is used.)
    pub fn forbidden(&self) -> Option<&'static str> {
        if !HOST_EVENT_TYPES.contains(&self.kind.as_str()) {
            return Some("an event type a host may not send");
        }
        if self.kind == "status.update" {
            #[derive(Deserialize)]
            struct Kind<'a> {
                #[serde(borrow)]
                kind: Cow<'a, str>,
            }
            // Read without building the payload: only `kind` is looked at.
            if let Ok(Kind { kind }) = serde_json::from_str::<Kind>(self.payload.get()) {
                if GATEWAY_STATUS_KINDS.contains(&kind.as_ref()) {
                    return Some("a status.update kind only the gateway announces");
                }
            }
        }
        None
    }
}

impl Default for RawPayload {
    /// `null`, the payload of an event frame without one.
    fn default() -> Self {
        RawPayload(RawValue::NULL.to_owned())
    }
}

impl PartialEq for RawPayload {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl From<Box<RawValue>> for RawPayload {
    fn from(raw: Box<RawValue>) -> Self {
        RawPayload(raw)
    }
}

impl From<Value> for RawPayload {
    fn from(value: Value) -> Self {
        RawPayload(crate::to_raw(&value))
    }
}

impl Serialize for RawPayload {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for RawPayload {
    /// Through a [`Value`]: this impl is what serde's internally tagged
    /// [`FromHost`] reaches, and its buffered content cannot give raw text
    /// back. The gateway's own decoder ([`HostLine`] for `FromHost`) reads
    /// event frames without it.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        serde_json::value::to_raw_value(&value)
            .map(RawPayload)
            .map_err(serde::de::Error::custom)
    }
}

/// How one side decodes the frames it reads.
pub trait HostLine: DeserializeOwned {
    /// Deepest `[`/`{` nesting accepted in a line, if this side bounds it
    /// (checked by a byte scan before the line is parsed).
    const MAX_DEPTH: Option<usize> = None;

    /// Decodes one line (no error classification: see [`parse_host_line`]).
    fn decode(line: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(line)
    }
}

impl HostLine for ToHost {
    /// `turn.start` carries the session's whole history, so it is read
    /// straight into its fields, the history left as text: serde's
    /// internally tagged enum would first buffer every key and value of it,
    /// the largest line a host reads, and decode every message.
    fn decode(line: &str) -> Result<Self, serde_json::Error> {
        #[derive(Deserialize)]
        struct Start {
            turn_id: TurnId,
            session_id: SessionId,
            trace_id: TraceId,
            #[serde(default)]
            history_base: Option<u64>,
            history: Box<RawValue>,
            prompt: String,
            config: Map<String, Value>,
        }
        if !tag_is(line, "turn.start") {
            return serde_json::from_str(line);
        }
        let s: Start = serde_json::from_str(line)?;
        let history = History::from_raw(s.history).ok_or_else(|| {
            <serde_json::Error as serde::de::Error>::custom("turn.start history is not an array")
        })?;
        Ok(ToHost::TurnStart(TurnStart {
            turn_id: s.turn_id,
            session_id: s.session_id,
            trace_id: s.trace_id,
            history_base: s.history_base,
            history,
            prompt: s.prompt,
            config: s.config,
        }))
    }
}

/// Whether `line` is an object whose `type` is `kind` (a scan that
/// allocates nothing unless the tag has escapes).
fn tag_is(line: &str, kind: &str) -> bool {
    #[derive(Deserialize)]
    struct Tag<'a> {
        #[serde(rename = "type", borrow)]
        kind: Cow<'a, str>,
    }
    serde_json::from_str::<Tag>(line).is_ok_and(|t| t.kind == kind)
}

impl HostLine for FromHost {
    /// What a host writes is bounded like what a client sends: a payload
    /// nested deeper would be stored and relayed to every client, whose
    /// own parsers may not survive it.
    const MAX_DEPTH: Option<usize> = Some(MAX_JSON_DEPTH);

    /// `event` frames, nearly every line a busy host writes, are read
    /// straight into their fields with the payload kept as text; serde's
    /// internally tagged enum would first buffer the whole object (every key
    /// and value allocated), then build the payload as a [`Value`]. Finding
    /// the tag first costs a scan that allocates nothing.
    fn decode(line: &str) -> Result<Self, serde_json::Error> {
        #[derive(Deserialize)]
        struct EventFrame {
            turn_id: TurnId,
            event: RawEvent,
        }
        #[derive(Deserialize)]
        struct RawEvent {
            #[serde(rename = "type")]
            kind: String,
            payload: Option<Box<RawValue>>,
        }
        if !tag_is(line, "event") {
            return serde_json::from_str(line);
        }
        let frame: EventFrame = serde_json::from_str(line)?;
        Ok(FromHost::Event {
            turn_id: frame.turn_id,
            event: HostEvent {
                kind: frame.event.kind,
                payload: frame.event.payload.map(RawPayload).unwrap_or_default(),
            },
        })
    }
}

/// Why a host line was rejected; either way the reply is
/// `{"type":"error","message"}` and the line is otherwise ignored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostFrameError {
    /// Not JSON, or a known type with wrong fields.
    #[error("invalid host frame: {0}")]
    Json(String),
    /// Valid JSON with a `type` this side does not know.
    #[error("unknown host frame type `{0}`")]
    UnknownType(String),
    /// Nested deeper than this side accepts ([`HostLine::MAX_DEPTH`]); not
    /// parsed at all.
    #[error("host frame nested deeper than {0} levels")]
    TooDeep(usize),
}

/// Encodes a frame as one line (JSON + `'\n'`). JSON text never contains a
/// raw newline, so the line framing is unambiguous.
pub fn encode_host_line<T: Serialize>(frame: &T) -> String {
    let mut s = match serde_json::to_string(frame) {
        Ok(s) => s,
        // Only a type serde_json cannot express gets here (a programming
        // error); send something the other side answers sensibly.
        Err(e) => serde_json::json!({"type": "error", "message": e.to_string()}).to_string(),
    };
    s.push('\n');
    s
}

impl ToHost {
    /// This frame as one line, what the gateway writes to a host. The same
    /// bytes as [`encode_host_line`], but a `turn.start` is spliced: its
    /// history is the session's own encoding, copied in rather than
    /// checked and serialized again (it is most of the line).
    pub fn to_line(&self) -> String {
        match self {
            ToHost::TurnStart(turn) => turn.line(),
            other => encode_host_line(other),
        }
    }
}

impl TurnStart {
    /// This turn as a line, as [`ToHost::to_line`] writes it.
    pub fn line(&self) -> String {
        self.to_line()
            .unwrap_or_else(|_| encode_host_line(&ToHost::TurnStart(self.clone())))
    }

    /// The fields in the order of PROTOCOL Part 2 (the order serde's
    /// derive writes them), the history as its text.
    fn to_line(&self) -> Result<String, serde_json::Error> {
        self.line_with(self.history_base, self.history.as_json())
    }

    /// The line for a host that holds the first `base` messages of this
    /// segment: `history_base` and only the messages after them, `items`
    /// (array items, as [`History::after`] gives them).
    pub fn line_after(&self, base: u64, items: &str) -> Result<String, serde_json::Error> {
        let mut history = String::with_capacity(items.len() + 2);
        history.push('[');
        history.push_str(items);
        history.push(']');
        self.line_with(Some(base), &history)
    }

    fn line_with(&self, base: Option<u64>, history: &str) -> Result<String, serde_json::Error> {
        let mut line = String::with_capacity(history.len() + self.prompt.len() + 256);
        line.push_str(r#"{"type":"turn.start","turn_id":"#);
        line.push_str(&serde_json::to_string(&self.turn_id)?);
        line.push_str(r#","session_id":"#);
        line.push_str(&serde_json::to_string(&self.session_id)?);
        line.push_str(r#","trace_id":"#);
        line.push_str(&serde_json::to_string(&self.trace_id)?);
        if let Some(base) = base {
            line.push_str(r#","history_base":"#);
            line.push_str(&base.to_string());
        }
        line.push_str(r#","history":"#);
        line.push_str(history);
        line.push_str(r#","prompt":"#);
        line.push_str(&serde_json::to_string(&self.prompt)?);
        line.push_str(r#","config":"#);
        line.push_str(&serde_json::to_string(&self.config)?);
        line.push_str("}\n");
        Ok(line)
    }
}

/// Decodes one line (a trailing `\r\n` or `\n` is fine).
pub fn parse_host_line<T: HostLine>(line: &str) -> Result<T, HostFrameError> {
    if let Some(limit) = T::MAX_DEPTH {
        if exceeds_depth(line.as_bytes(), limit) {
            return Err(HostFrameError::TooDeep(limit));
        }
    }
    let err = match T::decode(line) {
        Ok(frame) => return Ok(frame),
        Err(e) => e,
    };
    // Tell an unknown `type` from a malformed known one by probing `T` with
    // just the tag: a known tag then fails on a missing field (or succeeds,
    // for field-less frames), an unknown one on "unknown variant".
    #[derive(Deserialize)]
    struct Tag {
        #[serde(rename = "type")]
        kind: String,
    }
    if let Ok(Tag { kind }) = serde_json::from_str::<Tag>(line) {
        let probe = serde_json::json!({ "type": kind });
        if let Err(e) = serde_json::from_value::<T>(probe) {
            if e.to_string().starts_with("unknown variant") {
                return Err(HostFrameError::UnknownType(kind));
            }
        }
    }
    Err(HostFrameError::Json(err.to_string()))
}

mod history;
pub use history::{History, Mark};
mod peek;
pub use peek::{peek_frame, FramePeek};

#[cfg(test)]
mod tests;
