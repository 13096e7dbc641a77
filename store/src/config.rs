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

/// Page size of a new SQLite store's file, in bytes: a power of two from 512 to 65,536 (what
/// SQLite accepts). Only a new file takes it: an existing store keeps the size it was made with
/// (SQLite can change it only outside WAL mode, with a VACUUM of the whole file).
///
/// The trade, measured (docs/benchmarks/2026-12.md, "Bytes written per event"): events are clustered by
/// (session, seq), so a group commit writes one leaf page per session it touches, to the WAL and
/// again at the checkpoint, however little each session appended; half the page writes a third
/// fewer bytes per 100-byte event and a fifth fewer per 600-byte one (SQLite's 4,096 against
/// 2,048). The price is space: an event row over about a quarter of a page (487 bytes at 2,048,
/// 1,002 at 4,096) keeps only part of itself in the leaf and takes an overflow page of its own
/// for the rest, so a store of the benchmark's mixed transcript events (a quarter of them over
/// 480 bytes) is 1.43 times the size with 2,048-byte pages. tether's default is 2,048, for the
/// writes (and the sync latency that grows with them); `--sqlite-page-size 4096` suits a
/// gateway whose store size matters more than its write rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "u32")]
pub struct PageSize(u32);

impl PageSize {
    /// tether's default (SQLite's own is 4,096).
    pub const DEFAULT: PageSize = PageSize(2048);

    /// The size in bytes.
    pub fn bytes(self) -> u32 {
        self.0
    }
}

impl Default for PageSize {
    fn default() -> Self {
        PageSize::DEFAULT
    }
}

impl TryFrom<u32> for PageSize {
    type Error = String;

    fn try_from(bytes: u32) -> Result<Self, Self::Error> {
        if bytes.is_power_of_two() && (512..=65_536).contains(&bytes) {
            Ok(PageSize(bytes))
        } else {
            Err(format!(
                "a page size is a power of two from 512 to 65536 (got {bytes})"
            ))
        }
    }
}

impl std::str::FromStr for PageSize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes: u32 = s
            .trim()
            .parse()
            .map_err(|_| format!("a page size is a power of two from 512 to 65536 (got {s:?})"))?;
        PageSize::try_from(bytes)
    }
}

impl std::fmt::Display for PageSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Settings of an embedded (SQLite) store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// The database file (`<data dir>/tether.db`). Its directory is created if missing.
    pub db_path: PathBuf,
    /// Commit durability.
    pub synchronous: Synchronous,
    /// Page size if the file is new.
    pub page_size: PageSize,
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
    /// The defaults (docs/ARCHITECTURE.md) for a database at `db_path`: synchronous FULL, 2,048-byte
    /// pages for a new file, 5 s busy timeout, 4 read connections.
    pub fn new(db_path: impl Into<PathBuf>) -> Self {
        StoreConfig {
            db_path: db_path.into(),
            synchronous: Synchronous::Full,
            page_size: PageSize::DEFAULT,
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

#[cfg(test)]
mod tests {
    use super::PageSize;

    #[test]
    fn a_page_size_is_a_power_of_two_sqlite_accepts() {
        for ok in ["512", "1024", "2048", "4096", "65536", " 8192 "] {
            assert!(ok.parse::<PageSize>().is_ok(), "{ok}");
        }
        for bad in ["0", "256", "3000", "131072", "4k", "-4096", ""] {
            assert!(bad.parse::<PageSize>().is_err(), "{bad}");
        }
        assert_eq!(PageSize::default().bytes(), 2048);
    }
}
