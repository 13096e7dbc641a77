//! `session.close`, and the close of a `close_on_disconnect` session its
//! last peer left: emit `session.closed`, answer once it is on disk, stop.

use ractor::{ActorRef, RpcReplyPort};
use tether_protocol::{now_ms, EventType, RpcError, SessionClosedPayload, SessionStatus};
use tracing::info;

use super::{SessionMsg, SessionState, Waiter};
use crate::event::EventRecord;

impl SessionState {
    /// PROTOCOL 1.7: a `close_on_disconnect` session whose last peer left is
    /// closed at once, its running turn interrupted.
    pub(super) fn close_if_left(&mut self, myself: &ActorRef<SessionMsg>) {
        if !self.peers.is_empty() {
            self.ever_attached = true;
            return;
        }
        if !(self.ever_attached && self.close_on_disconnect) || self.status == SessionStatus::Closed
        {
            return;
        }
        // A follower writes nothing; peer counts do not cross nodes yet, so
        // the owner closes only when its own last peer leaves.
        if self.following() {
            return;
        }
        info!(session_id = %self.id, "last peer left a close_on_disconnect session; closing");
        self.stop_turns(myself, None);
        self.close(myself, "disconnect", None);
    }

    /// Emits `session.closed`; `reply` is answered once it is on disk (and
    /// the session stops then), or with 5070/5071 if it is not written.
    pub(super) fn close(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        reason: &str,
        reply: Option<RpcReplyPort<Result<(), RpcError>>>,
    ) {
        if self.status == SessionStatus::Closed {
            // Idempotent: a second close (or one racing the first) just waits
            // for the first one's commit if it is still pending.
            if self.commit.any_waiter(|w| matches!(w, Waiter::Close(_))) {
                self.wait_for(myself, self.commit.last_seq(), Waiter::Close(reply));
            } else if let Some(reply) = reply {
                let _ = reply.send(Ok(()));
            }
            return;
        }
        self.set_status(SessionStatus::Closed);
        let rec = EventRecord::new(
            EventType::SessionClosed,
            &SessionClosedPayload {
                reason: reason.to_string(),
            },
            None,
            now_ms(),
        );
        self.emit(rec);
        self.wait_for(myself, self.commit.last_seq(), Waiter::Close(reply));
    }
}
