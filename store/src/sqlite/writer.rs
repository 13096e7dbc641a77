//! The single writer connection and its group commit.
//!
//! A batch is one transaction (`BEGIN IMMEDIATE`, so the write lock is taken, and waited for,
//! up front rather than half-way through an op). Every op is atomic and ops are independent: one
//! failing op leaves no trace and does not sink the others. Three ways to get there, cheapest
//! first (every SQL statement is a round trip to sqlx's connection thread, which is what small
//! appends mostly cost):
//!
//! 1. A batch of one op is the transaction itself: no savepoint needed.
//! 2. The fast path ([`bulk`]): validate every op in Rust, then write the whole batch in a few
//!    statements, whatever its number of ops.
//! 3. The slow path, when the batch creates a session or the fast path hit an SQL error (e.g.
//!    disk full): op by op, each in its own SAVEPOINT, rolled back to it if the op fails.
//!
//! One subtlety of the slow path: SQLite may roll back the WHOLE transaction on some errors
//! (SQLITE_FULL, IOERR, BUSY, NOMEM: <https://www.sqlite.org/lang_transaction.html>), taking the
//! earlier, successful ops of the batch with it. We detect that (the savepoint is gone) and run
//! the batch again without the failed op. Each retry fails at least one more op for good, so a
//! batch of n ops needs at most n + 1 transactions.

use async_trait::async_trait;
use sqlx::sqlite::SqliteConnection;
use tether_protocol::SessionId;

use crate::{StoreError, StoreWrite, WriteOp};

use super::errors::{map_sqlx, Doing};
use super::{bulk, ops};

type OpResult = Result<(), StoreError>;

/// The [`StoreWrite`] of the SQLite store.
pub(crate) struct SqliteWriter {
    conn: SqliteConnection,
    /// A transaction may be open: set before BEGIN until COMMIT/ROLLBACK. If a `commit` future
    /// is dropped half-way (the caller was cancelled), the next call rolls the leftover back
    /// first instead of failing on "cannot start a transaction within a transaction".
    in_tx: bool,
}

/// How one slow-path attempt at a batch ended.
enum Attempt {
    /// The transaction committed (or failed as a whole at BEGIN/COMMIT); results are final.
    Done,
    /// The transaction was lost because of the op that just failed; run the batch again.
    Retry,
}

impl SqliteWriter {
    pub(crate) fn new(conn: SqliteConnection) -> Self {
        SqliteWriter { conn, in_tx: false }
    }

    async fn exec(&mut self, sql: &str) -> OpResult {
        sqlx::query(sql)
            .execute(&mut self.conn)
            .await
            .map(|_| ())
            .map_err(|e| map_sqlx(e, Doing::Write))
    }

    async fn begin(&mut self) -> OpResult {
        // Marked before BEGIN is sent: if this future is dropped while BEGIN runs, the
        // transaction may be open without us having seen the answer.
        self.in_tx = true;
        let begun = self.exec("BEGIN IMMEDIATE").await;
        if begun.is_err() {
            self.rollback().await;
        }
        begun
    }

    /// COMMITs; on failure rolls back, so nothing of the transaction remains.
    async fn finish(&mut self) -> OpResult {
        let committed = self.exec("COMMIT").await;
        match &committed {
            Ok(()) => self.in_tx = false,
            Err(e) => {
                tracing::warn!(error = %e, "store commit failed");
                self.rollback().await;
            }
        }
        committed
    }

    /// Ends whatever transaction may be open. Errors are ignored: "no transaction is active" is
    /// the expected one, and anything else will surface again at the next BEGIN.
    async fn rollback(&mut self) {
        if let Err(e) = self.exec("ROLLBACK").await {
            tracing::debug!(error = %e, "rollback");
        }
        self.in_tx = false;
    }

    /// A batch of one: the transaction is the op.
    async fn commit_one(&mut self, op: &WriteOp) -> OpResult {
        self.begin().await?;
        match ops::apply(&mut self.conn, op).await {
            Ok(()) => self.finish().await,
            Err(e) => {
                self.rollback().await;
                Err(e)
            }
        }
    }

    /// The fast path. `None` means "use the slow path": the batch creates a session, or the
    /// bulk write failed (and was rolled back, so nothing of it remains).
    async fn commit_fast(&mut self, ops: &[WriteOp]) -> Option<Vec<OpResult>> {
        let ids = bulk::session_ids(ops)?;
        if let Err(e) = self.begin().await {
            return Some(vec![Err(e); ops.len()]);
        }
        let written = match bulk::latest_seqs(&mut self.conn, &ids).await {
            Ok(stored) => {
                let plan = bulk::plan(ops, &stored);
                bulk::apply(&mut self.conn, &plan).await.map(|()| plan)
            }
            Err(e) => Err(e),
        };
        let plan = match written {
            Ok(plan) => plan,
            Err(e) => {
                tracing::debug!(error = %e, "bulk write failed; retrying op by op");
                self.rollback().await;
                return None;
            }
        };
        let committed = self.finish().await;
        Some(
            plan.rejected
                .into_iter()
                .map(|rejected| match (rejected, &committed) {
                    (Some(e), _) => Err(e),
                    (None, Ok(())) => Ok(()),
                    (None, Err(e)) => Err(e.clone()),
                })
                .collect(),
        )
    }

    /// The slow path: savepoint per op, retried while SQLite drops whole transactions.
    async fn commit_slow(&mut self, ops: &[WriteOp]) -> Vec<OpResult> {
        let mut results: Vec<Option<OpResult>> = vec![None; ops.len()];
        // Bounded: every Retry fails one more op for good.
        for _ in 0..=ops.len() {
            if let Attempt::Done = self.attempt(ops, &mut results).await {
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
    async fn attempt(&mut self, ops: &[WriteOp], results: &mut [Option<OpResult>]) -> Attempt {
        if let Err(e) = self.begin().await {
            fill_pending(results, &e);
            return Attempt::Done;
        }
        // Ops run OK in this transaction; they are only Ok once it commits.
        let mut ok = Vec::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            if results[i].is_some() {
                continue;
            }
            match self.run_in_savepoint(op).await {
                Ok(()) => ok.push(i),
                Err((e, tx_alive)) => {
                    results[i] = Some(Err(e));
                    if !tx_alive {
                        self.rollback().await;
                        return Attempt::Retry;
                    }
                }
            }
        }
        match self.finish().await {
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
    async fn run_in_savepoint(&mut self, op: &WriteOp) -> Result<(), (StoreError, bool)> {
        self.exec("SAVEPOINT op").await.map_err(|e| (e, false))?;
        let result = match ops::apply(&mut self.conn, op).await {
            Ok(()) => self.exec("RELEASE op").await,
            Err(e) => Err(e),
        };
        let Err(e) = result else { return Ok(()) };
        let alive =
            self.exec("ROLLBACK TO op").await.is_ok() && self.exec("RELEASE op").await.is_ok();
        if !alive {
            tracing::warn!(error = %e, "store transaction lost; retrying the batch without the failed op");
        }
        Err((e, alive))
    }
}

/// Gives `err` to every op that has no result yet.
fn fill_pending(results: &mut [Option<OpResult>], err: &StoreError) {
    for slot in results.iter_mut().filter(|r| r.is_none()) {
        *slot = Some(Err(err.clone()));
    }
}

#[async_trait]
impl StoreWrite for SqliteWriter {
    async fn commit(&mut self, ops: &[WriteOp]) -> Vec<OpResult> {
        if self.in_tx {
            self.rollback().await;
        }
        match ops {
            [] => Vec::new(),
            [op] => vec![self.commit_one(op).await],
            _ => match self.commit_fast(ops).await {
                Some(results) => results,
                None => self.commit_slow(ops).await,
            },
        }
    }

    async fn latest_seq(&mut self, session_id: &SessionId) -> Result<u64, StoreError> {
        if self.in_tx {
            self.rollback().await;
        }
        // Under the write lock: a commit still running on another
        // connection (a writer that was replaced mid-commit) finishes
        // first, so the answer includes it and a session that rebases on
        // it never re-sends seqs that are in fact on disk.
        self.begin().await?;
        let read = ops::latest_seq(&mut self.conn, session_id).await;
        self.rollback().await;
        Ok(read?.unwrap_or(0))
    }
}
