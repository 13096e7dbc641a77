//! What a session tells about itself: its `SessionInfo`, the gauges the
//! metrics read, the running turn's stats entry, its status, whose every
//! change goes through [`SessionState::set_status`], and its title, which
//! `session.rename` changes.

use ractor::{ActorRef, RpcReplyPort};
use tether_protocol::{
    format_ts, ActiveTurnStat, EventType, RenameParams, RpcError, SessionInfo, SessionInfoPayload,
    SessionStatus, SinceParams, SinceResult,
};
use tracing::debug;

use super::deferred::Deferred;
use super::write::{FirstWrite, Reply, Write};
use super::{replay, SessionMsg, SessionState, Waiter};

impl Write for RenameParams {
    type Answer = SessionInfo;
    // Its `session.info`.
    const FIRST_WRITE: FirstWrite = FirstWrite::Event;

    /// A durable `session.info` with the new title (the row's title goes
    /// to the store with it); answered with the session as of that event,
    /// once it is on disk.
    fn run(
        self,
        session: &mut SessionState,
        myself: &ActorRef<SessionMsg>,
        reply: Reply<SessionInfo>,
    ) {
        if let Err(e) = crate::title::check(&self.title, session.ctx.config.max_title_bytes) {
            let _ = reply.send(Err(e));
            return;
        }
        if session.status == SessionStatus::Closed {
            let _ = reply.send(Err(RpcError::session_closed()));
            return;
        }
        let payload = SessionInfoPayload {
            title: Some(self.title.clone()),
        };
        session.title = self.title;
        let seq = session.emit_durable(EventType::SessionInfo, &payload, None);
        let mut info = session.info();
        info.latest_seq = seq;
        info.message_count = session.commit.message_count();
        session.wait_for(myself, seq, Waiter::Reply(Deferred::new(reply, info)));
    }
}

impl SessionState {
    pub(crate) fn info(&self) -> SessionInfo {
        SessionInfo {
            session_id: self.id.clone(),
            profile: self.profile.clone(),
            title: self.title.clone(),
            status: self.status,
            created_at: format_ts(self.created_at_ms),
            updated_at: format_ts(self.updated_at_ms),
            parent_session_id: self.parent_session_id.clone(),
            history_version: self.history_version,
            message_count: self.commit.committed_message_count(),
            latest_seq: self.commit.committed_seq(),
            peers: (self.peers.len() as u32).saturating_add(self.gauges.other_peers()),
            close_on_disconnect: self.close_on_disconnect,
            attached: Some(self.attached()),
            owner_node: self.owner_node(),
        }
    }

    /// On a cluster: this node, or the one it follows (if it knows yet).
    fn owner_node(&self) -> Option<String> {
        let cluster = self.ctx.cluster.as_ref()?;
        if self.following() {
            return self.followed_owner().map(ToString::to_string);
        }
        Some(cluster.node_id().to_string())
    }

    pub(super) fn publish_gauges(&self) {
        self.gauges
            .set(self.peers.len(), self.ring.len(), self.ring.bytes());
        self.cluster.set_peers(self.peers.len());
        self.gauges.set_running(self.turns.running.is_some());
    }

    /// Every change of `status` goes through here. It reaches the store
    /// with the next append (see `row.rs`), or, for `Parked`, with the
    /// park's own patch.
    pub(super) fn set_status(&mut self, status: SessionStatus) {
        if self.status != status {
            debug!(session_id = %self.id, from = self.status.as_str(), to = status.as_str(), "session status");
            self.status = status;
        }
    }

    /// The running turn's stats entry, if a turn runs.
    pub(super) fn active_turn_stat(&self) -> Option<ActiveTurnStat> {
        self.turns.running.as_ref().map(|t| ActiveTurnStat {
            session_id: self.id.clone(),
            turn_id: t.tag.turn_id.clone(),
            trace_id: t.tag.trace_id.clone(),
            elapsed_s: self.running_for().map_or(0.0, |d| d.as_secs_f64()),
            host_id: t.host_id.unwrap_or(0),
        })
    }

    pub(super) fn since(
        &mut self,
        params: SinceParams,
        reply: RpcReplyPort<Result<SinceResult, RpcError>>,
    ) {
        replay::since(self, params, reply);
    }
}
