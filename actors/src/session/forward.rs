//! The forwarder's side (a cluster, docs/ARCHITECTURE.md "Requests"): on a follower,
//! a request that changes the session is written to the store for its
//! owner with a deadline (`--forward-timeout-s`), and the owner's answer
//! relayed to the client that asked.
//!
//! The forward's state tells the truth whatever happened to the owner: an
//! answer is relayed as it is; a forward still pending at the deadline is
//! withdrawn, and if the withdrawal wins it never runs (the client is told
//! so and may retry); one the owner accepted ran exactly once, answered or
//! not.
//!
//! The owner answers once what the request wrote is committed; the
//! follower relays that answer once it has read those events too
//! ([`SessionState::catch_up`]), so a read through this node right after
//! the answer shows the change, as it would on the owner.

use std::time::{Duration, Instant};

use ractor::{ActorRef, RpcReplyPort};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tether_protocol::codes::STORAGE_UNAVAILABLE;
use tether_protocol::{RpcError, SessionId};
use tether_store::cluster::{Cluster, ForwardId, ForwardState};
use tracing::{debug, warn};

use super::{SessionMsg, SessionState};

/// First wait between two reads of a forward's state; doubled up to
/// [`POLL_MAX`].
const POLL_FIRST: Duration = Duration::from_millis(10);
const POLL_MAX: Duration = Duration::from_millis(100);
/// Forwarded answers waiting for this follower to read their events, at
/// most.
const CATCHING_UP: usize = 256;

impl SessionState {
    /// Forwards `method` with `params` to the owner and relays its answer
    /// to `reply`, on a task; the owner must take it within
    /// `--forward-timeout-s`.
    pub(super) fn forward_request<T: DeserializeOwned + Send + 'static>(
        &self,
        myself: &ActorRef<SessionMsg>,
        method: &'static str,
        params: Value,
        reply: RpcReplyPort<Result<T, RpcError>>,
    ) {
        let timeout = self.ctx.config.forward_timeout;
        self.forward_request_within(myself, method, params, timeout, reply);
    }

    /// [`Self::forward_request`] with a deadline of its own (a compression
    /// may wait for its host up to the compress wait).
    pub(super) fn forward_request_within<T: DeserializeOwned + Send + 'static>(
        &self,
        myself: &ActorRef<SessionMsg>,
        method: &'static str,
        params: Value,
        timeout: Duration,
        reply: RpcReplyPort<Result<T, RpcError>>,
    ) {
        let Some(cluster) = self.ctx.cluster.clone() else {
            let _ = reply.send(Err(self.not_here()));
            return;
        };
        let id = self.id.clone();
        let profile = self.profile.clone();
        let reader = self.ctx.reader.clone();
        let catch_up_wait = self.ctx.config.forward_timeout;
        let me = myself.clone();
        // The owner's node may have to bring the session back to run it,
        // and its notification names no profile.
        let mut params = params;
        if let Some(obj) = params.as_object_mut() {
            obj.insert("profile".into(), Value::String(profile.clone()));
        }
        tokio::spawn(async move {
            let answer = forward(&cluster, &id, method, &params.to_string(), timeout).await;
            if answer.is_ok() {
                // What the owner committed before answering, read here first.
                match reader.get_session(&profile, &id).await {
                    Ok(Some(row)) => {
                        let upto = row.latest_seq;
                        let caught = me
                            .call(
                                |reply| SessionMsg::CatchUp { upto, reply },
                                Some(catch_up_wait),
                            )
                            .await;
                        if !matches!(caught, Ok(ractor::rpc::CallResult::Success(()))) {
                            debug!(session_id = %id, upto, "relaying a forwarded answer before this node read its events");
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        debug!(session_id = %id, error = %e, "could not read how far the owner wrote")
                    }
                }
            }
            let _ = reply.send(answer.and_then(|v| {
                serde_json::from_value(v).map_err(|e| {
                    RpcError::internal(format!("unreadable answer from the session's owner: {e}"))
                })
            }));
        });
    }

    /// `CatchUp`: answered once this follower has read up to `upto` (at
    /// once on an owner, or when it already has), or once a read finds the
    /// store has nothing more. A bounded few wait; more are answered at once.
    pub(super) fn catch_up(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        upto: u64,
        reply: RpcReplyPort<()>,
    ) {
        if !self.following()
            || self.commit.committed_seq() >= upto
            || self.catching_up.len() >= CATCHING_UP
        {
            let _ = reply.send(());
            return;
        }
        self.catching_up.push((upto, reply));
        // A read started now sees everything committed before the answer.
        self.follow_wake(myself);
    }

    /// After a read: the catch-ups this follower has read far enough for,
    /// or all of them when `caught_up` (a read started after they came
    /// found nothing more) or when this node owns the session now.
    pub(super) fn release_caught_up(&mut self, caught_up: bool) {
        if self.catching_up.is_empty() {
            return;
        }
        let h = self.commit.committed_seq();
        let all = caught_up || !self.following();
        let (ready, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.catching_up)
            .into_iter()
            .partition(|(upto, _)| all || *upto <= h);
        self.catching_up = wait;
        for (_, reply) in ready {
            let _ = reply.send(());
        }
    }

    /// Events emitted from outside (a handoff's announcement) are the
    /// owner's to write: forwarded as `session.emit`; `reply`, if any, is
    /// told whether the owner emitted them (`false` also when it could not
    /// be asked).
    pub(super) fn forward_emit(
        &self,
        myself: &ActorRef<SessionMsg>,
        events: Vec<crate::event::EventRecord>,
        reply: Option<RpcReplyPort<bool>>,
    ) {
        let events: Vec<Value> = events.iter().map(|e| e.to_forward()).collect();
        let (tx, rx) = tokio::sync::oneshot::channel::<Result<bool, RpcError>>();
        self.forward_request(
            myself,
            "session.emit",
            serde_json::json!({ "events": events }),
            tx.into(),
        );
        let id = self.id.clone();
        tokio::spawn(async move {
            let emitted = match rx.await {
                Ok(Ok(emitted)) => emitted,
                Ok(Err(e)) => {
                    warn!(session_id = %id, error = %e, "events forwarded to the owner were not emitted");
                    false
                }
                Err(_) => false,
            };
            if let Some(reply) = reply {
                let _ = reply.send(emitted);
            }
        });
    }
}

/// One forward, start to answer.
async fn forward(
    cluster: &Cluster,
    session_id: &SessionId,
    method: &str,
    params: &str,
    timeout: Duration,
) -> Result<Value, RpcError> {
    let id = cluster
        .forward(session_id, method, params, timeout)
        .await
        .map_err(|e| {
            unavailable(format!(
                "could not forward {method} to the session's owner: {e}"
            ))
        })?;
    debug!(session_id = %session_id, forward_id = %id, method, node_id = %cluster.node_id(), "request forwarded");
    let deadline = Instant::now() + timeout;
    let mut wait = POLL_FIRST;
    let mut withdrawn = false;
    loop {
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(POLL_MAX);
        let row = match cluster.forward_state(&id).await {
            Ok(Some(row)) => row,
            Ok(None) => return Err(unavailable(format!("forward {id} vanished"))),
            Err(e) => {
                warn!(forward_id = %id, error = %e, "could not read a forward's state");
                if Instant::now() > deadline + timeout {
                    return Err(unavailable(format!(
                        "forward {id}: its state could not be read; it ran at most once"
                    )));
                }
                continue;
            }
        };
        match row.state {
            ForwardState::Answered => return relay(&id, row.answer.as_deref()),
            ForwardState::Refused => {
                return Err(unavailable(format!(
                    "the session's owner did not run {method} in time; it was not run (retry)"
                )))
            }
            ForwardState::Pending if Instant::now() > deadline && !withdrawn => {
                withdrawn = true;
                match cluster.withdraw_forward(&id).await {
                    Ok(true) => {
                        return Err(unavailable(format!(
                            "the session's owner did not take {method} within {timeout:?}; it was not run (retry)"
                        )))
                    }
                    // Accepted first: wait for its answer like any other.
                    Ok(false) => {}
                    Err(e) => warn!(forward_id = %id, error = %e, "could not withdraw a forward"),
                }
            }
            ForwardState::Accepted if Instant::now() > deadline + timeout => {
                return Err(unavailable(format!(
                    "the session's owner accepted {method} (it ran once) but did not answer"
                )))
            }
            _ => {}
        }
    }
}

/// The owner's answer: `{"result": …}` or `{"error": {code, message}}`.
fn relay(id: &ForwardId, answer: Option<&str>) -> Result<Value, RpcError> {
    let answer: Value = answer
        .and_then(|a| serde_json::from_str(a).ok())
        .ok_or_else(|| RpcError::internal(format!("forward {id} has no readable answer")))?;
    if let Some(e) = answer.get("error") {
        return Err(serde_json::from_value(e.clone())
            .unwrap_or_else(|_| RpcError::internal(format!("forward {id}: {e}"))));
    }
    Ok(answer.get("result").cloned().unwrap_or(Value::Null))
}

fn unavailable(message: String) -> RpcError {
    RpcError::new(STORAGE_UNAVAILABLE, message)
}
