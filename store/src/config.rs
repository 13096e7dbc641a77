//! How to open the store.

use std::path::PathBuf;
use std::time::Duration;

/// Durability of a commit (SQLite's `PRAGMA synchronous` under WAL).
///
/// `Full` (the default) syncs the WAL on every commit, so an event a client saw survives a power
/// cut; group commit keeps its cost to one fsync per batch. `Normal` syncs only at checkpoints:
/// it survives a process crash, but a power cut may erase the last commits, events that clients
/// may already have seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Synchronous {
    /// fsync only at checkpoints.
    Normal,
    /// fsync the WAL at every commit.
    #[default]
    Full,
}

impl Synchronous {
    /// The spelling of `--synchronous` and of `synchronous` in `tether.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Synchronous::Normal => "normal",
            Synchronous::Full => "full",
        }
    }
}

/// Settings of an embedded (SQLite) store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// The database file (`<data dir>/tether.db`). Its directory is created if missing.
    pub db_path: PathBuf,
    /// Commit durability.
    pub synchronous: Synchronous,
    /// How long a statement waits for a lock held by another connection before failing with
    /// [`StoreError::Unavailable`](crate::StoreError::Unavailable).
    pub busy_timeout: Duration,
    /// Size of the read pool.
    pub read_connections: u32,
}

impl StoreConfig {
    /// The defaults (docs/ARCHITECTURE.md) for a database at `db_path`: synchronous FULL, 5 s busy
    /// timeout, 4 read connections.
    pub fn new(db_path: impl Into<PathBuf>) -> Self {
        StoreConfig {
            db_path: db_path.into(),
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
            read_connections: 4,
        }
    }
}
