//! A session's state as it comes live: from its stored row, the barrier's
//! committed seq, the first events of a new session, and on a cluster
//! whether this node owns it (taken over from a dead node, whose turns then
//! end `node_lost`) or follows it.

use std::collections::HashMap;

use super::history::Transcript;
use super::turns::Turns;
use super::{follow, forwarded, owed, peer_count, row, Commit, SessionArgs, SessionState};
use crate::node::Claimed;
use crate::ring::{Ring, RingEntry};

impl SessionState {
    pub(super) fn new(args: SessionArgs) -> SessionState {
        let SessionArgs {
            row,
            todos,
            barrier,
            initial,
            ctx,
            gauges,
            claimed,
        } = args;
        let (marker_reason, following) = match claimed {
            Some(Claimed::Owner { lost_from: Some(_) }) => (crate::turn::reasons::NODE_LOST, None),
            Some(Claimed::Follower { owner }) => (
                crate::turn::reasons::GATEWAY_RESTART,
                Some(follow::Following::new(Some(owner))),
            ),
            _ => (crate::turn::reasons::GATEWAY_RESTART, None),
        };
        let mut ring = Ring::new(ctx.config.ring_events, ctx.config.ring_bytes);
        for rec in &initial {
            if let Some(seq) = rec.seq {
                ring.push(RingEntry {
                    seq,
                    params: rec.params_of(&row.id),
                });
            }
        }
        let peer_count = peer_count::PeerCount::start(ctx.cluster.as_ref(), &row.id);
        SessionState {
            id: row.id,
            profile: row.profile,
            title: row.title,
            status: row.status,
            parent_session_id: row.parent_session_id,
            history_version: row.history_version,
            close_on_disconnect: row.close_on_disconnect,
            created_at_ms: row.created_at_ms,
            updated_at_ms: row.updated_at_ms,
            retained_from_seq: row.retained_from_seq,
            commit: Commit::new(barrier, row.message_count),
            row_written: row::Written::default(),
            ring,
            peers: HashMap::new(),
            ever_attached: false,
            checking_left: false,
            engine_pin: row.engine_pin,
            follow_profile_config: row.follow_profile_config,
            turns: Turns {
                todos,
                ..Turns::default()
            },
            transcript: Transcript::default(),
            compacting: None,
            pending_compress: None,
            pending_replace: None,
            marker_at_start: row.turn_marker,
            marker_reason,
            following,
            followed_deltas: Default::default(),
            waiting_resumes: Vec::new(),
            forwarded: forwarded::Forwarded::default(),
            peer_count,
            reported: None,
            owed: owed::Owed::default(),
            ctx,
            gauges,
        }
    }
}
