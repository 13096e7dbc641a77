//! The embedded SQLite implementation of the store.
//!
//! One writer connection (a plain [`SqliteConnection`], not a pool: there is exactly one writer
//! and it is owned by the StoreWriter actor) and a small read-only pool. WAL mode lets the readers
//! see the last committed state while the writer writes.

mod bulk;
mod checkpoint;
mod errors;
mod handoffs;
mod ops;
mod reader;
mod rows;
mod writer;

use std::path::Path;
use std::sync::Arc;

use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{ConnectOptions, Row};

use crate::{Opened, StoreConfig, StoreError, StoreWrite, Synchronous};
use errors::{map_migrate, map_sqlx, Doing};
use handoffs::SqliteHandoffs;
use reader::SqliteReader;
use writer::SqliteWriter;

/// The embedded migrations (`store/migrations/*.sql`).
static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// Statement cache of the writer: the multi-row INSERTs of every chunk size plus a few fixed
/// statements must all stay prepared, or the hot path re-parses SQL on every append.
const WRITER_STATEMENT_CACHE: usize = 512;

/// Opens (creating the directory and file if needed) the SQLite store, runs the migrations,
/// creates the epoch on first open (16 lowercase hex digits, random), and returns the writer,
/// the reader and the epoch.
pub async fn open_sqlite(cfg: &StoreConfig) -> Result<Opened, StoreError> {
    ensure_parent_dir(&cfg.db_path).await?;
    let mut conn = connect_writer(cfg, true).await?;
    MIGRATOR.run(&mut conn).await.map_err(map_migrate)?;
    let epoch = ensure_epoch(&mut conn).await?;

    let read_opts = base_options(cfg).read_only(true);
    let pool = SqlitePoolOptions::new()
        .max_connections(cfg.read_connections.max(1))
        .min_connections(0)
        .acquire_timeout(cfg.busy_timeout.max(std::time::Duration::from_secs(1)))
        .connect_with(read_opts)
        .await
        .map_err(|e| map_sqlx(e, Doing::Open))?;

    let checkpointer = base_options(cfg)
        .connect()
        .await
        .map_err(|e| map_sqlx(e, Doing::Open))?;
    let (stop_checkpoints, stop) = tokio::sync::oneshot::channel();
    checkpoint::spawn(checkpointer, stop);
    let handoffs = SqliteHandoffs::open(cfg).await?;

    tracing::info!(db_path = %cfg.db_path.display(), epoch = %epoch, "store opened");
    Ok(Opened {
        writer: Box::new(SqliteWriter::new(conn)),
        reader: Arc::new(SqliteReader::new(pool, epoch.clone(), stop_checkpoints)),
        handoffs: Arc::new(handoffs),
        epoch,
    })
}

/// Opens only a new writer connection on an existing store (used when the StoreWriter actor is
/// restarted). Does not create the database nor run migrations: a missing file here means the
/// store was lost, which must not silently become a new, empty store.
pub async fn open_sqlite_writer(cfg: &StoreConfig) -> Result<Box<dyn StoreWrite>, StoreError> {
    let conn = connect_writer(cfg, false).await?;
    Ok(Box::new(SqliteWriter::new(conn)))
}

/// Test support: a writer whose database may grow by at most `headroom_pages` pages
/// (`PRAGMA max_page_count`), so that "disk full" (SQLITE_FULL) can be provoked on demand.
#[doc(hidden)]
pub async fn open_sqlite_writer_with_page_headroom(
    cfg: &StoreConfig,
    headroom_pages: u64,
) -> Result<Box<dyn StoreWrite>, StoreError> {
    let mut conn = connect_writer(cfg, false).await?;
    let pages: i64 = sqlx::query("PRAGMA page_count")
        .fetch_one(&mut conn)
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|e| map_sqlx(e, Doing::Open))?;
    let max = pages.saturating_add(i64::try_from(headroom_pages).unwrap_or(i64::MAX));
    // PRAGMA arguments cannot be bound; `max` is an integer we computed.
    sqlx::query(&format!("PRAGMA max_page_count = {max}"))
        .execute(&mut conn)
        .await
        .map_err(|e| map_sqlx(e, Doing::Open))?;
    Ok(Box::new(SqliteWriter::new(conn)))
}

/// Settings every connection gets: WAL, the configured durability, the busy timeout and
/// enforced foreign keys.
fn base_options(cfg: &StoreConfig) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(&cfg.db_path)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(match cfg.synchronous {
            Synchronous::Normal => SqliteSynchronous::Normal,
            Synchronous::Full => SqliteSynchronous::Full,
        })
        .busy_timeout(cfg.busy_timeout)
        .foreign_keys(true)
}

/// WAL frames before the writer checkpoints by itself (about 256 MiB with
/// 4 KiB pages): only a backstop, the background checkpointer normally
/// keeps the WAL far smaller.
const WAL_AUTOCHECKPOINT_PAGES: u32 = 65536;
/// Writer page cache: negative means KiB (64 MiB), enough to keep the hot
/// leaves of every live session's events in memory.
const WRITER_CACHE_KIB: i64 = -65536;

async fn connect_writer(cfg: &StoreConfig, create: bool) -> Result<SqliteConnection, StoreError> {
    base_options(cfg)
        .create_if_missing(create)
        .statement_cache_capacity(WRITER_STATEMENT_CACHE)
        .pragma("temp_store", "MEMORY")
        // Checkpoints run on their own connection (checkpoint.rs).
        .pragma("wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES.to_string())
        .pragma("cache_size", WRITER_CACHE_KIB.to_string())
        .connect()
        .await
        .map_err(|e| map_sqlx(e, Doing::Open))
}

async fn ensure_parent_dir(db_path: &Path) -> Result<(), StoreError> {
    match db_path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => tokio::fs::create_dir_all(dir)
            .await
            .map_err(|e| StoreError::Unavailable(format!("create {}: {e}", dir.display()))),
        _ => Ok(()),
    }
}

/// Reads the epoch, creating it if this is the store's first open. Insert-if-absent then read,
/// so two racing first opens still agree on one epoch.
async fn ensure_epoch(conn: &mut SqliteConnection) -> Result<String, StoreError> {
    let candidate = format!("{:016x}", rand::random::<u64>());
    sqlx::query("INSERT INTO meta (key, value) VALUES ('epoch', ?1) ON CONFLICT (key) DO NOTHING")
        .bind(&candidate)
        .execute(&mut *conn)
        .await
        .map_err(|e| map_sqlx(e, Doing::Open))?;
    let row = sqlx::query("SELECT value FROM meta WHERE key = 'epoch'")
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| map_sqlx(e, Doing::Open))?;
    row.try_get::<String, _>(0)
        .map_err(|e| map_sqlx(e, Doing::Open))
}
