//! An online copy of a SQLite store while its gateway runs (`tether backup`).
//!
//! `VACUUM INTO` on a read-only connection of our own: it reads one
//! snapshot (a WAL read transaction, which never blocks the gateway's
//! writer, and whose PASSIVE checkpoints skip what it still reads) and
//! writes a compact, self-contained database file, so the copy holds
//! exactly the events committed before it began and is usable as it is.
//! The copy keeps the store's epoch: it is the same history, up to that
//! moment. Starting a gateway on it later is a restore, whose rule is in
//! docs/PROTOCOL.md ("History that went backwards").

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

/// What a backup copied, read back from the copy itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupReport {
    /// The store's epoch, the same in the copy.
    pub epoch: String,
    /// Sessions in the copy.
    pub sessions: u64,
    /// Durable events in the copy.
    pub events: u64,
    /// The copy's size on disk.
    pub bytes: u64,
    /// How long the copy took.
    pub took: Duration,
}

/// Why a backup was not taken (nothing is left at the destination but
/// what SQLite itself may have begun).
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// No database file at the store's path.
    #[error("no SQLite store at {0}")]
    NoStore(PathBuf),
    /// The destination exists.
    #[error("{0} already exists; a backup never overwrites a file")]
    Exists(PathBuf),
    /// The file is a database without tether's `meta` epoch, or no database.
    #[error("{path} is not a tether store: {reason}")]
    NotAStore {
        /// The file.
        path: PathBuf,
        /// What SQLite said.
        reason: String,
    },
    /// SQLite refused the copy.
    #[error("SQLite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The destination could not be named or read back.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// How long the copy's read waits out a writer holding SQLite's locks (a
/// WAL reader rarely waits at all).
const BUSY_WAIT: Duration = Duration::from_secs(5);

/// Copies the store at `db` to `dest`, a new file, while it is in use.
pub fn backup_sqlite(db: &Path, dest: &Path) -> Result<BackupReport, BackupError> {
    if !db.is_file() {
        return Err(BackupError::NoStore(db.to_path_buf()));
    }
    if dest.exists() {
        return Err(BackupError::Exists(dest.to_path_buf()));
    }
    let started = Instant::now();
    let source = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    source.busy_timeout(BUSY_WAIT)?;
    epoch_of(&source, db)?;
    let dest_text = dest.to_str().ok_or_else(|| BackupError::Io {
        path: dest.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not UTF-8"),
    })?;
    source.execute("VACUUM INTO ?1", [dest_text])?;
    drop(source);
    let took = started.elapsed();

    let copy = Connection::open_with_flags(dest, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let epoch = epoch_of(&copy, dest)?;
    let sessions: i64 = copy.query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))?;
    let events: i64 = copy.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?;
    drop(copy);
    let bytes = std::fs::metadata(dest)
        .map_err(|source| BackupError::Io {
            path: dest.to_path_buf(),
            source,
        })?
        .len();
    Ok(BackupReport {
        epoch,
        sessions: u64::try_from(sessions).unwrap_or(0),
        events: u64::try_from(events).unwrap_or(0),
        bytes,
        took,
    })
}

/// The epoch of a tether store; anything else is refused before it is copied.
fn epoch_of(conn: &Connection, path: &Path) -> Result<String, BackupError> {
    conn.query_row("SELECT value FROM meta WHERE key = 'epoch'", [], |r| {
        r.get::<_, String>(0)
    })
    .map_err(|e| BackupError::NotAStore {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}
