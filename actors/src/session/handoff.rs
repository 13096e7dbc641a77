//! `handoff.request` on the session's owner. The request inserts the
//! handoff row, which on a cluster is a fenced write of the session (the
//! store checks this node's fence under the ownership row's lock), so it
//! runs where the session is owned: here on its owner, forwarded from a
//! follower (`cluster/`). The other transitions (claim,
//! complete, fail) are compare-and-sets on the handoff row alone and run on
//! any node (`peer/handoff.rs`); only their announcements are the owner's.

use ractor::ActorRef;
use tether_protocol::{HandoffRequestParams, HandoffRequestResult, RpcError, SessionStatus};
use tether_store::RequestOutcome;

use super::write::{FirstWrite, Reply, Write};
use super::{SessionMsg, SessionState};

impl Write for HandoffRequestParams {
    type Answer = HandoffRequestResult;
    // The handoff row.
    const FIRST_WRITE: FirstWrite = FirstWrite::Elsewhere;

    fn run(
        self,
        session: &mut SessionState,
        _myself: &ActorRef<SessionMsg>,
        reply: Reply<HandoffRequestResult>,
    ) {
        session.handoff_request(self.target, reply);
    }
}

impl SessionState {
    /// Inserts the handoff on a task (one statement on the handoff pool,
    /// never on this actor's handler) and answers `reply`. The caller
    /// announces it.
    fn handoff_request(&self, target: String, reply: Reply<HandoffRequestResult>) {
        if self.status == SessionStatus::Closed {
            let _ = reply.send(Err(RpcError::session_closed()));
            return;
        }
        let handoffs = self.ctx.handoffs.clone();
        let profile = self.profile.clone();
        let id = self.id.clone();
        tokio::spawn(async move {
            let outcome = handoffs.request(&profile, &id, &target).await;
            let _ = reply.send(match outcome {
                Ok(RequestOutcome::Requested(row)) => Ok(HandoffRequestResult {
                    handoff_id: row.id,
                    state: row.state,
                }),
                Ok(RequestOutcome::InFlight(active)) => {
                    Err(RpcError::handoff_conflict(match active {
                        Some(h) => format!(
                            "session {} already has handoff {} {}",
                            id.as_str(),
                            h.id.as_str(),
                            h.state
                        ),
                        None => format!("session {} already has a handoff in flight", id.as_str()),
                    }))
                }
                Ok(RequestOutcome::NoSession) => Err(RpcError::session_not_found()),
                Ok(RequestOutcome::SessionClosed) => Err(RpcError::session_closed()),
                Err(e) => Err(e.into()),
            });
        });
    }
}
