//! Attach with replay, handled by the session in one message.
//!
//! `session.resume` fixes the cut point `H` (the last committed seq) and adds
//! the peer as *joining*: live frames above `H` are held for it. The replay
//! `(last_seen, H]` comes from the ring or, when the ring does not reach back,
//! from the store on a task so that the session keeps serving meanwhile. The
//! peer queues the reply in its outbox and only then sends `Joined`, which
//! releases the held frames behind it. So every durable event after
//! `last_seen` reaches the client exactly once, in order, and no live frame
//! overtakes the reply.
//!
//! A `last_seen` above `H` is lost history (PROTOCOL 1.4): the client saw
//! events this store no longer has and whose seqs new events will take. It
//! is answered `resync` and `truncated` with no events, never as "nothing
//! missed". (A cluster follower that has not read that far yet waits first,
//! `follow_resume.rs`.)

use std::sync::Arc;

use bytes::Bytes;
use ractor::{ActorRef, RpcReplyPort};
use serde_json::value::RawValue;
use tether_protocol::{PeerId, ResumeParams, ResumeResult, RpcError, SessionStatus};

use super::peers::PeerSlot;
use super::replay::read_range;
use super::{PeerLink, SessionMsg, SessionState};
use crate::event::frame_of;
use crate::outbox::{FrameClass, Pushed};
use crate::ring::Coverage;
use crate::transcript::messages_from_rows;

/// The answer to a resume, and whether the caller is now joining (and must
/// send `Joined` after queueing the reply).
#[derive(Debug)]
pub struct ResumeReply {
    pub result: ResumeResult,
    pub joining: bool,
}

enum Replay {
    None,
    Resync,
    /// `last_seen` is above the cut point: history went backwards.
    Lost,
    Ready(Vec<Arc<RawValue>>),
    Store {
        after: u64,
    },
}

impl SessionState {
    pub(super) fn resume(
        &mut self,
        params: ResumeParams,
        peer: Option<PeerLink>,
        reply: RpcReplyPort<Result<ResumeReply, RpcError>>,
    ) {
        if let Err(e) = self.check_resume(&params, peer.as_ref()) {
            let _ = reply.send(Err(e));
            return;
        }
        let h = self.commit.committed_seq();
        let joining = match peer {
            Some(peer) if params.attach => {
                let peer_id = peer.peer_id.clone();
                self.attach_slot(peer_id, PeerSlot::new(peer, Some(Vec::new())));
                true
            }
            _ => false,
        };
        let replay = self.replay_of(params.last_seen, h);
        let truncated = params.last_seen.map(|after| {
            after.saturating_add(1) < self.retained_from_seq || matches!(replay, Replay::Lost)
        });
        let mut result = ResumeResult {
            session: self.info(),
            epoch: self.ctx.epoch.to_string(),
            latest_seq: h,
            messages: None,
            active_turn: self.active_turn(),
            todos: self.turns.todos.clone(),
            events: None,
            truncated,
            resync: params.last_seen.map(|_| false),
        };
        let store_after = match replay {
            Replay::None => None,
            Replay::Resync | Replay::Lost => {
                result.events = Some(Vec::new());
                result.resync = Some(true);
                None
            }
            Replay::Ready(events) => {
                result.events = Some(events);
                None
            }
            Replay::Store { after } => Some(after),
        };
        let answer = ResumeReply { result, joining };
        if params.omit_messages && store_after.is_none() {
            let _ = reply.send(Ok(answer));
            return;
        }
        self.resume_from_store(answer, !params.omit_messages, store_after, reply);
    }

    /// Why a resume is refused, if it is.
    fn check_resume(&self, params: &ResumeParams, peer: Option<&PeerLink>) -> Result<(), RpcError> {
        if self.status == SessionStatus::Closed {
            return Err(RpcError::session_closed());
        }
        let limit = self.ctx.config.max_resume_messages;
        let messages = self.commit.committed_message_count();
        if !params.omit_messages && messages > limit {
            return Err(RpcError::resume_too_large(messages, limit));
        }
        let max_peers = self.ctx.config.max_peers_per_session;
        if let Some(p) = peer.filter(|_| params.attach) {
            if self.peers.len() >= max_peers && !self.peers.contains_key(&p.peer_id) {
                return Err(RpcError::session_busy(format!(
                    "the session has {} peers attached (--max-peers-per-session)",
                    self.peers.len()
                )));
            }
        }
        Ok(())
    }

    /// Where the replay `(after, h]` comes from.
    fn replay_of(&self, last_seen: Option<u64>, h: u64) -> Replay {
        match last_seen {
            None => Replay::None,
            Some(after) if after > h => {
                tracing::warn!(
                    session_id = %self.id,
                    last_seen = after,
                    latest_seq = h,
                    "a client saw more of this session than the store holds; answered as lost history"
                );
                Replay::Lost
            }
            Some(after) if h.saturating_sub(after) > self.ctx.config.max_replay_events => {
                Replay::Resync
            }
            Some(after) => match self.ring.coverage(after, h) {
                Coverage::Full => Replay::Ready(
                    self.ring
                        .range(after, h, usize::MAX)
                        .into_iter()
                        .map(|e| e.params)
                        .collect(),
                ),
                Coverage::Partial => Replay::Store { after },
            },
        }
    }

    /// Completes the answer on a task, from the store: the segment's
    /// messages (cut at the answer's `latest_seq`) and the replay after
    /// `store_after`, so that the session keeps serving meanwhile.
    fn resume_from_store(
        &self,
        mut answer: ResumeReply,
        with_messages: bool,
        store_after: Option<u64>,
        reply: RpcReplyPort<Result<ResumeReply, RpcError>>,
    ) {
        let reader = self.ctx.reader.clone();
        let id = self.id.clone();
        let h = answer.result.latest_seq;
        tokio::spawn(async move {
            let filled = async {
                if with_messages {
                    let rows = reader.segment_events(&id, h).await?;
                    answer.result.messages = Some(messages_from_rows(&rows));
                }
                if let Some(after) = store_after {
                    let (events, _) = read_range(reader.as_ref(), &id, after, h, u32::MAX).await?;
                    answer.result.events = Some(events);
                }
                Ok(answer)
            }
            .await;
            let _ = reply.send(filled);
        });
    }

    /// A peer that must see every event from seq 1 (it created the session).
    pub(super) fn attach_from_start(&mut self, myself: &ActorRef<SessionMsg>, peer: PeerLink) {
        let h = self.commit.committed_seq();
        if self.ring.coverage(0, h) == Coverage::Full {
            for e in self.ring.range(0, h, usize::MAX) {
                if peer.outbox.push(frame_of(&e.params), FrameClass::Durable) == Pushed::Closed {
                    return;
                }
            }
            let peer_id = peer.peer_id.clone();
            self.attach_slot(peer_id, PeerSlot::new(peer, None));
            return;
        }
        let peer_id = peer.peer_id.clone();
        self.attach_slot(peer_id.clone(), PeerSlot::new(peer, Some(Vec::new())));
        let reader = self.ctx.reader.clone();
        let id = self.id.clone();
        let myself = myself.clone();
        tokio::spawn(async move {
            let frames = read_range(reader.as_ref(), &id, 0, h, u32::MAX)
                .await
                .map(|(events, _)| events.iter().map(|p| frame_of(p)).collect());
            let _ = myself.cast(SessionMsg::Backfill { peer_id, frames });
        });
    }

    pub(super) fn backfilled(&mut self, peer_id: &PeerId, frames: Result<Vec<Bytes>, RpcError>) {
        match frames {
            Ok(frames) => self.joined(peer_id, frames),
            Err(e) => {
                tracing::warn!(session_id = %self.id, peer_id = %peer_id, error = %e, "backfill failed; closing peer");
                if let Some(slot) = self.peers.remove(peer_id) {
                    slot.outbox.close(1011, "replay failed");
                    self.presence.local_changed();
                }
            }
        }
    }

    /// Releases a joining peer: `prefix` first, then the frames held for it.
    pub(super) fn joined(&mut self, peer_id: &PeerId, prefix: Vec<Bytes>) {
        let Some(slot) = self.peers.get_mut(peer_id) else {
            return;
        };
        let Some(held) = slot.held.take() else {
            return;
        };
        let frames = prefix
            .into_iter()
            .map(|f| (f, FrameClass::Durable))
            .chain(held);
        for (frame, class) in frames {
            if slot.outbox.push_within(frame, class, slot.max_delay) == Pushed::Closed {
                self.detach(peer_id);
                return;
            }
        }
    }
}
