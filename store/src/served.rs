//! What this data directory saw the store hold, kept outside the store, so
//! that a store which comes back older (a restored backup, a failover to a
//! lagging replica, a hand-edited database) is noticed when it is opened
//! and given a new epoch (PROTOCOL.md Part 4, "History that went
//! backwards").
//!
//! The measure is the number of events the store ever held, counted as the
//! sum of every session's `latest_seq` plus the `latest_seq` of every session
//! erased since (the store's `erased_events`, kept in the erase's own
//! transaction; a trim changes no `latest_seq`): a session never rewinds (the one rewind, of a PostgreSQL batch answered 5072, undoes
//! what no one was told was written), so it only grows while the history is
//! the same. The file records the epoch and that number as of the writes
//! this gateway had committed: it starts at what the store held when it was
//! opened and grows by every event a commit acknowledged, so it never says
//! more than the store holds unless the store lost acknowledged events,
//! which is exactly what it is there to notice. It is written at most
//! [`WRITE_EVERY`] after a change, and once more when the store is closed.
//!
//! A missing or unreadable file, or one that names another epoch (another
//! database), only starts the count afresh: it can never make a store look
//! older than it is.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tether_protocol::SessionId;

use crate::{StoreError, StoreWrite, WriteOp};

/// The file's name in the data directory.
pub const SERVED_FILE: &str = "tether.served";

/// How long a change may wait before the file says it.
const WRITE_EVERY: Duration = Duration::from_secs(1);

/// The file's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    epoch: String,
    events: u64,
}

/// The events the file says a store with `epoch` held, if it says so for
/// this epoch and is readable.
fn recorded(path: &Path, epoch: &str) -> Option<u64> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read what this data directory served; starting the count afresh");
            return None;
        }
    };
    match serde_json::from_str::<Record>(&text) {
        Ok(r) if r.epoch == epoch => Some(r.events),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "what this data directory served is unreadable; starting the count afresh");
            None
        }
    }
}

/// Whether a store with `epoch` that holds `held` events is older than the
/// one the file at `path` says was served: `Some(served)` if so.
pub(crate) fn older_than_served(path: Option<&Path>, epoch: &str, held: u64) -> Option<u64> {
    let served = recorded(path?, epoch)?;
    (held < served).then_some(served)
}

/// Logs a store found older than the one served, and what is done about it.
pub(crate) fn log_rolled_back(url: &str, old_epoch: &str, new_epoch: &str, held: u64, served: u64) {
    tracing::warn!(
        store = %url,
        held,
        served,
        old_epoch,
        new_epoch,
        "the store holds fewer events than this data directory saw it hold: its history went backwards (a restore, a failover to a lagging replica, an edit); it gets a new epoch, so clients start over"
    );
}

/// A fresh epoch: 16 lowercase hex digits, random.
pub(crate) fn fresh_epoch() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// Keeps the file up to date while the store is open: counts what the
/// writers commit and writes it down now and then, and when dropped.
pub(crate) struct Served {
    path: PathBuf,
    epoch: String,
    count: Arc<AtomicU64>,
    ticker: tokio::task::JoinHandle<()>,
}

impl Served {
    /// Starts counting from `held` (what the store holds now), and writes
    /// the file at once.
    pub(crate) fn start(path: PathBuf, epoch: String, held: u64) -> Served {
        let count = Arc::new(AtomicU64::new(held));
        write(&path, &epoch, held);
        let ticker = tokio::spawn(tick(path.clone(), epoch.clone(), count.clone(), held));
        Served {
            path,
            epoch,
            count,
            ticker,
        }
    }

    /// `writer`, counting what it commits.
    pub(crate) fn counted(&self, writer: Box<dyn StoreWrite>) -> Box<dyn StoreWrite> {
        Box::new(Counted {
            inner: writer,
            count: self.count.clone(),
        })
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.ticker.abort();
        write(&self.path, &self.epoch, self.count.load(Ordering::Acquire));
    }
}

/// Writes the count down whenever it changed, every [`WRITE_EVERY`].
async fn tick(path: PathBuf, epoch: String, count: Arc<AtomicU64>, mut written: u64) {
    loop {
        tokio::time::sleep(WRITE_EVERY).await;
        let now = count.load(Ordering::Acquire);
        if now != written {
            let (path, epoch) = (path.clone(), epoch.clone());
            // A small file, but a write may block on a busy disk: not on a
            // runtime thread.
            let _ = tokio::task::spawn_blocking(move || write(&path, &epoch, now)).await;
            written = now;
        }
    }
}

/// Replaces the file (a new file renamed over the old one, so a reader
/// never finds half of one). A failure is logged: the file is a safeguard,
/// and a stale one can only miss a rollback, never invent one.
fn write(path: &Path, epoch: &str, events: u64) {
    let record = Record {
        epoch: epoch.to_string(),
        events,
    };
    let Ok(text) = serde_json::to_string(&record) else {
        return;
    };
    let tmp = path.with_extension("served.tmp");
    let done = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = done {
        tracing::warn!(path = %path.display(), error = %e, "cannot record what this data directory served");
    }
}

/// A writer whose acknowledged events are counted.
struct Counted {
    inner: Box<dyn StoreWrite>,
    count: Arc<AtomicU64>,
}

#[async_trait]
impl StoreWrite for Counted {
    async fn commit(&mut self, ops: Vec<WriteOp>) -> Vec<Result<(), StoreError>> {
        let sizes: Vec<u64> = ops.iter().map(|op| op.events().len() as u64).collect();
        let results = self.inner.commit(ops).await;
        let committed: u64 = results
            .iter()
            .zip(&sizes)
            .filter(|(r, _)| r.is_ok())
            .map(|(_, n)| n)
            .sum();
        if committed > 0 {
            self.count.fetch_add(committed, Ordering::AcqRel);
        }
        results
    }

    async fn latest_seq(&mut self, session_id: &SessionId) -> Result<u64, StoreError> {
        self.inner.latest_seq(session_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_fewer_events_under_the_same_epoch_is_older() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(SERVED_FILE);
        assert_eq!(older_than_served(Some(&path), "e1", 5), None, "no file");
        assert_eq!(older_than_served(None, "e1", 5), None, "no path");
        write(&path, "e1", 10);
        assert_eq!(older_than_served(Some(&path), "e1", 9), Some(10));
        assert_eq!(older_than_served(Some(&path), "e1", 10), None);
        assert_eq!(older_than_served(Some(&path), "e1", 11), None);
        assert_eq!(
            older_than_served(Some(&path), "e2", 0),
            None,
            "another store"
        );
        std::fs::write(&path, "{not json").expect("write");
        assert_eq!(older_than_served(Some(&path), "e1", 0), None, "unreadable");
    }
}
