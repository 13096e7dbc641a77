//! The one [`StoreErase`], over either store's pool: the order of statements, the batching,
//! and the trim rule ([`super::trim_upto`]). The statements are [`EraseSql`]'s; a store adds
//! only how it opens a write transaction, how its errors read, and what it does about space
//! and the retention lease ([`Housekeeping`]: `sqlite/erase.rs`, `postgres/erase.rs`).

use async_trait::async_trait;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row, Type};

use tether_protocol::{now_ms, SessionId, SessionStatus};

use super::sql::{Dialect, EraseSql};
use super::{Idle, Scope, StoreErase, Trimmed};
use crate::generic::{Affected, MapErr};
use crate::StoreError;

/// What a store does about space and the retention lease: the part of [`StoreErase`] that is
/// not statements in common.
#[async_trait]
pub(crate) trait Housekeeping: Send + Sync + 'static {
    type DB: Database;

    /// [`StoreErase::reclaim`].
    async fn reclaim(&self, pool: &Pool<Self::DB>, max_pages: u32) -> Result<u64, StoreError>;

    /// [`StoreErase::try_lead`].
    async fn try_lead(&self, pool: &Pool<Self::DB>) -> Result<bool, StoreError>;

    /// [`StoreErase::release_lead`].
    async fn release_lead(&self) -> Result<(), StoreError>;
}

/// A store's erase pool, statements and housekeeping.
pub(crate) struct Eraser<H: Housekeeping> {
    pool: Pool<H::DB>,
    house: H,
    sql: EraseSql,
    /// How a write transaction starts: SQLite takes the write lock first (`BEGIN IMMEDIATE`, as
    /// its writer does), so two writers never deadlock upgrading a read.
    begin: &'static str,
    read_err: MapErr,
    write_err: MapErr,
    /// The statement run after cut erases are finished, if any.
    after_finish: Option<&'static str>,
    /// The statement that tells others of an erase, inside its transaction, if any.
    erased: Option<&'static str>,
}

fn to_u64(v: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Invalid(format!("stored {what} is {v}")))
}

/// The profiles of a scope as a JSON array, and which of the scoped statements to run.
fn scope_bind(scope: Scope<'_>) -> (usize, String) {
    match scope {
        Scope::Profile(p) => (0, serde_json::json!([p]).to_string()),
        Scope::AllBut(others) => (1, serde_json::json!(others).to_string()),
    }
}

fn batch_size(batch: u32) -> i64 {
    i64::from(batch.max(1))
}

impl<H, DB> Eraser<H>
where
    H: Housekeeping<DB = DB>,
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
    usize: ColumnIndex<DB::Row>,
    DB::QueryResult: Affected,
{
    pub(crate) fn new(
        pool: Pool<DB>,
        house: H,
        dialect: &Dialect,
        begin: &'static str,
        read_err: MapErr,
        write_err: MapErr,
    ) -> Self {
        Eraser {
            pool,
            house,
            sql: EraseSql::new(dialect),
            begin,
            read_err,
            write_err,
            after_finish: dialect.after_finish,
            erased: dialect.erased,
        }
    }

    /// Step 1 of an erase (`crate::erase`): the row and what hangs on it, recorded in
    /// `erasing`; the branches it unlinked. `None` if the session is not `profile`'s.
    async fn unlink(
        &self,
        profile: &str,
        id: &str,
        life: Option<i64>,
    ) -> Result<Option<Vec<SessionId>>, StoreError> {
        let w = self.write_err;
        let mut tx = self.pool.begin_with(self.begin).await.map_err(w)?;
        let gone: Option<i64> = sqlx::query_scalar(&self.sql.delete_session)
            .bind(id)
            .bind(profile)
            .bind(life)
            .fetch_optional(&mut *tx)
            .await
            .map_err(w)?;
        let Some(events) = gone else {
            tx.rollback().await.map_err(w)?;
            return Ok(None);
        };
        sqlx::query(&self.sql.count_erased)
            .bind(events)
            .execute(&mut *tx)
            .await
            .map_err(w)?;
        sqlx::query(&self.sql.mark_erasing)
            .bind(id)
            .bind(now_ms())
            .execute(&mut *tx)
            .await
            .map_err(w)?;
        let branches: Vec<String> = sqlx::query_scalar(&self.sql.unlink_branches)
            .bind(id)
            .fetch_all(&mut *tx)
            .await
            .map_err(w)?;
        for hanging in &self.sql.delete_hanging {
            sqlx::query(hanging)
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(w)?;
        }
        if let Some(erased) = self.erased {
            sqlx::query(erased)
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(w)?;
        }
        tx.commit().await.map_err(w)?;
        Ok(Some(branches.into_iter().map(SessionId::from).collect()))
    }

    /// Step 2 for one session: its events, `batch` a transaction, then its `erasing` row.
    async fn purge(&self, id: &str, batch: u32) -> Result<u64, StoreError> {
        let w = self.write_err;
        let mut removed = 0;
        loop {
            let n = sqlx::query(&self.sql.delete_events)
                .bind(id)
                .bind(batch_size(batch))
                .execute(&self.pool)
                .await
                .map_err(w)?
                .rows();
            removed += n;
            if n == 0 {
                break;
            }
        }
        sqlx::query(&self.sql.unmark_erasing)
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(w)?;
        Ok(removed)
    }
}

#[async_trait]
impl<H, DB> StoreErase for Eraser<H>
where
    H: Housekeeping<DB = DB>,
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
    usize: ColumnIndex<DB::Row>,
    DB::QueryResult: Affected,
{
    async fn delete_session(
        &self,
        profile: &str,
        id: &SessionId,
        life: Option<i64>,
        batch: u32,
    ) -> Result<Option<Vec<SessionId>>, StoreError> {
        let Some(branches) = self.unlink(profile, id.as_str(), life).await? else {
            return Ok(None);
        };
        self.purge(id.as_str(), batch).await?;
        Ok(Some(branches))
    }

    async fn erase_profile(&self, profile: &str, batch: u32) -> Result<u64, StoreError> {
        let w = self.write_err;
        let mut erased = 0;
        loop {
            let ids: Vec<String> = sqlx::query_scalar(&self.sql.profile_sessions)
                .bind(profile)
                .bind(batch_size(batch))
                .fetch_all(&self.pool)
                .await
                .map_err(self.read_err)?;
            if ids.is_empty() {
                break;
            }
            for id in ids {
                if self.unlink(profile, &id, None).await?.is_some() {
                    self.purge(&id, batch).await?;
                    erased += 1;
                }
            }
        }
        let mut tx = self.pool.begin_with(self.begin).await.map_err(w)?;
        for statement in &self.sql.drop_profile {
            sqlx::query(statement)
                .bind(profile)
                .execute(&mut *tx)
                .await
                .map_err(w)?;
        }
        tx.commit().await.map_err(w)?;
        Ok(erased)
    }

    async fn finish_erasing(&self, batch: u32) -> Result<u64, StoreError> {
        // A few sessions a sweep: each may hold many batches of events.
        const SESSIONS_PER_SWEEP: i64 = 16;
        let ids: Vec<String> = sqlx::query_scalar(&self.sql.erasing)
            .bind(SESSIONS_PER_SWEEP)
            .fetch_all(&self.pool)
            .await
            .map_err(self.read_err)?;
        let mut removed = 0;
        for id in ids {
            removed += self.purge(&id, batch).await?;
        }
        if let Some(statement) = self.after_finish {
            sqlx::query(statement)
                .bind(batch_size(batch))
                .execute(&self.pool)
                .await
                .map_err(self.write_err)?;
        }
        Ok(removed)
    }

    async fn idle_since(
        &self,
        scope: Scope<'_>,
        status: SessionStatus,
        before_ms: i64,
        limit: u32,
    ) -> Result<Vec<Idle>, StoreError> {
        let (which, profiles) = scope_bind(scope);
        let rows: Vec<(String, String, i64)> = sqlx::query_as(&self.sql.idle_since[which])
            .bind(profiles)
            .bind(status.as_str())
            .bind(before_ms)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(self.read_err)?;
        Ok(rows
            .into_iter()
            .map(|(profile, id, life)| Idle {
                profile,
                id: SessionId::from(id),
                life,
            })
            .collect())
    }

    async fn trim_candidates(
        &self,
        scope: Scope<'_>,
        max_events: Option<u64>,
        before_ms: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(String, SessionId)>, StoreError> {
        let (which, profiles) = scope_bind(scope);
        let max_events = max_events.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let rows: Vec<(String, String)> = sqlx::query_as(&self.sql.trim_candidates[which])
            .bind(profiles)
            .bind(max_events)
            .bind(before_ms)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(self.read_err)?;
        Ok(with_ids(rows))
    }

    // One transaction per step, each deciding with `trim_upto` from what it reads.
    async fn trim(
        &self,
        id: &SessionId,
        max_events: Option<u64>,
        before_ms: Option<i64>,
        batch: u32,
    ) -> Result<Option<Trimmed>, StoreError> {
        let w = self.write_err;
        let mut removed = 0;
        loop {
            let mut tx = self.pool.begin_with(self.begin).await.map_err(w)?;
            let Some(row) = sqlx::query(&self.sql.trim_bounds)
                .bind(id.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(w)?
            else {
                return Ok(None);
            };
            let from: i64 = row.try_get(0).map_err(w)?;
            let latest: i64 = row.try_get(1).map_err(w)?;
            let compacted: Option<i64> = row.try_get(2).map_err(w)?;
            let by_age = match before_ms {
                Some(before) => sqlx::query_scalar::<_, Option<i64>>(&self.sql.trim_by_age)
                    .bind(id.as_str())
                    .bind(from)
                    .bind(from.saturating_add(batch_size(batch)))
                    .bind(before)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(w)?,
                None => None,
            };
            let Some(upto) = super::trim_upto(from, latest, compacted, max_events, by_age, batch)
            else {
                tx.commit().await.map_err(w)?;
                return Ok(Some(Trimmed {
                    retained_from_seq: to_u64(from, "retained_from_seq")?,
                    removed,
                }));
            };
            let n = sqlx::query(&self.sql.trim_events)
                .bind(id.as_str())
                .bind(upto)
                .execute(&mut *tx)
                .await
                .map_err(w)?
                .rows();
            sqlx::query(&self.sql.trim_mark)
                .bind(id.as_str())
                .bind(upto + 1)
                .execute(&mut *tx)
                .await
                .map_err(w)?;
            if let Some(erased) = self.erased {
                sqlx::query(erased)
                    .bind(id.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(w)?;
            }
            tx.commit().await.map_err(w)?;
            removed += n;
        }
    }

    async fn reclaim(&self, max_pages: u32) -> Result<u64, StoreError> {
        self.house.reclaim(&self.pool, max_pages).await
    }

    async fn try_lead(&self) -> Result<bool, StoreError> {
        self.house.try_lead(&self.pool).await
    }

    async fn release_lead(&self) -> Result<(), StoreError> {
        self.house.release_lead().await
    }
}

fn with_ids(rows: Vec<(String, String)>) -> Vec<(String, SessionId)> {
    rows.into_iter()
        .map(|(profile, id)| (profile, SessionId::from(id)))
        .collect()
}
