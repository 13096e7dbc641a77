//! An owner on a node that cannot renew its lease (cut off from
//! PostgreSQL while it stays alive, docs/CLUSTER.md "A node cut off from
//! PostgreSQL"). Another node may take the session over once the lease
//! this node last wrote runs out; this node stands down before that
//! (half the lease after its last answered heartbeat was sent): it
//! interrupts the running turn on its host and writes nothing (the new
//! owner ends it, `node_lost`), closes its peers' connections so that they
//! resume through another node, and stops. Nothing it held is acted on
//! again: the session is brought back from the store, and claimed again,
//! by whichever node a client reaches next.
//!
//! Two doors lead here: the registry's stand-down (every owned session at
//! once, when the node's watchdog stands down) and the check every message
//! passes before an owner acts on it ([`SessionState::unless_cut_off`]),
//! so a host frame that arrives in between is never fanned out.

use ractor::ActorRef;
use tether_protocol::codes::STORAGE_UNAVAILABLE;
use tether_protocol::RpcError;
use tracing::warn;

use crate::session::{SessionMsg, SessionState};

/// WebSocket close code for the peers of a node that stood down (RFC 6455
/// registry: "service restart"): resume through another node.
pub const CLOSE_NODE_CUT_OFF: u16 = 1012;
/// Its reason, as the client reads it.
const CUT_OFF_REASON: &str = "this node lost its database lease; resume through another node";

impl SessionState {
    /// Whether this session acts as the owner on a node that stood down
    /// (its watchdog found the lease not renewed in time). Not a timing of
    /// its own: a node that was paused (SIGSTOP) past its lease comes back
    /// through its late heartbeat's re-check instead, and its sessions
    /// follow whoever took them (`lost.rs`).
    pub(in crate::session) fn owner_cut_off(&self) -> bool {
        !self.following() && self.ctx.cluster.as_ref().is_some_and(|c| c.cut_off())
    }

    /// Before an owner acts on `msg`: on a node that cannot renew its
    /// lease it stands down instead, and `msg` is answered (retryable: it
    /// did not run) or dropped.
    pub(in crate::session) fn unless_cut_off(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        msg: SessionMsg,
    ) -> Option<SessionMsg> {
        if !self.owner_cut_off() || self.status == tether_protocol::SessionStatus::Closed {
            return Some(msg);
        }
        match msg {
            SessionMsg::Write { reply, .. } => {
                let _ = reply.send(Err(cut_off_error()));
            }
            SessionMsg::Resume { reply, .. } => {
                let _ = reply.send(Err(cut_off_error()));
            }
            SessionMsg::Since { reply, .. } => {
                let _ = reply.send(Err(cut_off_error()));
            }
            // Host frames, deadlines, commits: not acted on any more.
            _ => {}
        }
        self.stand_down(myself);
        None
    }

    /// Stops acting as the owner at once (see the module's doc). The
    /// running turn's host work was interrupted by the caller or is here.
    pub(in crate::session) fn stand_down(&mut self, myself: &ActorRef<SessionMsg>) {
        let running = self.turns.running.as_ref().map(|t| t.tag.turn_id.clone());
        if let (Some(turn_id), Some(hosts)) = (running.clone(), self.ctx.hosts()) {
            let _ = hosts.cast(crate::host_supervisor::HostSupervisorMsg::Abandon { turn_id });
        }
        for p in std::mem::take(&mut self.pending_submits) {
            let _ = p.reply.send(Err(cut_off_error()));
        }
        for slot in self.peers.values_mut() {
            slot.armed = false;
            slot.outbox.close(CLOSE_NODE_CUT_OFF, CUT_OFF_REASON);
        }
        let node_id = self
            .ctx
            .cluster
            .as_ref()
            .map(|c| c.node_id().to_string())
            .unwrap_or_default();
        warn!(session_id = %self.id, node_id = %node_id, turn_id = ?running, peers = self.peers.len(), "this node cannot renew its lease; standing down as the session's owner");
        myself.stop(Some("this node cannot renew its lease".into()));
    }
}

/// What a request to a session that stood down is answered: it did not
/// run; another node serves the session (5072, retry).
fn cut_off_error() -> RpcError {
    RpcError::new(STORAGE_UNAVAILABLE, CUT_OFF_REASON)
}
