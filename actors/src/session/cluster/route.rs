//! On a follower, where each message goes: what changes the session is
//! forwarded to its owner (`forward.rs`), what only an owner gets is
//! dropped (it came late, after this node lost the session: `lost.rs`),
//! and the rest is handled as on an owner. The match names every message,
//! so a new one is routed on purpose, not by default; a new method needs
//! nothing here (it is a `SessionMsg::Write`).

use ractor::ActorRef;

use super::ClusterMsg;
use crate::session::{SessionMsg, SessionState};

impl SessionState {
    /// `msg` to handle as on an owner, or `None` when a follower has done
    /// with it here.
    pub(in crate::session) fn unless_following(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        msg: SessionMsg,
    ) -> Option<SessionMsg> {
        if !self.following() {
            return Some(msg);
        }
        match msg {
            SessionMsg::Write { write, reply } => self.forward_write(myself, write, reply),
            SessionMsg::EmitIfOpen { events, reply } => self.forward_emit(myself, events, reply),
            // What only an owner gets or does; its work is the new owner's.
            SessionMsg::Turn { .. }
            | SessionMsg::TurnDeadline { .. }
            | SessionMsg::ControlLate { .. }
            | SessionMsg::ControlDone { .. }
            | SessionMsg::TranscriptLoaded { .. }
            | SessionMsg::RepayCompletions
            | SessionMsg::HostsLost
            | SessionMsg::Cluster(ClusterMsg::ForwardsWake | ClusterMsg::ForwardsRead { .. }) => {}
            // Live on another node: in use, so not retention's to close.
            SessionMsg::CloseIfIdle { reply, .. } => {
                let _ = reply.send(false);
            }
            SessionMsg::Park { reply, .. } => {
                // Nothing to write: a follower nobody here follows just stops.
                let idle = self.peers.is_empty();
                let _ = reply.send(idle);
                if idle {
                    myself.stop(Some("parked (follower)".into()));
                }
            }
            // Reads, peers, the commit pipeline.
            msg @ (SessionMsg::Resume { .. }
            | SessionMsg::AttachFromStart { .. }
            | SessionMsg::Joined { .. }
            | SessionMsg::Backfill { .. }
            | SessionMsg::Detach { .. }
            | SessionMsg::Since { .. }
            | SessionMsg::Info { .. }
            | SessionMsg::ActiveTurn { .. }
            | SessionMsg::Flush { .. }
            | SessionMsg::Drain { .. }
            | SessionMsg::Committed { .. }
            | SessionMsg::AppendFailed { .. }
            | SessionMsg::WriterRestarted
            | SessionMsg::Rebased { .. }
            | SessionMsg::ReportToReaper
            | SessionMsg::Erased { .. }
            | SessionMsg::Trimmed { .. }
            | SessionMsg::Unlinked
            | SessionMsg::Presence { .. }
            | SessionMsg::PresenceFlush
            // The follower's own work, and what an owner that just lost
            // the session still has to finish.
            | SessionMsg::Cluster(
                ClusterMsg::FollowWake
                | ClusterMsg::FollowDeltas { .. }
                | ClusterMsg::FollowRead { .. }
                | ClusterMsg::CatchUp { .. }
                | ClusterMsg::OwnerGone
                | ClusterMsg::OwnerNow { .. }
                | ClusterMsg::Promoted { .. }
                | ClusterMsg::Lost
                | ClusterMsg::OtherPeersChanged
                | ClusterMsg::PresenceWake
                | ClusterMsg::PresenceRead { .. }
                | ClusterMsg::LeftEverywhere { .. }
                | ClusterMsg::RecheckLeft
                | ClusterMsg::RunAccepted { .. }
                | ClusterMsg::ForwardDone { .. }
                | ClusterMsg::ParkWritten { .. }
                | ClusterMsg::ErasedWake
                | ClusterMsg::ErasedElsewhere,
            )) => return Some(msg),
        }
        None
    }
}
