//! The PostgreSQL implementation of the store (`--database-url postgres://…`).
//!
//! The same traits as `sqlite/`, the same tables (`migrations/postgres/`), the same rules
//! (`crate::rules`). What differs is what a server brings:
//!
//! - a batch is one statement, since every statement is a round trip (`batch.rs`);
//! - the connection can go away and come back, and a commit can be in doubt (`writer.rs`, `writer/doubt.rs`);
//! - a second gateway could connect: the writer's advisory lock keeps it out (`connect/lock.rs`),
//!   unless the gateways are nodes of one cluster (`cluster/`), which
//!   share the database under ownership rows and fences.
//!
//! Commits are durable when acknowledged: the writer's connection runs with
//! `synchronous_commit = on` (the server's default; it is forced back on if the database says
//! `off`), so an event a client saw is on the server's disk.

pub(crate) mod batch;
pub(crate) mod cluster;
pub(crate) mod connect;
pub(crate) mod erase;
pub(crate) mod errors;
pub(crate) mod fencing;
mod handoffs;
mod reader;
mod writer;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sqlx::migrate::{MigrateError, Migrator};
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};

use crate::{OpenError, Opened, PostgresConfig, StoreError, StoreWrite};
use connect::{ConnectError, Settings};
use errors::{map_migrate, map_sqlx};

/// The embedded migrations (`store/migrations/postgres/*.sql`).
static MIGRATOR: Migrator = sqlx::migrate!("./migrations/postgres");

/// Longest wait between two connection attempts while opening.
const OPEN_BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Handoff transitions are single statements; two connections let one wait on a row lock
/// without holding up the others.
pub(crate) const HANDOFF_CONNECTIONS: u32 = 2;
/// Erasing is serial; one more connection holds the retention lease during a sweep.
pub(crate) const ERASE_CONNECTIONS: u32 = 2;

/// Opens the PostgreSQL store: connects (retrying a server that cannot be reached for
/// `cfg.connect_timeout`), takes the database's writer lock, runs the migrations, creates the
/// epoch on first open, and returns the writer, the reader, the handoff queue and the epoch.
pub async fn open_postgres(cfg: &PostgresConfig) -> Result<Opened, OpenError> {
    let settings = Arc::new(Settings::new(cfg)?);
    let writer_id = writer::next_writer();
    let mut conn = connect_retrying(&settings, writer_id).await?;
    migrate(&mut conn, &settings.url).await?;
    let (epoch, held) = ensure_epoch(&mut conn, cfg.served.as_deref(), &settings.url).await?;
    let acquire = settings
        .connect_timeout
        .clamp(Duration::from_millis(500), Duration::from_secs(3));
    let reader = PgPoolOptions::new()
        .max_connections(settings.read_connections)
        .min_connections(0)
        .acquire_timeout(acquire)
        .connect_lazy_with(
            settings
                .pool_options("reader")
                .options([("default_transaction_read_only", "on")]),
        );
    let handoffs = PgPoolOptions::new()
        .max_connections(HANDOFF_CONNECTIONS)
        .min_connections(0)
        .acquire_timeout(acquire)
        .connect_lazy_with(settings.pool_options("handoffs"));
    let eraser = PgPoolOptions::new()
        .max_connections(ERASE_CONNECTIONS)
        .min_connections(0)
        .acquire_timeout(acquire)
        .connect_lazy_with(settings.pool_options("erase"));
    check_pool(&reader).await?;
    tracing::info!(url = %settings.url, epoch = %epoch, "store opened");
    let writer = writer::start(settings, writer_id, Some(conn), None);
    Ok(Opened {
        writer: Box::new(writer),
        reader: Arc::new(reader::new(reader, epoch.clone())),
        handoffs: Arc::new(handoffs::new(handoffs)),
        eraser: Arc::new(erase::new(eraser)),
        epoch,
        held,
    })
}

/// Opens only a new writer on an existing store (the StoreWriter actor was restarted). It never
/// migrates or creates anything, and it does not fail when the server is down: it then answers
/// 5072 and connects in the background, so a restart of the actor during an outage does not
/// turn into a stopped gateway.
pub async fn open_postgres_writer(cfg: &PostgresConfig) -> Result<Box<dyn StoreWrite>, StoreError> {
    let settings = Settings::new(cfg).map_err(|e| StoreError::Unavailable(e.to_string()))?;
    let writer_id = writer::next_writer();
    let conn = match settings.connect_writer(writer_id, 1).await {
        Ok(conn) => Some(conn),
        Err(e) => {
            tracing::warn!(error = %e.to_store_error(&settings.url), "new store writer not connected yet");
            None
        }
    };
    Ok(Box::new(writer::start(
        Arc::new(settings),
        writer_id,
        conn,
        None,
    )))
}

/// Test support: a handoff queue of its own on an opened store, as a second gateway would have.
#[cfg(feature = "testing")]
pub async fn open_postgres_handoffs(
    cfg: &PostgresConfig,
) -> Result<Arc<dyn crate::HandoffStore>, OpenError> {
    let settings = Settings::new(cfg)?;
    let pool = PgPoolOptions::new()
        .max_connections(HANDOFF_CONNECTIONS)
        .connect_lazy_with(settings.pool_options("handoffs"));
    Ok(Arc::new(handoffs::new(pool)))
}

/// Test support: an erase pool of its own on an opened store, as another node has.
#[cfg(feature = "testing")]
pub async fn open_postgres_eraser(
    cfg: &PostgresConfig,
) -> Result<Arc<dyn crate::StoreErase>, OpenError> {
    let settings = Settings::new(cfg)?;
    let pool = PgPoolOptions::new()
        .max_connections(ERASE_CONNECTIONS)
        .connect_lazy_with(settings.pool_options("erase"));
    Ok(Arc::new(erase::new(pool)))
}

/// The writer's first connection, retried while the server cannot be reached.
pub(crate) async fn connect_retrying(
    settings: &Settings,
    writer_id: u64,
) -> Result<PgConnection, OpenError> {
    let started = tokio::time::Instant::now();
    let mut backoff = Duration::from_millis(100);
    loop {
        match settings.connect_writer(writer_id, 1).await {
            Ok(conn) => return Ok(conn),
            Err(ConnectError::Unreachable(cause))
                if started.elapsed() < settings.connect_timeout =>
            {
                tracing::warn!(url = %settings.url, %cause, "database not reachable yet; retrying");
                let left = settings.connect_timeout.saturating_sub(started.elapsed());
                tokio::time::sleep(backoff.min(left)).await;
                backoff = (backoff * 2).min(OPEN_BACKOFF_MAX);
            }
            Err(e) => return Err(e.into_open_error(&settings.url, started.elapsed())),
        }
    }
}

/// Runs the migrations; a database migrated by a newer tether is refused before anything is
/// written to it.
pub(crate) async fn migrate(conn: &mut PgConnection, url: &str) -> Result<(), OpenError> {
    match MIGRATOR.run(conn).await {
        Ok(()) => Ok(()),
        Err(MigrateError::VersionMissing(version)) => Err(OpenError::NewerSchema {
            url: url.to_string(),
            detail: format!("it has migration {version}, which this build does not have"),
        }),
        Err(MigrateError::VersionMismatch(version)) => Err(OpenError::NewerSchema {
            url: url.to_string(),
            detail: format!("its migration {version} differs from this build's"),
        }),
        Err(e) => Err(OpenError::Store(map_migrate(e))),
    }
}

/// A read connection works (the URL may allow the writer but not a second connection).
pub(crate) async fn check_pool(pool: &PgPool) -> Result<(), OpenError> {
    sqlx::query("SELECT 1")
        .execute(pool)
        .await
        .map(|_| ())
        .map_err(|e| OpenError::Store(map_sqlx(e)))
}

/// Reads the epoch, creating it on the store's first open, and renews it when the store holds
/// fewer events than `served` says this data directory saw it hold (`crate::served`); with the
/// events it holds. Insert-if-absent then read, and a renewal only of the epoch it read, so two
/// racing opens (two nodes) still agree on one epoch.
pub(crate) async fn ensure_epoch(
    conn: &mut PgConnection,
    served: Option<&Path>,
    url: &str,
) -> Result<(String, u64), StoreError> {
    sqlx::query("INSERT INTO meta (key, value) VALUES ('epoch', $1) ON CONFLICT (key) DO NOTHING")
        .bind(crate::served::fresh_epoch())
        .execute(&mut *conn)
        .await
        .map_err(map_sqlx)?;
    let epoch = read_epoch(conn).await?;
    let held: i64 = sqlx::query_scalar(
        "SELECT (COALESCE(SUM(latest_seq), 0) + COALESCE((SELECT value::BIGINT FROM meta \
         WHERE key = 'erased_events'), 0))::BIGINT FROM sessions",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(map_sqlx)?;
    let held = u64::try_from(held).unwrap_or(0);
    let Some(saw) = crate::served::older_than_served(served, &epoch, held) else {
        return Ok((epoch, held));
    };
    sqlx::query("UPDATE meta SET value = $1 WHERE key = 'epoch' AND value = $2")
        .bind(crate::served::fresh_epoch())
        .bind(&epoch)
        .execute(&mut *conn)
        .await
        .map_err(map_sqlx)?;
    let renewed = read_epoch(conn).await?;
    crate::served::log_rolled_back(url, &epoch, &renewed, held, saw);
    Ok((renewed, held))
}

async fn read_epoch(conn: &mut PgConnection) -> Result<String, StoreError> {
    sqlx::query_scalar("SELECT value FROM meta WHERE key = 'epoch'")
        .fetch_one(&mut *conn)
        .await
        .map_err(map_sqlx)
}
