//! [`StoreErase`] of the PostgreSQL store: deletion and retention on a small pool of their own
//! (`crate::erase` says why). Every transaction is bounded: one session's rows, or at most
//! `batch` events. Space is given back by PostgreSQL's autovacuum (docs/RELIABILITY.md says
//! what it needs); the retention lease is an advisory lock, so that of several nodes on one
//! database one sweeps at a time.

use async_trait::async_trait;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgPool, Postgres};
use sqlx::Row;
use tokio::sync::Mutex;

use tether_protocol::{now_ms, SessionId, SessionStatus};

use crate::erase::{Scope, StoreErase, Trimmed};
use crate::StoreError;

use super::errors::map_sqlx;

/// The advisory lock key of the retention lease: `tether` in ASCII, then 2 (the gateway's
/// writer lock is 1).
const LEAD_KEY: i64 = 0x7465_7468_6572_0002;

/// The erase pool, and the connection that holds the retention lease while a sweep runs.
pub(crate) struct PgErase {
    pool: PgPool,
    lead: Mutex<Option<PoolConnection<Postgres>>>,
}

fn write_err(e: sqlx::Error) -> StoreError {
    map_sqlx(e)
}

fn to_u64(v: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Invalid(format!("stored {what} is {v}")))
}

/// The profiles of a scope, as an array parameter.
fn scope_sql(scope: Scope<'_>) -> (&'static str, Vec<String>) {
    match scope {
        Scope::Profile(p) => ("profile = ANY($1)", vec![p.to_string()]),
        Scope::AllBut(others) => ("profile <> ALL($1)", others.to_vec()),
    }
}

impl PgErase {
    pub(crate) fn new(pool: PgPool) -> Self {
        PgErase {
            pool,
            lead: Mutex::new(None),
        }
    }

    /// Step 1 of an erase (`crate::erase`): the row and what hangs on it, recorded in
    /// `erasing`; the branches it unlinked. `None` if the session is not `profile`'s.
    async fn unlink(&self, profile: &str, id: &str) -> Result<Option<Vec<SessionId>>, StoreError> {
        let mut tx = self.pool.begin().await.map_err(write_err)?;
        let gone: Option<i64> = sqlx::query_scalar(
            "DELETE FROM sessions WHERE id = $1 AND profile = $2 RETURNING latest_seq",
        )
        .bind(id)
        .bind(profile)
        .fetch_optional(&mut *tx)
        .await
        .map_err(write_err)?;
        let Some(events) = gone else {
            tx.rollback().await.map_err(write_err)?;
            return Ok(None);
        };
        // What the store ever held only grows: erased events still count (`crate::served`).
        sqlx::query(
            "INSERT INTO meta (key, value) VALUES ('erased_events', $1::BIGINT::TEXT) \
             ON CONFLICT (key) DO UPDATE SET value = (meta.value::BIGINT + $1::BIGINT)::TEXT",
        )
        .bind(events)
        .execute(&mut *tx)
        .await
        .map_err(write_err)?;
        sqlx::query(
            "INSERT INTO erasing (session_id, since_ms) VALUES ($1, $2) \
             ON CONFLICT (session_id) DO NOTHING",
        )
        .bind(id)
        .bind(now_ms())
        .execute(&mut *tx)
        .await
        .map_err(write_err)?;
        let branches: Vec<String> = sqlx::query_scalar(
            "UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id = $1 RETURNING id",
        )
        .bind(id)
        .fetch_all(&mut *tx)
        .await
        .map_err(write_err)?;
        // Nodes holding it live learn of it when this commits.
        super::cluster::erased::notify(&mut tx, id).await?;
        // Not `forwards` nor `session_owners`: the delete may itself be a
        // forwarded request, whose answer its owner writes there once the erase
        // is done, under its ownership row. Forward rows go with the nodes'
        // sweep once past their deadline (seconds); ownership rows, which hold
        // nothing but a node and a fence, with `finish_erasing`.
        for table in [
            "DELETE FROM handoffs WHERE session_id = $1",
            "DELETE FROM session_peers WHERE session_id = $1",
        ] {
            sqlx::query(table)
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(write_err)?;
        }
        tx.commit().await.map_err(write_err)?;
        Ok(Some(branches.into_iter().map(SessionId::from).collect()))
    }

    /// Step 2 for one session: its events, `batch` a transaction, then its `erasing` row.
    async fn purge(&self, id: &str, batch: u32) -> Result<u64, StoreError> {
        let mut removed = 0;
        loop {
            let n = sqlx::query(
                "DELETE FROM events WHERE session_id = $1 AND seq IN \
                 (SELECT seq FROM events WHERE session_id = $1 ORDER BY seq LIMIT $2)",
            )
            .bind(id)
            .bind(i64::from(batch.max(1)))
            .execute(&self.pool)
            .await
            .map_err(write_err)?
            .rows_affected();
            removed += n;
            if n == 0 {
                break;
            }
        }
        sqlx::query("DELETE FROM erasing WHERE session_id = $1")
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(write_err)?;
        Ok(removed)
    }
}

#[async_trait]
impl StoreErase for PgErase {
    async fn delete_session(
        &self,
        profile: &str,
        id: &SessionId,
        batch: u32,
    ) -> Result<Option<Vec<SessionId>>, StoreError> {
        let Some(branches) = self.unlink(profile, id.as_str()).await? else {
            return Ok(None);
        };
        self.purge(id.as_str(), batch).await?;
        Ok(Some(branches))
    }

    async fn erase_profile(&self, profile: &str, batch: u32) -> Result<u64, StoreError> {
        let mut erased = 0;
        loop {
            let ids: Vec<String> =
                sqlx::query_scalar("SELECT id FROM sessions WHERE profile = $1 LIMIT $2")
                    .bind(profile)
                    .bind(i64::from(batch.max(1)))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(map_sqlx)?;
            if ids.is_empty() {
                break;
            }
            for id in ids {
                if self.unlink(profile, &id).await?.is_some() {
                    self.purge(&id, batch).await?;
                    erased += 1;
                }
            }
        }
        let mut tx = self.pool.begin().await.map_err(write_err)?;
        sqlx::query("DELETE FROM handoffs WHERE profile = $1")
            .bind(profile)
            .execute(&mut *tx)
            .await
            .map_err(write_err)?;
        sqlx::query("DELETE FROM profiles WHERE name = $1")
            .bind(profile)
            .execute(&mut *tx)
            .await
            .map_err(write_err)?;
        tx.commit().await.map_err(write_err)?;
        Ok(erased)
    }

    async fn finish_erasing(&self, batch: u32) -> Result<u64, StoreError> {
        let ids: Vec<String> = sqlx::query_scalar("SELECT session_id FROM erasing LIMIT 16")
            .fetch_all(&self.pool)
            .await
            .map_err(map_sqlx)?;
        let mut removed = 0;
        for id in ids {
            removed += self.purge(&id, batch).await?;
        }
        // Ownership rows of erased sessions, once no forwarded request can
        // still be answered under them.
        sqlx::query(
            "DELETE FROM session_owners WHERE session_id IN (SELECT o.session_id \
             FROM session_owners o WHERE NOT EXISTS (SELECT 1 FROM sessions s \
             WHERE s.id = o.session_id) AND COALESCE(o.claimed_at, '-infinity') \
             < clock_timestamp() - interval '1 minute' LIMIT $1)",
        )
        .bind(i64::from(batch.max(1)))
        .execute(&self.pool)
        .await
        .map_err(write_err)?;
        Ok(removed)
    }

    async fn idle_since(
        &self,
        scope: Scope<'_>,
        status: SessionStatus,
        before_ms: i64,
        limit: u32,
    ) -> Result<Vec<(String, SessionId)>, StoreError> {
        let (within, profiles) = scope_sql(scope);
        let sql = format!(
            "SELECT profile, id FROM sessions WHERE {within} AND status = $2 \
             AND updated_at_ms < $3 ORDER BY updated_at_ms LIMIT $4"
        );
        let rows: Vec<(String, String)> = sqlx::query_as(&sql)
            .bind(profiles)
            .bind(status.as_str())
            .bind(before_ms)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(map_sqlx)?;
        Ok(rows
            .into_iter()
            .map(|(profile, id)| (profile, SessionId::from(id)))
            .collect())
    }

    async fn trim_candidates(
        &self,
        scope: Scope<'_>,
        max_events: Option<u64>,
        before_ms: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(String, SessionId)>, StoreError> {
        let (within, profiles) = scope_sql(scope);
        let max_events = max_events.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        // The latest compaction bounds what may go; then either rule picks the session.
        let sql = format!(
            "SELECT s.profile, s.id FROM sessions s \
             JOIN (SELECT session_id, MAX(seq) AS cut FROM events \
                   WHERE type = 'session.compacted' GROUP BY session_id) c ON c.session_id = s.id \
             WHERE {within} AND s.status <> 'closed' AND s.retained_from_seq < c.cut \
             AND (($2::BIGINT IS NOT NULL AND s.latest_seq - s.retained_from_seq + 1 > $2) \
               OR ($3::BIGINT IS NOT NULL AND EXISTS (SELECT 1 FROM events e WHERE e.session_id = s.id \
                   AND e.seq = s.retained_from_seq AND e.ts_ms < $3))) \
             LIMIT $4"
        );
        let rows: Vec<(String, String)> = sqlx::query_as(&sql)
            .bind(profiles)
            .bind(max_events)
            .bind(before_ms)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(map_sqlx)?;
        Ok(rows
            .into_iter()
            .map(|(profile, id)| (profile, SessionId::from(id)))
            .collect())
    }

    async fn trim(
        &self,
        id: &SessionId,
        max_events: Option<u64>,
        before_ms: Option<i64>,
        batch: u32,
    ) -> Result<Option<Trimmed>, StoreError> {
        let mut removed = 0;
        loop {
            let mut tx = self.pool.begin().await.map_err(write_err)?;
            let row = sqlx::query(
                "SELECT retained_from_seq, latest_seq, \
                 (SELECT MAX(seq) FROM events WHERE session_id = $1 AND type = 'session.compacted') \
                 FROM sessions WHERE id = $1",
            )
            .bind(id.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(write_err)?;
            let Some(row) = row else {
                return Ok(None);
            };
            let from: i64 = row.try_get(0).map_err(write_err)?;
            let latest: i64 = row.try_get(1).map_err(write_err)?;
            let compacted: Option<i64> = row.try_get(2).map_err(write_err)?;
            let by_age = match before_ms {
                Some(before) => sqlx::query_scalar::<_, Option<i64>>(
                    "SELECT MAX(seq) FROM events WHERE session_id = $1 AND seq >= $2 \
                     AND seq < $3 AND ts_ms < $4",
                )
                .bind(id.as_str())
                .bind(from)
                .bind(from.saturating_add(i64::from(batch.max(1))))
                .bind(before)
                .fetch_one(&mut *tx)
                .await
                .map_err(write_err)?,
                None => None,
            };
            let upto = crate::erase::trim_upto(from, latest, compacted, max_events, by_age, batch);
            let Some(upto) = upto else {
                tx.commit().await.map_err(write_err)?;
                return Ok(Some(Trimmed {
                    retained_from_seq: to_u64(from, "retained_from_seq")?,
                    removed,
                }));
            };
            let n = sqlx::query("DELETE FROM events WHERE session_id = $1 AND seq <= $2")
                .bind(id.as_str())
                .bind(upto)
                .execute(&mut *tx)
                .await
                .map_err(write_err)?
                .rows_affected();
            sqlx::query("UPDATE sessions SET retained_from_seq = $2 WHERE id = $1")
                .bind(id.as_str())
                .bind(upto + 1)
                .execute(&mut *tx)
                .await
                .map_err(write_err)?;
            super::cluster::erased::notify(&mut tx, id.as_str()).await?;
            tx.commit().await.map_err(write_err)?;
            removed += n;
        }
    }

    async fn reclaim(&self, _max_pages: u32) -> Result<u64, StoreError> {
        // PostgreSQL's autovacuum makes the space of removed rows reusable (docs/RELIABILITY.md).
        Ok(0)
    }

    async fn try_lead(&self) -> Result<bool, StoreError> {
        let mut lead = self.lead.lock().await;
        if lead.is_some() {
            return Ok(true);
        }
        let mut conn = self.pool.acquire().await.map_err(map_sqlx)?;
        let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(LEAD_KEY)
            .fetch_one(&mut *conn)
            .await
            .map_err(map_sqlx)?;
        if taken {
            *lead = Some(conn);
        }
        Ok(taken)
    }

    async fn release_lead(&self) -> Result<(), StoreError> {
        let Some(mut conn) = self.lead.lock().await.take() else {
            return Ok(());
        };
        let released = sqlx::query_scalar::<_, bool>("SELECT pg_advisory_unlock($1)")
            .bind(LEAD_KEY)
            .fetch_one(&mut *conn)
            .await;
        if released.is_err() {
            // A connection that cannot say so is closed, which releases the lock with it.
            conn.close_on_drop();
        }
        Ok(())
    }
}
