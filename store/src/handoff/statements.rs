//! The one [`HandoffDialect`], over either store's handoff pool: each transition is one
//! statement of [`HandoffSql`], bound and decoded here once. A store gives its pool, how its
//! errors read, and how a request's INSERT runs ([`Insert`]: as it is, or on a cluster node
//! under the session's fence).

use async_trait::async_trait;
use sqlx::query::Query;
use sqlx::{Database, Encode, Executor, IntoArguments, Pool, Type};

use tether_protocol::{HandoffId, HandoffState, SessionId};

use super::{HandoffDialect, HandoffRow, HandoffSql};
use crate::generic::{self, Affected, MapErr};
use crate::rows::{handoff_from_row, parse_handoff_state, StoreRow};
use crate::StoreError;

/// How a store runs a request's INSERT (`query`, for `session_id`): the rows it inserted.
#[async_trait]
pub(crate) trait Insert<DB: Database>: Send + Sync + 'static {
    async fn insert<'q>(
        &self,
        pool: &Pool<DB>,
        query: Query<'q, DB, DB::Arguments<'q>>,
        session_id: &SessionId,
    ) -> Result<u64, StoreError>
    where
        DB::Arguments<'q>: IntoArguments<'q, DB>;
}

/// A request's INSERT run as it is: one statement, its own transaction.
pub(crate) struct Plain(pub MapErr);

#[async_trait]
impl<DB> Insert<DB> for Plain
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::QueryResult: Affected,
{
    async fn insert<'q>(
        &self,
        pool: &Pool<DB>,
        query: Query<'q, DB, DB::Arguments<'q>>,
        _session_id: &SessionId,
    ) -> Result<u64, StoreError>
    where
        DB::Arguments<'q>: IntoArguments<'q, DB>,
    {
        let done = query.execute(pool).await.map_err(self.0)?;
        Ok(done.rows())
    }
}

/// A store's handoff statements.
pub(crate) struct Statements<DB: Database, I> {
    pool: Pool<DB>,
    sql: HandoffSql,
    read_err: MapErr,
    write_err: MapErr,
    insert: I,
}

impl<DB: Database, I> Statements<DB, I> {
    pub(crate) fn new(
        pool: Pool<DB>,
        sql: HandoffSql,
        read_err: MapErr,
        write_err: MapErr,
        insert: I,
    ) -> Self {
        Statements {
            pool,
            sql,
            read_err,
            write_err,
            insert,
        }
    }
}

#[async_trait]
impl<DB, I> HandoffDialect for Statements<DB, I>
where
    DB: Database,
    I: Insert<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    DB::Row: StoreRow,
{
    async fn insert_if_allowed(&self, row: &HandoffRow) -> Result<bool, StoreError> {
        let query = sqlx::query(&self.sql.request)
            .bind(row.id.as_str())
            .bind(row.session_id.as_str())
            .bind(row.profile.clone())
            .bind(row.target.clone())
            .bind(row.created_at_ms);
        let inserted = self
            .insert
            .insert(&self.pool, query, &row.session_id)
            .await?;
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
        generic::optional(&self.pool, query, self.write_err, handoff_from_row).await
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
        generic::optional(&self.pool, query, self.write_err, handoff_from_row).await
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
        generic::optional(&self.pool, query, self.write_err, handoff_from_row).await
    }

    async fn state_of(
        &self,
        profile: &str,
        id: &HandoffId,
    ) -> Result<Option<HandoffState>, StoreError> {
        let query = sqlx::query(&self.sql.state_of)
            .bind(id.as_str())
            .bind(profile);
        let state = generic::optional(&self.pool, query, self.read_err, |r| r.text(0)).await?;
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
        generic::optional(&self.pool, query, self.read_err, |r| r.text(0)).await
    }

    async fn in_flight(
        &self,
        profile: &str,
        session_id: &SessionId,
    ) -> Result<Option<HandoffRow>, StoreError> {
        let query = sqlx::query(&self.sql.in_flight)
            .bind(session_id.as_str())
            .bind(profile);
        generic::optional(&self.pool, query, self.read_err, handoff_from_row).await
    }

    async fn latest(
        &self,
        profile: &str,
        session_id: &SessionId,
    ) -> Result<Option<HandoffRow>, StoreError> {
        let query = sqlx::query(&self.sql.latest)
            .bind(session_id.as_str())
            .bind(profile);
        generic::optional(&self.pool, query, self.read_err, handoff_from_row).await
    }
}
