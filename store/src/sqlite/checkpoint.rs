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

/// How long the last checkpoint waits for a connection still finishing a transaction.
const LAST_CHECKPOINT_WAIT: Duration = Duration::from_secs(5);
/// How many times the last checkpoint is tried.
const LAST_CHECKPOINT_TRIES: u32 = 20;

/// The last step of a gateway's drain on a SQLite store: folds the whole WAL into the database
/// file and truncates the WAL to zero bytes (`PRAGMA wal_checkpoint(TRUNCATE)`), on a
/// connection of its own, once nothing writes any more. Left to the connections' own closing,
/// a stop left the WAL behind (2.4 MB on an idle gateway, 67 MB after load: the read pool's
/// connections close last and, being read-only, may not checkpoint), and a backup copied over
/// `tether.db` beside it was then replayed into by its frames: a malformed store. An empty WAL
/// replays nothing. `Ok(false)`: a reader still held the WAL and it was not truncated.
pub fn truncate_wal(db: &std::path::Path) -> Result<bool, crate::StoreError> {
    use rusqlite::{Connection, OpenFlags};
    let err = |e| super::errors::map_rusqlite(e, super::errors::Doing::Write);
    let conn = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(err)?;
    conn.busy_timeout(LAST_CHECKPOINT_WAIT).map_err(err)?;
    // (busy, frames in the WAL, frames checkpointed); busy 1: it could not finish. A checkpoint
    // already running on another connection (the background one's last round) makes it give up
    // at once, without waiting: so it is tried again a few times.
    let mut done = false;
    for _ in 0..LAST_CHECKPOINT_TRIES {
        let busy: i64 = conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .map_err(err)?;
        done = busy == 0;
        if done {
            break;
        }
        std::thread::sleep(INTERVAL / 10);
    }
    conn.close().map_err(|(_, e)| err(e))?;
    Ok(done)
}
