//! The embedded SQLite implementation of the store.
//!
//! One writer connection, on a thread of its own (`writer.rs`: there is exactly one writer and
//! the StoreWriter actor owns its handle), and a small read-only pool (sqlx). WAL mode lets the
//! readers see the last committed state while the writer writes.

pub(crate) mod backup;
pub(crate) mod checkpoint;
pub(crate) mod erase;
mod errors;
mod handoffs;
mod ops;
mod reader;
pub(crate) mod restore;
mod writer;

use std::path::Path;
use std::sync::Arc;

use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteAutoVacuum, SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection, Row};

use crate::{Opened, StoreConfig, StoreError, StoreWrite, Synchronous};
use errors::{map_migrate, map_sqlx, Doing};

/// The embedded migrations (`store/migrations/sqlite/*.sql`).
static MIGRATOR: Migrator = sqlx::migrate!("./migrations/sqlite");

/// Opens (creating the directory and file if needed) the SQLite store, runs the migrations,
/// creates the epoch on first open (16 lowercase hex digits, random), and returns the writer,
/// the reader and the epoch.
pub async fn open_sqlite(cfg: &StoreConfig) -> Result<Opened, StoreError> {
    ensure_parent_dir(&cfg.db_path).await?;
    // Incremental vacuum is what gives erased pages back to the file system; a new file gets it
    // here, before its first table, and an older one is converted below. So does the page size
    // (`PageSize`), which SQLite ignores on a file that has tables.
    let mut conn = base_options(cfg)
        .create_if_missing(true)
        .page_size(cfg.page_size.bytes())
        .auto_vacuum(SqliteAutoVacuum::Incremental)
        .connect()
        .await
        .map_err(|e| map_sqlx(e, Doing::Open))?;
    MIGRATOR.run(&mut conn).await.map_err(map_migrate)?;
    erase::ensure_incremental_vacuum(&mut conn, &cfg.db_path).await?;
    let described = cfg.db_path.display().to_string();
    let (epoch, held) = ensure_epoch(&mut conn, cfg.served.as_deref(), &described).await?;
    conn.close().await.map_err(|e| map_sqlx(e, Doing::Open))?;
    let writer = writer::start(cfg, false, None).await?;

    let read_opts = base_options(cfg).read_only(true);
    let pool = SqlitePoolOptions::new()
        .max_connections(cfg.read_connections.max(1))
        .min_connections(0)
        .acquire_timeout(cfg.busy_timeout.max(std::time::Duration::from_secs(1)))
        .connect_with(read_opts)
        .await
        .map_err(|e| map_sqlx(e, Doing::Open))?;

    let checkpointer = base_options(cfg)
        .busy_timeout(checkpoint::SCRUB_WAIT)
        .connect()
        .await
        .map_err(|e| map_sqlx(e, Doing::Open))?;
    let (stop_checkpoints, stop) = tokio::sync::oneshot::channel();
    let scrub = Arc::new(checkpoint::Scrub::default());
    checkpoint::spawn(checkpointer, scrub.clone(), stop);
    let handoffs = handoffs::open(cfg).await?;
    let eraser = erase::open(cfg, scrub).await?;

    tracing::info!(db_path = %cfg.db_path.display(), epoch = %epoch, "store opened");
    Ok(Opened {
        writer: Box::new(writer),
        reader: Arc::new(reader::new(pool, epoch.clone(), stop_checkpoints)),
        handoffs: Arc::new(handoffs),
        eraser: Arc::new(eraser),
        epoch,
        held,
    })
}

/// Opens only a new writer connection on an existing store (used when the StoreWriter actor is
/// restarted). Does not create the database nor run migrations: a missing file here means the
/// store was lost, which must not silently become a new, empty store.
pub async fn open_sqlite_writer(cfg: &StoreConfig) -> Result<Box<dyn StoreWrite>, StoreError> {
    Ok(Box::new(writer::start(cfg, false, None).await?))
}

/// Test support: a writer whose database may grow by at most `headroom_pages` pages
/// (`PRAGMA max_page_count`), so that "disk full" (SQLITE_FULL) can be provoked on demand.
#[cfg(feature = "testing")]
pub async fn open_sqlite_writer_with_page_headroom(
    cfg: &StoreConfig,
    headroom_pages: u64,
) -> Result<Box<dyn StoreWrite>, StoreError> {
    Ok(Box::new(
        writer::start(cfg, false, Some(headroom_pages)).await?,
    ))
}

/// Settings every connection gets: WAL, the configured durability, the busy timeout,
/// enforced foreign keys, and `secure_delete` (what any connection deletes or updates is
/// overwritten in the page, not left in its free space; the writer, on rusqlite, sets it too).
fn base_options(cfg: &StoreConfig) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(&cfg.db_path)
        .pragma("secure_delete", "ON")
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(match cfg.synchronous {
            Synchronous::Normal => SqliteSynchronous::Normal,
            Synchronous::Full => SqliteSynchronous::Full,
        })
        .busy_timeout(cfg.busy_timeout)
        .foreign_keys(true)
}

async fn ensure_parent_dir(db_path: &Path) -> Result<(), StoreError> {
    match db_path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => tokio::fs::create_dir_all(dir)
            .await
            .map_err(|e| StoreError::Unavailable(format!("create {}: {e}", dir.display()))),
        _ => Ok(()),
    }
}

/// Reads the epoch, creating it if this is the store's first open, and renews it when the store
/// holds fewer events than `served` says this data directory saw it hold (`crate::served`);
/// with the events it holds. Insert-if-absent then read, so two racing first opens still agree
/// on one epoch.
async fn ensure_epoch(
    conn: &mut SqliteConnection,
    served: Option<&Path>,
    described: &str,
) -> Result<(String, u64), StoreError> {
    let open = |e| map_sqlx(e, Doing::Open);
    sqlx::query("INSERT INTO meta (key, value) VALUES ('epoch', ?1) ON CONFLICT (key) DO NOTHING")
        .bind(crate::served::fresh_epoch())
        .execute(&mut *conn)
        .await
        .map_err(open)?;
    let epoch = read_epoch(conn).await?;
    let held: i64 = sqlx::query_scalar(
        "SELECT COALESCE(SUM(latest_seq), 0) + COALESCE((SELECT CAST(value AS INTEGER) FROM meta \
         WHERE key = 'erased_events'), 0) FROM sessions",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(open)?;
    let held = u64::try_from(held).unwrap_or(0);
    let Some(saw) = crate::served::older_than_served(served, &epoch, held) else {
        return Ok((epoch, held));
    };
    sqlx::query("UPDATE meta SET value = ?1 WHERE key = 'epoch' AND value = ?2")
        .bind(crate::served::fresh_epoch())
        .bind(&epoch)
        .execute(&mut *conn)
        .await
        .map_err(open)?;
    let renewed = read_epoch(conn).await?;
    crate::served::log_rolled_back(described, &epoch, &renewed, held, saw);
    Ok((renewed, held))
}

async fn read_epoch(conn: &mut SqliteConnection) -> Result<String, StoreError> {
    let row = sqlx::query("SELECT value FROM meta WHERE key = 'epoch'")
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| map_sqlx(e, Doing::Open))?;
    row.try_get::<String, _>(0)
        .map_err(|e| map_sqlx(e, Doing::Open))
}
