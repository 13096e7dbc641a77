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
//!
//! After an erase the same connection scrubs the WAL ([`Scrub`]): the pages
//! an erase overwrote (`secure_delete`) still have their old images, with the
//! erased text, in WAL frames, which a passive checkpoint leaves in the file
//! and a restarted WAL overwrites only as far as new writes reach. A
//! `wal_checkpoint(TRUNCATE)` copies the overwritten pages into the database
//! file and cuts the WAL to zero bytes. It waits for readers still on an
//! older snapshot and holds new commits back while it waits, so it is run
//! only when an erase asked for it, waits at most [`SCRUB_WAIT`], and when a
//! reader outlasts that (a `tether backup` reads one snapshot for minutes) is
//! tried again later, backing off up to [`SCRUB_BACKOFF_MAX`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::SqliteConnection;
use sqlx::Connection;
use tokio::sync::oneshot;

/// How often the WAL is folded back into the database.
pub(crate) const INTERVAL: Duration = Duration::from_millis(500);
/// How long a scrub waits for readers (and holds commits back) before it gives up for now.
pub(crate) const SCRUB_WAIT: Duration = Duration::from_millis(200);
/// The longest pause between two tries of a scrub that readers held off.
const SCRUB_BACKOFF_MAX: Duration = Duration::from_secs(8);

/// An erase's request for a truncating checkpoint, shared by the erase connection (which asks)
/// and the checkpointer (which does it). Requests made while one runs are not lost: the flag
/// is taken before the checkpoint starts.
#[derive(Debug, Default)]
pub(crate) struct Scrub {
    pending: AtomicBool,
}

impl Scrub {
    /// Asks for a truncating checkpoint at the checkpointer's next round.
    pub(crate) fn ask(&self) {
        self.pending.store(true, Ordering::Release);
    }

    fn take(&self) -> bool {
        self.pending.swap(false, Ordering::AcqRel)
    }
}

/// Runs until `stop` fires or is dropped (the store was dropped). The connection's busy timeout
/// is [`SCRUB_WAIT`] (a passive checkpoint never waits on it).
pub(crate) fn spawn(
    mut conn: SqliteConnection,
    scrub: Arc<Scrub>,
    mut stop: oneshot::Receiver<()>,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut backoff = INTERVAL;
        let mut next_scrub = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = &mut stop => break,
                _ = tick.tick() => {}
            }
            let now = tokio::time::Instant::now();
            if now >= next_scrub && scrub.take() {
                if truncate(&mut conn).await {
                    backoff = INTERVAL;
                } else {
                    scrub.ask();
                    next_scrub = now + backoff;
                    backoff = (backoff * 2).min(SCRUB_BACKOFF_MAX);
                }
                continue;
            }
            if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                .execute(&mut conn)
                .await
            {
                tracing::debug!(error = %e, "background checkpoint failed; retrying later");
            }
        }
        let _ = conn.close().await;
    });
}

/// One try at a truncating checkpoint; whether it finished.
async fn truncate(conn: &mut SqliteConnection) -> bool {
    // (busy, frames in the WAL, frames checkpointed); busy 1: readers held it off.
    match sqlx::query_scalar::<_, i64>("PRAGMA wal_checkpoint(TRUNCATE)")
        .fetch_one(&mut *conn)
        .await
    {
        Ok(0) => {
            tracing::debug!("WAL scrubbed after an erase");
            true
        }
        Ok(_) => {
            tracing::debug!("WAL scrub held off by a reader; trying again later");
            false
        }
        Err(e) => {
            tracing::debug!(error = %e, "WAL scrub failed; trying again later");
            false
        }
    }
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
