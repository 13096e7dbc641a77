//! Results of the session methods, and the shapes they share with events
//! and host frames (`SessionInfo`, `Message`, `TodoItem`).
//!
//! `Option` fields serialize as `null` (the contract lists them as
//! `…|null`) unless the contract says the field is absent, which is marked
//! "omitted" below.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::events::CompleteStatus;
use crate::ids::{PeerId, SessionId, TraceId, TurnId};

wire_enum! {
    /// A session's lifecycle state as clients see it.
    pub enum SessionStatus {
        /// Live, no turn running.
        Idle = "idle",
        /// A turn is running.
        Running = "running",
        /// All state is in the store; no live actor (resume brings it back).
        Parked = "parked",
        /// Closed for good.
        Closed = "closed",
    }
}

/// A session as listed and returned by create/resume/branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub session_id: SessionId,
    pub profile: String,
    pub title: String,
    pub status: SessionStatus,
    pub created_at: String,
    pub updated_at: String,
    pub parent_session_id: Option<SessionId>,
    /// Bumped by each compaction (a new history segment).
    pub history_version: u64,
    pub message_count: u64,
    pub latest_seq: u64,
    /// Peers attached now.
    pub peers: u32,
    pub close_on_disconnect: bool,
    /// Who is attached now (`peers` of them), in the answers the session
    /// gives about itself (`session.resume`, `session.create`); omitted
    /// where only the count is known (`session.list`, `session.branch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attached: Option<Vec<AttachedPeer>>,
    /// On a cluster, the node that owns the session now (omitted on a
    /// single gateway, and for a session no live node owns: parked, or its
    /// owner died and nobody has needed it since).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_node: Option<String>,
}

wire_enum! {
    /// How a peer reaches the gateway.
    pub enum PeerTransport {
        /// `/ws`.
        WebSocket = "ws",
        /// `GET /v1/sessions/{id}/events`.
        Sse = "sse",
        /// `POST /rpc` (never attached: it cannot receive live frames).
        Http = "http",
        /// `tether serve --stdio`.
        Stdio = "stdio",
        /// A stream of the Vercel AI SDK routes (`/v1/ai-sdk/...`).
        AiSdk = "ai-sdk",
        /// A stream of the AG-UI routes (`/v1/ag-ui...`).
        AgUi = "ag-ui",
    }
}

/// One attached peer: its id (the `peer_id` of its `gateway.ready`) and
/// its transport.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachedPeer {
    pub peer_id: PeerId,
    pub transport: PeerTransport,
}

wire_enum! {
    /// The role of a transcript entry.
    pub enum MessageRole {
        /// From `message.user`.
        User = "user",
        /// From `message.complete`.
        Assistant = "assistant",
        /// One per `tool.complete`; `text` is the result as JSON text.
        Tool = "tool",
        /// From `message.system` and a compaction's summary.
        System = "system",
    }
}

/// A transcript entry, derived from durable events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// The seq of the event it comes from.
    pub seq: u64,
    pub role: MessageRole,
    pub text: String,
    /// Omitted when the message belongs to no turn (seeds, summaries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    pub ts: String,
    /// How the turn ended, on an assistant message whose turn did not
    /// complete (`error`, `interrupted`); omitted otherwise. Without it a
    /// client reading a transcript could not tell a reply cut short by a
    /// crash or an interrupt from a whole one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CompleteStatus>,
    /// The `message.complete`'s `failure_reason` (`host_crash`,
    /// `gateway_restart`, `dequeued`, ...), when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// The message of the turn's `error` event, on an assistant message
    /// whose turn failed with one (what an engine said went wrong).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `session.create`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateResult {
    pub session: SessionInfo,
    pub epoch: String,
}

/// The running turn in a resume, so a client attaching mid-turn can render
/// the text so far and then apply `message.delta`s by their `offset`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveTurn {
    pub turn_id: TurnId,
    pub trace_id: TraceId,
    /// Assistant text streamed so far.
    pub text: String,
    pub started_at: String,
    /// The seq of the turn's `message.user`: a client that wants the
    /// turn's stored events from its start replays from just before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_seq: Option<u64>,
}

/// One todo entry (in `todo.updated` and a resume's `todos`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoItem {
    pub id: String,
    pub text: String,
    pub status: String,
}

/// A session's todo list as a full snapshot: the payload of `todo.updated`
/// and a resume's `todos` (the latest one). `revision` is assigned by the
/// gateway, one more per update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Todos {
    pub items: Vec<TodoItem>,
    pub revision: u64,
}

/// Compares already-encoded events by their text. `RawValue` has no
/// `PartialEq` of its own; the text is what goes on the wire, so it is the
/// right notion of equality here.
fn raw_eq(a: &[Arc<RawValue>], b: &[Arc<RawValue>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.get() == y.get())
}

fn opt_raw_eq(a: &Option<Vec<Arc<RawValue>>>, b: &Option<Vec<Arc<RawValue>>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => raw_eq(a, b),
        _ => false,
    }
}

/// `session.resume`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResumeResult {
    pub session: SessionInfo,
    pub epoch: String,
    pub latest_seq: u64,
    /// The current segment's transcript; omitted with `omit_messages`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<Message>>,
    pub active_turn: Option<ActiveTurn>,
    pub todos: Option<Todos>,
    /// Missed durable events (the params objects of their frames), kept
    /// pre-encoded and shared with the session's ring, so a replay from the
    /// ring costs neither a copy nor a re-serialization.
    /// Omitted when `last_seen` was not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<Arc<RawValue>>>,
    /// Omitted when `last_seen` was not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    /// Omitted when `last_seen` was not given; `true` means "too many
    /// missed: rebuild from `messages`".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync: Option<bool>,
}

impl PartialEq for ResumeResult {
    fn eq(&self, o: &Self) -> bool {
        self.session == o.session
            && self.epoch == o.epoch
            && self.latest_seq == o.latest_seq
            && self.messages == o.messages
            && self.active_turn == o.active_turn
            && self.todos == o.todos
            && opt_raw_eq(&self.events, &o.events)
            && self.truncated == o.truncated
            && self.resync == o.resync
    }
}

/// `session.detach`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetachResult {
    /// False when the caller was not attached.
    pub detached: bool,
}

/// `session.list`, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListResult {
    pub sessions: Vec<SessionInfo>,
    pub next_cursor: Option<String>,
}

/// `session.close`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloseResult {
    pub closed: bool,
}

/// `session.delete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteResult {
    pub deleted: bool,
}

/// `session.branch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchResult {
    pub session: SessionInfo,
}

wire_enum! {
    /// Whether a submitted prompt started at once or waits behind a turn.
    pub enum SubmitStatus {
        Started = "started",
        Queued = "queued",
    }
}

/// `prompt.submit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitResult {
    pub status: SubmitStatus,
    pub turn_id: TurnId,
    pub trace_id: TraceId,
    /// The prompt's `dedupe_key` matched an earlier one's: this is that
    /// turn, and nothing new was accepted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
}

wire_enum! {
    /// Whether `session.interrupt` found a turn to stop.
    pub enum InterruptStatus {
        Interrupted = "interrupted",
        Idle = "idle",
    }
}

/// `session.interrupt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterruptResult {
    pub status: InterruptStatus,
}

/// `session.compress`: done within the wait, or still running on the host
/// (the late answer is applied when it comes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum CompressResult {
    Compressed { history_version: u64, removed: u64 },
    Pending { request_id: String },
}

/// `session.events.since`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SinceResult {
    /// The params objects of the event frames, pre-encoded (shared).
    pub events: Vec<Arc<RawValue>>,
    pub latest_seq: u64,
    /// Some requested events were removed by retention.
    pub truncated: bool,
    /// The page was cut by `limit`; ask again from the last seq.
    pub has_more: bool,
    pub epoch: String,
}

impl PartialEq for SinceResult {
    fn eq(&self, o: &Self) -> bool {
        raw_eq(&self.events, &o.events)
            && self.latest_seq == o.latest_seq
            && self.truncated == o.truncated
            && self.has_more == o.has_more
            && self.epoch == o.epoch
    }
}

#[cfg(test)]
mod tests;
