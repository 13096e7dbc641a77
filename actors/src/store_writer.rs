//! `StoreWriter`: the one actor that writes to the store.
//!
//! It owns the single write connection and group-commits: a job that
//! finds the writer idle is committed at once, unless the last commit held
//! several sessions' appends and began less than `--commit-window-us` ago;
//! then it waits out the rest of that window. Jobs that arrive meanwhile,
//! or while a commit is in flight, are gathered into the next one, a batch
//! the store commits with each job atomic and independent of the others
//! ([`StoreWrite::commit`]).
//! The commit itself runs on a task that borrows the connection and hands
//! it back with the results, so the actor's mailbox keeps filling the next
//! batch meanwhile.
//!
//! Sessions learn the outcome as `Committed { append_gen, upto_seq }` or
//! `AppendFailed { append_gen, from_seq, code }`. After a failure the writer
//! rejects every Append of that session with an older `append_gen`, so a session
//! that rewound its seq can never leave a gap behind.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tether_protocol::SessionId;
use tether_store::{EventRow, NewSession, SessionPatch, StoreError, StoreWrite, WriteOp};
use tracing::{debug, warn};

use crate::session::SessionMsg;

/// Opens the writer (at start and after a restart); the store crate owns the type, since only
/// it knows how to open one.
pub use tether_store::WriterFactory;

/// What a session learns from a barrier: its committed `latest_seq` and the
/// generation its appends must carry from now on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub latest_seq: u64,
    pub append_gen: u64,
}

pub enum StoreWriterMsg {
    /// Append durable events of one session (seqs contiguous).
    Append {
        session_id: SessionId,
        append_gen: u64,
        events: Vec<EventRow>,
        patch: SessionPatch,
        notify: ActorRef<SessionMsg>,
    },
    /// Create a session with its first events, all or nothing.
    /// Create a session; answered, once committed, with the append
    /// generation its actor starts at (a barrier of its own: a new life
    /// under an id never inherits the floor an earlier life's rewind left).
    Create {
        session: Box<NewSession>,
        events: Vec<EventRow>,
        reply: RpcReplyPort<Result<u64, StoreError>>,
    },
    /// Patch a session row without an event.
    Patch {
        session_id: SessionId,
        patch: SessionPatch,
        reply: Option<RpcReplyPort<Result<(), StoreError>>>,
    },
    /// Answered after every job queued before it is committed.
    Barrier {
        session_id: SessionId,
        reply: RpcReplyPort<Result<Barrier, StoreError>>,
    },
    /// Answered once everything queued before it is committed.
    Flush { reply: RpcReplyPort<()> },
    /// Internal: a commit task finished and returns the connection.
    Done(Box<CommitDone>),
    /// Internal: start the next commit with everything queued so far.
    Kick,
}

pub struct CommitDone {
    store: Box<dyn StoreWrite>,
    replies: Vec<Reply>,
    results: Vec<Result<(), StoreError>>,
    barrier: Option<Result<u64, StoreError>>,
}

/// A queued message, split once, when it arrives, into what it writes (moved
/// into the store with the batch) and whom to tell how that went.
struct Job {
    op: Option<WriteOp>,
    reply: Reply,
}

/// Whom to tell, and what they need to hear: a message minus its data.
enum Reply {
    Append {
        session_id: SessionId,
        append_gen: u64,
        from_seq: u64,
        upto_seq: u64,
        notify: ActorRef<SessionMsg>,
    },
    Create {
        session_id: SessionId,
        reply: RpcReplyPort<Result<u64, StoreError>>,
    },
    Patch(Option<RpcReplyPort<Result<(), StoreError>>>),
    Barrier {
        session_id: SessionId,
        reply: RpcReplyPort<Result<Barrier, StoreError>>,
    },
    Flush(RpcReplyPort<()>),
}

impl Job {
    fn write(op: WriteOp, reply: Reply) -> Self {
        Job {
            op: Some(op),
            reply,
        }
    }

    /// What the job costs of a batch's event budget (at least 1).
    fn events(&self) -> usize {
        self.op.as_ref().map_or(0, |op| op.events().len()).max(1)
    }

    /// A barrier (or flush) must observe exactly the jobs before it: it ends the batch.
    fn ends_batch(&self) -> bool {
        matches!(self.reply, Reply::Barrier { .. } | Reply::Flush(_))
    }
}

pub struct StoreWriterArgs {
    pub factory: WriterFactory,
    pub max_batch_events: usize,
    /// Least time from one commit's start to the next.
    pub commit_window: Duration,
    /// Commit latencies, events appended and write errors go here.
    pub metrics: Arc<crate::metrics::Metrics>,
}

pub struct StoreWriterState {
    /// `None` while a commit task holds the connection.
    store: Option<Box<dyn StoreWrite>>,
    queue: VecDeque<Job>,
    /// Appends of a session of an older generation than this are stale and rejected.
    min_append_gen: HashMap<SessionId, u64>,
    next_append_gen: u64,
    max_batch_events: usize,
    commit_window: Duration,
    metrics: Arc<crate::metrics::Metrics>,
    /// A `Kick` is in the mailbox or on its way: the next commit waits for it.
    kicked: bool,
    /// When the last commit started, and whether it held the appends of
    /// more than one session.
    last_start: Option<Instant>,
    last_shared: bool,
}

pub struct StoreWriter;

impl Actor for StoreWriter {
    type Msg = StoreWriterMsg;
    type State = StoreWriterState;
    type Arguments = StoreWriterArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: StoreWriterArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let store = (args.factory)().await?;
        Ok(StoreWriterState {
            store: Some(store),
            queue: VecDeque::new(),
            min_append_gen: HashMap::new(),
            next_append_gen: 1,
            max_batch_events: args.max_batch_events.max(1),
            commit_window: args.commit_window,
            metrics: args.metrics,
            kicked: false,
            last_start: None,
            last_shared: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            StoreWriterMsg::Append {
                session_id,
                append_gen,
                events,
                patch,
                notify,
            } => state.enqueue_append(session_id, append_gen, events, patch, notify),
            StoreWriterMsg::Create {
                session,
                events,
                reply,
            } => {
                let session_id = session.id.clone();
                state.queue.push_back(Job::write(
                    WriteOp::CreateSession {
                        session: *session,
                        events,
                    },
                    Reply::Create { session_id, reply },
                ))
            }
            StoreWriterMsg::Patch {
                session_id,
                patch,
                reply,
            } => state.queue.push_back(Job::write(
                WriteOp::Patch { session_id, patch },
                Reply::Patch(reply),
            )),
            StoreWriterMsg::Barrier { session_id, reply } => state.queue.push_back(Job {
                op: None,
                reply: Reply::Barrier { session_id, reply },
            }),
            StoreWriterMsg::Flush { reply } => state.queue.push_back(Job {
                op: None,
                reply: Reply::Flush(reply),
            }),
            StoreWriterMsg::Done(done) => state.finish(*done),
            StoreWriterMsg::Kick => {
                state.kicked = false;
                state.start_next(&myself);
                return Ok(());
            }
        }
        state.kick(&myself);
        Ok(())
    }
}

impl StoreWriterState {
    fn enqueue_append(
        &mut self,
        session_id: SessionId,
        append_gen: u64,
        events: Vec<EventRow>,
        patch: SessionPatch,
        notify: ActorRef<SessionMsg>,
    ) {
        let from_seq = events.first().map_or(0, |e| e.seq);
        let min = self.min_append_gen.get(&session_id).copied().unwrap_or(0);
        if append_gen < min {
            // A rewound session already gave up on these seqs; committing
            // them now would fork its history.
            debug!(session_id = %session_id, append_gen, min, "stale append rejected");
            let _ = notify.cast(SessionMsg::AppendFailed {
                append_gen,
                from_seq,
                code: tether_protocol::codes::STORAGE_WRITE_FAILED,
                lost: false,
            });
            return;
        }
        let upto_seq = events.last().map_or(0, |e| e.seq);
        let reply = Reply::Append {
            session_id: session_id.clone(),
            append_gen,
            from_seq,
            upto_seq,
            notify,
        };
        let op = WriteOp::Append {
            session_id,
            events,
            patch,
        };
        self.queue.push_back(Job::write(op, reply));
    }

    /// Schedules the next commit. With `synchronous = full` every commit is
    /// an fsync, and a busy gateway's appends arrive one or two events at a
    /// time: started at once, commits held 2.4 events each at 50,000 durable
    /// deliveries/s, and the writer thread was a third of the gateway's CPU.
    /// So while commits are shared by several sessions, the next one starts
    /// no sooner than `commit_window` after the last one began; a gateway
    /// that commits less often than that never waits. Nor does a commit
    /// that held one session's appends: there was nobody else to gather,
    /// and a lone session would pay the window at every step of its turns
    /// (`tether bench turns --sessions 1` lost 64 % of its turns/s with it).
    /// The `Kick` is sent to itself either way, so it comes after every
    /// message already in the mailbox.
    fn kick(&mut self, myself: &ActorRef<StoreWriterMsg>) {
        if self.kicked || self.store.is_none() || self.queue.is_empty() {
            return;
        }
        let wait = match self.last_start {
            Some(t) if self.last_shared => {
                (t + self.commit_window).saturating_duration_since(Instant::now())
            }
            _ => Duration::ZERO,
        };
        if wait.is_zero() {
            if myself.cast(StoreWriterMsg::Kick).is_ok() {
                self.kicked = true;
            }
        } else {
            myself.send_after(wait, || StoreWriterMsg::Kick);
            self.kicked = true;
        }
    }

    /// Starts a commit task if the connection is free and work is queued.
    fn start_next(&mut self, myself: &ActorRef<StoreWriterMsg>) {
        if self.queue.is_empty() {
            return;
        }
        let Some(mut store) = self.store.take() else {
            return;
        };
        self.last_start = Some(Instant::now());
        let mut ops = Vec::new();
        let mut replies = Vec::new();
        let mut budget = self.max_batch_events;
        while let Some(job) = self.queue.front() {
            let n = job.events();
            if !replies.is_empty() && n > budget {
                break;
            }
            budget = budget.saturating_sub(n);
            let Some(job) = self.queue.pop_front() else {
                break;
            };
            let ends = job.ends_batch();
            ops.extend(job.op);
            replies.push(job.reply);
            if ends || budget == 0 {
                break;
            }
        }
        let mut sessions = replies.iter().filter_map(|r| match r {
            Reply::Append { session_id, .. } => Some(session_id),
            _ => None,
        });
        let first = sessions.next();
        self.last_shared = first.is_some_and(|f| sessions.any(|s| s != f));
        let barrier_session = replies.iter().find_map(|r| match r {
            Reply::Barrier { session_id, .. } => Some(session_id.clone()),
            _ => None,
        });
        let myself = myself.clone();
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            let results = if ops.is_empty() {
                Vec::new()
            } else {
                // Counted now: the batch itself moves into the store.
                let events: Vec<usize> = ops.iter().map(|op| op.events().len()).collect();
                let started = std::time::Instant::now();
                let results = store.commit(ops).await;
                metrics.committed(&events, &results, started.elapsed());
                results
            };
            let barrier = match barrier_session {
                Some(id) => Some(store.latest_seq(&id).await),
                None => None,
            };
            let _ = myself.cast(StoreWriterMsg::Done(Box::new(CommitDone {
                store,
                replies,
                results,
                barrier,
            })));
        });
    }

    /// Hands results to their owners and takes the connection back.
    fn finish(&mut self, done: CommitDone) {
        self.store = Some(done.store);
        let mut results = done.results.into_iter();
        let mut barrier = done.barrier;
        for reply in done.replies {
            match reply {
                Reply::Append {
                    session_id,
                    append_gen,
                    from_seq,
                    upto_seq,
                    notify,
                } => {
                    let msg = match next_result(&mut results) {
                        Ok(()) => SessionMsg::Committed {
                            append_gen,
                            upto_seq,
                        },
                        Err(e) => {
                            warn!(session_id = %session_id, append_gen, from_seq, error = %e, "append failed");
                            let min = self.min_append_gen.entry(session_id).or_insert(0);
                            *min = (*min).max(append_gen + 1);
                            SessionMsg::AppendFailed {
                                append_gen,
                                from_seq,
                                code: e.code(),
                                lost: matches!(e, StoreError::NotOwner { .. }),
                            }
                        }
                    };
                    let _ = notify.cast(msg);
                }
                Reply::Create { session_id, reply } => {
                    let answer = next_result(&mut results).map(|()| {
                        // A fresh generation, as a load's barrier gives: an
                        // append still queued from an earlier life of the
                        // id is below it and never lands in this one.
                        let append_gen = self.next_append_gen;
                        self.next_append_gen += 1;
                        self.min_append_gen.insert(session_id, append_gen);
                        append_gen
                    });
                    let _ = reply.send(answer);
                }
                Reply::Patch(reply) => {
                    let result = next_result(&mut results);
                    match reply {
                        Some(reply) => {
                            let _ = reply.send(result);
                        }
                        None => {
                            if let Err(e) = result {
                                warn!(error = %e, "session patch failed");
                            }
                        }
                    }
                }
                Reply::Barrier { session_id, reply } => {
                    let result = barrier.take().unwrap_or(Err(StoreError::Unavailable(
                        "barrier result missing".into(),
                    )));
                    let answer = result.map(|latest_seq| {
                        let append_gen = self.next_append_gen;
                        self.next_append_gen += 1;
                        self.min_append_gen.insert(session_id, append_gen);
                        Barrier {
                            latest_seq,
                            append_gen,
                        }
                    });
                    let _ = reply.send(answer);
                }
                Reply::Flush(reply) => {
                    let _ = reply.send(());
                }
            }
        }
    }
}

fn next_result(
    results: &mut impl Iterator<Item = Result<(), StoreError>>,
) -> Result<(), StoreError> {
    results
        .next()
        .unwrap_or_else(|| Err(StoreError::Unavailable("commit result missing".into())))
}
