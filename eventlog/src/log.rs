//! The log's handle: appends go to the writer thread, reads are served from the caller's
//! thread with the shared state locked only to find positions.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::codec::{Life, Record};
use crate::error::LogError;
use crate::fs::{FileSystem, ReadFile};
use crate::index::{IndexFile, LifeState};
use crate::policy::CommitPolicy;
use crate::segment::{index_path, segment_path};
use crate::writer::Request;

/// How a log is opened.
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// A segment is sealed and a new one started once it holds this many bytes (a commit is
    /// never split, so a segment may end up to one commit over). At most 2 GiB: offsets in a
    /// segment's index are 32-bit.
    pub segment_bytes: u64,
    /// When the writer commits.
    pub policy: CommitPolicy,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: 64 << 20,
            policy: CommitPolicy::default(),
        }
    }
}

/// Where a commit starts: its segment and the offset of its frame there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// The segment's number.
    pub segment: u32,
    /// The frame's offset in the segment.
    pub offset: u64,
}

/// A durable commit, as its appends learn it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Committed {
    /// The commit's number: commits are numbered from 1 without gaps, in log order.
    pub commit: u64,
    /// Where its frame is.
    pub position: Position,
}

/// What the caller is told when its append is settled.
pub type Done = Box<dyn FnOnce(Result<Committed, LogError>) + Send>;

/// What opening found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// A torn tail of the active segment (a commit cut by a crash before its sync), truncated:
    /// the file and the byte range removed.
    pub torn_tail: Option<(PathBuf, u64, u64)>,
    /// Sealed segments whose index was missing or did not check and was rebuilt by reading
    /// the segment.
    pub rebuilt_indexes: Vec<u32>,
    /// A newest segment removed because it held only an unfinished header (its creation
    /// was cut short; no commit was in it).
    pub unfinished_segment: Option<u32>,
    /// The commit the next append will get.
    pub next_commit: u64,
    /// Session lives with events.
    pub lives: usize,
}

/// The state readers and the writer share.
pub(crate) struct State {
    pub lives: HashMap<Life, LifeState>,
    pub active_segment: u32,
    pub active_file: Arc<dyn ReadFile>,
    /// End of the synced commits of the active segment.
    pub durable_end: u64,
    pub next_commit: u64,
    pub first_segment: u32,
}

/// Open files of sealed segments, for reads: at most [`FILE_CACHE`] of each kind.
#[derive(Default)]
pub(crate) struct FileCache {
    segments: HashMap<u32, Arc<dyn ReadFile>>,
    indexes: HashMap<u32, Arc<IndexFile>>,
}

const FILE_CACHE: usize = 128;

pub(crate) struct Shared {
    pub dir: PathBuf,
    pub fs: Arc<dyn FileSystem>,
    pub state: Mutex<State>,
    pub files: Mutex<FileCache>,
}

/// Locks a mutex; a panic elsewhere while it was held leaves plain data, still usable.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub(crate) fn segment_file(&self, segment: u32) -> Result<Arc<dyn ReadFile>, LogError> {
        if let Some(f) = lock(&self.files).segments.get(&segment) {
            return Ok(f.clone());
        }
        let f = self
            .fs
            .open_read(&segment_path(&self.dir, segment))
            .map_err(LogError::io("opening a segment"))?;
        let mut files = lock(&self.files);
        if files.segments.len() >= FILE_CACHE {
            files.segments.clear();
        }
        files.segments.insert(segment, f.clone());
        Ok(f)
    }

    pub(crate) fn index_file(&self, segment: u32) -> Result<Arc<IndexFile>, LogError> {
        if let Some(f) = lock(&self.files).indexes.get(&segment) {
            return Ok(f.clone());
        }
        let path = index_path(&self.dir, segment);
        let file = self
            .fs
            .open_read(&path)
            .map_err(LogError::io("opening an index"))?;
        let f = Arc::new(IndexFile::open(file, &path, segment)?);
        let mut files = lock(&self.files);
        if files.indexes.len() >= FILE_CACHE {
            files.indexes.clear();
        }
        files.indexes.insert(segment, f.clone());
        Ok(f)
    }
}

/// The event log. Appends are group-committed by one writer thread; reads run on the
/// caller's thread. Dropping the log lets the writer finish what is queued and stops it.
pub struct Log {
    pub(crate) shared: Arc<Shared>,
    tx: Option<mpsc::Sender<Request>>,
    writer: Option<JoinHandle<()>>,
}

/// An append in flight.
pub struct Pending(mpsc::Receiver<Result<Committed, LogError>>);

impl Pending {
    /// Waits until the append's commit is durable (or refused).
    pub fn wait(self) -> Result<Committed, LogError> {
        self.0.recv().unwrap_or(Err(LogError::Closed))
    }
}

impl Log {
    pub(crate) fn new(
        shared: Arc<Shared>,
        tx: mpsc::Sender<Request>,
        writer: JoinHandle<()>,
    ) -> Self {
        Log {
            shared,
            tx: Some(tx),
            writer: Some(writer),
        }
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Queues an append: its records go into one commit, all or nothing; `done` is called (on
    /// the writer thread: keep it short) once that commit is durable, or with the reason it
    /// was refused. Event records must continue their life's seqs by one.
    pub fn submit_then(&self, records: Vec<Record>, done: Done) {
        let bytes = records.iter().map(Record::encoded_len).sum();
        let request = Request {
            records,
            bytes,
            done,
        };
        let Some(tx) = &self.tx else {
            (request.done)(Err(LogError::Closed));
            return;
        };
        if let Err(mpsc::SendError(request)) = tx.send(request) {
            (request.done)(Err(LogError::Closed));
        }
    }

    /// Queues an append; [`Pending::wait`] for its commit.
    pub fn submit(&self, records: Vec<Record>) -> Pending {
        let (tx, rx) = mpsc::sync_channel(1);
        self.submit_then(
            records,
            Box::new(move |result| {
                let _ = tx.send(result);
            }),
        );
        Pending(rx)
    }

    /// Appends and waits until durable.
    pub fn append(&self, records: Vec<Record>) -> Result<Committed, LogError> {
        self.submit(records).wait()
    }

    /// The last durable event seq of a life (`None` if it has no events in the log).
    pub fn latest_seq(&self, life: &Life) -> Option<u64> {
        lock(&self.shared.state)
            .lives
            .get(life)
            .map(|s| s.latest_seq)
    }

    /// The commit the next append will get.
    pub fn next_commit(&self) -> u64 {
        lock(&self.shared.state).next_commit
    }

    /// Session lives with events in the log.
    pub fn lives(&self) -> usize {
        lock(&self.shared.state).lives.len()
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(writer) = self.writer.take() {
            if writer.join().is_err() {
                tracing::error!("event log writer thread panicked");
            }
        }
    }
}
