//! `StoreWriter`: the one actor that writes to the store.
//!
//! It owns the single write connection and group-commits: the first job
//! after idle is committed at once; jobs that arrive while a commit is in
//! flight are gathered into the next one (one transaction, a savepoint per
//! job so one failing job does not sink the others). The commit itself runs
//! on a task that borrows the connection and hands it back with the results,
//! so the actor's mailbox keeps filling the next batch meanwhile.
//!
//! Sessions learn the outcome as `Committed { gen, upto_seq }` or
//! `AppendFailed { gen, from_seq, code }`. After a failure the writer
//! rejects every Append of that session with an older `gen`, so a session
//! that rewound its seq can never leave a gap behind.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tether_protocol::SessionId;
use tether_store::{EventRow, NewSession, SessionPatch, StoreError, StoreWrite, WriteOp};
use tracing::{debug, warn};

use crate::session::SessionMsg;

/// Opens a fresh write connection (at start and after a restart).
pub type WriterFactory = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Box<dyn StoreWrite>, StoreError>> + Send>>
        + Send
        + Sync,
>;

/// What a session learns from a barrier: its committed `latest_seq` and the
/// generation its appends must carry from now on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub latest_seq: u64,
    pub gen: u64,
}

pub enum StoreWriterMsg {
    /// Append durable events of one session (seqs contiguous).
    Append {
        session_id: SessionId,
        gen: u64,
        events: Vec<EventRow>,
        patch: SessionPatch,
        notify: ActorRef<SessionMsg>,
    },
    /// Create a session with its first events, all or nothing.
    Create {
        session: Box<NewSession>,
        events: Vec<EventRow>,
        reply: RpcReplyPort<Result<(), StoreError>>,
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
}

pub struct CommitDone {
    store: Box<dyn StoreWrite>,
    tickets: Vec<Ticket>,
    results: Vec<Result<(), StoreError>>,
    barrier: Option<Result<u64, StoreError>>,
}

/// A queued job; `StoreWriterMsg` minus the internal variants.
enum Job {
    Append {
        session_id: SessionId,
        gen: u64,
        events: Vec<EventRow>,
        patch: SessionPatch,
        notify: ActorRef<SessionMsg>,
    },
    Create {
        session: Box<NewSession>,
        events: Vec<EventRow>,
        reply: RpcReplyPort<Result<(), StoreError>>,
    },
    Patch {
        session_id: SessionId,
        patch: SessionPatch,
        reply: Option<RpcReplyPort<Result<(), StoreError>>>,
    },
    Barrier {
        session_id: SessionId,
        reply: RpcReplyPort<Result<Barrier, StoreError>>,
    },
    Flush {
        reply: RpcReplyPort<()>,
    },
}

/// What is left of a job once its data went into a `WriteOp`: who to tell.
enum Ticket {
    Append {
        session_id: SessionId,
        gen: u64,
        from_seq: u64,
        upto_seq: u64,
        notify: ActorRef<SessionMsg>,
    },
    Create {
        reply: RpcReplyPort<Result<(), StoreError>>,
    },
    Patch {
        reply: Option<RpcReplyPort<Result<(), StoreError>>>,
    },
    Barrier {
        session_id: SessionId,
        reply: RpcReplyPort<Result<Barrier, StoreError>>,
    },
    Flush {
        reply: RpcReplyPort<()>,
    },
}

impl Job {
    fn events(&self) -> usize {
        match self {
            Job::Append { events, .. } | Job::Create { events, .. } => events.len().max(1),
            _ => 1,
        }
    }

    /// Moves the job's data into a store operation (no copy of the events).
    fn split(self) -> (Option<WriteOp>, Ticket) {
        match self {
            Job::Append {
                session_id,
                gen,
                events,
                patch,
                notify,
            } => {
                let from_seq = events.first().map(|e| e.seq).unwrap_or(0);
                let upto_seq = events.last().map(|e| e.seq).unwrap_or(0);
                (
                    Some(WriteOp::Append {
                        session_id: session_id.clone(),
                        events,
                        patch,
                    }),
                    Ticket::Append {
                        session_id,
                        gen,
                        from_seq,
                        upto_seq,
                        notify,
                    },
                )
            }
            Job::Create {
                session,
                events,
                reply,
            } => (
                Some(WriteOp::CreateSession {
                    session: *session,
                    events,
                }),
                Ticket::Create { reply },
            ),
            Job::Patch {
                session_id,
                patch,
                reply,
            } => (
                Some(WriteOp::Patch { session_id, patch }),
                Ticket::Patch { reply },
            ),
            Job::Barrier { session_id, reply } => (None, Ticket::Barrier { session_id, reply }),
            Job::Flush { reply } => (None, Ticket::Flush { reply }),
        }
    }
}

pub struct StoreWriterArgs {
    pub factory: WriterFactory,
    pub max_batch_events: usize,
    /// Commit latencies, events appended and write errors go here.
    pub metrics: Arc<crate::metrics::Metrics>,
}

pub struct StoreWriterState {
    /// `None` while a commit task holds the connection.
    store: Option<Box<dyn StoreWrite>>,
    queue: VecDeque<Job>,
    /// Appends of a session with a gen below this are stale and rejected.
    min_gen: HashMap<SessionId, u64>,
    next_gen: u64,
    max_batch_events: usize,
    metrics: Arc<crate::metrics::Metrics>,
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
            min_gen: HashMap::new(),
            next_gen: 1,
            max_batch_events: args.max_batch_events.max(1),
            metrics: args.metrics,
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
                gen,
                events,
                patch,
                notify,
            } => state.enqueue_append(session_id, gen, events, patch, notify),
            StoreWriterMsg::Create {
                session,
                events,
                reply,
            } => state.queue.push_back(Job::Create {
                session,
                events,
                reply,
            }),
            StoreWriterMsg::Patch {
                session_id,
                patch,
                reply,
            } => state.queue.push_back(Job::Patch {
                session_id,
                patch,
                reply,
            }),
            StoreWriterMsg::Barrier { session_id, reply } => {
                state.queue.push_back(Job::Barrier { session_id, reply })
            }
            StoreWriterMsg::Flush { reply } => state.queue.push_back(Job::Flush { reply }),
            StoreWriterMsg::Done(done) => state.finish(*done),
        }
        state.start_next(&myself);
        Ok(())
    }
}

impl StoreWriterState {
    fn enqueue_append(
        &mut self,
        session_id: SessionId,
        gen: u64,
        events: Vec<EventRow>,
        patch: SessionPatch,
        notify: ActorRef<SessionMsg>,
    ) {
        let min = self.min_gen.get(&session_id).copied().unwrap_or(0);
        if gen < min {
            // A rewound session already gave up on these seqs; committing
            // them now would fork its history.
            let from_seq = events.first().map(|e| e.seq).unwrap_or(0);
            debug!(session_id = %session_id, gen, min, "stale append rejected");
            let _ = notify.cast(SessionMsg::AppendFailed {
                gen,
                from_seq,
                code: tether_protocol::codes::STORAGE_WRITE_FAILED,
            });
            return;
        }
        self.queue.push_back(Job::Append {
            session_id,
            gen,
            events,
            patch,
            notify,
        });
    }

    /// Starts a commit task if the connection is free and work is queued.
    fn start_next(&mut self, myself: &ActorRef<StoreWriterMsg>) {
        if self.queue.is_empty() {
            return;
        }
        let Some(mut store) = self.store.take() else {
            return;
        };
        let mut jobs = Vec::new();
        let mut budget = self.max_batch_events;
        while let Some(job) = self.queue.front() {
            let n = job.events();
            if !jobs.is_empty() && n > budget {
                break;
            }
            budget = budget.saturating_sub(n);
            let Some(job) = self.queue.pop_front() else {
                break;
            };
            // A barrier must observe exactly the jobs before it: it ends the batch.
            let ends = matches!(job, Job::Barrier { .. } | Job::Flush { .. });
            jobs.push(job);
            if ends || budget == 0 {
                break;
            }
        }
        let mut ops = Vec::with_capacity(jobs.len());
        let mut tickets = Vec::with_capacity(jobs.len());
        let mut barrier_session = None;
        for job in jobs {
            let (op, ticket) = job.split();
            ops.extend(op);
            if let Ticket::Barrier { session_id, .. } = &ticket {
                barrier_session = Some(session_id.clone());
            }
            tickets.push(ticket);
        }
        let myself = myself.clone();
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            let results = if ops.is_empty() {
                Vec::new()
            } else {
                let started = std::time::Instant::now();
                let results = store.commit(&ops).await;
                metrics.committed(&ops, &results, started.elapsed());
                results
            };
            let barrier = match barrier_session {
                Some(id) => Some(store.latest_seq(&id).await),
                None => None,
            };
            let _ = myself.cast(StoreWriterMsg::Done(Box::new(CommitDone {
                store,
                tickets,
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
        for ticket in done.tickets {
            match ticket {
                Ticket::Append {
                    session_id,
                    gen,
                    from_seq,
                    upto_seq,
                    notify,
                } => {
                    let msg = match next_result(&mut results) {
                        Ok(()) => SessionMsg::Committed { gen, upto_seq },
                        Err(e) => {
                            warn!(session_id = %session_id, gen, from_seq, error = %e, "append failed");
                            let min = self.min_gen.entry(session_id).or_insert(0);
                            *min = (*min).max(gen + 1);
                            SessionMsg::AppendFailed {
                                gen,
                                from_seq,
                                code: e.code(),
                            }
                        }
                    };
                    let _ = notify.cast(msg);
                }
                Ticket::Create { reply } => {
                    let _ = reply.send(next_result(&mut results));
                }
                Ticket::Patch { reply } => {
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
                Ticket::Barrier { session_id, reply } => {
                    let result = barrier.take().unwrap_or(Err(StoreError::Unavailable(
                        "barrier result missing".into(),
                    )));
                    let answer = result.map(|latest_seq| {
                        let gen = self.next_gen;
                        self.next_gen += 1;
                        self.min_gen.insert(session_id, gen);
                        Barrier { latest_seq, gen }
                    });
                    let _ = reply.send(answer);
                }
                Ticket::Flush { reply } => {
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
