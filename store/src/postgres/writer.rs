//! The single writer connection, on a task of its own, and what it does when the connection
//! goes away.
//!
//! Why a task: the caller (the StoreWriter actor's commit task) may be dropped at any moment; a
//! batch handed to this task is finished whatever happens to its caller, so a statement is
//! never abandoned half-sent and the task always knows what it last wrote. The caller waits
//! once, for the batch's results.
//!
//! A batch is one statement (`batch.rs`), sent by `writer/commit.rs`. Its outcomes (the lost
//! ones are `writer/doubt.rs`'s):
//!
//! - **answered**: committed, or refused by the server (nothing written). A stale plan is
//!   planned again from fresh reads; any other refusal is narrowed down by sending each op on
//!   its own, so one op's error (a disk full, a NUL byte in a title) fails only that op.
//! - **lost** (the connection broke, or the server stopped answering): the batch is *in doubt*.
//!   The task reconnects, which takes the writer's lock (`connect/lock.rs`), so the old backend is
//!   gone and with it any chance of a late commit; then it reads back the `latest_seq` of the
//!   sessions the batch moved. All at their new value: committed, and reported so. All at
//!   their old value: nothing was written, and the batch is simply sent again on the new
//!   connection. It keeps trying for a few seconds ([`PostgresConfig::in_doubt_wait`]): long
//!   enough for a server restart, short enough that requests do not hang on a server that
//!   stays down. A batch still in doubt after that is answered 5072 (never 5071, which would
//!   claim that nothing was written), and its sessions refuse every write until the task has
//!   reconnected and settled it: if it had committed after all, it is undone (its events
//!   deleted, `latest_seq` put back, a session it created removed). No client saw those events
//!   (a session fans out only what was acknowledged) and their sessions have rewound, so the
//!   store is made to agree with what was answered; the next appends reuse those seqs.
//!
//! [`PostgresConfig::in_doubt_wait`]: crate::PostgresConfig::in_doubt_wait
//!
//! While the server cannot be reached the task answers every request at once with 5072 and
//! reconnects in the background with a capped backoff: callers never queue behind a dead
//! connection, and a session's work is bounded by what it holds itself.
//!
//! A server that stops answering without closing its connections (stopped, or cut off by the
//! network) is the same outage, noticed by time: every request the task takes up is answered
//! within [`PostgresConfig::write_wait`] of that moment, whatever it waits on (reading
//! `latest_seq`, the batch's answer, reconnecting to settle a batch in doubt). A batch whose
//! answer did not come in time is in doubt and answered 5072 as above, and the connection is
//! dropped, so the next requests are answered 5072 at once until a new one is up.
//!
//! [`PostgresConfig::write_wait`]: crate::PostgresConfig::write_wait
//!
//! # Cluster mode
//!
//! Started with a [`Fencing`] (a cluster node's writer), a batch is a transaction that first
//! locks and checks the ownership rows of its sessions, and notifies followers before it
//! commits (`postgres/fencing.rs`). Ops of a session this node does not own under the fence it
//! holds fail with [`StoreError::NotOwner`] and write nothing; the rest of the batch is planned
//! again and committed without them. A batch in doubt is resolved by looking for its last
//! event stored with its fence (another node may have written the same seqs since), and a
//! batch that has to be undone is undone only while this node still owns its sessions under
//! that fence. Without a `Fencing` everything above is exactly as a single gateway does it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::PgConnection;
use sqlx::Row;
use tether_protocol::SessionId;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::writer_command::WriterCommand;
use crate::{StoreError, StoreWrite, WriteOp};

use super::batch::{Evidence, Known, Plan};
use super::connect::{close, ConnectError, Settings};
use super::errors::{classify, Failure};
use super::fencing::Fencing;

mod commit;
mod doubt;

use commit::execute_fenced;

type OpResult = Result<(), StoreError>;

/// Batches waiting for the task: the StoreWriter actor has one commit in flight at a time.
const QUEUE: usize = 4;
/// Reconnect backoff: first retry at once, then doubling up to this.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// `Known` is a cache; past this many sessions it starts over rather than grow without end.
const MAX_KNOWN: usize = 100_000;

/// Numbers this process's writers, so that a writer connection can tell an older one of its
/// own process from a newer one (`connect/lock.rs`).
static WRITERS: AtomicU64 = AtomicU64::new(1);

/// The [`StoreWrite`] of the PostgreSQL store: a handle on the writer task, which ends (closing
/// its connection, and so releasing the lock) when this is dropped.
pub(crate) struct PgWriter {
    commands: mpsc::Sender<WriterCommand>,
}

/// What a sent batch came to, when the server answered.
enum Sent {
    Committed,
    /// Cluster mode: nothing was written, because of these sessions: not this node's under
    /// the batch's fences (`NotOwner`), or a forward their write was to accept is no longer
    /// acceptable (`ForwardRefused`).
    Refused(HashMap<SessionId, StoreError>),
}

/// Starts a writer. With `conn` (opened and locked by the caller) it writes at once; without,
/// it connects in the background and answers 5072 until it has. With `fencing` it is a cluster
/// node's writer (module doc).
pub(crate) fn start(
    settings: Arc<Settings>,
    writer: u64,
    conn: Option<PgConnection>,
    fencing: Option<Fencing>,
) -> PgWriter {
    let (commands, rx) = mpsc::channel(QUEUE);
    let down = StoreError::Unavailable(format!("{}: not connected yet", settings.url));
    let task = Task {
        settings,
        writer,
        next_conn: 2,
        conn,
        known: Known::new(),
        erasing: HashSet::new(),
        known_under: HashMap::new(),
        down,
        backoff: Duration::ZERO,
        in_doubt: HashSet::new(),
        unsettled: Vec::new(),
        fencing,
        deadline: Instant::now(),
    };
    tokio::spawn(task.run(rx));
    PgWriter { commands }
}

/// A fresh writer number.
pub(crate) fn next_writer() -> u64 {
    WRITERS.fetch_add(1, Ordering::Relaxed)
}

struct Task {
    settings: Arc<Settings>,
    writer: u64,
    next_conn: u64,
    conn: Option<PgConnection>,
    known: Known,
    /// Of the ids last read, those whose previous life is still being erased (`crate::erase`):
    /// a create of one is refused until the erase is done.
    erasing: HashSet<SessionId>,
    /// Cluster mode: the fence under which each session's entry in `known` was learned. Under
    /// another fence it may be stale (another node may have owned the session in between), so
    /// it is read again.
    known_under: HashMap<SessionId, u64>,
    /// What requests are told while there is no connection.
    down: StoreError,
    /// Wait before the next reconnect attempt.
    backoff: Duration,
    /// Sessions whose last batch is in doubt and was answered 5072: settled before any write
    /// to them (module doc).
    in_doubt: HashSet<SessionId>,
    /// What those batches would have moved, to settle them.
    unsettled: Vec<Evidence>,
    /// Cluster mode: this node and the fences it holds.
    fencing: Option<Fencing>,
    /// When the request being handled must be answered by ([`Settings::write_wait`] after it
    /// was taken up): every wait on the server ends there.
    deadline: Instant,
}

impl Task {
    async fn run(mut self, mut commands: mpsc::Receiver<WriterCommand>) {
        loop {
            if self.conn.is_none() {
                if !self.reconnect_answering(&mut commands).await {
                    return;
                }
                continue;
            }
            let Some(command) = commands.recv().await else {
                break;
            };
            self.deadline = Instant::now() + self.settings.write_wait;
            match command {
                WriterCommand::Commit { ops, reply } => {
                    let _ = reply.send(self.commit(&ops).await);
                }
                WriterCommand::LatestSeq { session_id, reply } => {
                    let _ = reply.send(self.latest_seq(&session_id).await);
                }
            }
        }
        if let Some(conn) = self.conn.take() {
            close(conn).await;
        }
    }

    /// One reconnect attempt (after the backoff), answering requests with 5072 meanwhile.
    /// `false` once every handle is gone.
    async fn reconnect_answering(&mut self, commands: &mut mpsc::Receiver<WriterCommand>) -> bool {
        let settings = self.settings.clone();
        let (writer, conn) = (self.writer, self.next_conn);
        self.next_conn += 1;
        let delay = self.backoff;
        let attempt = async move {
            tokio::time::sleep(delay).await;
            settings.connect_writer(writer, conn).await
        };
        tokio::pin!(attempt);
        let outcome = loop {
            tokio::select! {
                outcome = &mut attempt => break outcome,
                command = commands.recv() => match command {
                    None => return false,
                    Some(WriterCommand::Commit { ops, reply }) => {
                        let _ = reply.send(vec![Err(self.down.clone()); ops.len()]);
                    }
                    Some(WriterCommand::LatestSeq { reply, .. }) => {
                        let _ = reply.send(Err(self.down.clone()));
                    }
                },
            }
        };
        match outcome {
            Ok(conn) => self.connected(conn).await,
            Err(e) => self.connect_failed(&e),
        }
        true
    }

    /// A new connection: what was known may have changed meanwhile (a batch in doubt).
    async fn connected(&mut self, conn: PgConnection) {
        tracing::info!(url = %self.settings.url, "store writer connected");
        self.conn = Some(conn);
        self.backoff = Duration::ZERO;
        self.known.clear();
        if !self.in_doubt.is_empty() {
            // Settling is bounded like a request: requests wait behind it.
            self.deadline = Instant::now() + self.settings.write_wait;
            let settled = tokio::time::timeout(self.settings.write_wait, self.settle())
                .await
                .unwrap_or_else(|_| {
                    Err(Failure::Lost(StoreError::Unavailable(
                        "the database stopped answering while a batch in doubt was settled".into(),
                    )))
                });
            match settled {
                Ok(()) => {
                    self.in_doubt.clear();
                    self.unsettled.clear();
                }
                Err(e) => {
                    tracing::warn!(error = %e.error(), "settling a batch in doubt; retrying on the next connection");
                    self.lost(e.error()).await;
                    // Not at once: a settle that fails for a reason of its own must not spin.
                    self.backoff = MAX_BACKOFF;
                }
            }
        }
    }

    fn connect_failed(&mut self, e: &ConnectError) {
        self.down = e.to_store_error(&self.settings.url);
        self.backoff = (self.backoff * 2).clamp(FIRST_BACKOFF, MAX_BACKOFF);
        match e {
            ConnectError::Held(holder) => {
                tracing::error!(%holder, url = %self.settings.url, "another tether gateway holds the database; not writing")
            }
            ConnectError::Superseded => {
                // Replaced (a restarted StoreWriter actor); its handle goes soon.
                self.backoff = MAX_BACKOFF;
                tracing::debug!("store writer replaced by a newer one")
            }
            _ => tracing::warn!(error = %self.down, "store writer cannot connect; retrying"),
        }
    }

    /// The connection broke: drop it, and answer with 5072 until a new one is up.
    async fn lost(&mut self, e: &StoreError) {
        tracing::warn!(error = %e, "store writer lost its connection");
        if let Some(conn) = self.conn.take() {
            // Closed aside: a server that stopped answering would hold the answer up.
            tokio::spawn(close(conn));
        }
        self.down = StoreError::Unavailable(format!("{}: connection lost: {e}", self.settings.url));
        self.known.clear();
    }

    async fn latest_seq(&mut self, session_id: &SessionId) -> Result<u64, StoreError> {
        if self.in_doubt.contains(session_id) {
            return Err(self.down.clone());
        }
        match self.read_latest(std::slice::from_ref(session_id)).await {
            Ok(()) => Ok(self.known.get(session_id).copied().flatten().unwrap_or(0)),
            Err(Failure::Refused(e) | Failure::Stale(e)) => Err(e),
            Err(Failure::Lost(e)) => {
                self.lost(&e).await;
                Err(self.down.clone())
            }
        }
    }

    /// Reads `ids`' `latest_seq` into `known` (absent sessions as `None`).
    async fn read_latest(&mut self, ids: &[SessionId]) -> Result<(), Failure> {
        let wait = self.answer_wait();
        let Some(conn) = self.conn.as_mut() else {
            return Err(Failure::Lost(self.down.clone()));
        };
        let names: Vec<&str> = ids.iter().map(SessionId::as_str).collect();
        let rows = tokio::time::timeout(
            wait,
            sqlx::query(
                "SELECT id, latest_seq, false FROM sessions WHERE id = ANY($1) \
                 UNION ALL SELECT session_id, 0, true FROM erasing WHERE session_id = ANY($1)",
            )
            .bind(&names)
            .fetch_all(&mut *conn),
        )
        .await
        .map_err(|_| {
            Failure::Lost(StoreError::Unavailable(
                "the database stopped answering".into(),
            ))
        })?
        .map_err(classify)?;
        if self.known.len() > MAX_KNOWN {
            self.known.clear();
        }
        if self.erasing.len() > MAX_KNOWN {
            self.erasing.clear();
        }
        for id in ids {
            self.known.insert(id.clone(), None);
            self.erasing.remove(id);
        }
        for row in rows {
            let id: String = row.try_get(0).map_err(classify)?;
            let seq: i64 = row.try_get(1).map_err(classify)?;
            let erasing: bool = row.try_get(2).map_err(classify)?;
            if erasing {
                self.erasing.insert(SessionId::from(id));
                continue;
            }
            let seq = u64::try_from(seq).map_err(|_| {
                Failure::Refused(StoreError::Invalid(format!("stored latest_seq is {seq}")))
            })?;
            self.known.insert(SessionId::from(id), Some(seq));
        }
        Ok(())
    }

    /// Sends a planned statement (in cluster mode, its fenced transaction).
    async fn execute(&mut self, plan: &Plan<'_>) -> Result<Sent, Failure> {
        // The server's statement_timeout cancels a slow statement (an answer: nothing
        // written); this bound catches a server that does not answer at all, in time for the
        // request's deadline.
        let wait = self.answer_wait();
        let Some(conn) = self.conn.as_mut() else {
            return Err(Failure::Lost(self.down.clone()));
        };
        let outcome = match &self.fencing {
            None => tokio::time::timeout(wait, plan.query().execute(&mut *conn))
                .await
                .map(|done| done.map(|_| Sent::Committed)),
            Some(fencing) => tokio::time::timeout(wait, execute_fenced(conn, fencing, plan)).await,
        };
        match outcome {
            Ok(Ok(sent)) => Ok(sent),
            Ok(Err(e)) => Err(classify(e)),
            Err(_) => Err(Failure::Lost(StoreError::Unavailable(format!(
                "no answer from the database within {} ms",
                wait.as_millis()
            )))),
        }
    }

    /// How long the next statement may wait for the server's answer: what is left until the
    /// request's deadline, and never more than the server's own statement timeout (plus a
    /// margin for its answer to come back).
    pub(super) fn answer_wait(&self) -> Duration {
        let left = self.deadline.saturating_duration_since(Instant::now());
        left.min(self.settings.statement_timeout + Duration::from_secs(2))
    }
}

impl PgWriter {
    async fn send<T>(&self, command: WriterCommand, answer: oneshot::Receiver<T>) -> Option<T> {
        self.commands.send(command).await.ok()?;
        answer.await.ok()
    }
}

fn task_gone() -> StoreError {
    StoreError::Unavailable("the store writer task is gone".into())
}

#[async_trait]
impl StoreWrite for PgWriter {
    async fn commit(&mut self, ops: Vec<WriteOp>) -> Vec<OpResult> {
        let n = ops.len();
        if n == 0 {
            return Vec::new();
        }
        let (reply, answer) = oneshot::channel();
        // The batch moves to the task as it is: no copy of its events.
        self.send(WriterCommand::Commit { ops, reply }, answer)
            .await
            .unwrap_or_else(|| vec![Err(task_gone()); n])
    }

    async fn latest_seq(&mut self, session_id: &SessionId) -> Result<u64, StoreError> {
        let (reply, answer) = oneshot::channel();
        let command = WriterCommand::LatestSeq {
            session_id: session_id.clone(),
            reply,
        };
        self.send(command, answer)
            .await
            .unwrap_or_else(|| Err(task_gone()))
    }
}
