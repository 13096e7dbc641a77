//! The one [`HandoffStore`]: what each transition answers, over the statements a dialect runs.
//!
//! A dialect ([`HandoffDialect`]: `sqlite/handoffs.rs`, `postgres/handoffs.rs`) runs each
//! compare-and-set as one statement and reports only whether it moved a row. What a refusal
//! means for the caller (no session, a closed one, a handoff in flight, a state that did not
//! allow the move) is one rule for both, decided here from reads made after the refusal. Those
//! reads may see a later state than the refusal did (the handoff in flight may have finished
//! since), which only makes the answer fresher; the compare-and-set alone decided the move.

use async_trait::async_trait;

use tether_protocol::{now_ms, HandoffId, HandoffState, SessionId, SessionStatus};

use super::{
    truncate_utf8, CompleteOutcome, FailOutcome, HandoffRow, HandoffStore, RequestOutcome,
    MAX_HANDOFF_ERROR_BYTES,
};
use crate::StoreError;

/// The statements of the handoff queue in one dialect: each a single statement, so each
/// transition is atomic by itself (the module doc of `handoff.rs`). Every call is scoped by
/// profile, and a row of another profile is reported as absent.
#[async_trait]
pub(crate) trait HandoffDialect: Send + Sync {
    /// Inserts `row` (a new `pending` handoff) in the statement that checks that its session is
    /// in `row.profile`, not closed, and has no handoff in flight; whether it was inserted. A
    /// unique-index refusal (a racing request won) may come back as `Err(Conflict)`.
    async fn insert_if_allowed(&self, row: &HandoffRow) -> Result<bool, StoreError>;

    /// Moves the oldest `pending` handoff of `(profile, target)` to `running` at `now`.
    async fn claim(
        &self,
        profile: &str,
        target: &str,
        now: i64,
    ) -> Result<Option<HandoffRow>, StoreError>;

    /// `running → completed` at `now`; the row moved, `None` if it was not `running`.
    async fn complete_if_running(
        &self,
        profile: &str,
        id: &HandoffId,
        now: i64,
    ) -> Result<Option<HandoffRow>, StoreError>;

    /// `pending → failed` (and `running → failed` unless `only_if_pending`) with `error` at
    /// `now`; the row moved, `None` if its state did not allow it.
    async fn fail_if_allowed(
        &self,
        profile: &str,
        id: &HandoffId,
        error: &str,
        now: i64,
        only_if_pending: bool,
    ) -> Result<Option<HandoffRow>, StoreError>;

    /// A handoff's current state, `None` if there is no such handoff.
    async fn state_of(
        &self,
        profile: &str,
        id: &HandoffId,
    ) -> Result<Option<HandoffState>, StoreError>;

    /// The session's stored status, `None` if there is no such session.
    async fn session_status(
        &self,
        profile: &str,
        session_id: &SessionId,
    ) -> Result<Option<String>, StoreError>;

    /// The session's handoff in flight (`pending` or `running`), if any.
    async fn in_flight(
        &self,
        profile: &str,
        session_id: &SessionId,
    ) -> Result<Option<HandoffRow>, StoreError>;

    /// The session's most recently requested handoff, if any.
    async fn latest(
        &self,
        profile: &str,
        session_id: &SessionId,
    ) -> Result<Option<HandoffRow>, StoreError>;
}

/// The [`HandoffStore`] of a dialect: `PgHandoffs` and `SqliteHandoffs` are this over theirs.
pub(crate) struct Handoffs<D> {
    dialect: D,
}

impl<D: HandoffDialect> Handoffs<D> {
    /// The queue over `dialect`'s statements.
    pub(crate) fn over(dialect: D) -> Self {
        Handoffs { dialect }
    }
}

/// Whether a request's INSERT went in. A unique-index conflict is a refusal like the INSERT's
/// own check: another request won a race that check could not see (possible under
/// PostgreSQL's READ COMMITTED; not under SQLite's single writer, kept there for safety).
fn inserted(result: Result<bool, StoreError>) -> Result<bool, StoreError> {
    match result {
        Err(StoreError::Conflict(_)) => Ok(false),
        other => other,
    }
}

/// Why a refused request was refused, when its session says so (`status`: the session's, `None`
/// if it is not in the profile). `None` here: the session is open, so a handoff in flight was.
fn refused_by_session(status: Option<&str>) -> Option<RequestOutcome> {
    match status {
        None => Some(RequestOutcome::NoSession),
        Some(status) if status == SessionStatus::Closed.as_str() => {
            Some(RequestOutcome::SessionClosed)
        }
        Some(_) => None,
    }
}

/// What a refused `complete` answers, from the handoff's state read after the refusal.
fn not_completed(state: Option<HandoffState>) -> CompleteOutcome {
    state.map_or(CompleteOutcome::NotFound, CompleteOutcome::NotRunning)
}

/// What a refused `fail` answers, from the handoff's state read after the refusal.
fn not_failed(state: Option<HandoffState>) -> FailOutcome {
    state.map_or(FailOutcome::NotFound, FailOutcome::Unchanged)
}

#[async_trait]
impl<D: HandoffDialect> HandoffStore for Handoffs<D> {
    async fn request(
        &self,
        profile: &str,
        session_id: &SessionId,
        target: &str,
    ) -> Result<RequestOutcome, StoreError> {
        let now = now_ms();
        let row = HandoffRow {
            id: HandoffId::new(),
            session_id: session_id.clone(),
            profile: profile.to_string(),
            target: target.to_string(),
            state: HandoffState::Pending,
            error: None,
            created_at_ms: now,
            updated_at_ms: now,
        };
        if inserted(self.dialect.insert_if_allowed(&row).await)? {
            return Ok(RequestOutcome::Requested(row));
        }
        // Refused; say why (the module doc says why reading it afterwards is sound).
        let status = self.dialect.session_status(profile, session_id).await?;
        if let Some(outcome) = refused_by_session(status.as_deref()) {
            return Ok(outcome);
        }
        let in_flight = self.dialect.in_flight(profile, session_id).await?;
        Ok(RequestOutcome::InFlight(in_flight))
    }

    async fn claim(&self, profile: &str, target: &str) -> Result<Option<HandoffRow>, StoreError> {
        self.dialect.claim(profile, target, now_ms()).await
    }

    async fn complete(&self, profile: &str, id: &HandoffId) -> Result<CompleteOutcome, StoreError> {
        let moved = self
            .dialect
            .complete_if_running(profile, id, now_ms())
            .await?;
        if let Some(row) = moved {
            return Ok(CompleteOutcome::Completed(row));
        }
        Ok(not_completed(self.dialect.state_of(profile, id).await?))
    }

    async fn fail(
        &self,
        profile: &str,
        id: &HandoffId,
        error: &str,
        only_if_pending: bool,
    ) -> Result<FailOutcome, StoreError> {
        let error = truncate_utf8(error, MAX_HANDOFF_ERROR_BYTES);
        let moved = self
            .dialect
            .fail_if_allowed(profile, id, error, now_ms(), only_if_pending)
            .await?;
        if let Some(row) = moved {
            return Ok(FailOutcome::Failed(row));
        }
        Ok(not_failed(self.dialect.state_of(profile, id).await?))
    }

    async fn latest(
        &self,
        profile: &str,
        session_id: &SessionId,
    ) -> Result<Option<HandoffRow>, StoreError> {
        self.dialect.latest(profile, session_id).await
    }
}

#[cfg(test)]
mod tests;
