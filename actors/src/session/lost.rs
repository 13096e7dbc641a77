//! A session this node no longer owns (a cluster: another node claimed it,
//! so the fenced writer answered `NotOwner`). Its in-memory state is no
//! longer the truth, so it is dropped; nothing is reported to clients as a
//! storage failure.

use ractor::ActorRef;
use tracing::warn;

use super::peers::CLOSE_SESSION_LOST;
use super::{SessionMsg, SessionState};
use crate::host_supervisor::HostSupervisorMsg;

impl SessionState {
    /// Interrupts the running turn's host work (its side effects stop as
    /// soon as this node knows), closes its peers' connections (1011) and
    /// stops, so the clients reconnect and resume from their watermarks
    /// through any node. Nothing is written: the new owner ends the turn
    /// (`node_lost`).
    pub(super) fn lost(&mut self, myself: &ActorRef<SessionMsg>) {
        if self.following() || self.status == tether_protocol::SessionStatus::Closed {
            return;
        }
        let node_id = self
            .ctx
            .cluster
            .as_ref()
            .map(|c| c.node_id().to_string())
            .unwrap_or_default();
        let running = self.turns.running.as_ref().map(|t| t.tag.turn_id.clone());
        warn!(session_id = %self.id, node_id = %node_id, turn_id = ?running, "another node owns the session now; dropping it here");
        if let (Some(turn_id), Some(hosts)) = (running, self.ctx.hosts()) {
            let _ = hosts.cast(HostSupervisorMsg::Abandon { turn_id });
        }
        // A stop counts as clean (post_stop lets the peers go), so they are
        // closed here: what this node would still send them is not the truth.
        for slot in self.peers.values() {
            slot.outbox
                .close(CLOSE_SESSION_LOST, "session moved to another node");
        }
        myself.stop(Some("lost to another node".into()));
    }
}
