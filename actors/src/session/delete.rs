//! `session.delete`: erase the session, its events and its branches' link
//! to it, tell its peers, stop.
//!
//! The session first stops writing, as a close does: every accepted turn
//! ends (its `message.complete` reaches the peers before anything else of
//! the delete), a compression in flight is answered 4002, and nothing
//! durable may be emitted after that. Once every append is settled it asks
//! the store to erase (`StoreErase::delete_session`: the row in one short
//! transaction, then the events in bounded batches), so an erase never
//! races an append of its own session. When the erase is done the peers get
//! one transient `session.deleted` (the last frame of this session they
//! get; nothing of it is stored), the request is answered, and every
//! message still in the mailbox is answered 4001, as is every later
//! request (the registry finds no row to load).
//!
//! On a cluster the owner runs it (a follower forwards it there); every
//! other node that holds the session live (the follower that forwarded it,
//! as soon as it hears the answer; any other, on the store's notification)
//! then tells its own peers and stops too (`cluster/erased.rs`).
//!
//! Idempotence: a second `session.delete` while the first runs is answered
//! with the first; one that comes after finds no session and is answered
//! 4001, as any request for an unknown session (docs/PROTOCOL.md says a
//! client takes 4001 on a delete as done).

use ractor::ActorRef;
use tether_protocol::FailureReason;
use tether_protocol::{
    now_ms, DeleteParams, DeleteResult, EventType, RpcError, SessionDeletedPayload, SessionStatus,
};
use tracing::{info, warn};

use super::pipeline::storage_message;
use super::write::{FirstWrite, Reply, Write};
use super::{SessionMsg, SessionState};
use crate::event::{frame_of, EventRecord};
use crate::outbox::FrameClass;

/// Events per erase transaction: small enough that the writer, which takes
/// turns with the erase on the store's write lock, waits only milliseconds.
pub(crate) const ERASE_BATCH: u32 = 2000;

/// A delete under way: the requests waiting for it.
pub(super) struct Deleting {
    replies: Vec<Reply<DeleteResult>>,
    /// The erase is done: everything is answered 4001 from now on.
    pub(super) erased: bool,
}

impl Write for DeleteParams {
    type Answer = DeleteResult;
    // The running turn's ending, if any, is written first; a forward is
    // accepted before, since a delete may write no event at all.
    const FIRST_WRITE: FirstWrite = FirstWrite::Elsewhere;

    fn run(
        self,
        session: &mut SessionState,
        myself: &ActorRef<SessionMsg>,
        reply: Reply<DeleteResult>,
    ) {
        // Decided on another life of this id (retention's listing of one
        // erased since): not this session's delete.
        if self.life.is_some_and(|life| life != session.created_at_ms) {
            let _ = reply.send(Err(RpcError::session_not_found()));
            return;
        }
        session.delete(myself, reply);
    }
}

impl SessionState {
    /// Starts (or joins) the delete of this session.
    fn delete(&mut self, myself: &ActorRef<SessionMsg>, reply: Reply<DeleteResult>) {
        if let Some(deleting) = &mut self.deleting {
            if deleting.erased {
                let _ = reply.send(Err(RpcError::session_not_found()));
            } else {
                deleting.replies.push(reply);
            }
            return;
        }
        info!(session_id = %self.id, "deleting the session");
        if self.status != SessionStatus::Closed {
            self.end_all_turns(myself, FailureReason::SessionClosed);
            self.abandon_compression(RpcError::session_closed);
        }
        // Nothing durable follows: what is emitted now would only be erased.
        self.closed_at = Some(self.commit.last_seq());
        self.set_status(SessionStatus::Closed);
        self.deleting = Some(Deleting {
            replies: vec![reply],
            erased: false,
        });
        self.erase_when_settled(myself);
    }

    /// Every append is settled: erase in the store, off the mailbox.
    pub(super) fn erase_now(&mut self, myself: &ActorRef<SessionMsg>) {
        let ctx = self.ctx.clone();
        let profile = self.profile.clone();
        let id = self.id.clone();
        let life = self.created_at_ms;
        let me = myself.clone();
        tokio::spawn(async move {
            let result = ctx
                .eraser
                .delete_session(&profile, &id, Some(life), ERASE_BATCH)
                .await
                .map_err(|e| RpcError::new(e.code(), storage_message(e.code())));
            if let Ok(Some(branches)) = &result {
                crate::retention::unlink_live(&ctx, &profile, branches).await;
            }
            let _ = me.cast(SessionMsg::Erased {
                result: result.map(|found| found.is_some()),
            });
        });
    }

    /// Another node erased the session (`cluster/erased.rs`): its peers
    /// here are told, and it stops, as that node's copy did. One deleting
    /// itself meanwhile is answered by its own erase.
    pub(super) fn erased_elsewhere(&mut self, myself: &ActorRef<SessionMsg>) {
        if self.deleting.is_some() {
            return;
        }
        info!(session_id = %self.id, following = self.following(), "session erased by another node");
        self.deleting = Some(Deleting {
            replies: Vec::new(),
            erased: false,
        });
        self.erased(myself, Ok(true));
    }

    /// The store's answer to the erase.
    pub(super) fn erased(&mut self, myself: &ActorRef<SessionMsg>, result: Result<bool, RpcError>) {
        let Some(deleting) = &mut self.deleting else {
            return;
        };
        let replies = std::mem::take(&mut deleting.replies);
        match result {
            Ok(found) => {
                deleting.erased = true;
                info!(session_id = %self.id, found, "session deleted");
                let rec = EventRecord::new(
                    EventType::SessionDeleted,
                    &SessionDeletedPayload {},
                    None,
                    now_ms(),
                );
                // No seq and never stored, but never dropped for a slow peer
                // either: it is the last word on the session.
                self.fan_out(&frame_of(&rec.params_of(&self.id)), FrameClass::Durable);
                for reply in replies {
                    let _ = reply.send(Ok(DeleteResult { deleted: true }));
                }
                self.gauges.set(0, 0, 0);
                // Stop: what is still in the mailbox meets `unless_erased`.
                let _ = myself.drain();
            }
            Err(e) => {
                // Not erased (the store failed): the session stays closed,
                // its events as they were; a later delete tries again.
                warn!(session_id = %self.id, error = %e.message, "delete failed");
                self.deleting = None;
                for reply in replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }

    /// Once erased, a message that asks for an answer is answered 4001 (the
    /// session is gone), and nothing else is done; `Some(msg)` otherwise.
    pub(super) fn unless_erased(&mut self, msg: SessionMsg) -> Option<SessionMsg> {
        if !self.deleting.as_ref().is_some_and(|d| d.erased) {
            return Some(msg);
        }
        let gone = RpcError::session_not_found;
        match msg {
            SessionMsg::Resume { reply, .. } => drop(reply.send(Err(gone()))),
            SessionMsg::Since { reply, .. } => drop(reply.send(Err(gone()))),
            SessionMsg::Write { reply, .. } => drop(reply.send(Err(gone()))),
            SessionMsg::Detach {
                reply: Some(reply), ..
            } => drop(reply.send(false)),
            SessionMsg::EmitIfOpen {
                reply: Some(reply), ..
            } => drop(reply.send(false)),
            SessionMsg::Flush { reply } | SessionMsg::Drain { reply } => drop(reply.send(())),
            SessionMsg::Park { reply, .. } => drop(reply.send(true)),
            SessionMsg::ActiveTurn { reply } => drop(reply.send(None)),
            _ => {}
        }
        None
    }
}
