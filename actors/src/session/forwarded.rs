//! The owner's side of forwarding (a cluster, DESIGN.md "Requests"):
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

use ractor::ActorRef;
use serde::Serialize;
use serde_json::{json, Value};
use tether_protocol::{RpcError, SessionStatus};
use tether_store::cluster::{Cluster, ClusterError, ForwardId, ForwardRow};
use tracing::{debug, warn};

use super::{SessionMsg, SessionState};

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
        let field = |k: &str| params.get(k).and_then(Value::as_str).map(str::to_owned);
        match row.method.as_str() {
            "prompt.submit" => {
                let Some(text) = field("text") else {
                    return self.answer_now(
                        myself,
                        id,
                        Err(RpcError::invalid_params("text", "a string is required")),
                    );
                };
                if let Err(e) = self.check_submit() {
                    return self.answer_now(myself, id, Err(e));
                }
                // Its first write is its `message.user`, the next seq.
                cluster.accept_with(&self.id, self.commit.next_seq(), &id);
                let (tx, rx) = tokio::sync::oneshot::channel();
                self.submit(myself, text, tx.into());
                answer_after(cluster, myself, id, rx);
            }
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
                let reason = field("reason").unwrap_or_else(|| "closed".into());
                if self.status != SessionStatus::Closed {
                    // Its first write is `session.closed`.
                    cluster.accept_with(&self.id, self.commit.next_seq(), &id);
                }
                let (tx, rx) = tokio::sync::oneshot::channel();
                self.close(myself, &reason, Some(tx.into()));
                answer_after(cluster, myself, id, rx);
            }
            other => {
                let e = RpcError::method_not_found(other);
                self.answer_now(myself, id, Err(e));
            }
        }
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
        let result = reply
            .await
            .unwrap_or_else(|_| Err(RpcError::internal("the session stopped")));
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
