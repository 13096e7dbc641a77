//! The handoff work queue (PROTOCOL.md 1.4 "Handoff"): its rows, the outcome of each transition,
//! and the dialect-neutral [`HandoffStore`] trait.
//!
//! Every transition is a compare-and-set that the implementation runs as ONE statement, so no
//! two callers can both see the same `from` state and both move it: that is what makes
//! `handoff.claim` exactly-once. Every call is scoped by profile; another profile's handoff or
//! session is reported exactly like one that does not exist.
//!
//! Both stores implement the trait once, in `handoff/dialect.rs`, over their statements
//! ([`HandoffDialect`]): what a refused compare-and-set answers is one rule, not one per dialect.

mod dialect;
mod sql;
mod statements;

use async_trait::async_trait;

use tether_protocol::{HandoffId, HandoffState, SessionId};

use crate::StoreError;

pub(crate) use dialect::{HandoffDialect, Handoffs};
pub(crate) use sql::{HandoffSql, Ordering};
pub(crate) use statements::{Insert, Plain, Statements};

/// The longest `error` a failed handoff keeps, in bytes (UTF-8). Longer texts are cut at the last
/// character boundary within it, so one client's stack trace cannot bloat every `handoff.state`.
pub const MAX_HANDOFF_ERROR_BYTES: usize = 500;

/// One handoff as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoffRow {
    /// `h_` + ULID, minted by the store.
    pub id: HandoffId,
    /// The session being handed off.
    pub session_id: SessionId,
    /// The profile of the session (and so of the handoff).
    pub profile: String,
    /// Who may claim it (an opaque name chosen by the clients, e.g. `"phone"`).
    pub target: String,
    /// Where it is in `pending → running → completed | failed`.
    pub state: HandoffState,
    /// Why it failed (at most [`MAX_HANDOFF_ERROR_BYTES`]); `None` unless `failed`.
    pub error: Option<String>,
    /// When it was requested, ms since the Unix epoch.
    pub created_at_ms: i64,
    /// Its last transition, ms since the Unix epoch.
    pub updated_at_ms: i64,
}

/// What [`HandoffStore::request`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestOutcome {
    /// A new `pending` handoff.
    Requested(HandoffRow),
    /// Refused: the session already has a handoff in flight (`pending` or `running`), shown here
    /// when it could still be read after the refusal.
    InFlight(Option<HandoffRow>),
    /// Refused: no such session in this profile.
    NoSession,
    /// Refused: the session is closed.
    SessionClosed,
}

/// What [`HandoffStore::complete`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompleteOutcome {
    /// `running → completed`.
    Completed(HandoffRow),
    /// Refused: the handoff is not `running`; its current state, unchanged.
    NotRunning(HandoffState),
    /// No such handoff in this profile.
    NotFound,
}

/// What [`HandoffStore::fail`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailOutcome {
    /// Moved to `failed`, with the (truncated) error.
    Failed(HandoffRow),
    /// Not moved: its state did not allow it (already finished, or `running` with
    /// `only_if_pending`); the current state, unchanged.
    Unchanged(HandoffState),
    /// No such handoff in this profile.
    NotFound,
}

/// The handoff queue. Implementations run each transition as one atomic compare-and-set and may
/// be called from many tasks at once (`&self`).
#[async_trait]
pub trait HandoffStore: Send + Sync {
    /// Inserts a `pending` handoff of `session_id` for `target`, unless the session is not in
    /// `profile`, is closed, or already has a handoff in flight. The checks and the insert are
    /// one statement.
    async fn request(
        &self,
        profile: &str,
        session_id: &SessionId,
        target: &str,
    ) -> Result<RequestOutcome, StoreError>;

    /// Moves the oldest `pending` handoff of `(profile, target)` to `running` and returns it;
    /// `None` when there is none. Two concurrent claims never return the same handoff.
    async fn claim(&self, profile: &str, target: &str) -> Result<Option<HandoffRow>, StoreError>;

    /// `running → completed`.
    async fn complete(&self, profile: &str, id: &HandoffId) -> Result<CompleteOutcome, StoreError>;

    /// `pending | running → failed` (only `pending → failed` with `only_if_pending`), storing
    /// `error` cut to [`MAX_HANDOFF_ERROR_BYTES`].
    async fn fail(
        &self,
        profile: &str,
        id: &HandoffId,
        error: &str,
        only_if_pending: bool,
    ) -> Result<FailOutcome, StoreError>;

    /// The session's latest handoff (most recently requested), if any.
    async fn latest(
        &self,
        profile: &str,
        session_id: &SessionId,
    ) -> Result<Option<HandoffRow>, StoreError>;
}

/// `text` cut to at most `max` bytes, at a character boundary (never inside a UTF-8 sequence).
pub fn truncate_utf8(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    // A boundary is at most 3 bytes back (a UTF-8 sequence is at most 4 bytes long).
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_whole_characters() {
        assert_eq!(truncate_utf8("abc", 500), "abc");
        assert_eq!(truncate_utf8("abcdef", 3), "abc");
        // "é" is 2 bytes: cutting inside it drops it whole.
        assert_eq!(truncate_utf8("aé", 2), "a");
        assert_eq!(truncate_utf8("aé", 3), "aé");
        // A 4-byte character straddling the limit.
        let s = format!("{}😀", "x".repeat(498));
        assert_eq!(truncate_utf8(&s, 500), "x".repeat(498));
        assert_eq!(truncate_utf8("", 0), "");
        assert_eq!(truncate_utf8("é", 1), "");
    }
}
