//! The handoff statements of the PostgreSQL store ([`HandoffDialect`]); what their answers
//! mean is decided once for both dialects, in `handoff/dialect.rs`.
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
use sqlx::postgres::{PgArguments, PgPool, Postgres};
use sqlx::query::Query;

use tether_protocol::{HandoffId, HandoffState, SessionId};

use crate::handoff::{HandoffDialect, HandoffRow, HandoffSql, Handoffs, Ordering};
use crate::rows::{handoff_from_row, parse_handoff_state, StoreRow};
use crate::StoreError;

use super::errors::map_sqlx;
use super::fencing::{self as fenced, Fencing};

/// The [`HandoffStore`](crate::HandoffStore) of the PostgreSQL store: the shared queue
/// (`handoff/dialect.rs`) over this dialect's statements.
pub(crate) type PgHandoffs = Handoffs<PgHandoffSql>;

/// The handoff statements of the PostgreSQL store, on the handoff pool.
pub(crate) struct PgHandoffSql {
    pool: PgPool,
    sql: HandoffSql,
    /// A cluster node's: `request` is fenced (module doc).
    fencing: Option<Fencing>,
}

type PgQuery<'q> = Query<'q, Postgres, PgArguments>;

/// Insertion order is the `ord` sequence; a claim skips rows another claim has locked.
const ORDERING: Ordering = Ordering {
    inserted: "ord",
    claim_lock: "FOR UPDATE SKIP LOCKED",
};

impl Handoffs<PgHandoffSql> {
    pub(crate) fn new(pool: PgPool) -> Self {
        Handoffs::over(PgHandoffSql {
            pool,
            sql: HandoffSql::new(&ORDERING),
            fencing: None,
        })
    }

    /// A cluster node's handoff queue (module doc).
    pub(crate) fn fenced(pool: PgPool, fencing: Fencing) -> Self {
        Handoffs::over(PgHandoffSql {
            pool,
            sql: HandoffSql::new(&ORDERING),
            fencing: Some(fencing),
        })
    }
}

impl PgHandoffSql {
    /// Cluster mode: the request's insert, in a transaction that holds the session's
    /// ownership row under this node's fence.
    async fn insert_fenced(
        &self,
        fencing: &Fencing,
        query: PgQuery<'_>,
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

    /// Runs a statement that answers with at most one handoff.
    async fn one(&self, query: PgQuery<'_>) -> Result<Option<HandoffRow>, StoreError> {
        let row = query.fetch_optional(&self.pool).await.map_err(map_sqlx)?;
        row.as_ref().map(handoff_from_row).transpose()
    }

    /// Runs a statement that answers with at most one TEXT value.
    async fn text(&self, query: PgQuery<'_>) -> Result<Option<String>, StoreError> {
        let row = query.fetch_optional(&self.pool).await.map_err(map_sqlx)?;
        row.map(|r| r.text(0)).transpose()
    }
}

#[async_trait]
impl HandoffDialect for PgHandoffSql {
    async fn insert_if_allowed(&self, row: &HandoffRow) -> Result<bool, StoreError> {
        let insert = sqlx::query(&self.sql.request)
            .bind(row.id.as_str())
            .bind(row.session_id.as_str())
            .bind(&row.profile)
            .bind(&row.target)
            .bind(row.created_at_ms);
        let inserted = match &self.fencing {
            None => insert
                .execute(&self.pool)
                .await
                .map(|done| done.rows_affected())
                .map_err(map_sqlx)?,
            Some(fencing) => self.insert_fenced(fencing, insert, &row.session_id).await?,
        };
        Ok(inserted == 1)
    }

    async fn claim(
        &self,
        profile: &str,
        target: &str,
        now: i64,
    ) -> Result<Option<HandoffRow>, StoreError> {
        let query = sqlx::query(&self.sql.claim)
            .bind(profile)
            .bind(target)
            .bind(now);
        self.one(query).await
    }

    async fn complete_if_running(
        &self,
        profile: &str,
        id: &HandoffId,
        now: i64,
    ) -> Result<Option<HandoffRow>, StoreError> {
        let query = sqlx::query(&self.sql.complete)
            .bind(id.as_str())
            .bind(profile)
            .bind(now);
        self.one(query).await
    }

    async fn fail_if_allowed(
        &self,
        profile: &str,
        id: &HandoffId,
        error: &str,
        now: i64,
        only_if_pending: bool,
    ) -> Result<Option<HandoffRow>, StoreError> {
        let query = sqlx::query(&self.sql.fail)
            .bind(id.as_str())
            .bind(profile)
            .bind(error)
            .bind(now)
            .bind(only_if_pending);
        self.one(query).await
    }

    async fn state_of(
        &self,
        profile: &str,
        id: &HandoffId,
    ) -> Result<Option<HandoffState>, StoreError> {
        let query = sqlx::query(&self.sql.state_of)
            .bind(id.as_str())
            .bind(profile);
        let state = self.text(query).await?;
        state.map(|s| parse_handoff_state(&s)).transpose()
    }

    async fn session_status(
        &self,
        profile: &str,
        session_id: &SessionId,
    ) -> Result<Option<String>, StoreError> {
        let query = sqlx::query(&self.sql.session_status)
            .bind(session_id.as_str())
            .bind(profile);
        self.text(query).await
    }

    async fn in_flight(
        &self,
        profile: &str,
        session_id: &SessionId,
    ) -> Result<Option<HandoffRow>, StoreError> {
        let query = sqlx::query(&self.sql.in_flight)
            .bind(session_id.as_str())
            .bind(profile);
        self.one(query).await
    }

    async fn latest(
        &self,
        profile: &str,
        session_id: &SessionId,
    ) -> Result<Option<HandoffRow>, StoreError> {
        let query = sqlx::query(&self.sql.latest)
            .bind(session_id.as_str())
            .bind(profile);
        self.one(query).await
    }
}
