//! The owner's side of forwarding (a cluster, docs/ARCHITECTURE.md "Requests"):
//! requests another node forwarded for this session are read from the
//! store when a notification (or a resync) says there may be some, run
//! here like a local request, and answered in the store.
//!
//! Never twice: a request that writes registers its forward with the seq of
//! its first event (`accept_with`), so the writer moves the forward to
//! `accepted` in that event's transaction or refuses the write; a forward
//! read again while it runs is skipped. The answer is written once what the
//! request emitted is committed, so the forwarder never hears "done" for a
//! write that was then refused.

use std::collections::HashSet;
use std::time::Duration;

use ractor::{ActorRef, RpcReplyPort};
use serde::Serialize;
use serde_json::{json, Value};
use tether_protocol::{RpcError, SessionStatus};
use tether_store::cluster::{Cluster, ClusterError, ForwardId, ForwardRow};
use tracing::{debug, warn};

use super::{SessionMsg, SessionState};
use crate::event::EventRecord;

/// How long the answer waits for what the request emitted to be committed.
const SETTLE_WAIT: Duration = Duration::from_secs(10);

/// Forwards of this session being run here.
#[derive(Debug, Default)]
pub(crate) struct Forwarded {
    running: HashSet<ForwardId>,
    reading: bool,
    again: bool,
}

impl SessionState {
    /// There may be forwards for this session: read them (once more after
    /// the read in flight).
    pub(super) fn forwards_wake(&mut self, myself: &ActorRef<SessionMsg>) {
        if self.following() {
            return;
        }
        let Some(cluster) = self.ctx.cluster.clone() else {
            return;
        };
        if self.forwarded.reading {
            self.forwarded.again = true;
            return;
        }
        self.forwarded.reading = true;
        self.forwarded.again = false;
        let id = self.id.clone();
        let me = myself.clone();
        tokio::spawn(async move {
            let rows = cluster.pending_forwards(&id).await;
            let _ = me.cast(SessionMsg::ForwardsRead { rows });
        });
    }

    /// Runs each forward not already running, oldest first.
    pub(super) fn forwards_read(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        rows: Result<Vec<ForwardRow>, ClusterError>,
    ) {
        self.forwarded.reading = false;
        match rows {
            Ok(rows) => {
                for row in rows {
                    if self.following() {
                        break;
                    }
                    if self.forwarded.running.insert(row.id.clone()) {
                        self.run_forward(myself, row);
                    }
                }
            }
            Err(e) => warn!(session_id = %self.id, error = %e, "could not read forwarded requests"),
        }
        if self.forwarded.again {
            self.forwards_wake(myself);
        }
    }

    /// The answer is in the store (or could not be written).
    pub(super) fn forward_done(&mut self, id: &ForwardId) {
        self.forwarded.running.remove(id);
    }

    fn run_forward(&mut self, myself: &ActorRef<SessionMsg>, row: ForwardRow) {
        let Some(cluster) = self.ctx.cluster.clone() else {
            return;
        };
        debug!(session_id = %self.id, forward_id = %row.id, method = %row.method, from = %row.from_node, "running a forwarded request");
        let params: Value = serde_json::from_str(&row.params).unwrap_or(Value::Null);
        let id = row.id;
        let text = |k: &str| params.get(k).and_then(Value::as_str).map(str::to_owned);
        match row.method.as_str() {
            "prompt.submit" => match (text("text"), text("replaces")) {
                (Some(prompt), None) => self.forwarded_submit(myself, cluster, id, prompt),
                (Some(prompt), Some(turn)) => {
                    self.forwarded_replace(myself, cluster, id, prompt, turn.into())
                }
                (None, _) => self.answer_now(myself, id, Err(required("text"))),
            },
            "session.interrupt" => {
                if self.turns.running.is_some() {
                    // Its first write ends the running turn.
                    cluster.accept_with(&self.id, self.commit.next_seq(), &id);
                }
                let (tx, rx) = tokio::sync::oneshot::channel();
                self.interrupt(myself, tx.into());
                answer_after(cluster, myself, id, rx);
            }
            "session.close" => {
                let reason = text("reason").unwrap_or_else(|| "closed".into());
                if self.status != SessionStatus::Closed {
                    // Its first write is `session.closed`.
                    cluster.accept_with(&self.id, self.commit.next_seq(), &id);
                }
                let (tx, rx) = tokio::sync::oneshot::channel();
                self.close(myself, &reason, Some(tx.into()));
                answer_after(cluster, myself, id, rx);
            }
            // Its first write comes when the host answers, if ever.
            "session.compress" => {
                let focus = text("focus");
                self.accept_then(myself, id, |reply| SessionMsg::Compress { focus, reply });
            }
            // Its write is the handoff row, not an event.
            "handoff.request" => match text("target") {
                Some(target) => self.accept_then(myself, id, |reply| SessionMsg::HandoffRequest {
                    target,
                    reply,
                }),
                None => self.answer_now(myself, id, Err(required("target"))),
            },
            // Its write is the new session's, not one of this session's events.
            "session.branch" => {
                let ask = crate::branch::BranchAsk {
                    profile: self.profile.clone(),
                    upto_seq: params.get("upto_seq").and_then(Value::as_u64),
                    title: text("title"),
                };
                self.accept_then(myself, id, |reply| SessionMsg::Branch { ask, reply });
            }
            "session.emit" => self.forwarded_emit(myself, cluster, id, &params),
            other => self.answer_now(myself, id, Err(RpcError::method_not_found(other))),
        }
    }

    /// `prompt.submit`: checked first (a refused submit writes nothing and
    /// is answered at once); its first write is its `message.user`.
    fn forwarded_submit(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        cluster: Cluster,
        id: ForwardId,
        prompt: String,
    ) {
        if let Err(e) = self.check_submit() {
            return self.answer_now(myself, id, Err(e));
        }
        cluster.accept_with(&self.id, self.commit.next_seq(), &id);
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.submit(myself, prompt, tx.into());
        answer_after(cluster, myself, id, rx);
    }

    /// `prompt.submit` with `replaces`: as a local one, except that its
    /// first write must be known when it is accepted, so a segment not in
    /// memory yet is loaded and the request refused as busy (the client
    /// retries; the next one finds it loaded).
    fn forwarded_replace(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        cluster: Cluster,
        id: ForwardId,
        prompt: String,
        replaces: tether_protocol::TurnId,
    ) {
        if let Err(e) = self.check_replace() {
            return self.answer_now(myself, id, Err(e));
        }
        let kept = match self.replace_point(&replaces) {
            Some(Some((_, kept))) => kept,
            Some(None) => {
                let e = super::replace::not_in_history(&replaces);
                return self.answer_now(myself, id, Err(e));
            }
            None => {
                self.load_transcript(myself);
                let e = RpcError::session_busy("the session is loading its history: retry");
                return self.answer_now(myself, id, Err(e));
            }
        };
        cluster.accept_with(&self.id, self.commit.next_seq(), &id);
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.accept(myself, prompt, Some((replaces, kept)), tx.into());
        answer_after(cluster, myself, id, rx);
    }

    /// `session.emit`: events from outside (a handoff's announcement); its
    /// first write is the first of them. Answers whether they were emitted.
    fn forwarded_emit(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        cluster: Cluster,
        id: ForwardId,
        params: &Value,
    ) {
        let events: Option<Vec<EventRecord>> = params
            .get("events")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(EventRecord::from_forward).collect());
        let Some(events) = events.filter(|e| !e.is_empty()) else {
            let e = RpcError::invalid_params("events", "forwarded events are unreadable");
            return self.answer_now(myself, id, Err(e));
        };
        if self.status != SessionStatus::Closed {
            cluster.accept_with(&self.id, self.commit.next_seq(), &id);
        }
        let (tx, rx) = tokio::sync::oneshot::channel::<bool>();
        self.emit_if_open(events, Some(tx.into()));
        let (answered, answer) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let emitted = rx
                .await
                .map_err(|_| RpcError::internal("the session stopped"));
            let _ = answered.send(emitted);
        });
        answer_after(cluster, myself, id, answer);
    }

    /// Runs a forward whose first write is not an event known in advance:
    /// accepted first (so the forwarder's withdrawal at its deadline cannot
    /// race a request already running), then sent to this session as
    /// `build` makes it, and answered as any other.
    fn accept_then<T, F>(&mut self, myself: &ActorRef<SessionMsg>, id: ForwardId, build: F)
    where
        T: Serialize + Send + 'static,
        F: FnOnce(RpcReplyPort<Result<T, RpcError>>) -> SessionMsg + Send + 'static,
    {
        let Some(cluster) = self.ctx.cluster.clone() else {
            return;
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let me = myself.clone();
        let accepting = cluster.clone();
        let fid = id.clone();
        tokio::spawn(async move {
            match accepting.accept_forward(&fid).await {
                Ok(true) => {
                    let _ = me.cast(build(tx.into()));
                }
                // Withdrawn or past its deadline: it must not run.
                Ok(false) => {}
                Err(e) => {
                    let _ = tx.send(Err(RpcError::new(
                        tether_protocol::codes::STORAGE_UNAVAILABLE,
                        format!("could not accept a forwarded request: {e}"),
                    )));
                }
            }
        });
        answer_after(cluster, myself, id, rx);
    }

    /// Answers a forward that wrote nothing.
    fn answer_now(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        id: ForwardId,
        result: Result<(), RpcError>,
    ) {
        let Some(cluster) = self.ctx.cluster.clone() else {
            return;
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let _ = tx.send(result);
        answer_after(cluster, myself, id, rx);
    }
}

/// Waits for the request's reply and for what it emitted to be committed,
/// then writes the answer for the forwarder.
fn answer_after<T: Serialize + Send + 'static>(
    cluster: Cluster,
    myself: &ActorRef<SessionMsg>,
    id: ForwardId,
    reply: tokio::sync::oneshot::Receiver<Result<T, RpcError>>,
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
        let answer = match result {
            Ok(v) => json!({ "result": v }),
            Err(e) => json!({ "error": e }),
        };
        // `false`: the forwarder withdrew it, or the writer refused its
        // first write; it reads that from the forward's state.
        if let Err(e) = cluster.answer_forward(&id, &answer.to_string()).await {
            warn!(forward_id = %id, node_id = %cluster.node_id(), error = %e, "could not answer a forwarded request");
        }
        let _ = me.cast(SessionMsg::ForwardDone { id });
    });
}

/// A forwarded request without a field it needs.
fn required(field: &str) -> RpcError {
    RpcError::invalid_params(field, "a string is required")
}
