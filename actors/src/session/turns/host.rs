//! The host's frames of the running turn: deltas stream out as transient
//! events (their offsets are the gateway's), todos get the gateway's
//! revision, tool and status events pass through as the host wrote them.

use ractor::ActorRef;
use serde_json::Value;
use tether_protocol::FailureReason;
use tether_protocol::{
    now_ms, CompleteStatus, DeltaPayload, EventType, HostEvent, TodoItem, Todos, TurnEndStatus,
    TurnId,
};
use tracing::{debug, warn};

use super::super::{SessionMsg, SessionState};
use crate::event::EventRecord;
use crate::host_supervisor::ControlError;
use crate::turn::TurnUpdate;

impl SessionState {
    /// A frame of a turn, as the host supervisor reports it.
    pub(in crate::session) fn turn_update(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        turn_id: TurnId,
        update: TurnUpdate,
    ) {
        let current = self
            .turns
            .running
            .as_ref()
            .is_some_and(|t| t.tag.turn_id == turn_id);
        if !current {
            debug!(session_id = %self.id, turn_id = %turn_id, "update for a turn that is no longer running");
            return;
        }
        match update {
            TurnUpdate::Started { host_id } => self.turn_started(host_id),
            TurnUpdate::Events(events) => {
                for event in events {
                    self.turn_event(event);
                }
            }
            TurnUpdate::End {
                status: TurnEndStatus::Interrupted,
                ..
            } => {
                // Every interrupt of the gateway's ends the turn here at
                // once and stops listening to the host for it, so an
                // `interrupted` that finds its turn still running is the
                // host's own: it would tell clients of an interrupt nobody
                // asked for.
                warn!(session_id = %self.id, turn_id = %turn_id,
                      "the host ended a turn as interrupted that nothing interrupted; the turn fails");
                self.finish_turn(
                    myself,
                    &turn_id,
                    CompleteStatus::Error,
                    None,
                    Some((
                        FailureReason::HostProtocolError.as_str(),
                        "the compute host ended the turn as interrupted, but nothing interrupted it",
                    )),
                );
            }
            TurnUpdate::End {
                status: TurnEndStatus::Complete,
                text,
                usage,
            } => {
                if let Some(turn) = self.turns.running.as_mut() {
                    // Only an object is passed on: clients read its fields.
                    turn.usage = usage.filter(Value::is_object);
                }
                self.finish_turn(myself, &turn_id, CompleteStatus::Complete, Some(text), None);
            }
            TurnUpdate::Error { reason, message } => {
                self.finish_turn(
                    myself,
                    &turn_id,
                    CompleteStatus::Error,
                    None,
                    Some((&reason, &message)),
                );
            }
        }
    }

    fn turn_started(&mut self, host_id: u32) {
        let Some(turn) = self.turns.running.as_mut() else {
            return;
        };
        turn.host_id = Some(host_id);
        let tag = turn.tag.clone();
        self.turns.sticky_host = Some(host_id);
        debug!(session_id = %self.id, turn_id = %tag.turn_id, trace_id = %tag.trace_id, host_id, "turn started on host");
        self.emit_durable(EventType::MessageStart, &serde_json::json!({}), Some(tag));
    }

    fn turn_event(&mut self, event: HostEvent) {
        /// What the gateway reads of a delta: the rest of the payload (its
        /// offset among it) is the gateway's to compute.
        #[derive(serde::Deserialize)]
        struct Text {
            text: String,
        }
        #[derive(serde::Deserialize)]
        struct Items {
            items: Vec<TodoItem>,
        }
        let Some(turn) = self.turns.running.as_mut() else {
            return;
        };
        let tag = turn.tag.clone();
        let bad = &self.turns.bad_host_events;
        let dropped = |why: &str| {
            if let Some(n) = bad.hit() {
                warn!(session_id = %self.id, turn_id = %tag.turn_id, trace_id = %tag.trace_id,
                      kind = %event.kind, bad_host_events = n, why, "host event dropped");
            }
        };
        let text_of = |payload: &str| serde_json::from_str::<Text>(payload).ok().map(|t| t.text);
        match EventType::parse(&event.kind) {
            Some(EventType::MessageDelta) => {
                let Some(text) = text_of(event.payload.get()) else {
                    return dropped("a delta without text");
                };
                let offset = turn.text.len() as u64;
                turn.text.push_str(&text);
                self.emit_transient(EventType::MessageDelta, &DeltaPayload { text, offset }, tag);
            }
            Some(EventType::ReasoningDelta) => {
                let Some(text) = text_of(event.payload.get()) else {
                    return dropped("a reasoning delta without text");
                };
                let offset = turn.reasoning_bytes;
                turn.reasoning_bytes += text.len() as u64;
                self.emit_transient(
                    EventType::ReasoningDelta,
                    &DeltaPayload { text, offset },
                    tag,
                );
            }
            Some(EventType::TodoUpdated) => {
                let items = match serde_json::from_str::<Items>(event.payload.get()) {
                    Ok(Items { items }) => items,
                    Err(_) => return dropped("todo.updated without valid items"),
                };
                // The gateway numbers revisions so they increase across hosts,
                // parking and restarts (PROTOCOL 1.10).
                let revision = self.turns.todos.as_ref().map_or(0, |t| t.revision) + 1;
                let todos = Todos { items, revision };
                self.emit_durable(EventType::TodoUpdated, &todos, Some(tag));
                self.turns.todos = Some(todos);
            }
            Some(
                kind @ (EventType::ToolStart | EventType::ToolComplete | EventType::StatusUpdate),
            ) => {
                if !event.payload.is_object() {
                    return dropped("its payload is not an object");
                }
                // Passed on as the host wrote it: stored and sent without
                // being parsed into a tree and encoded again.
                self.emit(EventRecord {
                    seq: None,
                    kind,
                    turn: Some(tag),
                    ts_ms: now_ms(),
                    payload: event.payload.into_raw(),
                });
            }
            // The supervisor lets only Part 2's event types through.
            _ => dropped("an event type a host may not send"),
        }
    }

    /// The supervisor that ran this session's turn is gone (it was
    /// restarted): end the turn as a host crash, and fail a compression
    /// waiting for its answer, exactly as if the host had died.
    pub(in crate::session) fn hosts_lost(&mut self, myself: &ActorRef<SessionMsg>) {
        if let Some(turn_id) = self.turns.running.as_ref().map(|t| t.tag.turn_id.clone()) {
            self.turn_update(
                myself,
                turn_id,
                TurnUpdate::Error {
                    reason: FailureReason::HostCrash.as_str().into(),
                    message: "the host supervisor was restarted".into(),
                },
            );
        }
        if let Some(request_id) = self.compacting.as_ref().map(|c| c.request_id.clone()) {
            let lost = Err(ControlError::Supervisor("was restarted"));
            self.control_late(myself, request_id, lost);
        }
    }
}
