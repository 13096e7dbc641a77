//! The session's peers: their outboxes, the frames held for a joining
//! peer, and the fan-out that pushes one shared frame to all of them.

use std::time::Duration;

use bytes::Bytes;
use ractor::RpcReplyPort;
use std::sync::Arc;

use tether_protocol::{AttachedPeer, PeerId, PeerTransport, PresenceEntry};
use tracing::debug;

use super::SessionState;
use crate::outbox::{FrameClass, Outbox, Pushed};

/// A peer as a session sees it: an id, the outbox to push frames into, and
/// the latency budget it asked this session for (`delivery.max_delay_ms`).
#[derive(Debug, Clone)]
pub struct PeerLink {
    pub peer_id: PeerId,
    pub transport: PeerTransport,
    pub outbox: Outbox,
    pub max_delay: Duration,
    /// Who it is, as `session.presence` and the presence events tell it.
    pub presence: Arc<PresenceEntry>,
}

pub(super) struct PeerSlot {
    pub outbox: Outbox,
    /// Told in `SessionInfo.attached`.
    pub transport: PeerTransport,
    /// How long a delta to this peer may wait for its continuations.
    pub max_delay: Duration,
    /// `None` once joined; while joining, live frames are held here.
    pub held: Option<Vec<(Bytes, FrameClass)>>,
    /// Whether dropping the slot closes the peer's connection (see Drop).
    pub armed: bool,
    /// Its presence entry (`presence.rs`).
    pub presence: Arc<PresenceEntry>,
}

impl PeerSlot {
    pub fn new(link: PeerLink, held: Option<Vec<(Bytes, FrameClass)>>) -> Self {
        Self {
            outbox: link.outbox,
            transport: link.transport,
            max_delay: link.max_delay,
            held,
            armed: true,
            presence: link.presence,
        }
    }
}

/// A session that dies without stopping cleanly (killed, or crashed in a
/// handler) drops its state without telling anyone; its peers would wait
/// for events that never come. Each slot therefore closes its peer's
/// connection when dropped, unless the session let go of it on purpose
/// (detach, clean stop): the client reconnects and resumes from its
/// watermark on the session brought back from the store.
impl Drop for PeerSlot {
    fn drop(&mut self) {
        if self.armed && !self.outbox.is_closed() {
            self.outbox.close(CLOSE_SESSION_LOST, "session restarted");
        }
    }
}

/// WebSocket close code for a peer whose session actor died (RFC 6455
/// "internal error"); it reconnects and resumes.
pub const CLOSE_SESSION_LOST: u16 = 1011;

impl SessionState {
    /// Adds (or replaces, for a peer that resumes again) a peer's slot. The
    /// replaced slot is let go on purpose: it must not close the peer.
    pub(super) fn attach_slot(&mut self, peer_id: PeerId, slot: PeerSlot) {
        if let Some(mut old) = self.peers.insert(peer_id, slot) {
            old.armed = false;
        }
        self.presence.local_changed();
    }

    /// Who is attached, in peer id order (so that two answers list them
    /// alike).
    pub(super) fn attached(&self) -> Vec<AttachedPeer> {
        let mut attached: Vec<AttachedPeer> = self
            .peers
            .iter()
            .map(|(peer_id, slot)| AttachedPeer {
                peer_id: peer_id.clone(),
                transport: slot.transport,
            })
            .collect();
        attached.sort_by(|a, b| a.peer_id.as_str().cmp(b.peer_id.as_str()));
        attached
    }

    /// The peer leaves; whether it was attached.
    pub(super) fn detach(&mut self, peer_id: &PeerId) -> bool {
        let was = match self.peers.remove(peer_id) {
            Some(mut slot) => {
                slot.armed = false;
                true
            }
            None => false,
        };
        if was {
            self.presence.local_changed();
            debug!(session_id = %self.id, peer_id = %peer_id, peers = self.peers.len(), "peer detached");
        }
        was
    }

    pub(super) fn detach_and_answer(
        &mut self,
        peer_id: &PeerId,
        reply: Option<RpcReplyPort<bool>>,
    ) {
        let was = self.detach(peer_id);
        if let Some(reply) = reply {
            let _ = reply.send(was);
        }
    }

    /// Pushes a frame to every peer; a joining peer's frames are held until
    /// its resume reply is queued.
    pub(super) fn fan_out(&mut self, frame: &Bytes, class: FrameClass) {
        self.fan_out_to(frame, class, |_| true);
    }

    /// [`Self::fan_out`] to the peers `to` picks.
    pub(super) fn fan_out_to(
        &mut self,
        frame: &Bytes,
        class: FrameClass,
        to: impl Fn(&PeerSlot) -> bool,
    ) {
        let limit = self.ctx.config.outbox_frames;
        let mut gone = Vec::new();
        for (peer_id, slot) in self.peers.iter_mut() {
            if !to(slot) {
                continue;
            }
            match &mut slot.held {
                Some(held) => {
                    if held.len() >= limit && class == FrameClass::Durable {
                        slot.outbox
                            .close(crate::outbox::CLOSE_SLOW_CONSUMER, "slow consumer");
                        gone.push(peer_id.clone());
                    } else if held.len() < limit {
                        held.push((frame.clone(), class.clone()));
                    }
                }
                None => {
                    let pushed =
                        slot.outbox
                            .push_within(frame.clone(), class.clone(), slot.max_delay);
                    if pushed == Pushed::Closed {
                        gone.push(peer_id.clone());
                    }
                }
            }
        }
        for peer_id in gone {
            debug!(session_id = %self.id, peer_id = %peer_id, "peer gone during fan-out");
            self.detach(&peer_id);
        }
    }
}
