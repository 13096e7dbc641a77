//! The turn marker: which turns were running or queued, persisted with the
//! events that change it, so that a session that starts again (after a
//! gateway crash, or a restart of its actor) ends exactly those turns.

use ractor::ActorRef;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tether_protocol::{CompleteStatus, EventType, MessageCompletePayload, SessionStatus};
use tracing::{info, warn};

use super::turns::Turns;
use super::{SessionMsg, SessionState};
use crate::event::TurnTag;
use crate::host_supervisor::HostSupervisorMsg;

/// What is persisted as the session's turn marker.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct TurnMarker {
    pub running: Option<TurnTag>,
    #[serde(default)]
    pub queued: Vec<TurnTag>,
}

impl Turns {
    pub fn marker(&self) -> Option<Value> {
        if self.running.is_none() && self.queue.is_empty() {
            return None;
        }
        let marker = TurnMarker {
            running: self.running.as_ref().map(|r| r.tag.clone()),
            queued: self.queue.iter().map(|q| q.tag.clone()).collect(),
        };
        serde_json::to_value(marker).ok()
    }
}

impl SessionState {
    /// At start: turns the store says were running or queued when the
    /// session last stopped get their `message.complete` now, with
    /// `gateway_restart`, or `node_lost` on a cluster when the session was
    /// taken over from a dead node (docs/ARCHITECTURE.md "Failover"); queued ones come
    /// out `dequeued` either way.
    ///
    /// A closed session whose marker still names turns was closed by an
    /// older gateway, whose close did not end them (a close now ends its
    /// turns in the same append as `session.closed`, so this cannot
    /// happen again): its turns end now all the same, after its
    /// `session.closed` (the one case of events after it), and it stops
    /// once they are on disk.
    pub(super) fn end_orphaned_turns(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        marker: Option<Value>,
    ) {
        let Some(marker) = marker else {
            return;
        };
        let marker: TurnMarker = match serde_json::from_value(marker) {
            Ok(m) => m,
            Err(e) => {
                return warn!(session_id = %self.id, error = %e, "unreadable turn marker ignored")
            }
        };
        if let Some(tag) = marker.running {
            if let Some(hosts) = self.ctx.hosts() {
                // In case the host still runs it (the session actor restarted).
                let _ = hosts.cast(HostSupervisorMsg::Abandon {
                    turn_id: tag.turn_id.clone(),
                });
            }
            let reason = Some(self.marker_reason);
            info!(session_id = %self.id, turn_id = %tag.turn_id, trace_id = %tag.trace_id, reason = self.marker_reason, "ending a turn interrupted by a restart or a dead node");
            self.ctx
                .metrics
                .turn_ended(CompleteStatus::Error, reason, None);
            self.emit_durable(
                EventType::MessageComplete,
                &MessageCompletePayload {
                    text: String::new(),
                    status: CompleteStatus::Error,
                    failure_reason: Some(self.marker_reason.into()),
                    recoverable: Some(true),
                    usage: None,
                },
                Some(tag),
            );
        }
        for tag in marker.queued {
            self.complete_dequeued(tag);
        }
        self.turns.marker_dirty = true;
        if self.status == SessionStatus::Running {
            self.set_status(SessionStatus::Idle);
        }
        if self.status == SessionStatus::Closed {
            warn!(session_id = %self.id, "a closed session had turns without an ending; ended them");
            self.stop_when_settled(myself);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_protocol::{TraceId, TurnId};

    /// A marker as earlier gateways wrote it (one running turn, one queued).
    const ON_DISK: &str = r#"{"running":{"turn_id":"t_1","trace_id":"tr_1"},"queued":[{"turn_id":"t_2","trace_id":"tr_2"}]}"#;

    fn tag(turn: &str, trace: &str) -> TurnTag {
        TurnTag {
            turn_id: TurnId::from(turn),
            trace_id: TraceId::from(trace),
        }
    }

    #[test]
    fn a_stored_marker_still_loads_and_is_written_the_same_way() {
        let marker: TurnMarker = serde_json::from_str(ON_DISK).expect("loads");
        assert_eq!(
            marker,
            TurnMarker {
                running: Some(tag("t_1", "tr_1")),
                queued: vec![tag("t_2", "tr_2")],
            }
        );
        let written = serde_json::to_value(&marker).expect("encodes");
        let stored: Value = serde_json::from_str(ON_DISK).expect("json");
        assert_eq!(written, stored);
    }

    #[test]
    fn a_marker_without_queued_turns_loads() {
        let marker: TurnMarker = serde_json::from_str(r#"{"running":null}"#).expect("loads");
        assert_eq!(marker, TurnMarker::default());
    }
}
