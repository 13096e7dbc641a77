//! Turns: choosing a slot, writing `turn.start`, and routing every host
//! frame to whoever waits for it.

use std::collections::HashMap;
use tether_protocol::FailureReason;

use serde_json::Value;
use tether_protocol::{FromHost, HostEvent, ToHost, TurnEndStatus, TurnId};
use tracing::{debug, info, trace, warn};

use super::held::HeldTurn;
use super::{send_update, HostSupervisorState, Route, Slot};
use crate::host::{HostMsg, Incoming};
use crate::turn::TurnUpdate;

impl HostSupervisorState {
    /// `preferred` if it can take a turn now, else the least loaded slot
    /// that can.
    pub(super) fn choose(&self, preferred: Option<u32>) -> Option<u32> {
        if self.stopping {
            return None;
        }
        let max = self.config.max_turns_per_host;
        if let Some(p) = preferred {
            if self.slots.get(p as usize).is_some_and(|s| s.has_room(max)) {
                return Some(p);
            }
        }
        self.slots
            .iter()
            .filter(|s| s.has_room(max))
            .min_by_key(|s| (s.active_turns, s.id))
            .map(|s| s.id)
    }

    pub(super) fn send_to(&self, slot: u32, frame: ToHost) {
        let host = self.slots.get(slot as usize).and_then(|s| s.host.as_ref());
        match host {
            // A host that stopped meanwhile fails what was routed to it when
            // its stop is handled.
            Some(host) => {
                let _ = host.cast(HostMsg::Send(frame));
            }
            None => debug!(host_id = slot, "no host to write to"),
        }
    }

    /// A turn to run: on a slot with room, else it waits for one (all
    /// slots up but full), is held for a slot that is starting, or fails.
    pub(super) fn start_turn(&mut self, turn: HeldTurn) {
        match self.choose(turn.preferred) {
            // Turns that wait go first, by their share (`fair.rs`).
            Some(slot) if self.fair.waiting() == 0 => self.route(slot, turn),
            Some(_) => self.fair.push(turn.profile.clone(), turn),
            None if !self.stopping && self.slots.iter().any(Slot::usable) => {
                debug!(turn_id = %turn.start.turn_id, session_id = %turn.start.session_id,
                       trace_id = %turn.start.trace_id, waiting = self.fair.waiting() + 1,
                       "every compute host is full; the turn waits for room");
                self.fair.push(turn.profile.clone(), turn);
            }
            None => self.hold_or_fail(turn),
        }
    }

    /// Starts waiting turns while slots have room, each going to the
    /// profile whose share it is.
    pub(super) fn grant_waiting(&mut self) {
        while self.fair.waiting() > 0 {
            let Some(any) = self.choose(None) else {
                return;
            };
            let Some((_, turn)) = self.fair.next() else {
                return;
            };
            // Its own slot if that one has room, else the one found.
            let slot = self.choose(turn.preferred).unwrap_or(any);
            self.route(slot, turn);
        }
    }

    /// No slot is up: the turn waits for one that is starting, or fails.
    fn hold_or_fail(&mut self, turn: HeldTurn) {
        let turn_id = turn.start.turn_id.clone();
        let Some(HeldTurn { start, session, .. }) = self.hold_turn(turn) else {
            return;
        };
        info!(turn_id = %turn_id, session_id = %start.session_id, trace_id = %start.trace_id,
              "no compute host is up for the turn");
        send_update(
            &session,
            turn_id,
            TurnUpdate::Error {
                reason: FailureReason::HostUnavailable.as_str().into(),
                message: "no compute host is up".into(),
            },
        );
    }

    /// Writes `turn.start` to `slot` and routes the turn's frames back.
    fn route(&mut self, slot: u32, turn: HeldTurn) {
        let HeldTurn {
            start,
            session,
            profile,
            ..
        } = turn;
        let turn_id = start.turn_id.clone();
        if self.remove_route(&turn_id).is_some() {
            warn!(turn_id = %turn_id, "turn started twice; the first routing is dropped");
        }
        info!(host_id = slot, turn_id = %turn_id, session_id = %start.session_id,
              trace_id = %start.trace_id, "turn started on host");
        self.fair.started(&profile);
        self.turns.insert(
            turn_id.clone(),
            Route {
                slot,
                session: session.clone(),
                profile,
                session_id: start.session_id.clone(),
                trace_id: start.trace_id.clone(),
            },
        );
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.active_turns += 1;
        }
        self.send_to(slot, ToHost::TurnStart(start));
        // Sent from this handler, so it reaches the session before any of
        // the turn's frames (they are handled after it, in this mailbox).
        if !send_update(
            &session,
            turn_id.clone(),
            TurnUpdate::Started { host_id: slot },
        ) {
            self.abandon(&turn_id);
        }
    }

    pub(super) fn remove_route(&mut self, turn_id: &TurnId) -> Option<Route> {
        let route = self.turns.remove(turn_id)?;
        if let Some(s) = self.slots.get_mut(route.slot as usize) {
            s.active_turns = s.active_turns.saturating_sub(1);
        }
        self.fair.ended(&route.profile);
        Some(route)
    }

    pub(super) fn abandon(&mut self, turn_id: &TurnId) {
        self.drop_held_turn(turn_id);
        if let Some(route) = self.remove_route(turn_id) {
            info!(host_id = route.slot, turn_id = %turn_id, session_id = %route.session_id,
                  trace_id = %route.trace_id, "turn abandoned by its session");
            self.send_to(
                route.slot,
                ToHost::Interrupt {
                    turn_id: turn_id.clone(),
                },
            );
        }
    }

    /// The frames of one read of a host's stdout, in order. Event frames
    /// are gathered per turn and handed to each session as one message; any
    /// other frame first hands over the events before it, so a turn's events
    /// always reach its session before its end.
    pub(super) fn on_frames(
        &mut self,
        slot: u32,
        incarnation: u64,
        pid: u32,
        frames: Vec<Incoming>,
    ) {
        let current = self
            .slots
            .get(slot as usize)
            .is_some_and(|s| s.incarnation == incarnation && s.host.is_some() && !s.refused);
        if !current {
            debug!(
                host_id = slot,
                pid,
                frames = frames.len(),
                "frames from a host that is gone; dropped"
            );
            return;
        }
        let mut events = TurnEvents::default();
        for incoming in frames {
            match incoming {
                Incoming::Frame(FromHost::Event { turn_id, event }) => {
                    if self.allowed_event(slot, &turn_id, &event) {
                        events.push(turn_id, event);
                    }
                }
                Incoming::Frame(other) => {
                    self.hand_over(slot, &mut events);
                    self.on_frame(slot, pid, other);
                }
                Incoming::Refused {
                    turn_id,
                    request_id,
                    why,
                } => {
                    self.hand_over(slot, &mut events);
                    self.refused(slot, pid, turn_id, request_id, why);
                }
            }
            // A refused hello stops the host: what follows it counts for
            // nothing.
            if self.slots.get(slot as usize).is_some_and(|s| s.refused) {
                return;
            }
        }
        self.hand_over(slot, &mut events);
    }

    /// Sends every turn's gathered events to its session.
    fn hand_over(&mut self, slot: u32, events: &mut TurnEvents) {
        for (turn_id, list) in events.drain() {
            if let Some(route) = self.route_of(slot, &turn_id) {
                if !send_update(&route.session, turn_id.clone(), TurnUpdate::Events(list)) {
                    self.abandon(&turn_id);
                }
            }
        }
    }

    fn on_frame(&mut self, slot: u32, pid: u32, frame: FromHost) {
        match frame {
            FromHost::Hello {
                protocol,
                pid: said_pid,
                engine,
                version,
                ..
            } => self.hello(slot, pid, said_pid, protocol, &engine, &version),
            FromHost::Hb {
                active_turns,
                rss_kb,
            } => trace!(host_id = slot, pid, active_turns, rss_kb, "host heartbeat"),
            FromHost::Event { turn_id, event } => {
                if self.allowed_event(slot, &turn_id, &event) {
                    let mut events = TurnEvents::default();
                    events.push(turn_id, event);
                    self.hand_over(slot, &mut events);
                }
            }
            FromHost::TurnEnd {
                turn_id,
                status,
                text,
                usage,
            } => self.turn_ended(slot, turn_id, status, text, usage),
            FromHost::TurnError {
                turn_id,
                reason,
                message,
            } => self.turn_failed(slot, turn_id, reason, message),
            FromHost::ControlAck { request_id, result } => {
                self.answer(slot, request_id, Ok(result))
            }
            FromHost::ControlError {
                request_id,
                message,
            } => self.answer(slot, request_id, Err(message)),
            FromHost::Pong { .. } => {}
            FromHost::ShutdownAck => self.shutdown_acked(slot, pid),
            FromHost::Error { message } => {
                if let Some(n) = self.forbidden_frame(slot) {
                    warn!(host_id = slot, pid, error = %message, host_errors = n,
                          "the host could not understand a frame of ours");
                }
            }
        }
    }

    /// The route of a turn `slot` ended, taken out of the table; `None`
    /// for a turn of another slot (or none).
    fn take_route(&mut self, slot: u32, turn_id: &TurnId) -> Option<Route> {
        self.route_of(slot, turn_id)?;
        self.remove_route(turn_id)
    }

    fn turn_ended(
        &mut self,
        slot: u32,
        turn_id: TurnId,
        status: TurnEndStatus,
        text: String,
        usage: Option<Value>,
    ) {
        let Some(route) = self.take_route(slot, &turn_id) else {
            return;
        };
        debug!(host_id = slot, turn_id = %turn_id, session_id = %route.session_id,
               trace_id = %route.trace_id, status = %status.as_str(), "turn ended");
        let end = TurnUpdate::End {
            status,
            text,
            usage,
        };
        send_update(&route.session, turn_id, end);
    }

    fn turn_failed(&mut self, slot: u32, turn_id: TurnId, reason: String, message: String) {
        let Some(route) = self.take_route(slot, &turn_id) else {
            return;
        };
        info!(host_id = slot, turn_id = %turn_id, session_id = %route.session_id,
              trace_id = %route.trace_id, reason = %reason, "turn failed on host");
        send_update(
            &route.session,
            turn_id,
            TurnUpdate::Error { reason, message },
        );
    }

    fn shutdown_acked(&mut self, slot: u32, pid: u32) {
        if !self.stopping {
            // Only an answer to our `shutdown` may take a slot out of
            // service; a host that says it unprompted keeps serving.
            if let Some(n) = self.forbidden_frame(slot) {
                warn!(
                    host_id = slot,
                    pid,
                    forbidden_frames = n,
                    "shutdown.ack without a shutdown; ignored"
                );
            }
            return;
        }
        info!(host_id = slot, pid, "compute host is finishing");
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.finishing = true;
        }
        self.publish_up();
    }

    /// The route of a turn run by `slot`; frames for other turns are dropped.
    pub(super) fn route_of(&self, slot: u32, turn_id: &TurnId) -> Option<&Route> {
        match self.turns.get(turn_id) {
            Some(route) if route.slot == slot => Some(route),
            Some(route) => {
                if let Some(n) = self.forbidden_frame(slot) {
                    warn!(host_id = slot, turn_id = %turn_id, routed_to = route.slot, forbidden_frames = n,
                          "frame for a turn of another host; dropped");
                }
                None
            }
            None => {
                debug!(host_id = slot, turn_id = %turn_id, "frame for no routed turn; dropped");
                None
            }
        }
    }
}

/// Event frames gathered per turn, turns in the order they first appeared.
#[derive(Default)]
struct TurnEvents {
    turns: Vec<(TurnId, Vec<HostEvent>)>,
    index: HashMap<TurnId, usize>,
}

impl TurnEvents {
    fn push(&mut self, turn_id: TurnId, event: HostEvent) {
        match self.index.get(&turn_id) {
            Some(&i) => self.turns[i].1.push(event),
            None => {
                self.index.insert(turn_id.clone(), self.turns.len());
                self.turns.push((turn_id, vec![event]));
            }
        }
    }

    fn drain(&mut self) -> std::vec::Drain<'_, (TurnId, Vec<HostEvent>)> {
        self.index.clear();
        self.turns.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: &str) -> HostEvent {
        HostEvent {
            kind: kind.into(),
            payload: Default::default(),
        }
    }

    #[test]
    fn events_are_gathered_per_turn_in_order() {
        let mut events = TurnEvents::default();
        for (turn, kind) in [
            ("t_a", "1"),
            ("t_b", "2"),
            ("t_a", "3"),
            ("t_c", "4"),
            ("t_b", "5"),
        ] {
            events.push(TurnId::from(turn), ev(kind));
        }
        let kinds = |list: &[HostEvent]| list.iter().map(|e| e.kind.clone()).collect::<Vec<_>>();
        let drained: Vec<_> = events
            .drain()
            .map(|(t, list)| (t.as_str().to_owned(), kinds(&list)))
            .collect();
        assert_eq!(
            drained,
            [
                ("t_a".to_owned(), vec!["1".to_owned(), "3".to_owned()]),
                ("t_b".to_owned(), vec!["2".to_owned(), "5".to_owned()]),
                ("t_c".to_owned(), vec!["4".to_owned()]),
            ]
        );
        // Drained means empty: the next batch starts afresh.
        events.push(TurnId::from("t_a"), ev("6"));
        assert_eq!(events.drain().count(), 1);
    }
}
