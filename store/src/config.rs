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
    /// Where to record what this data directory saw the store hold, so that a store found
    /// older at the next open gets a new epoch (`served.rs`); `None`: not recorded.
    pub served: Option<PathBuf>,
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
            served: None,
        }
    }
}

/// Settings of a PostgreSQL store (`--database-url postgres://…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresConfig {
    /// `postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?…]` (libpq's URL form, as sqlx parses it).
    pub url: String,
    /// How long opening retries a server that cannot be reached before giving up.
    pub connect_timeout: Duration,
    /// Size of the read pool (the handoff queue has a pool of its own, of two).
    pub read_connections: u32,
    /// A write statement running longer is treated as a lost connection (and the server is
    /// told to cancel it): a half-open TCP connection must not hang the writer forever.
    pub statement_timeout: Duration,
    /// How long the writer waits for the server to come back when the answer to a batch was
    /// lost, to tell whether it committed, before it answers 5072 (`postgres/writer/doubt.rs`).
    /// Meanwhile writes wait; after it they are answered 5072 at once. Never past
    /// [`PostgresConfig::write_wait`].
    pub in_doubt_wait: Duration,
    /// The longest a batch waits for its answer once the writer takes it up: committed,
    /// refused, or 5072 when the server did not answer in time (a server that stops answering
    /// without closing its connections, e.g. stopped or cut off). A batch that may have
    /// committed meanwhile is settled as `postgres/writer.rs` says.
    pub write_wait: Duration,
    /// Where to record what this data directory saw the store hold (see
    /// [`StoreConfig::served`]).
    pub served: Option<PathBuf>,
}

impl PostgresConfig {
    /// The defaults for `url`: 30 s connect timeout, 4 read connections, 10 s statements, 5 s
    /// for a commit in doubt and 5 s for any batch's answer.
    pub fn new(url: impl Into<String>) -> Self {
        PostgresConfig {
            url: url.into(),
            connect_timeout: Duration::from_secs(30),
            read_connections: 4,
            statement_timeout: Duration::from_secs(10),
            in_doubt_wait: Duration::from_secs(5),
            write_wait: Duration::from_secs(5),
            served: None,
        }
    }
}
