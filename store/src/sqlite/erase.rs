//! [`StoreErase`] of the SQLite store: the shared steps (`crate::erase`) on a connection of their
//! own, with `secure_delete` on, so that what they remove is overwritten in the file and not only
//! unlinked; the WAL scrubbed after each erase (`checkpoint.rs`), so the old images of the pages
//! they overwrote do not stay in it; and what only SQLite does: giving freed pages back
//! (incremental vacuum).
//!
//! Every transaction here is `BEGIN IMMEDIATE` (the write lock first, as the writer takes it) and
//! bounded: one session's rows, or at most `batch` events. The writer waits at most one of them.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{Sqlite, SqliteConnection, SqlitePool, SqlitePoolOptions};
use tether_protocol::{SessionId, SessionStatus};

use crate::erase::{Dialect, Eraser, Housekeeping};
use crate::{Idle, Scope, StoreConfig, StoreErase, StoreError, Trimmed};

use super::base_options;
use super::checkpoint::Scrub;
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

/// The erase connection (one: erasing is rare and serial), and the checkpointer's scrub that
/// every erase which removed something asks for: `secure_delete` overwrites the bytes in the
/// pages, the scrub gets the pages' old images out of the WAL (`checkpoint.rs`).
pub(crate) struct SqliteErase {
    inner: Eraser<SqliteHouse>,
    scrub: Arc<Scrub>,
}

impl SqliteErase {
    /// Asks for a scrub when `removed` says something went.
    fn scrubbed<T>(&self, removed: bool, result: T) -> T {
        if removed {
            self.scrub.ask();
        }
        result
    }
}

/// SQLite's space and lease: incremental vacuum, and a lease always held (one gateway).
pub(crate) struct SqliteHouse;

fn write_err(e: sqlx::Error) -> StoreError {
    map_sqlx(e, Doing::Write)
}

fn read_err(e: sqlx::Error) -> StoreError {
    map_sqlx(e, Doing::Read)
}

fn to_u64(v: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Invalid(format!("stored {what} is {v}")))
}

/// SQLite reads a JSON array of profiles with `json_each`; nothing else hangs on a session.
const DIALECT: Dialect = Dialect {
    profile_in: "profile IN (SELECT value FROM json_each($1))",
    profile_not_in: "profile NOT IN (SELECT value FROM json_each($1))",
    hanging: &[],
    after_finish: None,
    erased: None,
};

/// Opens the erase connection on an existing, migrated store.
pub(crate) async fn open(cfg: &StoreConfig, scrub: Arc<Scrub>) -> Result<SqliteErase, StoreError> {
    let acquire = cfg.busy_timeout.max(Duration::from_secs(1)) * 2;
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .acquire_timeout(acquire)
        .connect_with(base_options(cfg))
        .await
        .map_err(|e| map_sqlx(e, Doing::Open))?;
    let inner = Eraser::new(
        pool,
        SqliteHouse,
        &DIALECT,
        "BEGIN IMMEDIATE",
        read_err,
        write_err,
    );
    Ok(SqliteErase { inner, scrub })
}

#[async_trait]
impl StoreErase for SqliteErase {
    async fn delete_session(
        &self,
        profile: &str,
        id: &SessionId,
        life: Option<i64>,
        batch: u32,
    ) -> Result<Option<Vec<SessionId>>, StoreError> {
        let r = self.inner.delete_session(profile, id, life, batch).await;
        // Also after an error: a cut erase may have removed part of it.
        let removed = !matches!(r, Ok(None));
        self.scrubbed(removed, r)
    }

    async fn erase_profile(&self, profile: &str, batch: u32) -> Result<u64, StoreError> {
        let r = self.inner.erase_profile(profile, batch).await;
        self.scrubbed(true, r)
    }

    async fn finish_erasing(&self, batch: u32) -> Result<u64, StoreError> {
        let r = self.inner.finish_erasing(batch).await;
        let removed = !matches!(r, Ok(0));
        self.scrubbed(removed, r)
    }

    async fn idle_since(
        &self,
        scope: Scope<'_>,
        status: SessionStatus,
        before_ms: i64,
        limit: u32,
    ) -> Result<Vec<Idle>, StoreError> {
        self.inner.idle_since(scope, status, before_ms, limit).await
    }

    async fn trim_candidates(
        &self,
        scope: Scope<'_>,
        max_events: Option<u64>,
        before_ms: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(String, SessionId)>, StoreError> {
        self.inner
            .trim_candidates(scope, max_events, before_ms, limit)
            .await
    }

    async fn trim(
        &self,
        id: &SessionId,
        max_events: Option<u64>,
        before_ms: Option<i64>,
        batch: u32,
    ) -> Result<Option<Trimmed>, StoreError> {
        let r = self.inner.trim(id, max_events, before_ms, batch).await;
        let removed = !matches!(r, Ok(None) | Ok(Some(Trimmed { removed: 0, .. })));
        self.scrubbed(removed, r)
    }

    async fn reclaim(&self, max_pages: u32) -> Result<u64, StoreError> {
        self.inner.reclaim(max_pages).await
    }

    async fn try_lead(&self) -> Result<bool, StoreError> {
        self.inner.try_lead().await
    }

    async fn release_lead(&self) -> Result<(), StoreError> {
        self.inner.release_lead().await
    }
}

#[async_trait]
impl Housekeeping for SqliteHouse {
    type DB = Sqlite;

    async fn reclaim(&self, pool: &SqlitePool, max_pages: u32) -> Result<u64, StoreError> {
        let free: i64 = sqlx::query_scalar("PRAGMA freelist_count")
            .fetch_one(pool)
            .await
            .map_err(|e| map_sqlx(e, Doing::Read))?;
        if free > 0 {
            // PRAGMA arguments cannot be bound; the number is ours.
            sqlx::query(&format!("PRAGMA incremental_vacuum({max_pages})"))
                .execute(pool)
                .await
                .map_err(write_err)?;
        }
        // Old copies of erased pages may still be in the WAL: start it over when no reader
        // needs it (PASSIVE otherwise leaves it as it is; a busy WAL is tried again next time).
        let _ = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(pool)
            .await;
        let after: i64 = sqlx::query_scalar("PRAGMA freelist_count")
            .fetch_one(pool)
            .await
            .map_err(|e| map_sqlx(e, Doing::Read))?;
        to_u64(free.saturating_sub(after).max(0), "freelist_count")
    }

    async fn try_lead(&self, _pool: &SqlitePool) -> Result<bool, StoreError> {
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
