//! The owner's side of forwarding (a cluster, docs/ARCHITECTURE.md "Requests"):
//! requests another node forwarded for this session are read from the
//! store when a notification (or a resync) says there may be some, run
//! here like a local request, and answered in the store.
//!
//! Never twice: a request that writes registers its forward with the seq of
//! its first event (`accept_with`), so the writer moves the forward to
//! `accepted` in that event's transaction or refuses the write; a forward
//! read again while it runs is skipped. A request deferred past its
//! handler (a prompt waiting for the session's history, `replace.rs`)
//! carries its forward id in its reply and registers it the same way when
//! it runs: it waits as a local one does, and a forwarder that withdrew
//! meanwhile has its write refused, so it still never runs twice nor after
//! a withdrawal. The answer is written once what the request emitted is
//! committed, so the forwarder never hears "done" for a write that was
//! then refused.

use std::collections::HashSet;
use std::time::Duration;

use ractor::ActorRef;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use tether_protocol::{HandleWrite, RpcError, SessionStatus, SessionWrite};
use tether_store::cluster::{Cluster, ClusterError, ForwardId, ForwardRow};
use tracing::{debug, warn};

use super::ClusterMsg;
use crate::event::EventRecord;
use crate::session::write::{FirstWrite, Reply, Write, WriteReply};
use crate::session::{SessionMsg, SessionState};

/// How long the answer waits for what the request emitted to be committed.
const SETTLE_WAIT: Duration = Duration::from_secs(10);

/// The method name events emitted from outside are forwarded under; not a
/// client method.
const EMIT: &str = "session.emit";

/// Forwards of this session being run here.
#[derive(Debug, Default)]
pub(crate) struct Forwarded {
    running: HashSet<ForwardId>,
    reading: bool,
    again: bool,
}

/// What a follower forwards to the owner: a client's write, as the
/// protocol's request, or events emitted from outside (a handoff's
/// announcement).
pub(super) enum Forwardable {
    Write(SessionWrite),
    Emit(Vec<EventRecord>),
}

/// The params of a forwarded emit.
#[derive(Serialize, Deserialize)]
struct EmitParams {
    events: Vec<Value>,
    profile: String,
}

impl Forwardable {
    /// The method and params stored for the owner, naming `profile` (the
    /// owner's node may have to bring the session back to run it).
    pub(in crate::session) fn encode(
        self,
        profile: &str,
    ) -> (&'static str, Result<String, serde_json::Error>) {
        match self {
            Forwardable::Write(mut write) => {
                write.set_profile(profile.to_owned());
                let params = write.params().map(|p| p.to_string());
                (write.method(), params)
            }
            Forwardable::Emit(events) => {
                let params = EmitParams {
                    events: events.iter().map(EventRecord::to_forward).collect(),
                    profile: profile.to_owned(),
                };
                (EMIT, serde_json::to_string(&params))
            }
        }
    }

    /// What [`Forwardable::encode`] stored; -32601/-32602 for anything else.
    fn decode(method: &str, params: &str) -> Result<Forwardable, RpcError> {
        let params: Value = serde_json::from_str(params)
            .map_err(|e| RpcError::invalid_params("params", e.to_string()))?;
        if method != EMIT {
            return SessionWrite::from_parts(method, params).map(Forwardable::Write);
        }
        let events: Option<Vec<EventRecord>> = serde_json::from_value::<EmitParams>(params)
            .ok()
            .and_then(|p| p.events.iter().map(EventRecord::from_forward).collect());
        match events.filter(|e| !e.is_empty()) {
            Some(events) => Ok(Forwardable::Emit(events)),
            None => Err(RpcError::invalid_params(
                "events",
                "forwarded events are unreadable",
            )),
        }
    }
}

/// The owner's answer to a forward, as stored: `{"result": …}` or
/// `{"error": {code, message}}`.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Answer {
    Result(Box<RawValue>),
    Error(RpcError),
}

impl From<Result<Box<RawValue>, RpcError>> for Answer {
    fn from(r: Result<Box<RawValue>, RpcError>) -> Self {
        match r {
            Ok(v) => Answer::Result(v),
            Err(e) => Answer::Error(e),
        }
    }
}

impl From<Answer> for Result<Box<RawValue>, RpcError> {
    fn from(a: Answer) -> Self {
        match a {
            Answer::Result(v) => Ok(v),
            Answer::Error(e) => Err(e),
        }
    }
}

/// Runs a forwarded write here, so that the forward is accepted as its
/// [`FirstWrite`] says.
struct RunForward<'a> {
    state: &'a mut SessionState,
    myself: &'a ActorRef<SessionMsg>,
    cluster: Cluster,
    id: ForwardId,
    reply: WriteReply,
}

impl<P: Write> HandleWrite<P> for RunForward<'_> {
    type Output = ();

    fn handle(self, params: P) {
        let RunForward {
            state,
            myself,
            cluster,
            id,
            reply,
        } = self;
        match P::FIRST_WRITE {
            FirstWrite::Event => {
                // One deferred past this handler (a prompt waiting for the
                // history) carries the id in its reply, and is accepted
                // when it runs (`accepting`).
                let reply = Reply::forwarded(reply, id.clone());
                state.accepting(&cluster, id, |state| params.run(state, myself, reply));
            }
            FirstWrite::Elsewhere => accept_then(cluster, id, myself, params.into(), reply),
        }
    }
}

impl SessionState {
    /// Runs `run`, a write of forward `id`, so that the forward is
    /// accepted with the first event it writes: its events go to the
    /// writer after this handler, and the writer accepts the forward in
    /// that event's transaction or refuses the write. One that wrote
    /// nothing (refused, nothing to do, or deferred) is answered as it is.
    pub(in crate::session) fn accepting(
        &mut self,
        cluster: &Cluster,
        id: ForwardId,
        run: impl FnOnce(&mut SessionState),
    ) {
        let first = self.commit.next_seq();
        run(self);
        if self.commit.next_seq() > first {
            cluster.accept_with(&self.id, first, &id);
        }
    }

    /// There may be forwards for this session: read them (once more after
    /// the read in flight).
    pub(in crate::session) fn forwards_wake(&mut self, myself: &ActorRef<SessionMsg>) {
        if self.following() {
            return;
        }
        let Some(cluster) = self.ctx.cluster.clone() else {
            return;
        };
        if self.cluster.forwarded.reading {
            self.cluster.forwarded.again = true;
            return;
        }
        self.cluster.forwarded.reading = true;
        self.cluster.forwarded.again = false;
        let id = self.id.clone();
        let me = myself.clone();
        tokio::spawn(async move {
            let rows = cluster.pending_forwards(&id).await;
            let _ = me.cast(SessionMsg::Cluster(ClusterMsg::ForwardsRead { rows }));
        });
    }

    /// Runs each forward not already running, oldest first.
    pub(in crate::session) fn forwards_read(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        rows: Result<Vec<ForwardRow>, ClusterError>,
    ) {
        self.cluster.forwarded.reading = false;
        match rows {
            Ok(rows) => {
                for row in rows {
                    if self.following() {
                        break;
                    }
                    if self.cluster.forwarded.running.insert(row.id.clone()) {
                        self.run_forward(myself, row);
                    }
                }
            }
            Err(e) => warn!(session_id = %self.id, error = %e, "could not read forwarded requests"),
        }
        if self.cluster.forwarded.again {
            self.forwards_wake(myself);
        }
    }

    /// The answer is in the store (or could not be written).
    pub(in crate::session) fn forward_done(&mut self, id: &ForwardId) {
        self.cluster.forwarded.running.remove(id);
    }

    fn run_forward(&mut self, myself: &ActorRef<SessionMsg>, row: ForwardRow) {
        let Some(cluster) = self.ctx.cluster.clone() else {
            return;
        };
        debug!(session_id = %self.id, forward_id = %row.id, method = %row.method, from = %row.from_node, "running a forwarded request");
        let id = row.id;
        let (tx, rx) = tokio::sync::oneshot::channel();
        match Forwardable::decode(&row.method, &row.params) {
            Ok(Forwardable::Write(write)) => write.dispatch(RunForward {
                state: self,
                myself,
                cluster: cluster.clone(),
                id: id.clone(),
                reply: tx.into(),
            }),
            Ok(Forwardable::Emit(events)) => self.forwarded_emit(&cluster, &id, events, tx.into()),
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        }
        answer_after(cluster, myself, id, rx);
    }

    /// A forward this node accepted before running it: run it now, unless
    /// the session is another node's since (it did not run; retry).
    pub(in crate::session) fn run_accepted(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        write: SessionWrite,
        reply: WriteReply,
    ) {
        if self.following() {
            let _ = reply.send(Err(self.not_here()));
            return;
        }
        self.write(myself, write, reply);
    }

    /// Events from outside (a handoff's announcement); the forward is
    /// accepted with the first of them. Answers whether they were emitted.
    fn forwarded_emit(
        &mut self,
        cluster: &Cluster,
        id: &ForwardId,
        events: Vec<EventRecord>,
        reply: WriteReply,
    ) {
        if self.status != SessionStatus::Closed {
            cluster.accept_with(&self.id, self.commit.next_seq(), id);
        }
        let (tx, rx) = tokio::sync::oneshot::channel::<bool>();
        self.emit_if_open(events, Some(tx.into()));
        tokio::spawn(async move {
            let emitted = rx
                .await
                .map_err(|_| RpcError::internal("the session stopped"));
            let _ = reply.send(emitted.map(|e| tether_protocol::to_raw(&e)));
        });
    }
}

/// Runs a forward whose first write is not one of its events: accepted
/// first (so the forwarder's withdrawal at its deadline cannot race a
/// request already running), then sent to this session to run.
fn accept_then(
    cluster: Cluster,
    id: ForwardId,
    myself: &ActorRef<SessionMsg>,
    write: SessionWrite,
    reply: WriteReply,
) {
    let me = myself.clone();
    tokio::spawn(async move {
        match cluster.accept_forward(&id).await {
            Ok(true) => {
                let _ = me.cast(SessionMsg::Cluster(ClusterMsg::RunAccepted {
                    write,
                    reply,
                }));
            }
            // Withdrawn or past its deadline: it must not run.
            Ok(false) => {}
            Err(e) => {
                let _ = reply.send(Err(RpcError::new(
                    tether_protocol::codes::STORAGE_UNAVAILABLE,
                    format!("could not accept a forwarded request: {e}"),
                )));
            }
        }
    });
}

/// Waits for the request's reply and for what it emitted to be committed,
/// then writes the answer for the forwarder.
fn answer_after(
    cluster: Cluster,
    myself: &ActorRef<SessionMsg>,
    id: ForwardId,
    reply: tokio::sync::oneshot::Receiver<Result<Box<RawValue>, RpcError>>,
) {
    let me = myself.clone();
    tokio::spawn(async move {
        // Its reply dropped: the session stopped before answering. Retryable,
        // and said so truthfully (it may have written its first write).
        let result = reply.await.unwrap_or_else(|_| {
            Err(RpcError::new(
                tether_protocol::codes::STORAGE_UNAVAILABLE,
                "the session's owner stopped before answering; read the session to see whether the request ran",
            ))
        });
        let _ = me
            .call(|reply| SessionMsg::Flush { reply }, Some(SETTLE_WAIT))
            .await;
        let answer = match serde_json::to_string(&Answer::from(result)) {
            Ok(answer) => answer,
            Err(e) => {
                warn!(forward_id = %id, error = %e, "could not encode a forwarded request's answer");
                let _ = me.cast(SessionMsg::Cluster(ClusterMsg::ForwardDone { id }));
                return;
            }
        };
        // `false`: the forwarder withdrew it, or the writer refused its
        // first write; it reads that from the forward's state.
        if let Err(e) = cluster.answer_forward(&id, &answer).await {
            warn!(forward_id = %id, node_id = %cluster.node_id(), error = %e, "could not answer a forwarded request");
        }
        let _ = me.cast(SessionMsg::Cluster(ClusterMsg::ForwardDone { id }));
    });
}
