//! One gateway per store: an exclusive `flock` held for the process's life.
//!
//! Two gateways on one SQLite file do not corrupt it (SQLite locks its own
//! pages), but they break everything above it: each keeps its own seq
//! counters, so one of them fails every append with a conflict, and each
//! believes the hosts recorded in the data directory are leftovers of a dead
//! gateway and kills them. So the store refuses a second owner.
//!
//! `flock` (not a pid file) because the kernel drops it when the holder dies,
//! however it dies: a `kill -9` never leaves a stale lock behind, and no
//! liveness guess (is that pid still ours?) is ever needed. The lock is
//! advisory; it only binds tether gateways, which is what it is for.
//!
//! The holder's pid is found for the error message: the lock file of a data
//! directory holds it as text, and for any file `/proc/locks` names the
//! process holding a `flock` on its inode.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The lock file's name inside a data directory.
pub const LOCK_FILE: &str = "tether.lock";

/// Why a lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the lock: another gateway runs on this store.
    #[error("{} is in use by another tether gateway ({}); run one gateway per data directory and database", path.display(), holder(*pid))]
    Held {
        /// The file that is locked.
        path: PathBuf,
        /// The process holding it, when it can be told.
        pid: Option<u32>,
    },
    /// The lock file could not be opened or locked at all.
    #[error("cannot lock {}: {source}", path.display())]
    Io {
        /// The file that could not be locked.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
}

fn holder(pid: Option<u32>) -> String {
    match pid {
        Some(pid) => format!("pid {pid}"),
        None => "pid unknown".into(),
    }
}

/// A held lock; dropping it (or the process ending) releases it.
#[derive(Debug)]
pub struct StoreLock {
    // Held for its open file description: closing it releases the lock.
    _file: File,
    path: PathBuf,
}

impl StoreLock {
    /// The locked file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Locks `DIR/tether.lock` and writes this process's pid into it.
    pub fn data_dir(dir: &Path) -> Result<StoreLock, LockError> {
        let path = dir.join(LOCK_FILE);
        let mut lock = Self::file(&path)?;
        // For people and for the next gateway's message; the lock itself
        // is the flock, never this text.
        let pid = std::process::id();
        let written = lock
            ._file
            .set_len(0)
            .and_then(|_| writeln!(lock._file, "{pid}"));
        if let Err(source) = written {
            return Err(LockError::Io { path, source });
        }
        lock.path = path;
        Ok(lock)
    }

    /// Locks `path` itself (created empty if missing), e.g. a SQLite
    /// database that lives outside the data directory. SQLite's own locks
    /// are POSIX record locks, which on Linux are independent of `flock`.
    pub fn file(path: &Path) -> Result<StoreLock, LockError> {
        let io = |source| LockError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => Ok(StoreLock {
                _file: file,
                path: path.to_path_buf(),
            }),
            Err(TryLockError::WouldBlock) => Err(LockError::Held {
                path: path.to_path_buf(),
                pid: holder_of(path, &file),
            }),
            Err(TryLockError::Error(e)) => Err(io(e)),
        }
    }
}

/// The pid holding a `flock` on `file`: from `/proc/locks` by inode, else
/// the pid a data directory's lock file holds as text.
fn holder_of(path: &Path, file: &File) -> Option<u32> {
    let inode = file.metadata().ok()?.ino();
    if let Ok(locks) = std::fs::read_to_string("/proc/locks") {
        if let Some(pid) = flock_holder(&locks, inode) {
            return Some(pid);
        }
    }
    if path.file_name().is_some_and(|n| n == LOCK_FILE) {
        return std::fs::read_to_string(path).ok()?.trim().parse().ok();
    }
    None
}

/// Parses `/proc/locks` (`1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF`)
/// for the holder of a write `flock` on `inode`.
fn flock_holder(locks: &str, inode: u64) -> Option<u32> {
    locks.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Blocked waiters are listed as "1: -> FLOCK ..."; skip them.
        if f.len() < 6 || f[1] != "FLOCK" || f[3] != "WRITE" {
            return None;
        }
        let ino: u64 = f[5].rsplit(':').next()?.parse().ok()?;
        (ino == inode).then(|| f[4].parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_directory_is_refused_with_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let first = StoreLock::data_dir(dir.path()).unwrap();
        match StoreLock::data_dir(dir.path()) {
            Err(LockError::Held { pid, path }) => {
                assert_eq!(pid, Some(std::process::id()));
                assert_eq!(path, dir.path().join(LOCK_FILE));
            }
            other => panic!("expected Held, got {other:?}"),
        }
        drop(first);
        StoreLock::data_dir(dir.path()).expect("free again once dropped");
    }

    #[test]
    fn a_file_lock_names_its_holder_from_proc_locks() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("elsewhere.db");
        let _first = StoreLock::file(&db).unwrap();
        match StoreLock::file(&db) {
            Err(LockError::Held { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("expected Held, got {other:?}"),
        }
    }

    #[test]
    fn proc_locks_lines_are_matched_by_inode_and_kind() {
        let locks = "1: POSIX  ADVISORY  WRITE 10 fd:01:77 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 20 fd:01:78 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 30 fd:01:77 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 40 fd:01:77 0 EOF\n";
        assert_eq!(flock_holder(locks, 77), Some(40));
        assert_eq!(flock_holder(locks, 78), Some(20));
        assert_eq!(flock_holder(locks, 79), None);
    }
}
