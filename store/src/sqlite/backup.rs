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
//!
//! Never blocking the writer is not enough to leave its commits alone: the
//! copy writes the whole store, and left to itself it hands the kernel
//! gigabytes of dirty pages (Linux starts writing them back only at 10 % of
//! memory), which the gateway's next fsync then waits behind (on ext4, a
//! journal commit first writes out every file's newly allocated data). A
//! 7.5 GB copy during the turn benchmark held commits up to 1.1 s. So the
//! copy paces itself ([`Pacer`]): every megabyte it writes, it waits for
//! it to reach the disk before it goes on, which bounds what any commit of
//! the gateway can find queued ahead of it, and it keeps to a rate the
//! operator chooses, since its reads and writes share the disk with the
//! gateway's syncs however they are queued. And because `VACUUM
//! INTO` never syncs its output, the copy is synced whole before the
//! backup says it is done: a backup that a power cut can take back is not
//! one.

use std::fs::File;
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
/// Bytes the copy may write before it waits for them to be on disk.
const SYNC_EVERY_BYTES: u64 = 1 << 20;
/// `tether backup`'s default pace, MiB written a second: a 7.5 GB store
/// copied at it during the turn benchmark kept every step clean (commit
/// p99 up to 156 ms in the worst 10 s) where an unpaced copy held commits
/// for 1.1 s (docs/RELIABILITY.md, "Backup and restore").
pub const DEFAULT_PACE_MIB_S: u32 = 8;
/// SQLite virtual-machine instructions between two looks at the copy's
/// size (a look is one `fstat`).
const LOOK_EVERY_OPS: i32 = 10_000;

/// Paces the copy: called from SQLite's progress handler while `VACUUM
/// INTO` runs, it syncs the copy each time it has grown by
/// [`SYNC_EVERY_BYTES`], on the copy's own thread, so the copy cannot run
/// ahead of the disk, and then sleeps until the copy is back at its pace
/// (which slows its reads of the store as much).
struct Pacer {
    dest: PathBuf,
    file: Option<File>,
    synced: u64,
    started: Instant,
    /// Bytes a second; `None`: as fast as the disk takes them.
    pace: Option<f64>,
}

impl Pacer {
    fn new(dest: &Path, pace_mib_s: u32) -> Pacer {
        Pacer {
            dest: dest.to_path_buf(),
            file: None,
            synced: 0,
            started: Instant::now(),
            pace: (pace_mib_s > 0).then(|| f64::from(pace_mib_s) * 1024.0 * 1024.0),
        }
    }

    fn look(&mut self) {
        if self.file.is_none() {
            // SQLite creates the file when it first writes to it.
            self.file = File::open(&self.dest).ok();
        }
        let Some(file) = &self.file else { return };
        let Ok(len) = file.metadata().map(|m| m.len()) else {
            return;
        };
        if len >= self.synced + SYNC_EVERY_BYTES {
            // A failed sync here only loses the pacing; the final one,
            // below, is the one whose failure fails the backup.
            if let Err(e) = file.sync_data() {
                tracing::debug!(error = %e, "pacing sync of the backup");
            }
            self.synced = len;
            let Some(pace) = self.pace else { return };
            let due = Duration::from_secs_f64(len as f64 / pace);
            if let Some(ahead) = due.checked_sub(self.started.elapsed()) {
                std::thread::sleep(ahead);
            }
        }
    }
}

/// Syncs the finished copy and its directory entry.
fn sync_copy(dest: &Path) -> Result<(), BackupError> {
    let io = |source| BackupError::Io {
        path: dest.to_path_buf(),
        source,
    };
    File::open(dest).and_then(|f| f.sync_all()).map_err(io)?;
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(dir).and_then(|d| d.sync_all()).map_err(io)
}

/// Copies the store at `db` to `dest`, a new file, while it is in use,
/// writing at most `pace_mib_s` MiB a second (0: unpaced).
pub fn backup_sqlite(db: &Path, dest: &Path, pace_mib_s: u32) -> Result<BackupReport, BackupError> {
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
    let mut pacer = Pacer::new(dest, pace_mib_s);
    source.progress_handler(
        LOOK_EVERY_OPS,
        Some(move || {
            pacer.look();
            false
        }),
    );
    source.execute("VACUUM INTO ?1", [dest_text])?;
    drop(source);
    sync_copy(dest)?;
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

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::{backup_sqlite, SYNC_EVERY_BYTES};

    /// A copy several times [`SYNC_EVERY_BYTES`] long goes through the
    /// pacer's syncs and sleeps and comes out whole.
    #[test]
    fn a_paced_copy_is_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (db, dest) = (dir.path().join("store.db"), dir.path().join("copy.db"));
        let conn = Connection::open(&db).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; \
             CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL); \
             INSERT INTO meta VALUES ('epoch', '00112233aabbccdd'); \
             CREATE TABLE sessions (id TEXT PRIMARY KEY); \
             INSERT INTO sessions VALUES ('s_1'); \
             CREATE TABLE events (seq INTEGER PRIMARY KEY, payload TEXT NOT NULL);",
        )
        .unwrap();
        let payload = "x".repeat(1000);
        let rows = usize::try_from(4 * SYNC_EVERY_BYTES / 1000).unwrap();
        for seq in 1..=rows {
            conn.execute("INSERT INTO events VALUES (?1, ?2)", (seq, &payload))
                .unwrap();
        }
        let report = backup_sqlite(&db, &dest, 64).unwrap();
        assert_eq!(report.epoch, "00112233aabbccdd");
        assert_eq!(report.sessions, 1);
        assert_eq!(report.events, u64::try_from(rows).unwrap());
        assert!(report.bytes > 4 * SYNC_EVERY_BYTES, "{report:?}");
        let copy = Connection::open(&dest).unwrap();
        let check: String = copy
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
    }
}
