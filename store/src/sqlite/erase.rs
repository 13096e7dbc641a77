//! [`StoreErase`] of the SQLite store: deletion and retention on a connection of their own
//! (`crate::erase` says why), with `secure_delete` on, so that what it removes is overwritten in
//! the file and not only unlinked.
//!
//! Every transaction here is `BEGIN IMMEDIATE` (the write lock first, as the writer takes it) and
//! bounded: one session's rows, or at most `batch` events. The writer waits at most one of them.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnection, SqlitePool, SqlitePoolOptions};
use sqlx::Row;

use tether_protocol::{now_ms, SessionId, SessionStatus};

use crate::erase::{Scope, StoreErase, Trimmed};
use crate::{StoreConfig, StoreError};

use super::base_options;
use super::errors::{map_sqlx, Doing};

/// A store created before erasing existed has no incremental vacuum, and SQLite turns it on only
/// by rewriting the whole file (`VACUUM`). Up to this size that takes well under a second, so it
/// is done when the store is opened; a larger store keeps its freed pages for reuse (and its
/// erased bytes are still overwritten: `secure_delete`) until the operator runs
/// `tether admin vacuum` with the gateway stopped.
const VACUUM_ON_OPEN_MAX_BYTES: u64 = 64 << 20;

/// Turns incremental vacuum on for a store that does not have it yet (see
/// [`VACUUM_ON_OPEN_MAX_BYTES`]; `force`: whatever its size).
pub(crate) async fn ensure_incremental_vacuum_with(
    conn: &mut SqliteConnection,
    path: &Path,
    force: bool,
) -> Result<bool, StoreError> {
    let open = |e| map_sqlx(e, Doing::Open);
    // 2 is INCREMENTAL.
    let mode: i64 = sqlx::query_scalar("PRAGMA auto_vacuum")
        .fetch_one(&mut *conn)
        .await
        .map_err(open)?;
    if mode == 2 {
        return Ok(true);
    }
    let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(u64::MAX);
    if !force && bytes > VACUUM_ON_OPEN_MAX_BYTES {
        tracing::warn!(
            db_path = %path.display(),
            bytes,
            "the store has no incremental vacuum: erased data's pages are reused but not given \
             back to the file system until `tether admin vacuum` runs with the gateway stopped"
        );
        return Ok(false);
    }
    sqlx::query("PRAGMA auto_vacuum = INCREMENTAL")
        .execute(&mut *conn)
        .await
        .map_err(open)?;
    sqlx::query("VACUUM")
        .execute(&mut *conn)
        .await
        .map_err(open)?;
    tracing::info!(db_path = %path.display(), bytes, "store converted to incremental vacuum");
    Ok(true)
}

/// [`ensure_incremental_vacuum_with`] as a store's open does it.
pub(crate) async fn ensure_incremental_vacuum(
    conn: &mut SqliteConnection,
    path: &Path,
) -> Result<bool, StoreError> {
    ensure_incremental_vacuum_with(conn, path, false).await
}

/// The erase connection (one: erasing is rare and serial).
pub(crate) struct SqliteErase {
    pool: SqlitePool,
}

fn write_err(e: sqlx::Error) -> StoreError {
    map_sqlx(e, Doing::Write)
}

fn to_u64(v: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Invalid(format!("stored {what} is {v}")))
}

/// The profiles of a scope as a JSON array, for `json_each`.
fn scope_sql(scope: Scope<'_>) -> (&'static str, String) {
    match scope {
        Scope::Profile(p) => (
            "profile IN (SELECT value FROM json_each(?1))",
            serde_json::json!([p]).to_string(),
        ),
        Scope::AllBut(others) => (
            "profile NOT IN (SELECT value FROM json_each(?1))",
            serde_json::json!(others).to_string(),
        ),
    }
}

impl SqliteErase {
    /// Opens the erase connection on an existing, migrated store.
    pub(crate) async fn open(cfg: &StoreConfig) -> Result<Self, StoreError> {
        let acquire = cfg.busy_timeout.max(Duration::from_secs(1)) * 2;
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .acquire_timeout(acquire)
            .connect_with(base_options(cfg).pragma("secure_delete", "ON"))
            .await
            .map_err(|e| map_sqlx(e, Doing::Open))?;
        Ok(SqliteErase { pool })
    }

    /// Step 1 of an erase (`crate::erase`): the row and what hangs on it, recorded in
    /// `erasing`; the branches it unlinked. `None` if the session is not `profile`'s.
    async fn unlink(&self, profile: &str, id: &str) -> Result<Option<Vec<SessionId>>, StoreError> {
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(write_err)?;
        let gone: Option<i64> = sqlx::query_scalar(
            "DELETE FROM sessions WHERE id = ?1 AND profile = ?2 RETURNING latest_seq",
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
            "INSERT INTO meta (key, value) VALUES ('erased_events', CAST(?1 AS TEXT)) \
             ON CONFLICT (key) DO UPDATE SET value = CAST(CAST(value AS INTEGER) + ?1 AS TEXT)",
        )
        .bind(events)
        .execute(&mut *tx)
        .await
        .map_err(write_err)?;
        sqlx::query(
            "INSERT INTO erasing (session_id, since_ms) VALUES (?1, ?2) \
             ON CONFLICT (session_id) DO NOTHING",
        )
        .bind(id)
        .bind(now_ms())
        .execute(&mut *tx)
        .await
        .map_err(write_err)?;
        let branches: Vec<String> = sqlx::query_scalar(
            "UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id = ?1 RETURNING id",
        )
        .bind(id)
        .fetch_all(&mut *tx)
        .await
        .map_err(write_err)?;
        sqlx::query("DELETE FROM handoffs WHERE session_id = ?1")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(write_err)?;
        tx.commit().await.map_err(write_err)?;
        Ok(Some(branches.into_iter().map(SessionId::from).collect()))
    }

    /// Step 2 for one session: its events, `batch` a transaction, then its `erasing` row.
    async fn purge(&self, id: &str, batch: u32) -> Result<u64, StoreError> {
        let mut removed = 0;
        loop {
            let n = sqlx::query(
                "DELETE FROM events WHERE session_id = ?1 AND seq IN \
                 (SELECT seq FROM events WHERE session_id = ?1 ORDER BY seq LIMIT ?2)",
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
        sqlx::query("DELETE FROM erasing WHERE session_id = ?1")
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(write_err)?;
        Ok(removed)
    }
}

#[async_trait]
impl StoreErase for SqliteErase {
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
                sqlx::query_scalar("SELECT id FROM sessions WHERE profile = ?1 LIMIT ?2")
                    .bind(profile)
                    .bind(i64::from(batch.max(1)))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| map_sqlx(e, Doing::Read))?;
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
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(write_err)?;
        sqlx::query("DELETE FROM handoffs WHERE profile = ?1")
            .bind(profile)
            .execute(&mut *tx)
            .await
            .map_err(write_err)?;
        sqlx::query("DELETE FROM profiles WHERE name = ?1")
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
            .map_err(|e| map_sqlx(e, Doing::Read))?;
        let mut removed = 0;
        for id in ids {
            removed += self.purge(&id, batch).await?;
        }
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
            "SELECT profile, id FROM sessions WHERE {within} AND status = ?2 \
             AND updated_at_ms < ?3 ORDER BY updated_at_ms LIMIT ?4"
        );
        let rows: Vec<(String, String)> = sqlx::query_as(&sql)
            .bind(profiles)
            .bind(status.as_str())
            .bind(before_ms)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map_sqlx(e, Doing::Read))?;
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
             AND ((?2 IS NOT NULL AND s.latest_seq - s.retained_from_seq + 1 > ?2) \
               OR (?3 IS NOT NULL AND EXISTS (SELECT 1 FROM events e WHERE e.session_id = s.id \
                   AND e.seq = s.retained_from_seq AND e.ts_ms < ?3))) \
             LIMIT ?4"
        );
        let rows: Vec<(String, String)> = sqlx::query_as(&sql)
            .bind(profiles)
            .bind(max_events)
            .bind(before_ms)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map_sqlx(e, Doing::Read))?;
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
            let mut tx = self
                .pool
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(write_err)?;
            let row = sqlx::query(
                "SELECT retained_from_seq, latest_seq, \
                 (SELECT MAX(seq) FROM events WHERE session_id = ?1 AND type = 'session.compacted') \
                 FROM sessions WHERE id = ?1",
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
                    "SELECT MAX(seq) FROM events WHERE session_id = ?1 AND seq >= ?2 \
                     AND seq < ?3 AND ts_ms < ?4",
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
            let n = sqlx::query("DELETE FROM events WHERE session_id = ?1 AND seq <= ?2")
                .bind(id.as_str())
                .bind(upto)
                .execute(&mut *tx)
                .await
                .map_err(write_err)?
                .rows_affected();
            sqlx::query("UPDATE sessions SET retained_from_seq = ?2 WHERE id = ?1")
                .bind(id.as_str())
                .bind(upto + 1)
                .execute(&mut *tx)
                .await
                .map_err(write_err)?;
            tx.commit().await.map_err(write_err)?;
            removed += n;
        }
    }

    async fn reclaim(&self, max_pages: u32) -> Result<u64, StoreError> {
        let free: i64 = sqlx::query_scalar("PRAGMA freelist_count")
            .fetch_one(&self.pool)
            .await
            .map_err(|e| map_sqlx(e, Doing::Read))?;
        if free > 0 {
            // PRAGMA arguments cannot be bound; the number is ours.
            sqlx::query(&format!("PRAGMA incremental_vacuum({max_pages})"))
                .execute(&self.pool)
                .await
                .map_err(write_err)?;
        }
        // Old copies of erased pages may still be in the WAL: start it over when no reader
        // needs it (PASSIVE otherwise leaves it as it is; a busy WAL is tried again next time).
        let _ = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&self.pool)
            .await;
        let after: i64 = sqlx::query_scalar("PRAGMA freelist_count")
            .fetch_one(&self.pool)
            .await
            .map_err(|e| map_sqlx(e, Doing::Read))?;
        to_u64(free.saturating_sub(after).max(0), "freelist_count")
    }

    async fn try_lead(&self) -> Result<bool, StoreError> {
        Ok(true)
    }

    async fn release_lead(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// `tether admin vacuum`: turns incremental vacuum on whatever the store's size (rewriting the
/// file once), then gives every free page back and starts the WAL over. For a store whose
/// gateway is stopped (its caller holds the store's lock).
pub async fn vacuum_sqlite(cfg: &StoreConfig) -> Result<u64, StoreError> {
    use sqlx::{ConnectOptions, Connection};
    let mut conn = base_options(cfg)
        .connect()
        .await
        .map_err(|e| map_sqlx(e, Doing::Open))?;
    let before: i64 = sqlx::query_scalar("PRAGMA page_count")
        .fetch_one(&mut conn)
        .await
        .map_err(|e| map_sqlx(e, Doing::Read))?;
    ensure_incremental_vacuum_with(&mut conn, &cfg.db_path, true).await?;
    sqlx::query("PRAGMA incremental_vacuum")
        .execute(&mut conn)
        .await
        .map_err(write_err)?;
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut conn)
        .await
        .map_err(write_err)?;
    let after: i64 = sqlx::query_scalar("PRAGMA page_count")
        .fetch_one(&mut conn)
        .await
        .map_err(|e| map_sqlx(e, Doing::Read))?;
    conn.close().await.map_err(|e| map_sqlx(e, Doing::Open))?;
    to_u64(before.saturating_sub(after).max(0), "page_count")
}
