//! The one [`StoreRead`], over either store's read pool: the statements are
//! [`ReadSql`]'s (one text, `crate::reads`), the decoders `crate::rows`', and a store gives
//! only its pool, how its errors read, the index hints its planner needs, and what must live
//! as long as its reader (`sqlite/reader.rs`, `postgres/reader.rs`).
//!
//! Each read is one statement, so it sees one committed snapshot and never an uncommitted
//! event: that is what lets the Session actor fan out only what the writer confirmed.

use async_trait::async_trait;
use sqlx::{Database, Encode, Executor, IntoArguments, Pool, Type};

use tether_protocol::{SessionId, SessionStatus};

use crate::generic::{self, MapErr};
use crate::paging::{events_since_binds, ListPage};
use crate::reads::{IndexHints, ReadSql};
use crate::rows::{event_from_row, session_from_row, StoreRow};
use crate::{EventRow, SessionRow, StoreError, StoreRead};

/// A store's read pool and statements; `K` is kept for as long as the reader lives.
pub(crate) struct Reader<DB: Database, K: Send + Sync + 'static = ()> {
    pool: Pool<DB>,
    epoch: String,
    sql: ReadSql,
    read_err: MapErr,
    _keep: K,
}

impl<DB: Database, K: Send + Sync + 'static> Reader<DB, K> {
    pub(crate) fn new(
        pool: Pool<DB>,
        epoch: String,
        hints: &IndexHints,
        read_err: MapErr,
        keep: K,
    ) -> Self {
        Reader {
            pool,
            epoch,
            sql: ReadSql::new(hints),
            read_err,
            _keep: keep,
        }
    }
}

#[async_trait]
impl<DB, K> StoreRead for Reader<DB, K>
where
    DB: Database,
    K: Send + Sync + 'static,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    DB::Row: StoreRow,
{
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
        generic::optional(&self.pool, query, self.read_err, session_from_row).await
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
        page.fill(query.fetch(&self.pool), self.read_err, session_from_row)
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
        generic::all(&self.pool, query, self.read_err, event_from_row).await
    }

    async fn latest_todos(&self, session_id: &SessionId) -> Result<Option<EventRow>, StoreError> {
        let query = sqlx::query(&self.sql.latest_todos).bind(session_id.as_str());
        generic::optional(&self.pool, query, self.read_err, event_from_row).await
    }

    async fn branch_titles(
        &self,
        profile: &str,
        parent: &SessionId,
    ) -> Result<Vec<String>, StoreError> {
        let query = sqlx::query(&self.sql.branch_titles)
            .bind(profile)
            .bind(parent.as_str());
        generic::all(&self.pool, query, self.read_err, |r| r.text(0)).await
    }

    async fn sessions_with_turn_marker(&self) -> Result<Vec<(String, SessionId)>, StoreError> {
        let query = sqlx::query(&self.sql.with_turn_marker);
        generic::all(&self.pool, query, self.read_err, |r| {
            Ok((r.text(0)?, SessionId::from(r.text(1)?)))
        })
        .await
    }

    async fn count_open_sessions(&self) -> Result<u64, StoreError> {
        let query = sqlx::query(&self.sql.count_not_closed).bind(SessionStatus::Closed.as_str());
        let count = generic::optional(&self.pool, query, self.read_err, |r| r.int(0))
            .await?
            .unwrap_or(0);
        Ok(u64::try_from(count).unwrap_or(0))
    }

    async fn segment_events(
        &self,
        session_id: &SessionId,
        upto: u64,
    ) -> Result<Vec<EventRow>, StoreError> {
        let query = sqlx::query(&self.sql.segment)
            .bind(session_id.as_str())
            .bind(i64::try_from(upto).unwrap_or(i64::MAX));
        generic::all(&self.pool, query, self.read_err, event_from_row).await
    }
}
