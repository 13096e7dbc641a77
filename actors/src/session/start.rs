//! A session's state as it comes live: from its stored row, the barrier's
//! committed seq, the first events of a new session, and on a cluster
//! whether this node owns it (taken over from a dead node, whose turns then
//! end `node_lost`) or follows it.

use std::collections::HashMap;
use tether_protocol::FailureReason;

use super::cluster::ClusterState;
use super::history::Transcript;
use super::turns::Turns;
use super::{owed, row, Commit, SessionArgs, SessionState};
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
        let marker_reason = match claimed {
            Some(Claimed::Owner { lost_from: Some(_) }) => FailureReason::NodeLost.as_str(),
            _ => FailureReason::GatewayRestart.as_str(),
        };
        let cluster = ClusterState::new(&ctx, &row.id, claimed.as_ref());
        let mut ring = Ring::new(ctx.config.ring_events, ctx.config.ring_bytes);
        for rec in &initial {
            if let Some(seq) = rec.seq {
                ring.push(RingEntry {
                    seq,
                    params: rec.params_of(&row.id),
                });
            }
        }
        let turn_count = crate::registry::ledger::TurnCount::new(&ctx.profiles, &row.profile);
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
            engine_pin: row.engine_pin,
            follow_profile_config: row.follow_profile_config,
            turns: Turns {
                todos,
                ..Turns::default()
            },
            transcript: Transcript::default(),
            compacting: None,
            pending_compress: None,
            pending_submits: Default::default(),
            marker_at_start: row.turn_marker,
            marker_reason,
            cluster,
            presence: Default::default(),
            reported: None,
            owed: owed::Owed::default(),
            closed_at: None,
            turn_count,
            deleting: None,
            used_at_ms: None,
            ctx,
            gauges,
        }
    }
}
