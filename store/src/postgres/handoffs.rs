//! The [`HandoffStore`] of the PostgreSQL store.
//!
//! As in SQLite (`sqlite/handoffs.rs` says why), transitions do not go through the writer: each
//! is one statement on a small pool of its own. Under READ COMMITTED two statements can run at
//! once, so each transition stays a compare-and-set by itself: the state it moves from is in
//! its WHERE clause (re-checked by the server on a row another transaction just changed), a
//! claim skips rows another claim has locked (`FOR UPDATE SKIP LOCKED`: two claims never return
//! the same handoff, and neither waits for the other), and the partial unique index of
//! `0003_handoffs.sql` keeps two racing requests from both inserting.
//!
//! On a cluster node (`cluster/`), `request` is a write of the session by its owner: it runs
//! in a transaction that first locks the session's ownership row and checks node and fence,
//! like the writer's batches, and answers [`StoreError::NotOwner`] otherwise. The other
//! transitions (`claim`, `complete`, `fail`) touch only the handoff row, by compare-and-set on
//! its state, so they are already safe with several nodes at once and stay unfenced.

use async_trait::async_trait;
use sqlx::postgres::{PgPool, PgRow};

use tether_protocol::{now_ms, HandoffId, HandoffState, SessionId, SessionStatus};

use crate::handoff::{
    truncate_utf8, CompleteOutcome, FailOutcome, HandoffRow, HandoffStore, RequestOutcome,
    MAX_HANDOFF_ERROR_BYTES,
};
use crate::StoreError;

use super::cluster::{fenced, Fencing};
use super::errors::map_sqlx;
use super::rows::get;

/// The columns, in the order [`handoff_from_row`] reads them.
const COLUMNS: &str = "id, session_id, profile, target, state, error, created_at_ms, updated_at_ms";

/// The [`HandoffStore`] of the PostgreSQL store.
pub(crate) struct PgHandoffs {
    pool: PgPool,
    sql: Sql,
    /// A cluster node's: `request` is fenced (module doc).
    fencing: Option<Fencing>,
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
                "INSERT INTO handoffs ({COLUMNS}) \
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
                 AND state = '{pending}' RETURNING {COLUMNS}"
            ),
            complete: format!(
                "UPDATE handoffs SET state = '{completed}', updated_at_ms = $3 \
                 WHERE id = $1 AND profile = $2 AND state = '{running}' RETURNING {COLUMNS}"
            ),
            // `$5` = only_if_pending.
            fail: format!(
                "UPDATE handoffs SET state = '{failed}', error = $3, updated_at_ms = $4 \
                 WHERE id = $1 AND profile = $2 \
                 AND (state = '{pending}' OR (NOT $5 AND state = '{running}')) \
                 RETURNING {COLUMNS}"
            ),
            // Insertion order, not the clock: a clock that steps back must not hide the newest.
            latest: format!(
                "SELECT {COLUMNS} FROM handoffs WHERE session_id = $1 AND profile = $2 \
                 ORDER BY ord DESC LIMIT 1"
            ),
            in_flight: format!(
                "SELECT {COLUMNS} FROM handoffs WHERE session_id = $1 AND profile = $2 \
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
            fencing: None,
        }
    }

    /// A cluster node's handoff queue (module doc).
    pub(crate) fn fenced(pool: PgPool, fencing: Fencing) -> Self {
        PgHandoffs {
            fencing: Some(fencing),
            ..PgHandoffs::new(pool)
        }
    }

    /// Cluster mode: the request's insert, in a transaction that holds the session's
    /// ownership row under this node's fence.
    async fn insert_fenced(
        &self,
        fencing: &Fencing,
        query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
        session_id: &SessionId,
    ) -> Result<u64, StoreError> {
        let Some(fence) = fencing.fences.get(session_id) else {
            return Err(StoreError::NotOwner {
                session_id: session_id.clone(),
                fence: 0,
            });
        };
        let mut tx = self.pool.begin().await.map_err(map_sqlx)?;
        let refused = fenced::check(&mut tx, &fencing.node, &[(session_id.as_str(), fence)])
            .await
            .map_err(map_sqlx)?;
        if let Some(e) = refused.into_values().next() {
            fencing.fences.forget(session_id, fence);
            return Err(e);
        }
        let done = query.execute(&mut *tx).await.map_err(map_sqlx)?;
        tx.commit().await.map_err(map_sqlx)?;
        Ok(done.rows_affected())
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
        row.map(|r| parse_state(&get::<String>(&r, 0)?)).transpose()
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
        row.map(|r| get::<String>(&r, 0)).transpose()
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
        let insert = sqlx::query(&self.sql.request)
            .bind(row.id.as_str())
            .bind(session_id.as_str())
            .bind(profile)
            .bind(target)
            .bind(now);
        let inserted = match &self.fencing {
            None => insert
                .execute(&self.pool)
                .await
                .map(|done| done.rows_affected())
                .map_err(map_sqlx),
            Some(fencing) => self.insert_fenced(fencing, insert, session_id).await,
        };
        match inserted {
            Ok(1) => return Ok(RequestOutcome::Requested(row)),
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

fn parse_state(text: &str) -> Result<HandoffState, StoreError> {
    HandoffState::parse(text)
        .ok_or_else(|| StoreError::Invalid(format!("stored handoff state is {text:?}")))
}

/// Decodes a row selected (or returned) with [`COLUMNS`].
fn handoff_from_row(row: &PgRow) -> Result<HandoffRow, StoreError> {
    Ok(HandoffRow {
        id: HandoffId::from(get::<String>(row, 0)?),
        session_id: SessionId::from(get::<String>(row, 1)?),
        profile: get(row, 2)?,
        target: get(row, 3)?,
        state: parse_state(&get::<String>(row, 4)?)?,
        error: get(row, 5)?,
        created_at_ms: get(row, 6)?,
        updated_at_ms: get(row, 7)?,
    })
}
