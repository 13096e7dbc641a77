//! The handoff statements of the SQLite store ([`HandoffDialect`]); what their answers mean
//! is decided once for both dialects, in `handoff/dialect.rs`.
//!
//! # Which connection
//!
//! Handoff transitions do NOT go through the StoreWriter's connection; they have a connection of
//! their own (a pool of exactly one, with the store's `busy_timeout`). Why:
//!
//! - Each transition is one statement, hence one transaction by itself: it gains nothing from the
//!   StoreWriter's group commit, which exists to amortise many small event appends.
//! - A transition answers with data (the claimed row, the state that refused it); the writer's
//!   ops only succeed or fail, and teaching it compare-and-set results would put branches on the
//!   event hot path for a rare operation.
//! - SQLite admits one writer at a time anyway (WAL): a handoff statement and a writer batch
//!   simply take turns on the database's write lock, each waiting up to `busy_timeout`. Both sides
//!   take the lock before they read (the writer with `BEGIN IMMEDIATE`, a single UPDATE/INSERT
//!   statement by itself), so neither can hit SQLITE_BUSY_SNAPSHOT mid-transaction.
//! - One connection, not several: handoff calls then queue in the pool (first come, first
//!   served) instead of in SQLite's sleep-and-retry busy handler, where contending connections
//!   back off for milliseconds at a time.
//!
//! The cost: a transition and the `status.update` event that announces it are two transactions
//! (the event is appended by the session, through the StoreWriter, after the transition
//! committed). A crash between them loses the announcement, never the transition; the row is
//! the truth and `handoff.state` reads it.

use std::time::Duration;

use sqlx::sqlite::{Sqlite, SqlitePoolOptions};

use crate::handoff::{HandoffSql, Handoffs, Ordering, Plain, Statements};
use crate::{StoreConfig, StoreError};

use super::base_options;
use super::errors::{map_sqlx, Doing};

/// The [`HandoffStore`](crate::HandoffStore) of the SQLite store: the shared queue
/// (`handoff/dialect.rs`) over the shared statements (`handoff/statements.rs`), on the handoff
/// connection.
pub(crate) type SqliteHandoffs = Handoffs<Statements<Sqlite, Plain>>;

/// Insertion order is the rowid; a claim needs no lock of its own (one writer at a time).
const ORDERING: Ordering = Ordering {
    inserted: "rowid",
    claim_lock: "",
};

fn read_err(e: sqlx::Error) -> StoreError {
    map_sqlx(e, Doing::Read)
}

fn write_err(e: sqlx::Error) -> StoreError {
    map_sqlx(e, Doing::Write)
}

/// Opens the handoff connection on an existing, migrated store.
pub(crate) async fn open(cfg: &StoreConfig) -> Result<SqliteHandoffs, StoreError> {
    // Callers queue for the one connection; the one ahead may wait up to a busy_timeout
    // for the write lock, so allow a couple of those before calling the store unavailable.
    let acquire = cfg.busy_timeout.max(Duration::from_secs(1)) * 2;
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .acquire_timeout(acquire)
        .connect_with(base_options(cfg))
        .await
        .map_err(|e| map_sqlx(e, Doing::Open))?;
    let sql = HandoffSql::new(&ORDERING);
    Ok(Handoffs::over(Statements::new(
        pool,
        sql,
        read_err,
        write_err,
        Plain(write_err),
    )))
}
