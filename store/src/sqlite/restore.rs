//! Putting a backup in place of a stopped gateway's SQLite store (`tether restore`).
//!
//! Copying a backup over `tether.db` by hand is how a store gets corrupted: the WAL beside the
//! old file (`tether.db-wal`) still holds frames whose salts the WAL's own header vouches for,
//! and the next open replays them onto pages of a different database. So the restore never
//! lets a backup meet a WAL it did not write, and never serves a copy it has not checked:
//!
//! 1. It takes the data directory's lock and the database file's lock, the two a gateway holds
//!    while it runs (`crate::lock`): a restore under a running gateway is refused.
//! 2. It copies the backup next to the store (`tether.db.restoring`, so the rename at the end
//!    is atomic), syncs it, and runs `PRAGMA integrity_check` on the copy and reads its epoch:
//!    a damaged file, or one that is not a tether store, is refused before anything else is
//!    touched.
//! 3. It moves the current store aside whole, its WAL first (`tether.db.replaced-MS` and
//!    `…-wal`, `…-journal`: the pair still opens as the store it was), removes the shared
//!    memory index (`-shm`, rebuilt from the WAL by whoever opens next), and renames the
//!    checked copy to `tether.db`, then syncs the directory. The WAL goes first because a
//!    crash between two steps must never leave the old WAL beside a new file: it leaves at
//!    worst the old file without its WAL (run the restore again).
//!
//! The restored store is older than what the data directory served; `crate::served` notices
//! when a gateway opens it and gives it a new epoch, so clients get lost history as lost
//! history (PROTOCOL.md, "History that went backwards"). The restore says so beforehand.

use std::fs::File;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use crate::{LockError, StoreLock};

/// How many of `integrity_check`'s complaints a refusal quotes.
const PROBLEMS_SHOWN: usize = 5;

/// What a restore put in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// The restored store's epoch (the backup's).
    pub epoch: String,
    /// Sessions in the restored store.
    pub sessions: u64,
    /// Durable events in the restored store.
    pub events: u64,
    /// Where the store that was there before now is (with its `-wal`), if there was one.
    pub replaced: Option<PathBuf>,
    /// `Some((held, served))` when the data directory saw the store hold more events than the
    /// backup does: the next gateway gives it a new epoch.
    pub older_than_served: Option<(u64, u64)>,
}

/// Why nothing was restored (the current store is as it was).
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// A gateway (or another restore) holds the data directory or the database.
    #[error("{0}; stop the gateway first")]
    Held(LockError),
    /// The backup is not a file.
    #[error("no backup at {0}")]
    NoBackup(PathBuf),
    /// The backup has a WAL of its own beside it: it is a live store, whose file alone is not
    /// the whole of it.
    #[error(
        "{0} has a non-empty WAL beside it: it is a store in use or one that was not closed, \
         not a backup; take backups with `tether backup`"
    )]
    LiveBackup(PathBuf),
    /// The copy failed SQLite's integrity check.
    #[error("{path} is damaged (PRAGMA integrity_check): {problems}")]
    Damaged {
        /// The backup.
        path: PathBuf,
        /// The first complaints.
        problems: String,
    },
    /// A database without tether's `meta` epoch, or no database.
    #[error("{path} is not a tether store: {reason}")]
    NotAStore {
        /// The backup.
        path: PathBuf,
        /// What SQLite said.
        reason: String,
    },
    /// A file could not be copied, synced, moved or removed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RestoreError + '_ {
    move |source| RestoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `path` with `suffix` appended to its file name (`tether.db` → `tether.db-wal`).
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The files SQLite keeps beside a database: its WAL, its rollback journal, its WAL index.
const COMPANIONS: [&str; 3] = ["-wal", "-journal", "-shm"];

/// Restores `backup` as the store at `db` of the data directory `data_dir`, whose gateway must
/// be stopped (module doc).
pub fn restore_sqlite(
    backup: &Path,
    db: &Path,
    data_dir: &Path,
) -> Result<RestoreReport, RestoreError> {
    if !backup.is_file() {
        return Err(RestoreError::NoBackup(backup.to_path_buf()));
    }
    if std::fs::metadata(beside(backup, "-wal")).is_ok_and(|m| m.len() > 0) {
        return Err(RestoreError::LiveBackup(backup.to_path_buf()));
    }
    std::fs::create_dir_all(data_dir).map_err(io(data_dir))?;
    let dir = match db.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    // Held until the copy is in place: no gateway starts on a half-done restore.
    let _dir_lock = StoreLock::data_dir(data_dir).map_err(RestoreError::Held)?;
    let had_store = std::fs::metadata(db).is_ok_and(|m| m.len() > 0);
    let _db_lock = StoreLock::file(db).map_err(RestoreError::Held)?;

    let copy = beside(db, ".restoring");
    remove_with_companions(&copy)?;
    let checked = copy_and_check(backup, &copy);
    let (epoch, sessions, events, held) = match checked {
        Ok(found) => found,
        Err(e) => {
            // Nothing of a refused backup stays behind.
            let _ = remove_with_companions(&copy);
            return Err(e);
        }
    };

    let replaced = if had_store {
        let aside = beside(db, &format!(".replaced-{}", tether_protocol::now_ms()));
        for suffix in ["-wal", "-journal"] {
            move_if_there(&beside(db, suffix), &beside(&aside, suffix))?;
        }
        remove_if_there(&beside(db, "-shm"))?;
        move_if_there(db, &aside)?;
        Some(aside)
    } else {
        for suffix in COMPANIONS {
            remove_if_there(&beside(db, suffix))?;
        }
        None
    };
    std::fs::rename(&copy, db).map_err(io(db))?;
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(io(&dir))?;

    let served = data_dir.join(crate::served::SERVED_FILE);
    let older_than_served =
        crate::served::older_than_served(Some(&served), &epoch, held).map(|saw| (held, saw));
    Ok(RestoreReport {
        epoch,
        sessions,
        events,
        replaced,
        older_than_served,
    })
}

/// Copies `backup` to `copy`, syncs it, checks it: its epoch, sessions, events and the events
/// it ever held (`crate::served`'s measure).
fn copy_and_check(backup: &Path, copy: &Path) -> Result<(String, u64, u64, u64), RestoreError> {
    std::fs::copy(backup, copy).map_err(io(copy))?;
    let not_a_store = |e: rusqlite::Error| RestoreError::NotAStore {
        path: backup.to_path_buf(),
        reason: e.to_string(),
    };
    // Read-write: a WAL-mode file needs its index to be opened at all; the connection is the
    // only one, so closing it leaves no `-wal` or `-shm` of the copy behind.
    let conn = Connection::open_with_flags(
        copy,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(not_a_store)?;
    let problems = integrity_problems(&conn).map_err(|e| match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) | None => not_a_store(e),
        Some(_) => RestoreError::Damaged {
            path: backup.to_path_buf(),
            problems: e.to_string(),
        },
    })?;
    if !problems.is_empty() {
        return Err(RestoreError::Damaged {
            path: backup.to_path_buf(),
            problems,
        });
    }
    let epoch: String = conn
        .query_row("SELECT value FROM meta WHERE key = 'epoch'", [], |r| {
            r.get(0)
        })
        .map_err(not_a_store)?;
    let count = |sql: &str| -> Result<u64, RestoreError> {
        let n: i64 = conn.query_row(sql, [], |r| r.get(0)).map_err(not_a_store)?;
        Ok(u64::try_from(n).unwrap_or(0))
    };
    let sessions = count("SELECT count(*) FROM sessions")?;
    let events = count("SELECT count(*) FROM events")?;
    let held = count(
        "SELECT COALESCE(SUM(latest_seq), 0) + COALESCE((SELECT CAST(value AS INTEGER) FROM meta \
         WHERE key = 'erased_events'), 0) FROM sessions",
    )?;
    conn.close().map_err(|(_, e)| not_a_store(e))?;
    for suffix in COMPANIONS {
        remove_if_there(&beside(copy, suffix))?;
    }
    File::open(copy)
        .and_then(|f| f.sync_all())
        .map_err(io(copy))?;
    Ok((epoch, sessions, events, held))
}

/// `integrity_check`'s complaints, joined; empty when it says `ok`.
fn integrity_problems(conn: &Connection) -> Result<String, rusqlite::Error> {
    let mut stmt = conn.prepare("PRAGMA integrity_check")?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
    let mut problems = Vec::new();
    let mut more = 0usize;
    for row in rows {
        let line = row?;
        if line == "ok" {
            continue;
        }
        if problems.len() < PROBLEMS_SHOWN {
            problems.push(line);
        } else {
            more += 1;
        }
    }
    let mut text = problems.join("; ");
    if more > 0 {
        text.push_str(&format!("; and {more} more"));
    }
    Ok(text)
}

fn remove_if_there(path: &Path) -> Result<(), RestoreError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(path)(e)),
        _ => Ok(()),
    }
}

fn remove_with_companions(path: &Path) -> Result<(), RestoreError> {
    remove_if_there(path)?;
    for suffix in COMPANIONS {
        remove_if_there(&beside(path, suffix))?;
    }
    Ok(())
}

fn move_if_there(from: &Path, to: &Path) -> Result<(), RestoreError> {
    match std::fs::rename(from, to) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(from)(e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_at(path: &Path, events: usize) {
        let conn = Connection::open(path).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; \
             CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL); \
             INSERT INTO meta VALUES ('epoch', '00112233aabbccdd'); \
             CREATE TABLE sessions (id TEXT PRIMARY KEY, latest_seq INTEGER NOT NULL); \
             CREATE TABLE events (seq INTEGER PRIMARY KEY, payload TEXT NOT NULL);",
        )
        .unwrap();
        conn.execute("INSERT INTO sessions VALUES ('s_1', ?1)", [events])
            .unwrap();
        for seq in 1..=events {
            conn.execute("INSERT INTO events VALUES (?1, 'x')", [seq])
                .unwrap();
        }
    }

    #[test]
    fn a_stale_wal_is_moved_aside_with_its_store_and_the_copy_is_whole() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("tether.db");
        // The current store, left open with frames in its WAL, as a killed gateway leaves it.
        store_at(&db, 50);
        let live = Connection::open(&db).unwrap();
        live.execute_batch("PRAGMA wal_autocheckpoint = 0; UPDATE events SET payload = 'y';")
            .unwrap();
        std::fs::copy(beside(&db, "-wal"), dir.path().join("saved-wal")).unwrap();
        drop(live);
        std::fs::copy(dir.path().join("saved-wal"), beside(&db, "-wal")).unwrap();
        let backup = dir.path().join("backup.db");
        store_at(&backup, 3);

        let report = restore_sqlite(&backup, &db, dir.path()).unwrap();
        assert_eq!((report.sessions, report.events), (1, 3));
        assert!(!beside(&db, "-wal").exists() && !beside(&db, "-shm").exists());
        let aside = report.replaced.expect("the old store is kept");
        assert!(beside(&aside, "-wal").exists());
        let conn = Connection::open(&db).unwrap();
        let n: i64 = conn
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 3);
        assert!(integrity_problems(&conn).unwrap().is_empty());
    }

    #[test]
    fn a_damaged_backup_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("tether.db");
        store_at(&db, 5);
        let backup = dir.path().join("backup.db");
        store_at(&backup, 2000);
        // Overwrite a page in the middle of the events' tree.
        let mut bytes = std::fs::read(&backup).unwrap();
        let page = 4096;
        for b in &mut bytes[3 * page..3 * page + 200] {
            *b = 0x55;
        }
        std::fs::write(&backup, &bytes).unwrap();
        let before = std::fs::read(&db).unwrap();
        let refused = restore_sqlite(&backup, &db, dir.path()).unwrap_err();
        assert!(
            matches!(
                refused,
                RestoreError::Damaged { .. } | RestoreError::NotAStore { .. }
            ),
            "{refused}"
        );
        assert_eq!(std::fs::read(&db).unwrap(), before);
        assert!(!beside(&db, ".restoring").exists());
    }

    #[test]
    fn a_held_data_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("tether.db");
        let backup = dir.path().join("backup.db");
        store_at(&backup, 1);
        let _gateway = StoreLock::data_dir(dir.path()).unwrap();
        let refused = restore_sqlite(&backup, &db, dir.path()).unwrap_err();
        assert!(matches!(refused, RestoreError::Held(_)), "{refused}");
    }
}
