//! Checkpoints off the writer's path.
//!
//! SQLite's automatic checkpoint runs on the connection that commits, with
//! an fsync of the database file, so every few thousand commits one append
//! (and every turn waiting on it) stalled for the length of that fsync. A
//! separate connection now runs `PRAGMA wal_checkpoint(PASSIVE)` on a short
//! interval: passive checkpoints never block the writer or the readers. They
//! do most of the copying; the writer's own checkpoint at 64 MiB of WAL
//! (`writer.rs`) copies what is left and lets the WAL start over, which a
//! checkpoint on another connection cannot do while the writer is busy.

use std::time::Duration;

use sqlx::sqlite::SqliteConnection;
use sqlx::Connection;
use tokio::sync::oneshot;

/// How often the WAL is folded back into the database.
pub(crate) const INTERVAL: Duration = Duration::from_millis(500);

/// Runs until `stop` fires or is dropped (the store was dropped).
pub(crate) fn spawn(mut conn: SqliteConnection, mut stop: oneshot::Receiver<()>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut stop => break,
                _ = tick.tick() => {
                    if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&mut conn).await {
                        tracing::debug!(error = %e, "background checkpoint failed; retrying later");
                    }
                }
            }
        }
        let _ = conn.close().await;
    });
}
