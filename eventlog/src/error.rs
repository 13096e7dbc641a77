//! The log's errors.

use std::io;
use std::path::PathBuf;

/// A range of a file that failed its checksum: never served, never skipped silently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The file (a segment or a segment's index).
    pub file: PathBuf,
    /// First damaged byte.
    pub start: u64,
    /// One past the last damaged byte (as far as the log can tell: up to the next frame that
    /// checks, or the end of the file).
    pub end: u64,
    /// What failed.
    pub what: &'static str,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bytes {}..{}: {}",
            self.file.display(),
            self.start,
            self.end,
            self.what
        )
    }
}

/// Why an operation of the log failed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The file layer failed. For a commit: nothing of it is durable or will ever be read.
    #[error("event log i/o ({doing}): {source}")]
    Io {
        /// What the log was doing.
        doing: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A checksum failed in the middle of the log (not a torn tail): the range is reported and
    /// nothing in it is served.
    #[error("event log damaged: {0}")]
    Damaged(Damage),
    /// An op's seqs do not continue its session's stream; the op was refused, the rest of its
    /// commit is unaffected.
    #[error("seq conflict for a session: expected {expected}, got {got}")]
    SeqConflict {
        /// The seq the session's next event must have.
        expected: u64,
        /// The seq the op carried.
        got: u64,
    },
    /// A record is larger than the log accepts.
    #[error("record too large: {0} bytes")]
    TooLarge(usize),
    /// An earlier failure could not be contained (the log could not roll away from bytes
    /// whose sync failed): every later commit is refused until the log is opened again.
    #[error("event log stopped after an unrecoverable write failure; reopen it")]
    Poisoned,
    /// The writer thread is gone (the log was closed).
    #[error("event log closed")]
    Closed,
    /// A file is not one of ours, or from a format we do not know.
    #[error("not an event log file: {0}")]
    Format(String),
}

impl LogError {
    pub(crate) fn io(doing: &'static str) -> impl FnOnce(io::Error) -> LogError {
        move |source| LogError::Io { doing, source }
    }
}
