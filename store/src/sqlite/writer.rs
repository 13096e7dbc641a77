//! The single writer connection, on a thread of its own, and its group commit.
//!
//! Why a thread: a commit is a handful of statements per op, and through an async driver every
//! statement is a round trip between threads, each waiting for the scheduler on a loaded core.
//! `perf` of a 250-session fan-out put three quarters of the writer's cost outside SQLite. Here
//! the connection (rusqlite) lives on one OS thread that runs a whole batch, BEGIN to COMMIT,
//! without waking anybody; the caller waits once, for the batch's results.
//!
//! A batch is one transaction (`BEGIN IMMEDIATE`, so the write lock is taken, and waited for,
//! up front rather than half-way through an op). Every op is atomic and ops are independent: one
//! failing op leaves no trace and does not sink the others. Three ways to get there, cheapest
//! first:
//!
//! 1. A batch of one op is the transaction itself.
//! 2. Appends and patches, the batches of a busy gateway, run one after the other with no
//!    savepoint: each op's first statement is the `UPDATE sessions` that checks its seq, and an
//!    op it refuses has written nothing. Only an SQL error half-way (e.g. disk full) could leave
//!    part of an op behind; it rolls the whole transaction back and the batch takes way 3.
//! 3. Each op in its own SAVEPOINT, rolled back to it if the op fails.
//!
//! One subtlety: SQLite may roll back the WHOLE transaction on some errors (SQLITE_FULL, IOERR,
//! BUSY, NOMEM: <https://www.sqlite.org/lang_transaction.html>), taking the earlier, successful
//! ops of the batch with it. We detect that (the savepoint is gone) and run the batch again
//! without the failed op. Each retry fails at least one more op for good, so a batch of n ops
//! needs at most n + 1 transactions.
//!
//! A caller that stops waiting (its future dropped) does not cut a batch short: the thread
//! finishes it, so a transaction is never left open.

use std::sync::mpsc;

use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags};
use tether_protocol::SessionId;
use tokio::sync::oneshot;

use crate::writer_command::WriterCommand;
use crate::{StoreConfig, StoreError, StoreWrite, Synchronous, WriteOp};

use super::errors::{map_rusqlite, Doing};
use super::ops;

type OpResult = Result<(), StoreError>;

/// Batches waiting for the thread. The StoreWriter actor has one commit in flight at a time, so
/// this never holds more than a batch and a barrier read.
const QUEUE: usize = 4;
/// Prepared statements kept per connection (the writer has about ten).
const STATEMENT_CACHE: usize = 32;
/// Bytes of WAL (64 MiB) after which the writer checkpoints, right after a commit; SQLite counts
/// it in frames of the store's page size, so a store with smaller pages gets more of them (a
/// 2 KiB store checkpointing at half the bytes syncs twice as often).
///
/// The background checkpointer (`checkpoint.rs`) does most of the copying, but it cannot let
/// the WAL start over: SQLite rewinds the WAL only when a write transaction begins with every
/// frame already copied, and a busy writer always has appended more frames by the time a
/// checkpoint on another connection ends. With only the background one, the WAL grew by the
/// whole write rate (175 MiB in a 30 s fan-out run), each frame landing on a new part of the
/// file. Run here, between two of the writer's own transactions, a checkpoint has only the
/// frames since the last background one left to copy, and the next commit rewinds the WAL.
/// It copies only what the background checkpointer has not, and it stalls the writer while it
/// runs, hence a threshold well above what the background one leaves behind (500 ms of writes).
const WAL_AUTOCHECKPOINT_BYTES: i64 = 64 << 20;
/// Writer page cache: negative means KiB (8 MiB, whatever the page size). What appends touch is the last
/// leaf of each writing session's events, the interior pages above them and the sessions' rows,
/// but the cache keeps every page it touched until it is full, so at 64 MiB it grew with the
/// database itself (13 MiB more of the gateway's RSS by the end of the turn benchmark's ramp,
/// docs/benchmarks/2026-12.md, "The frame path and the house"). A page pushed out is read back from the OS page cache: 5,000 sessions
/// appending at once, more hot pages than this holds, committed as fast as with 64 MiB.
const WRITER_CACHE_KIB: i64 = -8192;

/// The [`StoreWrite`] of the SQLite store: a handle on the writer thread, which ends (closing
/// the connection) when this is dropped.
pub(crate) struct SqliteWriter {
    commands: mpsc::SyncSender<WriterCommand>,
}

/// Opens the writer connection (`create`: the file may be created) and starts its thread.
/// `max_pages_over`: test support, let the database grow by at most that many pages.
pub(crate) async fn start(
    cfg: &StoreConfig,
    create: bool,
    max_pages_over: Option<u64>,
) -> Result<SqliteWriter, StoreError> {
    let cfg = cfg.clone();
    let conn = tokio::task::spawn_blocking(move || connect(&cfg, create, max_pages_over))
        .await
        .map_err(|e| StoreError::Unavailable(format!("opening the writer: {e}")))??;
    let (commands, rx) = mpsc::sync_channel(QUEUE);
    std::thread::Builder::new()
        .name("tether-writer".into())
        .spawn(move || serve(conn, rx))
        .map_err(|e| StoreError::Unavailable(format!("starting the writer thread: {e}")))?;
    Ok(SqliteWriter { commands })
}

fn connect(
    cfg: &StoreConfig,
    create: bool,
    max_pages_over: Option<u64>,
) -> Result<Connection, StoreError> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let open_err = |e| map_rusqlite(e, Doing::Open);
    let conn = Connection::open_with_flags(&cfg.db_path, flags).map_err(open_err)?;
    conn.busy_timeout(cfg.busy_timeout).map_err(open_err)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    let synchronous = match cfg.synchronous {
        Synchronous::Normal => "NORMAL",
        Synchronous::Full => "FULL",
    };
    let page_size: i64 = conn
        .query_row("PRAGMA page_size", [], |row| row.get(0))
        .map_err(open_err)?;
    let autocheckpoint = WAL_AUTOCHECKPOINT_BYTES / page_size.max(512);
    // PRAGMA arguments cannot be bound; every value here is ours. `secure_delete`: a row the
    // writer updates (a session's row, at every append) or deletes (a turn marker, a handoff)
    // leaves its old bytes in the page's free space unless they are overwritten; left there, an
    // erased session's title or prompt stayed readable in the file after the erase had
    // overwritten the rows it removed (docs/RELIABILITY.md, "Deletion": cost measured there).
    conn.execute_batch(&format!(
        "PRAGMA journal_mode = WAL; \
         PRAGMA secure_delete = ON; \
         PRAGMA synchronous = {synchronous}; \
         PRAGMA foreign_keys = ON; \
         PRAGMA temp_store = MEMORY; \
         PRAGMA wal_autocheckpoint = {autocheckpoint}; \
         PRAGMA cache_size = {WRITER_CACHE_KIB};"
    ))
    .map_err(open_err)?;
    if let Some(over) = max_pages_over {
        let pages: i64 = conn
            .query_row("PRAGMA page_count", [], |row| row.get(0))
            .map_err(open_err)?;
        let max = pages.saturating_add(i64::try_from(over).unwrap_or(i64::MAX));
        conn.execute_batch(&format!("PRAGMA max_page_count = {max}"))
            .map_err(open_err)?;
    }
    Ok(conn)
}

/// The thread: runs commands until every handle is gone.
fn serve(conn: Connection, commands: mpsc::Receiver<WriterCommand>) {
    let mut tx = Tx { conn };
    while let Ok(command) = commands.recv() {
        match command {
            WriterCommand::Commit { ops, reply } => {
                let _ = reply.send(tx.commit(&ops));
            }
            WriterCommand::LatestSeq { session_id, reply } => {
                let _ = reply.send(tx.latest_seq(&session_id));
            }
        }
    }
}

/// How one attempt at a batch ended.
enum Attempt {
    /// The transaction committed (or failed as a whole at BEGIN/COMMIT); results are final.
    Done,
    /// The transaction was lost because of the op that just failed; run the batch again.
    Retry,
}

/// The connection and the transaction logic.
struct Tx {
    conn: Connection,
}

impl Tx {
    /// Runs one of the fixed transaction statements, kept prepared.
    fn exec(&self, sql: &str) -> OpResult {
        self.conn
            .prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute([]))
            .map(|_| ())
            .map_err(|e| map_rusqlite(e, Doing::Write))
    }

    fn begin(&self) -> OpResult {
        let begun = self.exec("BEGIN IMMEDIATE");
        if begun.is_err() {
            self.rollback();
        }
        begun
    }

    /// COMMITs; on failure rolls back, so nothing of the transaction remains.
    fn finish(&self) -> OpResult {
        let committed = self.exec("COMMIT");
        if let Err(e) = &committed {
            tracing::warn!(error = %e, "store commit failed");
            self.rollback();
        }
        committed
    }

    /// Ends whatever transaction may be open.
    fn rollback(&self) {
        if self.conn.is_autocommit() {
            return;
        }
        if let Err(e) = self.exec("ROLLBACK") {
            tracing::debug!(error = %e, "rollback");
        }
    }

    fn commit(&mut self, ops: &[WriteOp]) -> Vec<OpResult> {
        self.rollback();
        match ops {
            [] => Vec::new(),
            [op] => vec![self.commit_one(op)],
            _ => match self.commit_unguarded(ops) {
                Some(results) => results,
                None => self.commit_many(ops),
            },
        }
    }

    /// Way 2: no savepoints. `None`: the batch must take way 3 (it creates a session, or an SQL
    /// error rolled everything back).
    fn commit_unguarded(&self, ops: &[WriteOp]) -> Option<Vec<OpResult>> {
        if ops
            .iter()
            .any(|op| matches!(op, WriteOp::CreateSession { .. }))
        {
            return None;
        }
        if let Err(e) = self.begin() {
            return Some(vec![Err(e); ops.len()]);
        }
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            match ops::apply_checked_first(&self.conn, op) {
                Ok(outcome) => results.push(outcome),
                Err(e) => {
                    tracing::debug!(error = %e, "batch failed half-way; retrying op by op");
                    self.rollback();
                    return None;
                }
            }
        }
        let committed = self.finish();
        Some(
            results
                .into_iter()
                .map(|r| match (r, &committed) {
                    (Err(refused), _) => Err(refused),
                    (Ok(()), Ok(())) => Ok(()),
                    (Ok(()), Err(e)) => Err(e.clone()),
                })
                .collect(),
        )
    }

    /// A batch of one: the transaction is the op.
    fn commit_one(&self, op: &WriteOp) -> OpResult {
        self.begin()?;
        match ops::apply(&self.conn, op) {
            Ok(()) => self.finish(),
            Err(e) => {
                self.rollback();
                Err(e)
            }
        }
    }

    /// Savepoint per op, retried while SQLite drops whole transactions.
    fn commit_many(&self, ops: &[WriteOp]) -> Vec<OpResult> {
        let mut results: Vec<Option<OpResult>> = vec![None; ops.len()];
        // Bounded: every Retry fails one more op for good.
        for _ in 0..=ops.len() {
            if let Attempt::Done = self.attempt(ops, &mut results) {
                break;
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(StoreError::Io("batch abandoned".into()))))
            .collect()
    }

    /// One try at the batch: every op whose `results` slot is still `None` is run. On `Done`
    /// every slot is filled.
    fn attempt(&self, ops: &[WriteOp], results: &mut [Option<OpResult>]) -> Attempt {
        if let Err(e) = self.begin() {
            fill_pending(results, &e);
            return Attempt::Done;
        }
        // Ops run OK in this transaction; they are only Ok once it commits.
        let mut ok = Vec::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            if results[i].is_some() {
                continue;
            }
            match self.run_in_savepoint(op) {
                Ok(()) => ok.push(i),
                Err((e, tx_alive)) => {
                    results[i] = Some(Err(e));
                    if !tx_alive {
                        self.rollback();
                        return Attempt::Retry;
                    }
                }
            }
        }
        match self.finish() {
            Ok(()) => {
                for i in ok {
                    results[i] = Some(Ok(()));
                }
            }
            Err(e) => fill_pending(results, &e),
        }
        Attempt::Done
    }

    /// Runs one op in a savepoint. On error, returns it with whether the surrounding transaction
    /// survived (its savepoint could be rolled back).
    fn run_in_savepoint(&self, op: &WriteOp) -> Result<(), (StoreError, bool)> {
        self.exec("SAVEPOINT op").map_err(|e| (e, false))?;
        let result = match ops::apply(&self.conn, op) {
            Ok(()) => self.exec("RELEASE op"),
            Err(e) => Err(e),
        };
        let Err(e) = result else { return Ok(()) };
        let alive = !self.conn.is_autocommit()
            && self.exec("ROLLBACK TO op").is_ok()
            && self.exec("RELEASE op").is_ok();
        if !alive {
            tracing::warn!(error = %e, "store transaction lost; retrying the batch without the failed op");
        }
        Err((e, alive))
    }

    fn latest_seq(&self, session_id: &SessionId) -> Result<u64, StoreError> {
        self.rollback();
        // Under the write lock: a commit still running on another connection (a writer that
        // was replaced mid-commit) finishes first, so the answer includes it and a session that
        // rebases on it never re-sends seqs that are in fact on disk.
        self.begin()?;
        let read = ops::latest_seq(&self.conn, session_id);
        self.rollback();
        Ok(read?.unwrap_or(0))
    }
}

/// Gives `err` to every op that has no result yet.
fn fill_pending(results: &mut [Option<OpResult>], err: &StoreError) {
    for slot in results.iter_mut().filter(|r| r.is_none()) {
        *slot = Some(Err(err.clone()));
    }
}

impl SqliteWriter {
    /// Hands `command` to the thread; `false` if the thread is gone.
    fn send(&self, command: WriterCommand) -> bool {
        self.commands.send(command).is_ok()
    }
}

fn thread_gone() -> StoreError {
    StoreError::Unavailable("the store writer thread is gone".into())
}

#[async_trait]
impl StoreWrite for SqliteWriter {
    async fn commit(&mut self, ops: Vec<WriteOp>) -> Vec<OpResult> {
        let n = ops.len();
        if n == 0 {
            return Vec::new();
        }
        let (reply, answer) = oneshot::channel();
        // The batch moves to the thread as it is: no copy of its events.
        if !self.send(WriterCommand::Commit { ops, reply }) {
            return vec![Err(thread_gone()); n];
        }
        answer.await.unwrap_or_else(|_| vec![Err(thread_gone()); n])
    }

    async fn latest_seq(&mut self, session_id: &SessionId) -> Result<u64, StoreError> {
        let (reply, answer) = oneshot::channel();
        let command = WriterCommand::LatestSeq {
            session_id: session_id.clone(),
            reply,
        };
        if !self.send(command) {
            return Err(thread_gone());
        }
        answer.await.unwrap_or_else(|_| Err(thread_gone()))
    }
}
