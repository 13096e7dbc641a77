//! Turns: accept a prompt, run it on a compute host, end it exactly once.
//!
//! A prompt becomes a durable `message.user` (tagged with its new turn id
//! and trace id) and then either starts or waits in the queue. Whatever
//! happens next (the host's `turn.end` or `turn.error`, a crash the
//! supervisor reports, the deadline, an interrupt) goes through
//! [`SessionState::finish_turn`], the one place that writes the turn's
//! `message.complete`, so every accepted turn gets exactly one.
//!
//! The turn marker (running and queued turn ids) is persisted with the
//! events that change it, so a gateway that dies mid-turn finds the turns
//! to end at its next start.

use std::collections::VecDeque;
use std::time::Duration;

use ractor::{ActorRef, RpcReplyPort};
use serde_json::{Map, Value};
use tether_protocol::{
    now_ms, ActiveTurn, CompleteStatus, DeltaPayload, ErrorPayload, EventType, HostEvent,
    InterruptResult, InterruptStatus, MessageCompletePayload, RpcError, SessionStatus,
    StatusUpdatePayload, SubmitResult, SubmitStatus, TextPayload, TodoItem, Todos, TraceId,
    TurnEndStatus, TurnId,
};
use tracing::{debug, info, warn};

use super::{SessionMsg, SessionState, Waiter};
use crate::event::{EventRecord, TurnTag};
use crate::host_supervisor::HostSupervisorMsg;
use crate::turn::{reasons, TurnStart, TurnUpdate};

/// The turn being run.
#[derive(Debug)]
pub(crate) struct RunningTurn {
    pub tag: TurnTag,
    pub prompt: String,
    /// Seq of its `message.user`: the history it sees is everything before.
    pub user_seq: u64,
    pub started_at_ms: i64,
    pub host_id: Option<u32>,
    /// Whether `turn.start` was sent (it waits for the transcript to load).
    pub dispatched: bool,
    /// Assistant text streamed so far (`offset` of the next delta = its length).
    pub text: String,
    pub reasoning_bytes: u64,
    /// The deadline timer, cancelled when the turn ends.
    pub deadline: Option<tokio::task::AbortHandle>,
    /// The `usage` of the host's `turn.end`, for `message.complete`.
    pub usage: Option<Value>,
}

/// A prompt waiting behind the running turn.
#[derive(Debug)]
pub(crate) struct QueuedTurn {
    pub tag: TurnTag,
    pub prompt: String,
    pub user_seq: u64,
}

/// Turn-related state of a session.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    pub running: Option<RunningTurn>,
    pub queue: VecDeque<QueuedTurn>,
    /// The host slot this session sticks to while it is up.
    pub sticky_host: Option<u32>,
    /// Latest todo snapshot; its revision is the gateway's (PROTOCOL 1.10).
    pub todos: Option<Todos>,
    /// The marker changed and must go out with the next append.
    pub marker_dirty: bool,
    /// Host events dropped for a bad payload: logged sparingly, since a
    /// host can send them faster than a log takes them.
    pub bad_host_events: crate::sparse_log::SparseLog,
}

impl SessionState {
    /// `prompt.submit`.
    pub(super) fn submit(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        text: String,
        reply: RpcReplyPort<Result<SubmitResult, RpcError>>,
    ) {
        if let Err(e) = self.check_submit() {
            let _ = reply.send(Err(e));
            return;
        }
        let tag = TurnTag {
            turn_id: TurnId::new(),
            trace_id: TraceId::new(),
        };
        let user_seq = self.emit_durable(
            EventType::MessageUser,
            &TextPayload { text: text.clone() },
            Some(tag.clone()),
        );
        let status = if self.turns.running.is_none() {
            self.turns.running = Some(RunningTurn {
                tag: tag.clone(),
                prompt: text,
                user_seq,
                started_at_ms: now_ms(),
                host_id: None,
                dispatched: false,
                text: String::new(),
                reasoning_bytes: 0,
                deadline: None,
                usage: None,
            });
            self.set_status(SessionStatus::Running);
            self.dispatch_turn(myself);
            SubmitStatus::Started
        } else {
            self.turns.queue.push_back(QueuedTurn {
                tag: tag.clone(),
                prompt: text,
                user_seq,
            });
            self.emit_durable(
                EventType::StatusUpdate,
                &StatusUpdatePayload {
                    kind: "queued".into(),
                    text: None,
                },
                Some(tag.clone()),
            );
            SubmitStatus::Queued
        };
        self.turns.marker_dirty = true;
        info!(session_id = %self.id, turn_id = %tag.turn_id, trace_id = %tag.trace_id, status = status.as_str(), "turn accepted");
        // Answered once `message.user` is on disk (or with 5070/5071 if not).
        self.waiters.push((
            user_seq,
            Waiter::Submit {
                reply,
                result: SubmitResult {
                    status,
                    turn_id: tag.turn_id,
                    trace_id: tag.trace_id,
                },
            },
        ));
    }

    fn check_submit(&self) -> Result<(), RpcError> {
        if self.status == SessionStatus::Closed {
            return Err(RpcError::session_closed());
        }
        if self.compacting.is_some() {
            return Err(RpcError::session_busy("the session is being compacted"));
        }
        if self.turns.running.is_some() && self.turns.queue.len() >= self.ctx.config.max_queued {
            return Err(RpcError::session_busy(format!(
                "{} prompts are already queued",
                self.turns.queue.len()
            )));
        }
        if self.ctx.lifecycle.draining() {
            return Err(RpcError::new(
                tether_protocol::codes::HOST_UNAVAILABLE,
                "the gateway is shutting down",
            ));
        }
        if self.ctx.hosts_up() == 0 {
            return Err(RpcError::host_unavailable());
        }
        Ok(())
    }

    /// Sends `turn.start` for the running turn once the transcript is in memory.
    pub(super) fn dispatch_turn(&mut self, myself: &ActorRef<SessionMsg>) {
        let Some(turn) = self.turns.running.as_ref() else {
            return;
        };
        if turn.dispatched {
            return;
        }
        let Some(history) = self.history_before(turn.user_seq) else {
            self.load_transcript(myself);
            return;
        };
        let start = TurnStart {
            turn_id: turn.tag.turn_id.clone(),
            session_id: self.id.clone(),
            trace_id: turn.tag.trace_id.clone(),
            history,
            prompt: turn.prompt.clone(),
            config: self.engine_config(),
        };
        let turn_id = turn.tag.turn_id.clone();
        let preferred = self.turns.sticky_host;
        let sent = self
            .ctx
            .hosts()
            .map(|hosts| {
                hosts
                    .cast(HostSupervisorMsg::StartTurn {
                        start,
                        preferred,
                        session: myself.clone(),
                    })
                    .is_ok()
            })
            .unwrap_or(false);
        if let Some(turn) = self.turns.running.as_mut() {
            turn.dispatched = true;
        }
        if !sent {
            self.finish_turn(
                myself,
                &turn_id,
                CompleteStatus::Error,
                None,
                Some((reasons::HOST_UNAVAILABLE, "no compute host is running")),
            );
            return;
        }
        let deadline = self.ctx.config.turn_deadline;
        let me = myself.clone();
        let timer = tokio::spawn(async move {
            tokio::time::sleep(deadline).await;
            let _ = me.cast(SessionMsg::TurnDeadline { turn_id });
        });
        // Cancelled when the turn ends: an hour-long timer per finished turn
        // would otherwise pile up under load.
        if let Some(turn) = self.turns.running.as_mut() {
            turn.deadline = Some(timer.abort_handle());
        }
    }

    /// What `turn.start` carries as `config`: the profile's current engine
    /// config for a session that follows it (read now, so a reloaded file
    /// applies from the next turn), else the session's own pin.
    fn engine_config(&self) -> Map<String, Value> {
        if self.follow_profile_config {
            return self
                .ctx
                .config
                .profile_engines
                .get(&self.profile)
                .unwrap_or_default();
        }
        match &self.engine_pin {
            Some(Value::Object(map)) => map.clone(),
            _ => Map::new(),
        }
    }

    /// A frame of a turn, as the host supervisor reports it.
    pub(super) fn turn_update(
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
                status,
                text,
                usage,
            } => {
                if let Some(turn) = self.turns.running.as_mut() {
                    // Only an object is passed on: clients read its fields.
                    turn.usage = usage.filter(Value::is_object);
                }
                let status = match status {
                    TurnEndStatus::Complete => CompleteStatus::Complete,
                    TurnEndStatus::Interrupted => CompleteStatus::Interrupted,
                };
                self.finish_turn(myself, &turn_id, status, Some(text), None);
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
        match event.kind.as_str() {
            "message.delta" => {
                let Some(text) = text_of(event.payload.get()) else {
                    return dropped("a delta without text");
                };
                let offset = turn.text.len() as u64;
                turn.text.push_str(&text);
                self.emit_transient(EventType::MessageDelta, &DeltaPayload { text, offset }, tag);
            }
            "reasoning.delta" => {
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
            "todo.updated" => {
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
            "tool.start" | "tool.complete" | "status.update" => {
                if !event.payload.is_object() {
                    return dropped("its payload is not an object");
                }
                if let Some(kind) = EventType::parse(&event.kind) {
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
            }
            // The supervisor lets only Part 2's event types through.
            _ => dropped("an event type a host may not send"),
        }
    }

    /// Ends the running turn with its one `message.complete`, then starts
    /// the next queued prompt.
    pub(super) fn finish_turn(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        turn_id: &TurnId,
        status: CompleteStatus,
        text: Option<String>,
        failure: Option<(&str, &str)>,
    ) {
        let reason = failure.map(|(reason, _)| reason);
        let error = failure.map(|(_, message)| message);
        self.end_turn(myself, turn_id, status, text, reason, error);
    }

    /// Ends the running turn with `reason` as its `failure_reason`, after an
    /// `error` event when there is an `error` message to tell.
    fn end_turn(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        turn_id: &TurnId,
        status: CompleteStatus,
        text: Option<String>,
        reason: Option<&str>,
        error: Option<&str>,
    ) {
        let Some(turn) = self.turns.running.take_if(|t| &t.tag.turn_id == turn_id) else {
            return;
        };
        if let Some(timer) = &turn.deadline {
            timer.abort();
        }
        let tag = turn.tag.clone();
        if let Some(message) = error {
            self.emit_durable(
                EventType::Error,
                &ErrorPayload {
                    message: message.to_string(),
                    code: None,
                },
                Some(tag.clone()),
            );
        }
        let failure_reason = reason.map(str::to_string);
        let recoverable = reason.map(is_recoverable);
        let payload = MessageCompletePayload {
            text: text.unwrap_or(turn.text),
            status,
            failure_reason,
            recoverable,
            usage: turn.usage,
        };
        let elapsed_ms = now_ms() - turn.started_at_ms;
        info!(session_id = %self.id, turn_id = %tag.turn_id, trace_id = %tag.trace_id, status = status.as_str(), elapsed_ms, "turn ended");
        let took = Duration::from_millis(elapsed_ms.max(0) as u64);
        let reason = payload.failure_reason.as_deref();
        self.ctx.metrics.turn_ended(status, reason, Some(took));
        self.emit_durable(EventType::MessageComplete, &payload, Some(tag));
        self.turns.marker_dirty = true;
        self.start_next(myself);
    }

    fn start_next(&mut self, myself: &ActorRef<SessionMsg>) {
        if self.ctx.lifecycle.draining() {
            // The hosts are about to stop: a turn started now would only
            // fail. Queued prompts come out `dequeued`, as on an interrupt.
            self.dequeue_all();
        }
        match self.turns.queue.pop_front() {
            Some(next) => {
                self.turns.running = Some(RunningTurn {
                    tag: next.tag,
                    prompt: next.prompt,
                    user_seq: next.user_seq,
                    started_at_ms: now_ms(),
                    host_id: None,
                    dispatched: false,
                    text: String::new(),
                    reasoning_bytes: 0,
                    deadline: None,
                    usage: None,
                });
                self.dispatch_turn(myself);
            }
            None => {
                if self.status == SessionStatus::Running {
                    self.set_status(SessionStatus::Idle);
                }
            }
        }
    }

    /// `session.interrupt`: stop the running turn now and drop the queue.
    /// The turn ends here, without waiting for the host, so a hung host
    /// cannot keep it spinning, and it is never continued.
    pub(super) fn interrupt(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        reply: RpcReplyPort<Result<InterruptResult, RpcError>>,
    ) {
        let status = if self.stop_turns(myself, None) {
            InterruptStatus::Interrupted
        } else {
            InterruptStatus::Idle
        };
        let _ = reply.send(Ok(InterruptResult { status }));
    }

    /// Ends the running turn as interrupted (with `reason` as its
    /// `failure_reason`, if any) and drops the queue; whether a turn was
    /// running.
    pub(super) fn stop_turns(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        reason: Option<&str>,
    ) -> bool {
        let Some(turn_id) = self.turns.running.as_ref().map(|t| t.tag.turn_id.clone()) else {
            return false;
        };
        if let Some(hosts) = self.ctx.hosts() {
            let _ = hosts.cast(HostSupervisorMsg::Abandon {
                turn_id: turn_id.clone(),
            });
        }
        // Queued prompts first leave the queue, so finishing the running
        // turn does not start one of them.
        let dropped: Vec<QueuedTurn> = self.turns.queue.drain(..).collect();
        let status = CompleteStatus::Interrupted;
        self.end_turn(myself, &turn_id, status, None, reason, None);
        self.turns.queue = dropped.into();
        self.dequeue_all();
        true
    }

    /// Ends every queued prompt with its `dequeued` completion.
    fn dequeue_all(&mut self) {
        if self.turns.queue.is_empty() {
            return;
        }
        let dropped: Vec<QueuedTurn> = self.turns.queue.drain(..).collect();
        for q in dropped {
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
                Some(q.tag),
            );
        }
        self.turns.marker_dirty = true;
    }

    /// A drain (SIGTERM/SIGINT): the running turn ends `interrupted` /
    /// `gateway_shutdown` (recoverable: the client may simply send it
    /// again), queued prompts `dequeued`; `reply` answers once those
    /// endings are committed and fanned out, so the transports close their
    /// peers only after the peers have them.
    pub(super) fn drain(&mut self, myself: &ActorRef<SessionMsg>, reply: RpcReplyPort<()>) {
        if self.turns.running.is_some() {
            info!(session_id = %self.id, "ending the running turn for the gateway's shutdown");
            self.stop_turns(myself, Some(reasons::GATEWAY_SHUTDOWN));
        } else {
            self.dequeue_all();
        }
        if self.pending.is_empty() && self.unsent.is_empty() {
            let _ = reply.send(());
        } else {
            self.flush_waiters.push(reply);
        }
    }

    /// The turn deadline passed: give up on the host and end the turn.
    pub(super) fn turn_deadline(&mut self, myself: &ActorRef<SessionMsg>, turn_id: TurnId) {
        if self
            .turns
            .running
            .as_ref()
            .is_none_or(|t| t.tag.turn_id != turn_id)
        {
            return;
        }
        if let Some(hosts) = self.ctx.hosts() {
            let _ = hosts.cast(HostSupervisorMsg::Abandon {
                turn_id: turn_id.clone(),
            });
        }
        let msg = format!(
            "the turn ran past its deadline of {} s",
            self.ctx.config.turn_deadline.as_secs()
        );
        self.finish_turn(
            myself,
            &turn_id,
            CompleteStatus::Error,
            None,
            Some((reasons::HOST_TIMEOUT, &msg)),
        );
    }

    /// `active_turn` of a resume.
    pub(super) fn active_turn(&self) -> Option<ActiveTurn> {
        self.turns.running.as_ref().map(|t| ActiveTurn {
            turn_id: t.tag.turn_id.clone(),
            trace_id: t.tag.trace_id.clone(),
            text: t.text.clone(),
            started_at: tether_protocol::format_ts(t.started_at_ms),
        })
    }

    /// Drops turns whose `message.user` was never written (an append
    /// failed): they were never accepted, so they get no `message.complete`.
    pub(super) fn forget_unwritten_turns(&mut self, from_seq: u64) {
        self.turns.queue.retain(|q| q.user_seq < from_seq);
        if self
            .turns
            .running
            .as_ref()
            .is_some_and(|t| t.user_seq >= from_seq)
        {
            if let Some(t) = self.turns.running.take() {
                if let Some(timer) = &t.deadline {
                    timer.abort();
                }
                if let Some(hosts) = self.ctx.hosts() {
                    let _ = hosts.cast(HostSupervisorMsg::Abandon {
                        turn_id: t.tag.turn_id,
                    });
                }
            }
            if self.status == SessionStatus::Running {
                self.set_status(SessionStatus::Idle);
            }
        }
    }

    /// The supervisor that ran this session's turn is gone (it was
    /// restarted): end the turn as a host crash, and fail a compression
    /// waiting for its answer, exactly as if the host had died.
    pub(super) fn hosts_lost(&mut self, myself: &ActorRef<SessionMsg>) {
        if let Some(turn_id) = self.turns.running.as_ref().map(|t| t.tag.turn_id.clone()) {
            self.turn_update(
                myself,
                turn_id,
                TurnUpdate::Error {
                    reason: reasons::HOST_CRASH.into(),
                    message: "the host supervisor was restarted".into(),
                },
            );
        }
        if let Some(request_id) = self.compacting.as_ref().map(|c| c.request_id.clone()) {
            self.control_late(request_id, Err("the host supervisor was restarted".into()));
        }
    }

    /// Elapsed time of the running turn, for stats.
    pub(super) fn running_for(&self) -> Option<Duration> {
        self.turns
            .running
            .as_ref()
            .map(|t| Duration::from_millis((now_ms() - t.started_at_ms).max(0) as u64))
    }
}

/// Failures the client may simply retry.
fn is_recoverable(reason: &str) -> bool {
    matches!(
        reason,
        reasons::HOST_CRASH
            | reasons::HOST_TIMEOUT
            | reasons::HOST_UNAVAILABLE
            | reasons::GATEWAY_RESTART
            | reasons::GATEWAY_SHUTDOWN
    )
}
