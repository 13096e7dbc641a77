//! The plain data the store reads and writes. No behaviour: these are rows, not objects.

use serde_json::Value;

use tether_protocol::{SessionId, SessionStatus};

/// One durable event as stored. The same shape goes in (appends) and comes out (replay).
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    /// Position in the session's stream, from 1, contiguous.
    pub seq: u64,
    /// The event type, dotted (`message.user`, `session.compacted`, ...).
    pub kind: String,
    /// The event's payload, a JSON object serialized once by the caller. The store keeps the
    /// text as is (no re-parsing on the hot path) so replay returns byte-identical frames.
    pub payload: String,
    /// The turn this event belongs to, if any.
    pub turn_id: Option<String>,
    /// The trace of the request that caused it, if any.
    pub trace_id: Option<String>,
    /// When it was emitted, ms since the Unix epoch.
    pub ts_ms: i64,
}

/// A session row as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRow {
    /// Globally unique (ULID), but every read is scoped by `profile`.
    pub id: SessionId,
    /// The profile that owns the session.
    pub profile: String,
    /// Display title.
    pub title: String,
    /// Lifecycle status as last persisted.
    pub status: SessionStatus,
    /// The session this one was branched from.
    pub parent_session_id: Option<SessionId>,
    /// Session kind (`chat`).
    pub kind: String,
    /// Bumped by every compaction.
    pub history_version: u64,
    /// Close (rather than park) when the last peer leaves.
    pub close_on_disconnect: bool,
    /// Per-session engine pin (JSON object), if any.
    pub engine_pin: Option<Value>,
    /// Whether the session follows later changes of its profile's engine configuration.
    pub follow_profile_config: bool,
    /// Marker of the turn in flight (JSON), used to finish turns after a gateway restart.
    pub turn_marker: Option<Value>,
    /// Creation time, ms since the Unix epoch.
    pub created_at_ms: i64,
    /// Last update, ms since the Unix epoch.
    pub updated_at_ms: i64,
    /// Highest durable seq (0 if no events).
    pub latest_seq: u64,
    /// Number of transcript messages.
    pub message_count: u64,
    /// First seq still stored (1 unless retention removed older events); `truncated` in the
    /// protocol derives from it.
    pub retained_from_seq: u64,
}

/// A session to create. Its status starts `idle`, `updated_at_ms = created_at_ms`, and its
/// `latest_seq` is the last seq of the events created with it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSession {
    /// The new id (ULID).
    pub id: SessionId,
    /// Owning profile; created in `profiles` if it does not exist yet.
    pub profile: String,
    /// Display title.
    pub title: String,
    /// The session this one is branched from.
    pub parent_session_id: Option<SessionId>,
    /// Session kind (`chat`).
    pub kind: String,
    /// Close (rather than park) when the last peer leaves.
    pub close_on_disconnect: bool,
    /// Per-session engine pin (JSON object), if any.
    pub engine_pin: Option<Value>,
    /// Whether the session follows later changes of its profile's engine configuration.
    pub follow_profile_config: bool,
    /// Creation time, ms since the Unix epoch.
    pub created_at_ms: i64,
    /// Number of transcript messages among the seed events.
    pub message_count: u64,
}

/// Changes to a session row. `None` leaves a column as it is; `turn_marker: Some(None)` clears
/// the marker. Absolute values, not deltas: the Session actor owns the truth and the row mirrors it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionPatch {
    /// New status.
    pub status: Option<SessionStatus>,
    /// New title.
    pub title: Option<String>,
    /// New transcript message count.
    pub message_count: Option<u64>,
    /// New history version (after a compaction).
    pub history_version: Option<u64>,
    /// `Some(Some(v))` sets the marker, `Some(None)` clears it.
    pub turn_marker: Option<Option<Value>>,
    /// New update time.
    pub updated_at_ms: Option<i64>,
}

impl SessionPatch {
    /// True when the patch changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == SessionPatch::default()
    }
}

/// One unit of work for [`StoreWrite::commit`](crate::StoreWrite::commit). Each op is atomic on
/// its own (wholly written or not at all) and independent of the others in its batch.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOp {
    /// Create a session row and its first events (`session.created` + seed messages), all or
    /// nothing. The events' seqs must be 1, 2, 3, ...
    CreateSession {
        /// The row to create.
        session: NewSession,
        /// Its first events.
        events: Vec<EventRow>,
    },
    /// Append durable events and patch the session row. The seqs must be contiguous and the
    /// first must be the row's `latest_seq + 1`; `latest_seq` moves to the last one. An empty
    /// `events` only applies the patch.
    Append {
        /// The session appended to.
        session_id: SessionId,
        /// The events, ascending seq.
        events: Vec<EventRow>,
        /// Row changes written with them.
        patch: SessionPatch,
    },
    /// Only patch the row (e.g. a status change without an event).
    Patch {
        /// The session patched.
        session_id: SessionId,
        /// Row changes.
        patch: SessionPatch,
    },
}

impl WriteOp {
    /// The events the op writes (none for a patch).
    pub fn events(&self) -> &[EventRow] {
        match self {
            WriteOp::CreateSession { events, .. } | WriteOp::Append { events, .. } => events,
            WriteOp::Patch { .. } => &[],
        }
    }
}
