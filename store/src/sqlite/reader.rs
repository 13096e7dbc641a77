//! Reads over the read-only pool.
//!
//! Under WAL each read sees the last committed state without blocking (or being blocked by) the
//! writer. Readers never see an uncommitted event: that is what lets the Session actor fan out
//! only what the writer confirmed.

use async_trait::async_trait;
use sqlx::query::Query;
use sqlx::sqlite::{Sqlite, SqliteArguments, SqlitePool, SqliteRow};

use tether_protocol::{SessionId, SessionStatus};

use crate::paging::{events_since_binds, ListPage};
use crate::reads::{IndexHints, ReadSql};
use crate::{EventRow, SessionRow, StoreError, StoreRead};

use super::errors::{map_sqlx, Doing};
use super::rows::{event_from_row, session_from_row, StoreRow};

/// Left to itself, the planner walks a session's whole event range in the primary key to
/// find its latest compaction (~45 ms at 200k events) instead of using the partial index of
/// compactions (~10 µs); the partial indexes of todo snapshots and turn markers make those
/// reads one seek too.
const HINTS: IndexHints = IndexHints {
    compactions: "INDEXED BY events_compactions",
    todos: "INDEXED BY events_todos",
    turn_markers: "INDEXED BY sessions_with_turn_marker",
};

/// The [`StoreRead`] of the SQLite store.
pub(crate) struct SqliteReader {
    pool: SqlitePool,
    epoch: String,
    sql: ReadSql,
    /// Dropped with the reader, which stops the background checkpointer.
    _stop_checkpoints: tokio::sync::oneshot::Sender<()>,
}

type SqliteQuery<'q> = Query<'q, Sqlite, SqliteArguments<'q>>;

impl SqliteReader {
    pub(crate) fn new(
        pool: SqlitePool,
        epoch: String,
        stop_checkpoints: tokio::sync::oneshot::Sender<()>,
    ) -> Self {
        SqliteReader {
            pool,
            epoch,
            sql: ReadSql::new(&HINTS),
            _stop_checkpoints: stop_checkpoints,
        }
    }

    /// Runs a read that answers with at most one row.
    async fn optional<T: Send>(
        &self,
        query: SqliteQuery<'_>,
        decode: fn(&SqliteRow) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        let row = query.fetch_optional(&self.pool).await.map_err(read_err)?;
        row.as_ref().map(decode).transpose()
    }

    /// Runs a read and decodes every row it answers.
    async fn all<T: Send>(
        &self,
        query: SqliteQuery<'_>,
        decode: fn(&SqliteRow) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let rows = query.fetch_all(&self.pool).await.map_err(read_err)?;
        rows.iter().map(decode).collect()
    }
}

fn read_err(e: sqlx::Error) -> StoreError {
    map_sqlx(e, Doing::Read)
}

#[async_trait]
impl StoreRead for SqliteReader {
    fn epoch(&self) -> &str {
        &self.epoch
    }

    async fn get_session(
        &self,
        profile: &str,
        id: &SessionId,
    ) -> Result<Option<SessionRow>, StoreError> {
        let query = sqlx::query(&self.sql.get_session)
            .bind(id.as_str())
            .bind(profile);
        self.optional(query, session_from_row).await
    }

    async fn list_sessions_within(
        &self,
        profile: &str,
        include_closed: bool,
        cursor: Option<&str>,
        limit: u32,
        max_bytes: usize,
    ) -> Result<(Vec<SessionRow>, Option<String>), StoreError> {
        let (page, after) = ListPage::start(cursor, limit, max_bytes)?;
        let query = match &after {
            None => sqlx::query(&self.sql.list_first)
                .bind(profile)
                .bind(include_closed)
                .bind(page.fetch()),
            Some(after) => sqlx::query(&self.sql.list_after)
                .bind(profile)
                .bind(include_closed)
                .bind(page.fetch())
                .bind(after.created_at_ms)
                .bind(after.id.as_str()),
        };
        // Streamed, not fetched whole: the page decides row by row where it ends
        // (`crate::paging`), so a page never holds much more than `max_bytes` in memory.
        page.fill(query.fetch(&self.pool), read_err, session_from_row)
            .await
    }

    async fn events_since(
        &self,
        session_id: &SessionId,
        after: u64,
        limit: u32,
    ) -> Result<Vec<EventRow>, StoreError> {
        let Some((after, limit)) = events_since_binds(after, limit) else {
            return Ok(Vec::new());
        };
        let query = sqlx::query(&self.sql.events_since)
            .bind(session_id.as_str())
            .bind(after)
            .bind(limit);
        self.all(query, event_from_row).await
    }

    async fn latest_todos(&self, session_id: &SessionId) -> Result<Option<EventRow>, StoreError> {
        let query = sqlx::query(&self.sql.latest_todos).bind(session_id.as_str());
        self.optional(query, event_from_row).await
    }

    async fn branch_titles(
        &self,
        profile: &str,
        parent: &SessionId,
    ) -> Result<Vec<String>, StoreError> {
        let query = sqlx::query(&self.sql.branch_titles)
            .bind(profile)
            .bind(parent.as_str());
        self.all(query, |r| r.text(0)).await
    }

    async fn sessions_with_turn_marker(&self) -> Result<Vec<(String, SessionId)>, StoreError> {
        let query = sqlx::query(&self.sql.with_turn_marker);
        self.all(query, |r| Ok((r.text(0)?, SessionId::from(r.text(1)?))))
            .await
    }

    async fn count_open_sessions(&self) -> Result<u64, StoreError> {
        let row = sqlx::query(&self.sql.count_not_closed)
            .bind(SessionStatus::Closed.as_str())
            .fetch_one(&self.pool)
            .await
            .map_err(read_err)?;
        Ok(u64::try_from(row.int(0)?).unwrap_or(0))
    }

    async fn segment_events(
        &self,
        session_id: &SessionId,
        upto: u64,
    ) -> Result<Vec<EventRow>, StoreError> {
        let query = sqlx::query(&self.sql.segment)
            .bind(session_id.as_str())
            .bind(i64::try_from(upto).unwrap_or(i64::MAX));
        self.all(query, event_from_row).await
    }
}
