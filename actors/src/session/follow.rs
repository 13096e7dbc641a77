//! A session followed on a node that does not own it (a cluster: a live
//! other node owns it; docs/ARCHITECTURE.md, "Cluster").
//!
//! The follower writes nothing. A notification (or a resync after the
//! listener reconnected) only says there may be something to read: it reads
//! the store after its watermark, by seq, and fans each event out exactly
//! as the owner does: into the ring, then to every peer, in seq order, with
//! the watermark as the "committed seq" that resume cuts its replay at, so
//! attach + replay stays one step here too. When the registry's poll finds
//! the owner dead (or gone), the follower claims the session and becomes
//! its owner in place (`Promoted`): its peers stay attached, get what they
//! had not seen, then the dead node's turns end `node_lost`.

use ractor::ActorRef;
use tether_protocol::{EventType, RpcError, SessionStatus};
use tether_store::cluster::NodeId;
use tether_store::{EventRow, SessionRow, StoreError};
use tracing::{debug, info, warn};

use super::{Commit, SessionMsg, SessionState};
use crate::event::{frame_of, EventRecord};
use crate::node::Claimed;
use crate::outbox::FrameClass;
use crate::ring::RingEntry;
use crate::store_writer::{Barrier, StoreWriterMsg};
use crate::transcript;

/// Events read per store read; more are read at once after a full page.
const READ_PAGE: u32 = 512;

/// What a follower keeps.
#[derive(Debug)]
pub(crate) struct Following {
    /// `None` right after this node lost the session (`lost.rs`), until a
    /// poll or a claim names the new owner.
    owner: Option<NodeId>,
    /// A read is in flight.
    reading: bool,
    /// A wake came while it was: read once more after it.
    again: bool,
    /// A claim is in flight.
    promoting: bool,
}

impl Following {
    /// The owner followed, once known.
    pub fn owner(&self) -> Option<&NodeId> {
        self.owner.as_ref()
    }

    pub fn new(owner: Option<NodeId>) -> Self {
        Following {
            owner,
            reading: false,
            again: false,
            promoting: false,
        }
    }
}

/// What a follower that claimed its session learned under its new fence.
#[derive(Debug)]
pub struct Promotion {
    lost_from: Option<NodeId>,
    barrier: Barrier,
    row: SessionRow,
    /// Every event after the watermark the claim started from.
    missed: Vec<EventRow>,
}

/// What a claim attempt of a follower came to.
#[derive(Debug)]
pub enum Promoted {
    Owner(Box<Promotion>),
    /// Another live node got it first: follow that one.
    Follow(NodeId),
    Failed(StoreError),
}

impl SessionState {
    /// Whether this node only follows the session.
    pub(super) fn following(&self) -> bool {
        self.following.is_some()
    }

    /// A request that changes the session is the owner's to run: on a
    /// follower it is answered here (and `None` returned); anything else
    /// is handled as usual.
    pub(super) fn unless_following(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        msg: SessionMsg,
    ) -> Option<SessionMsg> {
        if !self.following() {
            return Some(msg);
        }
        match msg {
            SessionMsg::Submit {
                text,
                replaces,
                reply,
            } => self.forward_request(
                "prompt.submit",
                serde_json::json!({ "text": text, "replaces": replaces }),
                reply,
            ),
            SessionMsg::Interrupt { reply } => {
                self.forward_request("session.interrupt", serde_json::json!({}), reply)
            }
            SessionMsg::Branch { ask, reply } => self.forward_request(
                "session.branch",
                serde_json::json!({ "upto_seq": ask.upto_seq, "title": ask.title }),
                reply,
            ),
            SessionMsg::HandoffRequest { target, reply } => self.forward_request(
                "handoff.request",
                serde_json::json!({ "target": target }),
                reply,
            ),
            SessionMsg::Compress { focus, reply } => self.forward_request_within(
                "session.compress",
                serde_json::json!({ "focus": focus }),
                self.ctx
                    .config
                    .forward_timeout
                    .max(self.ctx.config.compress_wait),
                reply,
            ),
            SessionMsg::Close {
                reason,
                reply: Some(reply),
            } => self.forward_request(
                "session.close",
                serde_json::json!({ "reason": reason }),
                reply,
            ),
            SessionMsg::Close { reply: None, .. } => {}
            SessionMsg::EmitIfOpen { events, reply } => self.forward_emit(events, reply),
            // What only an owner gets or does: late, after this node lost
            // the session (`lost.rs`); its work is the new owner's now.
            SessionMsg::Turn { .. }
            | SessionMsg::TurnDeadline { .. }
            | SessionMsg::ControlLate { .. }
            | SessionMsg::TranscriptLoaded { .. }
            | SessionMsg::RepayCompletions
            | SessionMsg::HostsLost
            | SessionMsg::ForwardsWake
            | SessionMsg::ForwardsRead { .. } => {}
            SessionMsg::ControlDone { reply, .. } => drop(reply.send(Err(self.not_here()))),
            SessionMsg::Park { reply, .. } => {
                // Nothing to write: a follower nobody here follows just stops.
                let idle = self.peers.is_empty();
                let _ = reply.send(idle);
                if idle {
                    myself.stop(Some("parked (follower)".into()));
                }
            }
            other => return Some(other),
        }
        None
    }

    /// The answer to a request this follower cannot run itself.
    pub(super) fn not_here(&self) -> RpcError {
        let owner = self
            .following
            .as_ref()
            .and_then(|f| f.owner.as_ref())
            .map_or_else(|| "another node".to_string(), |o| format!("node {o}"));
        RpcError::new(
            tether_protocol::codes::STORAGE_UNAVAILABLE,
            format!("session {} is owned by {owner}; retry", self.id),
        )
    }

    /// A notification or a resync: read after the watermark (once more
    /// after the read in flight, if there is one).
    pub(super) fn follow_wake(&mut self, myself: &ActorRef<SessionMsg>) {
        let Some(f) = self.following.as_mut() else {
            return;
        };
        if f.reading {
            f.again = true;
            return;
        }
        f.reading = true;
        f.again = false;
        let reader = self.ctx.reader.clone();
        let id = self.id.clone();
        let after = self.commit.committed_seq();
        let me = myself.clone();
        tokio::spawn(async move {
            let rows = reader.events_since(&id, after, READ_PAGE).await;
            let _ = me.cast(SessionMsg::FollowRead { rows });
        });
    }

    /// Fans out what a read found, then reads again if more may be there.
    pub(super) fn follow_read(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        rows: Result<Vec<EventRow>, StoreError>,
    ) {
        let Some(f) = self.following.as_mut() else {
            return;
        };
        f.reading = false;
        let (read, more) = match rows {
            Ok(rows) => {
                let full = rows.len() as u32 >= READ_PAGE;
                self.relay(&rows);
                (true, full)
            }
            Err(e) => {
                // The next notification, resync or poll reads again.
                warn!(session_id = %self.id, error = %e, "follower read failed");
                (false, false)
            }
        };
        let again = self.following.as_ref().is_some_and(|f| f.again);
        // Nothing more in the store (as of this read): a resume waiting for
        // a watermark beyond it is answered now.
        self.release_waiting_resumes(read && !(more || again));
        if more || again {
            self.follow_wake(myself);
        }
    }

    /// Ring and fan-out of stored events, in seq order, each exactly once:
    /// what is at or below the watermark was relayed already, and a gap
    /// (never expected: reads are by seq) stops the batch until the next
    /// read.
    fn relay(&mut self, rows: &[EventRow]) {
        for row in rows {
            let next = self.commit.committed_seq() + 1;
            if row.seq < next {
                continue;
            }
            if row.seq > next {
                warn!(session_id = %self.id, seq = row.seq, expected = next, "gap in a followed session; reading again later");
                return;
            }
            let Some(rec) = EventRecord::from_row(row) else {
                warn!(session_id = %self.id, seq = row.seq, "malformed stored event; reading again later");
                return;
            };
            let params = rec.params_of(&self.id);
            let frame = frame_of(&params);
            let count = transcript::count_after(rec.kind, self.commit.committed_message_count());
            self.commit = Commit::new(
                Barrier {
                    latest_seq: row.seq,
                    append_gen: 0,
                },
                count,
            );
            self.followed_deltas.relayed(&rec);
            match rec.kind {
                EventType::MessageUser => self.set_status(SessionStatus::Running),
                EventType::MessageComplete => self.set_status(SessionStatus::Idle),
                EventType::SessionClosed => self.set_status(SessionStatus::Closed),
                _ => {}
            }
            self.ring.push(RingEntry {
                seq: row.seq,
                params,
            });
            self.fan_out(&frame, FrameClass::Durable);
            self.release_held_deltas();
        }
        self.publish_gauges();
    }

    /// The registry's poll found the owner dead or gone: a follower with
    /// peers claims the session; one without stops (nothing to relay to).
    pub(super) fn owner_gone(&mut self, myself: &ActorRef<SessionMsg>) {
        let Some(f) = self.following.as_mut() else {
            return;
        };
        if self.peers.is_empty() {
            debug!(session_id = %self.id, "owner gone and nobody here follows; stopping");
            myself.stop(Some("followed owner gone".into()));
            return;
        }
        if f.promoting {
            return;
        }
        f.promoting = true;
        let Some(cluster) = self.ctx.cluster.clone() else {
            return;
        };
        let writer = self.ctx.writer();
        let reader = self.ctx.reader.clone();
        let id = self.id.clone();
        let profile = self.profile.clone();
        let after = self.commit.committed_seq();
        let wait = self.ctx.config.call_timeout;
        let me = myself.clone();
        tokio::spawn(async move {
            let promoted = async {
                let lost_from = match crate::node::claim(&cluster, &id).await? {
                    Claimed::Follower { owner } => return Ok(Promoted::Follow(owner)),
                    Claimed::Owner { lost_from } => lost_from,
                };
                let writer = writer
                    .ok_or_else(|| StoreError::Unavailable("store writer is restarting".into()))?;
                let barrier = match writer
                    .call(
                        |reply| StoreWriterMsg::Barrier {
                            session_id: id.clone(),
                            reply,
                        },
                        Some(wait),
                    )
                    .await
                {
                    Ok(ractor::rpc::CallResult::Success(b)) => b?,
                    _ => {
                        return Err(StoreError::Unavailable(
                            "store writer did not answer".into(),
                        ))
                    }
                };
                let row = reader
                    .get_session(&profile, &id)
                    .await?
                    .ok_or_else(|| StoreError::Unavailable(format!("session {id} vanished")))?;
                let missed = reader.events_between(&id, after, u64::MAX).await?;
                Ok(Promoted::Owner(Box::new(Promotion {
                    lost_from,
                    barrier,
                    row,
                    missed,
                })))
            }
            .await;
            let promoted = promoted.unwrap_or_else(Promoted::Failed);
            let _ = me.cast(SessionMsg::Promoted { promoted });
        });
    }

    /// The claim's outcome: owner in place, or still a follower.
    pub(super) fn promoted(&mut self, myself: &ActorRef<SessionMsg>, promoted: Promoted) {
        let Some(f) = self.following.as_mut() else {
            return;
        };
        f.promoting = false;
        let p = match promoted {
            Promoted::Owner(p) => *p,
            Promoted::Follow(owner) => {
                f.owner = Some(owner);
                return;
            }
            Promoted::Failed(e) => {
                // The next poll tries again.
                warn!(session_id = %self.id, error = %e, "could not take over a followed session");
                return;
            }
        };
        // What the peers have not seen first, then the endings.
        self.relay(&p.missed);
        self.following = None;
        self.followed_deltas = Default::default();
        self.release_waiting_resumes(true);
        self.commit = Commit::new(p.barrier, p.row.message_count);
        self.status = p.row.status;
        if self.status == SessionStatus::Parked {
            // Its owner parked it (nobody was attached there) and released
            // it: live again here, and so in the store (listings read it).
            self.set_status(SessionStatus::Idle);
            if let Some(writer) = self.ctx.writer() {
                let _ = writer.cast(StoreWriterMsg::Patch {
                    session_id: self.id.clone(),
                    patch: tether_store::SessionPatch {
                        status: Some(SessionStatus::Idle),
                        ..Default::default()
                    },
                    reply: None,
                });
            }
        }
        self.title = p.row.title;
        self.history_version = p.row.history_version;
        self.retained_from_seq = p.row.retained_from_seq;
        self.marker_reason = match &p.lost_from {
            Some(_) => crate::turn::reasons::NODE_LOST,
            None => crate::turn::reasons::GATEWAY_RESTART,
        };
        info!(session_id = %self.id, latest_seq = self.commit.committed_seq(), dead = ?p.lost_from.as_ref().map(|n| n.to_string()), "follower became the owner");
        self.end_orphaned_turns(p.row.turn_marker);
        self.send_unsent(myself);
        self.report_to_reaper(true);
        // Forwards the dead owner never took (this node's own included).
        self.forwards_wake(myself);
    }
}
