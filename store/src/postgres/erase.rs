//! [`StoreErase`] of the PostgreSQL store: the shared steps (`crate::erase`) on a small pool of
//! their own. Every transaction is bounded: one session's rows, or at most
//! `batch` events. Space is given back by PostgreSQL's autovacuum (docs/RELIABILITY.md says
//! what it needs); the retention lease is an advisory lock, so that of several nodes on one
//! database one sweeps at a time.

use async_trait::async_trait;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgPool, Postgres};
use tokio::sync::Mutex;

use crate::erase::{Dialect, Eraser, Housekeeping};
use crate::StoreError;

use super::errors::map_sqlx;

/// The advisory lock key of the retention lease: `tether` in ASCII, then 2 (the gateway's
/// writer lock is 1).
const LEAD_KEY: i64 = 0x7465_7468_6572_0002;

/// The erase pool.
pub(crate) type PgErase = Eraser<PgHouse>;

/// PostgreSQL's space and lease: autovacuum, and the connection that holds the retention
/// lease (an advisory lock) while a sweep runs.
pub(crate) struct PgHouse {
    lead: Mutex<Option<PoolConnection<Postgres>>>,
}

/// PostgreSQL reads a JSON array of profiles with `json_array_elements_text`. A session's peer
/// rows go with it. Not `forwards` nor `session_owners`: the delete may itself be a forwarded
/// request, whose answer its owner writes there once the erase is done, under its ownership row.
/// Forward rows go with the nodes' sweep once past their deadline (seconds); ownership rows,
/// which hold nothing but a node and a fence, once the erases are finished and no forwarded
/// request can still be answered under them (a minute).
const DIALECT: Dialect = Dialect {
    profile_in: "profile IN (SELECT json_array_elements_text(CAST($1 AS JSON)))",
    profile_not_in: "profile NOT IN (SELECT json_array_elements_text(CAST($1 AS JSON)))",
    hanging: &["session_peers"],
    // Nodes holding the session live learn of it when the erase commits.
    erased: Some(super::cluster::erased::NOTIFY_ERASED),
    after_finish: Some(
        "DELETE FROM session_owners WHERE session_id IN (SELECT o.session_id \
         FROM session_owners o WHERE NOT EXISTS (SELECT 1 FROM sessions s \
         WHERE s.id = o.session_id) AND COALESCE(o.claimed_at, '-infinity') \
         < clock_timestamp() - interval '1 minute' LIMIT $1)",
    ),
};

/// The erase steps on `pool`.
pub(crate) fn new(pool: PgPool) -> PgErase {
    let house = PgHouse {
        lead: Mutex::new(None),
    };
    Eraser::new(pool, house, &DIALECT, "BEGIN", map_sqlx, map_sqlx)
}

#[async_trait]
impl Housekeeping for PgHouse {
    type DB = Postgres;

    async fn reclaim(&self, _pool: &PgPool, _max_pages: u32) -> Result<u64, StoreError> {
        // PostgreSQL's autovacuum makes the space of removed rows reusable (docs/RELIABILITY.md).
        Ok(0)
    }

    async fn try_lead(&self, pool: &PgPool) -> Result<bool, StoreError> {
        let mut lead = self.lead.lock().await;
        if lead.is_some() {
            return Ok(true);
        }
        let mut conn = pool.acquire().await.map_err(map_sqlx)?;
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
