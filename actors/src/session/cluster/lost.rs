//! A session this node no longer owns (a cluster: another node claimed it,
//! so the fenced writer answered `NotOwner`, or a late heartbeat's recheck
//! forgot the fence). Its owner state (turns, the pipeline's rewind, owed
//! completions) is no longer the truth; what it fanned out is, because it
//! fanned out only what was committed under its fence. So a session with
//! peers here becomes a follower in place (docs/ARCHITECTURE.md, "Losing a
//! session in place"): it reads the new owner's events after its
//! watermark, which is exactly what its peers have not seen. Nothing is
//! reported to clients as a storage failure.

use ractor::ActorRef;
use tracing::{info, warn};

use super::follow::Following;
use crate::host_supervisor::HostSupervisorMsg;
use crate::registry::RegistryMsg;
use crate::session::{SessionMsg, SessionState};

impl SessionState {
    /// Interrupts the running turn's host work (its side effects stop as
    /// soon as this node knows) and writes nothing: the new owner ends the
    /// turn (`node_lost`). With peers, it goes on as a follower; without,
    /// it stops. An append still at the writer is waited for first: it
    /// fails (the fence is gone) and calls this again with its rewind done,
    /// so the follower starts from what was really committed.
    pub(in crate::session) fn lost(&mut self, myself: &ActorRef<SessionMsg>) {
        if self.following() || self.status == tether_protocol::SessionStatus::Closed {
            return;
        }
        let node_id = self
            .ctx
            .cluster
            .as_ref()
            .map(|c| c.node_id().to_string())
            .unwrap_or_default();
        if self.owner_cut_off() {
            // This node cannot renew its lease: it may be cut off, not
            // overtaken, and whoever takes over needs no follower here.
            self.stand_down(myself);
            return;
        }
        let running = self.turns.running.as_ref().map(|t| t.tag.turn_id.clone());
        if let (Some(turn_id), Some(hosts)) = (running.clone(), self.ctx.hosts()) {
            let _ = hosts.cast(HostSupervisorMsg::Abandon { turn_id });
        }
        if self.commit.has_append() {
            info!(session_id = %self.id, node_id = %node_id, "session lost to another node; waiting for the append in flight");
            return;
        }
        if self.peers.is_empty() {
            warn!(session_id = %self.id, node_id = %node_id, turn_id = ?running, "another node owns the session now; dropping it here");
            myself.stop(Some("lost to another node".into()));
            return;
        }
        warn!(session_id = %self.id, node_id = %node_id, turn_id = ?running, peers = self.peers.len(), "another node owns the session now; following it");
        self.forget_ownership();
        self.cluster.following = Some(Following::new(None));
        // The registry routes notifications to followers it knows of; it
        // wakes this one once it does. Until then, read at once.
        if let Ok(registry) = self.ctx.registry() {
            let _ = registry.cast(RegistryMsg::Demoted {
                key: (self.profile.clone(), self.id.clone()),
            });
        }
        self.follow_wake(myself);
    }

    /// Drops everything only an owner keeps. Replies still waiting are
    /// answered (retryable: the request did not run here).
    fn forget_ownership(&mut self) {
        if let Some(t) = self.turns.running.take() {
            if let Some(timer) = &t.deadline {
                timer.abort();
            }
        }
        self.turns.queue.clear();
        self.turns.sticky_host = None;
        self.turns.marker_dirty = false;
        self.owed = crate::session::owed::Owed::default();
        self.cluster.forwarded = super::forwarded::Forwarded::default();
        let not_here = self.not_here();
        self.abandon_compression(|| not_here.clone());
        for p in std::mem::take(&mut self.pending_submits) {
            let _ = p.reply.send(Err(self.not_here()));
        }
        self.transcript = crate::session::history::Transcript::default();
        self.row_written.forget();
    }
}
