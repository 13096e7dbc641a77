//! `session.close`, and the close of a `close_on_disconnect` session its
//! last peer left: end every accepted turn, emit `session.closed`, answer
//! once it is on disk, stop.
//!
//! A close is one append: the turns' endings and `session.closed` are
//! committed together or not at all, so a crash never leaves a closed
//! session with a turn that has no ending (nor an open one that lost its
//! endings). From the moment it is decided, nothing durable may be emitted
//! after `session.closed` (`pipeline.rs` refuses it), and every request
//! answers 4002.

use ractor::{ActorRef, RpcReplyPort};
use tether_protocol::FailureReason;
use tether_protocol::{
    CloseParams, CloseResult, EventType, RpcError, SessionClosedPayload, SessionStatus,
};
use tracing::info;

use super::write::{FirstWrite, Reply, Write};
use super::{SessionMsg, SessionState, Waiter};

impl Write for CloseParams {
    type Answer = CloseResult;
    // The running turn's ending, or `session.closed` (a closed session
    // writes nothing).
    const FIRST_WRITE: FirstWrite = FirstWrite::Event;

    fn run(
        self,
        session: &mut SessionState,
        myself: &ActorRef<SessionMsg>,
        reply: Reply<CloseResult>,
    ) {
        session.close(myself, "client", Some(reply));
    }
}

impl SessionState {
    /// PROTOCOL 1.7: a `close_on_disconnect` session whose last peer left is
    /// closed at once, its running turn interrupted.
    /// On a cluster, "last" is over every node: the owner closes once its
    /// own peers are gone and a fresh read of the other nodes' counts finds
    /// none (the registry's poll, a second late at most, only prompts that
    /// read). A follower never closes: its peers count on the owner.
    pub(super) fn close_if_left(&mut self, myself: &ActorRef<SessionMsg>) {
        let others = self.gauges.other_peers();
        if !self.peers.is_empty() || others > 0 {
            self.ever_attached = true;
            return;
        }
        if !(self.ever_attached && self.close_on_disconnect)
            || self.status == SessionStatus::Closed
            || self.following()
        {
            return;
        }
        if self.ctx.cluster.is_some() {
            // The other nodes' peers are read afresh first (`cluster/left.rs`).
            self.check_left_elsewhere(myself);
            return;
        }
        self.close_on_disconnect_now(myself);
    }

    /// Retention's close of a session idle past its cutoff: the sweep
    /// picked it from the store a moment ago, and a client may have come
    /// back since (resumed it, attached, sent a prompt). Decided here, on the
    /// session's state at the moment it acts: anyone attached (here or on
    /// another node), any turn or compaction, or a client's request since
    /// the cutoff keeps it open. Otherwise it closes as `session.close`
    /// does; answers whether it did.
    pub(super) fn close_if_idle(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        idle_before_ms: i64,
        reply: RpcReplyPort<bool>,
    ) {
        let in_use = !self.peers.is_empty()
            || self.gauges.other_peers() > 0
            || self.busy()
            || self.deleting.is_some()
            || self.updated_at_ms >= idle_before_ms
            || self.used_at_ms.is_some_and(|t| t >= idle_before_ms);
        if in_use || self.status == SessionStatus::Closed {
            info!(session_id = %self.id, in_use, "retention: session in use; not closed");
            let _ = reply.send(false);
            return;
        }
        info!(session_id = %self.id, "retention: closing an idle session");
        self.close(myself, "client", None);
        let _ = reply.send(true);
    }

    pub(super) fn close_on_disconnect_now(&mut self, myself: &ActorRef<SessionMsg>) {
        if self.status == SessionStatus::Closed {
            return;
        }
        info!(session_id = %self.id, "last peer left a close_on_disconnect session; closing");
        self.close(myself, "disconnect", None);
    }

    /// Ends every accepted turn (`interrupted` / `session_closed`, queued
    /// prompts `dequeued`) and a compression in flight (answered 4002),
    /// then emits `session.closed`; `reply` is answered once all of it is
    /// on disk (and the session stops then), or with 5070/5071 if it is
    /// not written (and the session is open again, its turns ended).
    fn close(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        reason: &str,
        reply: Option<Reply<CloseResult>>,
    ) {
        if self.status == SessionStatus::Closed {
            // Idempotent: a second close (or one racing the first) just waits
            // for the first one's commit if it is still pending.
            if self.commit.any_waiter(|w| matches!(w, Waiter::Close(_))) {
                self.wait_for(myself, self.commit.last_seq(), Waiter::Close(reply));
            } else if let Some(reply) = reply {
                let _ = reply.send(Ok(CloseResult { closed: true }));
            }
            return;
        }
        self.end_all_turns(myself, FailureReason::SessionClosed);
        self.abandon_compression(RpcError::session_closed);
        let payload = SessionClosedPayload {
            reason: reason.to_string(),
        };
        let seq = self.emit_durable(EventType::SessionClosed, &payload, None);
        // Nothing may follow it.
        self.closed_at = Some(seq);
        self.set_status(SessionStatus::Closed);
        self.wait_for(myself, self.commit.last_seq(), Waiter::Close(reply));
    }
}
