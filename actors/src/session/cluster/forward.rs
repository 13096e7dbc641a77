//! The forwarder's side (a cluster, docs/ARCHITECTURE.md "Requests"): on a follower,
//! a request that changes the session is written to the store for its
//! owner with a deadline (`--forward-timeout-s`), and the owner's answer
//! relayed to the client that asked.
//!
//! The forward's state tells the truth whatever happened to the owner: an
//! answer is relayed as it is; a forward still pending near the deadline
//! is withdrawn, and if the withdrawal wins it never runs (5072: the client
//! may retry); one the owner accepted ran exactly once, answered or not.
//! Whatever the link to the database does, the client is answered within
//! `--forward-timeout-s`: what cannot be told by then (the forward's own
//! commit unanswered, its row unreadable, an accepted one unanswered) is
//! 5073 "outcome unknown" with the forward's id, never 5072.
//!
//! The owner answers once what the request wrote is committed; the
//! follower relays that answer once it has read those events too
//! ([`SessionState::catch_up`]), so a read through this node right after
//! the answer shows the change, as it would on the owner.

use std::time::Duration;

use tokio::time::Instant;

use ractor::{ActorRef, RpcReplyPort};
use serde_json::value::RawValue;
use tether_protocol::codes::STORAGE_UNAVAILABLE;
use tether_protocol::{RpcError, SessionId, SessionWrite};
use tether_store::cluster::{Cluster, ForwardId, ForwardState, ForwardWriteError};
use tracing::{debug, warn};

use super::forwarded::{Answer, Forwardable};
use super::take_ready;
use super::ClusterMsg;
use crate::event::EventRecord;
use crate::session::write::{host_wait, WriteReply};
use crate::session::{SessionMsg, SessionState};

/// First wait between two reads of a forward's state; doubled up to
/// [`POLL_MAX`].
const POLL_FIRST: Duration = Duration::from_millis(10);
const POLL_MAX: Duration = Duration::from_millis(100);
/// How long before its deadline, at most, a forward still pending is
/// withdrawn (a fifth of the timeout when that is less).
const WITHDRAW_MARGIN: Duration = Duration::from_secs(1);
/// Forwarded answers waiting for this follower to read their events, at
/// most.
const CATCHING_UP: usize = 256;

impl SessionState {
    /// A write of this session, on a follower: forwarded to the owner as
    /// the protocol's request, which must take it within
    /// `--forward-timeout-s` (a compression: within its host's wait), and
    /// the owner's answer relayed to `reply`.
    pub(in crate::session) fn forward_write(
        &self,
        myself: &ActorRef<SessionMsg>,
        write: SessionWrite,
        reply: WriteReply,
    ) {
        let config = &self.ctx.config;
        let timeout = config.forward_timeout.max(host_wait(&write, config));
        // A delete the owner did: this follower's copy is gone too, told
        // before the client hears the answer (`erased.rs`).
        let deleted = matches!(write, SessionWrite::SessionDelete(_)).then(|| myself.clone());
        self.forward(myself, Forwardable::Write(write), timeout, move |answer| {
            if let (Some(me), Ok(_)) = (deleted, &answer) {
                let _ = me.cast(SessionMsg::Cluster(ClusterMsg::ErasedElsewhere));
            }
            let _ = reply.send(answer);
        });
    }

    /// Events emitted from outside (a handoff's announcement) are the
    /// owner's to write: forwarded; `reply`, if any, is told whether the
    /// owner emitted them (`false` also when it could not be asked).
    pub(in crate::session) fn forward_emit(
        &self,
        myself: &ActorRef<SessionMsg>,
        events: Vec<EventRecord>,
        reply: Option<RpcReplyPort<bool>>,
    ) {
        let id = self.id.clone();
        let timeout = self.ctx.config.forward_timeout;
        self.forward(myself, Forwardable::Emit(events), timeout, move |answer| {
            let emitted = answer.and_then(|raw| {
                serde_json::from_str::<bool>(raw.get())
                    .map_err(|e| RpcError::internal(format!("unreadable answer: {e}")))
            });
            let emitted = emitted.unwrap_or_else(|e| {
                warn!(session_id = %id, error = %e, "events forwarded to the owner were not emitted");
                false
            });
            if let Some(reply) = reply {
                let _ = reply.send(emitted);
            }
        });
    }

    /// Forwards `what` to the owner and hands its answer to `done`, on a
    /// task, once this node has read what the owner wrote for it.
    fn forward(
        &self,
        myself: &ActorRef<SessionMsg>,
        what: Forwardable,
        timeout: Duration,
        done: impl FnOnce(Result<Box<RawValue>, RpcError>) + Send + 'static,
    ) {
        let Some(cluster) = self.ctx.cluster.clone() else {
            done(Err(self.not_here()));
            return;
        };
        let id = self.id.clone();
        let profile = self.profile.clone();
        let reader = self.ctx.reader.clone();
        let me = myself.clone();
        // The owner's node may have to bring the session back to run it,
        // and its notification names no profile: the params do.
        let (method, params) = what.encode(&profile);
        tokio::spawn(async move {
            let deadline = Instant::now() + timeout;
            let answer = match params {
                Ok(params) => forward(&cluster, &id, method, &params, timeout, deadline).await,
                Err(e) => Err(RpcError::internal(format!("cannot encode {method}: {e}"))),
            };
            if answer.is_ok() {
                // What the owner committed before answering, read here
                // first, within what is left of the deadline (the answer
                // is true either way).
                let left = deadline.saturating_duration_since(Instant::now());
                match within(deadline, reader.get_session(&profile, &id)).await {
                    Some(Ok(Some(row))) if !left.is_zero() => {
                        let upto = row.latest_seq;
                        let caught = me
                            .call(
                                |reply| SessionMsg::Cluster(ClusterMsg::CatchUp { upto, reply }),
                                Some(left),
                            )
                            .await;
                        if !matches!(caught, Ok(ractor::rpc::CallResult::Success(()))) {
                            debug!(session_id = %id, upto, "relaying a forwarded answer before this node read its events");
                        }
                    }
                    Some(Err(e)) => {
                        debug!(session_id = %id, error = %e, "could not read how far the owner wrote")
                    }
                    _ => {}
                }
            }
            done(answer);
        });
    }

    /// `CatchUp`: answered once this follower has read up to `upto` (at
    /// once on an owner, or when it already has), or once a read finds the
    /// store has nothing more. A bounded few wait; more are answered at once.
    pub(in crate::session) fn catch_up(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        upto: u64,
        reply: RpcReplyPort<()>,
    ) {
        if !self.following()
            || self.commit.committed_seq() >= upto
            || self.cluster.catching_up.len() >= CATCHING_UP
        {
            let _ = reply.send(());
            return;
        }
        self.cluster.catching_up.push((upto, reply));
        // A read started now sees everything committed before the answer.
        self.follow_wake(myself);
    }

    /// After a read: the catch-ups this follower has read far enough for,
    /// or all of them when `caught_up` (a read started after they came
    /// found nothing more) or when this node owns the session now.
    pub(in crate::session) fn release_caught_up(&mut self, caught_up: bool) {
        let read = self.read_so_far(caught_up);
        for (_, reply) in take_ready(&mut self.cluster.catching_up, read, |(upto, _)| *upto) {
            let _ = reply.send(());
        }
    }
}

/// One forward, start to answer, all of it within `timeout` whatever the
/// link to the database does: every statement is bounded by the deadline.
/// An error answer means it did not run (5072: never written, withdrawn, or
/// refused by the owner); when that cannot be told, the answer is 5073
/// "outcome unknown" with the forward's id, and the client reads the
/// session before it retries.
async fn forward(
    cluster: &Cluster,
    session_id: &SessionId,
    method: &str,
    params: &str,
    timeout: Duration,
    deadline: Instant,
) -> Result<Box<RawValue>, RpcError> {
    let id = ForwardId::fresh();
    // Withdrawn a little before the deadline, so that the withdrawal's own
    // round trip keeps within it.
    let withdraw_at = deadline - (timeout / 5).min(WITHDRAW_MARGIN);
    let written = within(
        deadline,
        cluster.forward_as(&id, session_id, method, params, timeout),
    )
    .await;
    let in_doubt = match written {
        Some(Ok(())) => false,
        Some(Err(ForwardWriteError::NotWritten(e))) => {
            return Err(unavailable(format!(
                "could not forward {method} to the session's owner: {e}; it was not run (retry)"
            )))
        }
        Some(Err(ForwardWriteError::InDoubt(e))) => {
            warn!(session_id = %session_id, forward_id = %id, method, error = %e, "a forward's commit went unanswered; reading its state");
            true
        }
        None => true,
    };
    debug!(session_id = %session_id, forward_id = %id, method, node_id = %cluster.node_id(), in_doubt, "request forwarded");
    let mut wait = POLL_FIRST;
    let mut withdrawn = false;
    let mut accepted = false;
    while Instant::now() < deadline {
        tokio::time::sleep(wait.min(deadline.saturating_duration_since(Instant::now()))).await;
        wait = (wait * 2).min(POLL_MAX);
        if Instant::now() >= withdraw_at && !withdrawn && !accepted {
            withdrawn = true;
            match within(deadline, cluster.withdraw_forward(&id)).await {
                Some(Ok(true)) => {
                    return Err(unavailable(format!(
                        "the session's owner did not take {method} within {timeout:?}; it was not run (retry)"
                    )))
                }
                // Accepted or answered first (or, in doubt, never written):
                // its row tells.
                Some(Ok(false)) => {}
                Some(Err(e)) => warn!(forward_id = %id, error = %e, "could not withdraw a forward"),
                None => break,
            }
        }
        let row = match within(deadline, cluster.forward_state(&id)).await {
            Some(Ok(Some(row))) => row,
            // In doubt, it may not be stored (yet): only its row can tell.
            Some(Ok(None)) => continue,
            Some(Err(e)) => {
                warn!(forward_id = %id, error = %e, "could not read a forward's state");
                continue;
            }
            None => break,
        };
        match row.state {
            ForwardState::Answered => return relay(&id, row.answer.as_deref()),
            ForwardState::Refused => {
                return Err(unavailable(format!(
                    "the session's owner did not run {method} in time; it was not run (retry)"
                )))
            }
            ForwardState::Accepted => accepted = true,
            ForwardState::Pending => {}
        }
    }
    warn!(session_id = %session_id, forward_id = %id, method, accepted, in_doubt, "a forward's outcome is unknown at its deadline");
    let detail = if accepted {
        format!("the session's owner ran {method} but its answer did not come within {timeout:?}")
    } else {
        format!("whether the session's owner ran {method} could not be told within {timeout:?}")
    };
    Err(RpcError::outcome_unknown(detail, id.as_str()))
}

/// `what`, unless `deadline` comes first (`None`).
async fn within<T>(deadline: Instant, what: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::time::timeout_at(deadline, what).await.ok()
}

/// The owner's answer, as it wrote it.
fn relay(id: &ForwardId, answer: Option<&str>) -> Result<Box<RawValue>, RpcError> {
    let answer: Answer = answer
        .and_then(|a| serde_json::from_str(a).ok())
        .ok_or_else(|| RpcError::internal(format!("forward {id} has no readable answer")))?;
    answer.into()
}

fn unavailable(message: String) -> RpcError {
    RpcError::new(STORAGE_UNAVAILABLE, message)
}
