//! The turn marker: which turns were running or queued, persisted with the
//! events that change it, so that a session that starts again (after a
//! gateway crash, or a restart of its actor) ends exactly those turns.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tether_protocol::{
    CompleteStatus, EventType, MessageCompletePayload, SessionStatus, TraceId, TurnId,
};
use tracing::{info, warn};

use super::turns::Turns;
use super::SessionState;
use crate::event::TurnTag;
use crate::host_supervisor::HostSupervisorMsg;
use crate::turn::reasons;

/// What is persisted as the session's turn marker.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct TurnMarker {
    pub running: Option<MarkedTurn>,
    #[serde(default)]
    pub queued: Vec<MarkedTurn>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct MarkedTurn {
    pub turn_id: TurnId,
    pub trace_id: TraceId,
}

impl MarkedTurn {
    fn of(tag: &TurnTag) -> Self {
        Self {
            turn_id: tag.turn_id.clone(),
            trace_id: tag.trace_id.clone(),
        }
    }

    fn tag(&self) -> TurnTag {
        TurnTag {
            turn_id: self.turn_id.clone(),
            trace_id: self.trace_id.clone(),
        }
    }
}

impl Turns {
    pub fn marker(&self) -> Option<Value> {
        if self.running.is_none() && self.queue.is_empty() {
            return None;
        }
        let marker = TurnMarker {
            running: self.running.as_ref().map(|r| MarkedTurn::of(&r.tag)),
            queued: self.queue.iter().map(|q| MarkedTurn::of(&q.tag)).collect(),
        };
        serde_json::to_value(marker).ok()
    }
}

impl SessionState {
    /// At start: turns the store says were running or queued when the
    /// session last stopped get their `message.complete` now.
    pub(super) fn end_orphaned_turns(&mut self, marker: Option<Value>) {
        let Some(marker) = marker else {
            return;
        };
        let marker: TurnMarker = match serde_json::from_value(marker) {
            Ok(m) => m,
            Err(e) => {
                return warn!(session_id = %self.id, error = %e, "unreadable turn marker ignored")
            }
        };
        if let Some(running) = marker.running {
            let tag = running.tag();
            if let Some(hosts) = self.ctx.hosts() {
                // In case the host still runs it (the session actor restarted).
                let _ = hosts.cast(HostSupervisorMsg::Abandon {
                    turn_id: tag.turn_id.clone(),
                });
            }
            info!(session_id = %self.id, turn_id = %tag.turn_id, trace_id = %tag.trace_id, "ending a turn interrupted by a restart");
            let reason = Some(reasons::GATEWAY_RESTART);
            self.ctx
                .metrics
                .turn_ended(CompleteStatus::Error, reason, None);
            self.emit_durable(
                EventType::MessageComplete,
                &MessageCompletePayload {
                    text: String::new(),
                    status: CompleteStatus::Error,
                    failure_reason: Some(reasons::GATEWAY_RESTART.into()),
                    recoverable: Some(true),
                    usage: None,
                },
                Some(tag),
            );
        }
        for q in marker.queued {
            let dequeued = Some(reasons::DEQUEUED);
            self.ctx
                .metrics
                .turn_ended(CompleteStatus::Interrupted, dequeued, None);
            self.emit_durable(
                EventType::MessageComplete,
                &MessageCompletePayload {
                    text: String::new(),
                    status: CompleteStatus::Interrupted,
                    failure_reason: Some(reasons::DEQUEUED.into()),
                    recoverable: None,
                    usage: None,
                },
                Some(q.tag()),
            );
        }
        self.turns.marker_dirty = true;
        if self.status == SessionStatus::Running {
            self.set_status(SessionStatus::Idle);
        }
    }
}
