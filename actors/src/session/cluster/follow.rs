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
use tether_protocol::FailureReason;
use tether_protocol::{
    EventType, RpcError, SessionCompactedPayload, SessionInfoPayload, SessionStatus,
};
use tether_store::cluster::NodeId;
use tether_store::{EventRow, SessionRow, StoreError};
use tracing::{debug, info, warn};

use super::ClusterMsg;
use crate::event::{frame_of, EventRecord};
use crate::node::Claimed;
use crate::outbox::FrameClass;
use crate::ring::RingEntry;
use crate::session::{Commit, SessionMsg, SessionState};
use crate::store_writer::{Barrier, StoreWriterMsg};
use crate::transcript;

/// Events read per store read; more are read at once after a full page.
const READ_PAGE: u32 = 512;
/// How soon a takeover whose claim succeeded but whose reads then failed
/// is tried again (the registry's poll no longer does: it sees this node
/// as the owner).
const PROMOTE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

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
    /// An earlier takeover's claim succeeded (from this dead node, if
    /// any) but what had to follow it failed: the session is this node's
    /// in the store, so the next attempt only finishes the takeover.
    claimed: Option<Option<NodeId>>,
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
            claimed: None,
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
    /// `claimed` is `Some` when the claim itself succeeded (from that dead
    /// node, if any) and only what followed it failed.
    Failed {
        error: StoreError,
        claimed: Option<Option<NodeId>>,
    },
}

impl SessionState {
    /// The answer to a request this follower cannot run itself.
    pub(in crate::session) fn not_here(&self) -> RpcError {
        let owner = self
            .followed_owner()
            .map_or_else(|| "another node".to_string(), |o| format!("node {o}"));
        RpcError::new(
            tether_protocol::codes::STORAGE_UNAVAILABLE,
            format!("session {} is owned by {owner}; retry", self.id),
        )
    }

    /// A notification or a resync: read after the watermark (once more
    /// after the read in flight, if there is one).
    pub(in crate::session) fn follow_wake(&mut self, myself: &ActorRef<SessionMsg>) {
        let Some(f) = self.cluster.following.as_mut() else {
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
            let _ = me.cast(SessionMsg::Cluster(ClusterMsg::FollowRead { rows }));
        });
    }

    /// Fans out what a read found, then reads again if more may be there.
    pub(in crate::session) fn follow_read(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        rows: Result<Vec<EventRow>, StoreError>,
    ) {
        let Some(f) = self.cluster.following.as_mut() else {
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
                // The next notification, resync or poll reads again; a
                // resume waiting for a watermark this node cannot read up
                // to is refused (retry), never answered as lost history.
                warn!(session_id = %self.id, error = %e, "follower read failed");
                self.refuse_waiting_resumes();
                (false, false)
            }
        };
        let again = self.cluster.following.as_ref().is_some_and(|f| f.again);
        // Nothing more in the store (as of this read): a resume waiting for
        // a watermark beyond it is answered now.
        self.release_waiting_resumes(read && !(more || again));
        self.release_caught_up(read && !(more || again));
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
            self.cluster.followed_deltas.relayed(&rec);
            match rec.kind {
                EventType::MessageUser => self.set_status(SessionStatus::Running),
                EventType::MessageComplete => self.set_status(SessionStatus::Idle),
                EventType::SessionClosed => self.set_status(SessionStatus::Closed),
                EventType::SessionCompacted => {
                    if let Ok(c) = serde_json::from_str::<SessionCompactedPayload>(&row.payload) {
                        self.history_version = c.history_version;
                    }
                }
                EventType::SessionInfo => {
                    if let Ok(SessionInfoPayload { title: Some(title) }) =
                        serde_json::from_str(&row.payload)
                    {
                        self.title = title;
                    }
                }
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

    /// The registry's poll read who owns the followed session: a follower
    /// names it from then on (`owner_node`), within a poll of a takeover.
    pub(in crate::session) fn owner_now(&mut self, owner: NodeId) {
        if let Some(f) = self.cluster.following.as_mut() {
            if !f.promoting {
                f.owner = Some(owner);
            }
        }
    }

    /// The registry's poll found the owner dead or gone: a follower with
    /// peers claims the session; one without stops (nothing to relay to).
    /// Also the retry of a takeover whose claim succeeded: that one is
    /// finished whether or not anyone follows here, since the session is
    /// this node's now and its dead owner's turns must end.
    pub(in crate::session) fn owner_gone(&mut self, myself: &ActorRef<SessionMsg>) {
        let Some(f) = self.cluster.following.as_mut() else {
            return;
        };
        if self.peers.is_empty() && f.claimed.is_none() {
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
        let claimed = f.claimed.clone();
        let me = myself.clone();
        tokio::spawn(async move {
            let lost_from = match claimed {
                Some(lost_from) => lost_from,
                None => match crate::node::claim(&cluster, &id).await {
                    Ok(Claimed::Owner { lost_from }) => lost_from,
                    Ok(Claimed::Follower { owner }) => {
                        let _ = me.cast(SessionMsg::Cluster(ClusterMsg::Promoted {
                            promoted: Promoted::Follow(owner),
                        }));
                        return;
                    }
                    Err(error) => {
                        let promoted = Promoted::Failed {
                            error,
                            claimed: None,
                        };
                        let _ = me.cast(SessionMsg::Cluster(ClusterMsg::Promoted { promoted }));
                        return;
                    }
                },
            };
            // From here on the session is this node's in the store: a
            // failure must not leave it a follower of itself.
            let claimed = Some(lost_from.clone());
            let promoted = async {
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
            let promoted = promoted.unwrap_or_else(|error| Promoted::Failed { error, claimed });
            let _ = me.cast(SessionMsg::Cluster(ClusterMsg::Promoted { promoted }));
        });
    }

    /// The claim's outcome: owner in place, or still a follower.
    pub(in crate::session) fn promoted(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        promoted: Promoted,
    ) {
        let Some(f) = self.cluster.following.as_mut() else {
            return;
        };
        f.promoting = false;
        let p = match promoted {
            Promoted::Owner(p) => *p,
            Promoted::Follow(owner) => {
                f.owner = Some(owner);
                return;
            }
            Promoted::Failed {
                error,
                claimed: None,
            } => {
                // The next poll tries again.
                warn!(session_id = %self.id, error = %error, "could not take over a followed session");
                return;
            }
            Promoted::Failed {
                error,
                claimed: Some(lost_from),
            } => {
                // Claimed, so the registry's poll sees this node as the
                // owner and will not ask again: left alone, the session
                // would stay a follower of itself, nobody would end the
                // dead owner's turn, and its peers would wait forever.
                warn!(session_id = %self.id, error = %error, "took over a followed session but could not read it; retrying");
                f.claimed = Some(lost_from);
                myself.send_after(PROMOTE_RETRY, || SessionMsg::Cluster(ClusterMsg::OwnerGone));
                return;
            }
        };
        // What the peers have not seen first, then the endings.
        self.relay(&p.missed);
        self.cluster.following = None;
        self.cluster.followed_deltas = Default::default();
        self.release_waiting_resumes(true);
        self.release_caught_up(true);
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
            Some(_) => FailureReason::NodeLost.as_str(),
            None => FailureReason::GatewayRestart.as_str(),
        };
        info!(session_id = %self.id, latest_seq = self.commit.committed_seq(), dead = ?p.lost_from.as_ref().map(|n| n.to_string()), "follower became the owner");
        self.end_orphaned_turns(myself, p.row.turn_marker);
        self.send_unsent(myself);
        self.report_to_reaper(true);
        // Forwards the dead owner never took (this node's own included).
        self.forwards_wake(myself);
    }
}
