//! A running turn whose own durable events could not be stored (the
//! database unreachable or failing under a host's `tool.start`, a
//! `todo.updated`…). Completed regardless, it would end `complete` with
//! events missing that no client ever saw and no transcript holds. So it
//! is stopped on its host and ended `error` with `storage_unavailable`
//! (recoverable: the prompt may simply be sent again); that ending is owed
//! like any other until the store takes it (`owed.rs`).

use std::collections::HashSet;

use ractor::ActorRef;
use tether_protocol::{CompleteStatus, FailureReason};
use tracing::warn;

use super::super::{SessionMsg, SessionState};
use crate::host_supervisor::HostSupervisorMsg;

impl SessionState {
    /// After an append failed (not refused by another node's fence): the
    /// running turn, if `unstored` names it, ends with a storage failure.
    pub(in crate::session) fn fail_unstored_turn(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        unstored: &HashSet<String>,
        code: i64,
    ) {
        let Some(turn_id) = self
            .turns
            .running
            .as_ref()
            .map(|t| t.tag.turn_id.clone())
            .filter(|id| unstored.contains(id.as_str()))
        else {
            return;
        };
        warn!(session_id = %self.id, turn_id = %turn_id, code, "events of the running turn could not be stored; failing it");
        if let Some(hosts) = self.ctx.hosts() {
            let _ = hosts.cast(HostSupervisorMsg::Abandon {
                turn_id: turn_id.clone(),
            });
        }
        let message = format!("an event of this turn could not be stored ({code})");
        self.finish_turn(
            myself,
            &turn_id,
            CompleteStatus::Error,
            None,
            Some((FailureReason::StorageUnavailable.as_str(), &message)),
        );
    }
}
