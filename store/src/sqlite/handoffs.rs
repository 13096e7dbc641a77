//! The handoff statements of the SQLite store ([`HandoffDialect`]); what their answers mean
//! is decided once for both dialects, in `handoff/dialect.rs`.
//!
//! # Which connection
//!
//! Handoff transitions do NOT go through the StoreWriter's connection; they have a connection of
//! their own (a pool of exactly one, with the store's `busy_timeout`). Why:
//!
//! - Each transition is one statement, hence one transaction by itself: it gains nothing from the
//!   StoreWriter's group commit, which exists to amortise many small event appends.
//! - A transition answers with data (the claimed row, the state that refused it); the writer's
//!   ops only succeed or fail, and teaching it compare-and-set results would put branches on the
//!   event hot path for a rare operation.
//! - SQLite admits one writer at a time anyway (WAL): a handoff statement and a writer batch
//!   simply take turns on the database's write lock, each waiting up to `busy_timeout`. Both sides
//!   take the lock before they read (the writer with `BEGIN IMMEDIATE`, a single UPDATE/INSERT
//!   statement by itself), so neither can hit SQLITE_BUSY_SNAPSHOT mid-transaction.
//! - One connection, not several: handoff calls then queue in the pool (first come, first
//!   served) instead of in SQLite's sleep-and-retry busy handler, where contending connections
//!   back off for milliseconds at a time.
//!
//! The cost: a transition and the `status.update` event that announces it are two transactions
//! (the event is appended by the session, through the StoreWriter, after the transition
//! committed). A crash between them loses the announcement, never the transition; the row is
//! the truth and `handoff.state` reads it.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::query::Query;
use sqlx::sqlite::{Sqlite, SqliteArguments, SqlitePool, SqlitePoolOptions};

use tether_protocol::{HandoffId, HandoffState, SessionId};

use crate::handoff::{HandoffDialect, HandoffRow, HandoffSql, Handoffs, Ordering};
use crate::rows::{handoff_from_row, parse_handoff_state, StoreRow};
use crate::{StoreConfig, StoreError};

use super::base_options;
use super::errors::{map_sqlx, Doing};

/// The [`HandoffStore`](crate::HandoffStore) of the SQLite store: the shared queue
/// (`handoff/dialect.rs`) over this dialect's statements.
pub(crate) type SqliteHandoffs = Handoffs<SqliteHandoffSql>;

/// The handoff statements of the SQLite store, on the handoff connection.
pub(crate) struct SqliteHandoffSql {
    pool: SqlitePool,
    sql: HandoffSql,
}

type SqliteQuery<'q> = Query<'q, Sqlite, SqliteArguments<'q>>;

/// Insertion order is the rowid; a claim needs no lock of its own (one writer at a time).
const ORDERING: Ordering = Ordering {
    inserted: "rowid",
    claim_lock: "",
};

impl Handoffs<SqliteHandoffSql> {
    /// Opens the handoff connection on an existing, migrated store.
    pub(crate) async fn open(cfg: &StoreConfig) -> Result<Self, StoreError> {
        // Callers queue for the one connection; the one ahead may wait up to a busy_timeout
        // for the write lock, so allow a couple of those before calling the store unavailable.
        let acquire = cfg.busy_timeout.max(Duration::from_secs(1)) * 2;
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .acquire_timeout(acquire)
            .connect_with(base_options(cfg))
            .await
            .map_err(|e| map_sqlx(e, Doing::Open))?;
        Ok(Handoffs::over(SqliteHandoffSql {
            pool,
            sql: HandoffSql::new(&ORDERING),
        }))
    }
}

impl SqliteHandoffSql {
    /// Runs a statement that answers with at most one handoff.
    async fn one(
        &self,
        query: SqliteQuery<'_>,
        doing: Doing,
    ) -> Result<Option<HandoffRow>, StoreError> {
        let row = query
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| map_sqlx(e, doing))?;
        row.as_ref().map(handoff_from_row).transpose()
    }

    /// Runs a statement that answers with at most one TEXT value.
    async fn text(&self, query: SqliteQuery<'_>) -> Result<Option<String>, StoreError> {
        let row = query
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| map_sqlx(e, Doing::Read))?;
        row.map(|r| r.text(0)).transpose()
    }
}

#[async_trait]
impl HandoffDialect for SqliteHandoffSql {
    async fn insert_if_allowed(&self, row: &HandoffRow) -> Result<bool, StoreError> {
        let done = sqlx::query(&self.sql.request)
            .bind(row.id.as_str())
            .bind(row.session_id.as_str())
            .bind(&row.profile)
            .bind(&row.target)
            .bind(row.created_at_ms)
            .execute(&self.pool)
            .await
            .map_err(|e| map_sqlx(e, Doing::Write))?;
        Ok(done.rows_affected() == 1)
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
        self.one(query, Doing::Write).await
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
        self.one(query, Doing::Write).await
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
        self.one(query, Doing::Write).await
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
        self.one(query, Doing::Read).await
    }

    async fn latest(
        &self,
        profile: &str,
        session_id: &SessionId,
    ) -> Result<Option<HandoffRow>, StoreError> {
        let query = sqlx::query(&self.sql.latest)
            .bind(session_id.as_str())
            .bind(profile);
        self.one(query, Doing::Read).await
    }
}
