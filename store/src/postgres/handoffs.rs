//! The [`HandoffStore`] of the PostgreSQL store.
//!
//! As in SQLite (`sqlite/handoffs.rs` says why), transitions do not go through the writer: each
//! is one statement on a small pool of its own. Under READ COMMITTED two statements can run at
//! once, so each transition stays a compare-and-set by itself: the state it moves from is in
//! its WHERE clause (re-checked by the server on a row another transaction just changed), a
//! claim skips rows another claim has locked (`FOR UPDATE SKIP LOCKED`: two claims never return
//! the same handoff, and neither waits for the other), and the partial unique index of
//! `0003_handoffs.sql` keeps two racing requests from both inserting.

use async_trait::async_trait;
use sqlx::postgres::PgPool;

use tether_protocol::{now_ms, HandoffId, HandoffState, SessionId, SessionStatus};

use crate::handoff::{
    truncate_utf8, CompleteOutcome, FailOutcome, HandoffRow, HandoffStore, RequestOutcome,
    MAX_HANDOFF_ERROR_BYTES,
};
use crate::rows::{handoff_from_row, parse_handoff_state, StoreRow, HANDOFF_COLUMNS};
use crate::StoreError;

use super::errors::map_sqlx;

/// The [`HandoffStore`] of the PostgreSQL store.
pub(crate) struct PgHandoffs {
    pool: PgPool,
    sql: Sql,
}

/// The statements, built once.
struct Sql {
    request: String,
    claim: String,
    complete: String,
    fail: String,
    latest: String,
    in_flight: String,
    state_of: String,
}

impl Sql {
    fn new() -> Self {
        let pending = HandoffState::Pending.as_str();
        let running = HandoffState::Running.as_str();
        let completed = HandoffState::Completed.as_str();
        let failed = HandoffState::Failed.as_str();
        let closed = SessionStatus::Closed.as_str();
        Sql {
            request: format!(
                "INSERT INTO handoffs ({HANDOFF_COLUMNS}) \
                 SELECT $1, $2, $3, $4, '{pending}', NULL, $5, $5 \
                 WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $2 AND profile = $3 \
                     AND status <> '{closed}') \
                 AND NOT EXISTS (SELECT 1 FROM handoffs WHERE session_id = $2 \
                     AND state IN ('{pending}', '{running}'))"
            ),
            // The oldest pending one (insertion order breaks ties within a millisecond).
            claim: format!(
                "UPDATE handoffs SET state = '{running}', updated_at_ms = $3 \
                 WHERE id = (SELECT id FROM handoffs WHERE profile = $1 AND target = $2 \
                     AND state = '{pending}' ORDER BY created_at_ms, ord LIMIT 1 \
                     FOR UPDATE SKIP LOCKED) \
                 AND state = '{pending}' RETURNING {HANDOFF_COLUMNS}"
            ),
            complete: format!(
                "UPDATE handoffs SET state = '{completed}', updated_at_ms = $3 \
                 WHERE id = $1 AND profile = $2 AND state = '{running}' RETURNING {HANDOFF_COLUMNS}"
            ),
            // `$5` = only_if_pending.
            fail: format!(
                "UPDATE handoffs SET state = '{failed}', error = $3, updated_at_ms = $4 \
                 WHERE id = $1 AND profile = $2 \
                 AND (state = '{pending}' OR (NOT $5 AND state = '{running}')) \
                 RETURNING {HANDOFF_COLUMNS}"
            ),
            // Insertion order, not the clock: a clock that steps back must not hide the newest.
            latest: format!(
                "SELECT {HANDOFF_COLUMNS} FROM handoffs WHERE session_id = $1 AND profile = $2 \
                 ORDER BY ord DESC LIMIT 1"
            ),
            in_flight: format!(
                "SELECT {HANDOFF_COLUMNS} FROM handoffs WHERE session_id = $1 AND profile = $2 \
                 AND state IN ('{pending}', '{running}')"
            ),
            state_of: "SELECT state FROM handoffs WHERE id = $1 AND profile = $2".to_string(),
        }
    }
}

impl PgHandoffs {
    pub(crate) fn new(pool: PgPool) -> Self {
        PgHandoffs {
            pool,
            sql: Sql::new(),
        }
    }

    /// The current state of a handoff, read after a compare-and-set refused it.
    async fn state_of(
        &self,
        profile: &str,
        id: &HandoffId,
    ) -> Result<Option<HandoffState>, StoreError> {
        let row = sqlx::query(&self.sql.state_of)
            .bind(id.as_str())
            .bind(profile)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_sqlx)?;
        row.map(|r| parse_handoff_state(&r.text(0)?)).transpose()
    }

    /// The session's stored status, `None` if it is not in `profile`.
    async fn session_status(
        &self,
        profile: &str,
        session_id: &SessionId,
    ) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT status FROM sessions WHERE id = $1 AND profile = $2")
            .bind(session_id.as_str())
            .bind(profile)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_sqlx)?;
        row.map(|r| r.text(0)).transpose()
    }

    async fn in_flight(
        &self,
        profile: &str,
        session_id: &SessionId,
    ) -> Result<Option<HandoffRow>, StoreError> {
        let row = sqlx::query(&self.sql.in_flight)
            .bind(session_id.as_str())
            .bind(profile)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_sqlx)?;
        row.as_ref().map(handoff_from_row).transpose()
    }
}

#[async_trait]
impl HandoffStore for PgHandoffs {
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
        let inserted = sqlx::query(&self.sql.request)
            .bind(row.id.as_str())
            .bind(session_id.as_str())
            .bind(profile)
            .bind(target)
            .bind(now)
            .execute(&self.pool)
            .await
            .map_err(map_sqlx);
        match inserted {
            Ok(done) if done.rows_affected() == 1 => return Ok(RequestOutcome::Requested(row)),
            Ok(_) => {}
            // The partial unique index refused it: another request won a race that the INSERT's
            // own check could not see under READ COMMITTED.
            Err(StoreError::Conflict(_)) => {}
            Err(e) => return Err(e),
        }
        // Refused; say why. These reads may see a later state than the refusal did (the
        // handoff in flight may have finished since), which only makes the answer fresher.
        match self.session_status(profile, session_id).await? {
            None => return Ok(RequestOutcome::NoSession),
            Some(status) if status == SessionStatus::Closed.as_str() => {
                return Ok(RequestOutcome::SessionClosed)
            }
            Some(_) => {}
        }
        Ok(RequestOutcome::InFlight(
            self.in_flight(profile, session_id).await?,
        ))
    }

    async fn claim(&self, profile: &str, target: &str) -> Result<Option<HandoffRow>, StoreError> {
        let row = sqlx::query(&self.sql.claim)
            .bind(profile)
            .bind(target)
            .bind(now_ms())
            .fetch_optional(&self.pool)
            .await
            .map_err(map_sqlx)?;
        row.as_ref().map(handoff_from_row).transpose()
    }

    async fn complete(&self, profile: &str, id: &HandoffId) -> Result<CompleteOutcome, StoreError> {
        let row = sqlx::query(&self.sql.complete)
            .bind(id.as_str())
            .bind(profile)
            .bind(now_ms())
            .fetch_optional(&self.pool)
            .await
            .map_err(map_sqlx)?;
        if let Some(row) = row {
            return Ok(CompleteOutcome::Completed(handoff_from_row(&row)?));
        }
        Ok(match self.state_of(profile, id).await? {
            Some(state) => CompleteOutcome::NotRunning(state),
            None => CompleteOutcome::NotFound,
        })
    }

    async fn fail(
        &self,
        profile: &str,
        id: &HandoffId,
        error: &str,
        only_if_pending: bool,
    ) -> Result<FailOutcome, StoreError> {
        let row = sqlx::query(&self.sql.fail)
            .bind(id.as_str())
            .bind(profile)
            .bind(truncate_utf8(error, MAX_HANDOFF_ERROR_BYTES))
            .bind(now_ms())
            .bind(only_if_pending)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_sqlx)?;
        if let Some(row) = row {
            return Ok(FailOutcome::Failed(handoff_from_row(&row)?));
        }
        Ok(match self.state_of(profile, id).await? {
            Some(state) => FailOutcome::Unchanged(state),
            None => FailOutcome::NotFound,
        })
    }

    async fn latest(
        &self,
        profile: &str,
        session_id: &SessionId,
    ) -> Result<Option<HandoffRow>, StoreError> {
        let row = sqlx::query(&self.sql.latest)
            .bind(session_id.as_str())
            .bind(profile)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_sqlx)?;
        row.as_ref().map(handoff_from_row).transpose()
    }
}
