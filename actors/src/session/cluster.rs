//! A session on a cluster (docs/ARCHITECTURE.md, "Cluster"): what a node
//! that only follows the session does, how a follower's writes reach the
//! owner and how the owner runs them, how a node that lost the session or
//! whose followed owner died goes on, and this node's count of the
//! session's peers in the store. On a single gateway none of it runs: the
//! session's state holds an empty [`ClusterState`] and no [`ClusterMsg`]
//! ever arrives.
//!
//! Everything here is reached through two doors: [`SessionMsg::Cluster`]
//! for its messages, and `route.rs`, which decides on a follower where
//! every other message goes.

mod cut_off;
mod erased;
mod follow;
mod follow_deltas;
mod follow_resume;
mod forward;
mod forwarded;
mod left;
mod lost;
mod peer_count;
mod route;

use ractor::{ActorRef, RpcReplyPort};
use tether_protocol::SessionWrite;
use tether_store::cluster::{ClusterError, ForwardId, ForwardRow};
use tether_store::{EventRow, StoreError};

pub use follow::Promoted;

use super::write::WriteReply;
use super::{SessionMsg, SessionState};
use crate::ctx::Ctx;
use crate::node::Claimed;
use crate::reaper::ParkReason;

/// What only a session on a cluster is told.
pub enum ClusterMsg {
    /// On a follower: committed events may be waiting after the watermark
    /// (a notification, or a resync after the listener reconnected).
    FollowWake,
    /// On a follower: transient events the owner sent across nodes.
    FollowDeltas { body: String },
    /// Internal: what a follower's read found.
    FollowRead {
        rows: Result<Vec<EventRow>, StoreError>,
    },
    /// On a follower: answered once it has read up to `upto` (a forwarded
    /// write's answer waits for it, `forward.rs`); at once on an owner.
    CatchUp { upto: u64, reply: RpcReplyPort<()> },
    /// From the registry's poll: the followed owner is dead or gone.
    OwnerGone,
    /// From the registry's poll: a live node owns the followed session
    /// (another one than it knew, after a takeover), for `owner_node`.
    OwnerNow {
        owner: tether_store::cluster::NodeId,
    },
    /// Internal: what a follower's claim came to.
    Promoted { promoted: Promoted },
    /// From the registry's poll: this node no longer holds the session's
    /// fence (another node claimed it).
    Lost,
    /// From the registry's poll: the other nodes' count of this session's
    /// peers changed (already in the gauges).
    OtherPeersChanged,
    /// From the registry: another node wrote who is attached there.
    PresenceWake,
    /// Internal: the other nodes' presence entries, read.
    PresenceRead {
        read: Result<
            std::collections::BTreeMap<
                tether_protocol::PeerId,
                std::sync::Arc<tether_protocol::PresenceEntry>,
            >,
            ClusterError,
        >,
    },
    /// Internal: a fresh read of the other nodes' peers, for a
    /// `close_on_disconnect` session whose last peer here left.
    LeftEverywhere { others: Result<u64, ClusterError> },
    /// Internal: a second after that read failed, it may be tried again.
    RecheckLeft,
    /// On the owner: requests may have been forwarded from another node.
    ForwardsWake,
    /// Internal: the forwards read from the store.
    ForwardsRead {
        rows: Result<Vec<ForwardRow>, ClusterError>,
    },
    /// Internal: a forward accepted before it runs (its first write is
    /// not one of its events), to run now.
    RunAccepted {
        write: SessionWrite,
        reply: WriteReply,
    },
    /// Internal: a forward's answer is written.
    ForwardDone { id: ForwardId },
    /// From the registry: some node erased this session or trimmed its
    /// events (a notification, or a resync on a follower): its row is read.
    ErasedWake,
    /// Internal: the row is gone (that read, or the owner's answer to a
    /// delete this follower forwarded): erased by another node.
    ErasedElsewhere,
    /// Internal: a park's patch was answered (on a cluster the store
    /// refuses it while another node has peers on the session).
    ParkWritten {
        result: Result<(), StoreError>,
        reason: ParkReason,
        reply: RpcReplyPort<bool>,
    },
}

/// Takes out of `held` what waits for nothing more: everything when `read`
/// is `None`, else what waits for a seq (`upto`) at most `read`.
fn take_ready<T>(held: &mut Vec<T>, read: Option<u64>, upto: impl Fn(&T) -> u64) -> Vec<T> {
    let (ready, wait) = std::mem::take(held)
        .into_iter()
        .partition(|t| read.is_none_or(|h| upto(t) <= h));
    *held = wait;
    ready
}

/// What a session keeps on a cluster.
#[derive(Debug, Default)]
pub(crate) struct ClusterState {
    /// While a live other node owns the session: this one only relays its
    /// committed events (`follow.rs`).
    following: Option<follow::Following>,
    /// On a follower: the owner's deltas held for a seq, and the turn they
    /// build (`follow_deltas.rs`).
    followed_deltas: follow_deltas::FollowedDeltas,
    /// On a follower: resumes waiting for it to read up to their watermark
    /// (`follow_resume.rs`).
    waiting_resumes: Vec<follow_resume::WaitingResume>,
    /// On a follower: forwarded answers waiting for it to read up to
    /// their seq (`forward.rs`).
    catching_up: Vec<(u64, RpcReplyPort<()>)>,
    /// Requests forwarded to this owner, while they run (`forwarded.rs`).
    forwarded: forwarded::Forwarded,
    /// This node's peer count in the store (`peer_count.rs`).
    peer_count: Option<peer_count::PeerCount>,
    /// A read of the other nodes' peers is in flight (`left.rs`).
    checking_left: bool,
}

impl ClusterState {
    /// As the session comes live: following `claimed`'s owner, or not.
    pub(super) fn new(
        ctx: &Ctx,
        id: &tether_protocol::SessionId,
        claimed: Option<&Claimed>,
    ) -> Self {
        let following = match claimed {
            Some(Claimed::Follower { owner }) => Some(follow::Following::new(Some(owner.clone()))),
            _ => None,
        };
        ClusterState {
            following,
            peer_count: peer_count::PeerCount::start(ctx.cluster.as_ref(), id),
            ..ClusterState::default()
        }
    }

    /// This node's count of the session's peers changed.
    pub(super) fn set_peers(&self, peers: usize) {
        if let Some(count) = &self.peer_count {
            count.set(peers);
        }
    }

    /// This node's peers on the session changed: their count and presence
    /// entries (a JSON array).
    pub(super) fn set_presence(&self, peers: usize, presence: String) {
        if let Some(count) = &self.peer_count {
            count.set_presence(peers, presence);
        }
    }
}

impl SessionState {
    /// Whether this node only follows the session.
    pub(super) fn following(&self) -> bool {
        self.cluster.following.is_some()
    }

    /// The owner followed, once known.
    pub(super) fn followed_owner(&self) -> Option<&tether_store::cluster::NodeId> {
        self.cluster.following.as_ref().and_then(|f| f.owner())
    }

    /// The turn that runs on the owner, as far as what crossed nodes tells.
    pub(super) fn followed_turn(&self) -> Option<tether_protocol::ActiveTurn> {
        self.cluster.followed_deltas.active_turn()
    }

    /// How far this follower has read, for what waits for it: everything
    /// (`None`) when `caught_up` (a read found the store had nothing more)
    /// or when this node owns the session now.
    fn read_so_far(&self, caught_up: bool) -> Option<u64> {
        (!caught_up && self.following()).then(|| self.commit.committed_seq())
    }

    pub(super) fn cluster_msg(&mut self, myself: &ActorRef<SessionMsg>, msg: ClusterMsg) {
        match msg {
            ClusterMsg::FollowWake => self.follow_wake(myself),
            ClusterMsg::FollowDeltas { body } => self.follow_deltas(&body),
            ClusterMsg::FollowRead { rows } => self.follow_read(myself, rows),
            ClusterMsg::CatchUp { upto, reply } => self.catch_up(myself, upto, reply),
            ClusterMsg::OwnerGone => self.owner_gone(myself),
            ClusterMsg::OwnerNow { owner } => self.owner_now(owner),
            ClusterMsg::Promoted { promoted } => self.promoted(myself, promoted),
            ClusterMsg::Lost => self.lost(myself),
            // `close_if_left`, after every message, looks at the new count;
            // who those peers are is read again.
            ClusterMsg::OtherPeersChanged => self.presence_wake(myself),
            ClusterMsg::PresenceWake => self.presence_wake(myself),
            ClusterMsg::PresenceRead { read } => self.presence_read(myself, read),
            ClusterMsg::LeftEverywhere { others } => self.left_everywhere(myself, others),
            ClusterMsg::RecheckLeft => self.recheck_left(),
            ClusterMsg::ForwardsWake => self.forwards_wake(myself),
            ClusterMsg::ForwardsRead { rows } => self.forwards_read(myself, rows),
            ClusterMsg::RunAccepted { write, reply } => self.run_accepted(myself, write, reply),
            ClusterMsg::ForwardDone { id } => self.forward_done(&id),
            ClusterMsg::ErasedWake => self.erased_wake(myself),
            ClusterMsg::ErasedElsewhere => self.erased_elsewhere(myself),
            ClusterMsg::ParkWritten {
                result,
                reason,
                reply,
            } => self.park_written(myself, result, reason, reply),
        }
    }
}
