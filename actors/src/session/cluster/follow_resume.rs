//! A resume through a follower that lags its client: the client comes with
//! a watermark from another node (the owner, or a faster follower) that
//! this follower has not read up to yet. Answered at once, the cut point
//! would sit below `last_seen` and the events between would reach the
//! client again once read. So such a resume waits until the follower has
//! read up to `last_seen` (it reads at once), or until a read finds the
//! store has no more (a watermark beyond the store's head is then answered
//! as the owner answers it: lost history). A bounded few wait; more are
//! refused with 5072 (retry), since answered at once they would look like
//! lost history.

use ractor::{ActorRef, RpcReplyPort};
use tether_protocol::{ResumeParams, RpcError};

use super::take_ready;
use crate::session::{PeerLink, ResumeReply, SessionMsg, SessionState};

/// Resumes waiting for the follower to catch up, at most.
const WAITING: usize = 64;

/// A resume held until the follower has read far enough.
pub(crate) struct WaitingResume {
    params: ResumeParams,
    peer: Option<PeerLink>,
    reply: RpcReplyPort<Result<ResumeReply, RpcError>>,
}

impl std::fmt::Debug for WaitingResume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitingResume")
            .field("last_seen", &self.params.last_seen)
            .finish_non_exhaustive()
    }
}

impl SessionState {
    /// `session.resume`, unless this follower must first read up to the
    /// client's watermark: then it is held and a read started.
    pub(in crate::session) fn resume_when_caught_up(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        params: ResumeParams,
        peer: Option<PeerLink>,
        reply: RpcReplyPort<Result<ResumeReply, RpcError>>,
    ) {
        let ahead = params
            .last_seen
            .is_some_and(|n| n > self.commit.committed_seq());
        if ahead && self.following() {
            if self.cluster.waiting_resumes.len() >= WAITING {
                let _ = reply.send(Err(RpcError::storage_unavailable(
                    "this node has not yet read the session up to last_seen; retry",
                )));
                return;
            }
            self.cluster.waiting_resumes.push(WaitingResume {
                params,
                peer,
                reply,
            });
            self.follow_wake(myself);
            return;
        }
        self.resume(params, peer, reply);
    }

    /// A read failed: the held resumes are refused (5072, retry), since
    /// this node cannot tell how far the store goes.
    pub(in crate::session) fn refuse_waiting_resumes(&mut self) {
        for w in std::mem::take(&mut self.cluster.waiting_resumes) {
            let _ = w.reply.send(Err(RpcError::storage_unavailable(
                "this node could not read the session up to last_seen; retry",
            )));
        }
    }

    /// After a read: the held resumes the follower has caught up for, or
    /// all of them when `caught_up` (the store had nothing more) or when
    /// this node owns the session now.
    pub(in crate::session) fn release_waiting_resumes(&mut self, caught_up: bool) {
        let read = self.read_so_far(caught_up);
        let ready = take_ready(&mut self.cluster.waiting_resumes, read, |w| {
            w.params.last_seen.unwrap_or(0)
        });
        for w in ready {
            self.resume(w.params, w.peer, w.reply);
        }
    }
}
