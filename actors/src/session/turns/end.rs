//! Every way a turn ends: the host's answer, an interrupt, a drain, the
//! deadline. The running turn's `message.complete` is written by
//! [`SessionState::end_turn`], a queued prompt's by
//! [`SessionState::complete_dequeued`]. A turn whose `message.user` was
//! never written was never accepted and is only forgotten.

use std::time::Duration;
use tether_protocol::FailureReason;

use ractor::{ActorRef, RpcReplyPort};
use tether_protocol::{
    now_ms, CompleteStatus, ErrorPayload, EventType, InterruptParams, InterruptResult,
    InterruptStatus, MessageCompletePayload, RpcError, SessionStatus, TurnId,
};
use tracing::info;

use super::super::deferred::Deferred;
use super::super::write::{FirstWrite, Reply, Write};
use super::super::{SessionMsg, SessionState, Waiter};
use super::{QueuedTurn, RunningTurn};
use crate::event::TurnTag;
use crate::host_supervisor::HostSupervisorMsg;

impl Write for InterruptParams {
    type Answer = InterruptResult;
    // The running turn's ending (an idle session writes nothing).
    const FIRST_WRITE: FirstWrite = FirstWrite::Event;

    fn run(
        self,
        session: &mut SessionState,
        myself: &ActorRef<SessionMsg>,
        reply: Reply<InterruptResult>,
    ) {
        session.interrupt(myself, reply);
    }
}

impl SessionState {
    /// Ends the running turn with its one `message.complete`, then starts
    /// the next queued prompt.
    pub(in crate::session) fn finish_turn(
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
                self.turns.running = Some(RunningTurn::new(next.tag, next.prompt, next.user_seq));
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
    /// cannot keep it spinning, and it is never continued. `interrupted`
    /// is answered once its ending is on disk; a closed session (or one
    /// whose close is decided) has no turn to interrupt: 4002.
    fn interrupt(&mut self, myself: &ActorRef<SessionMsg>, reply: Reply<InterruptResult>) {
        if self.status == SessionStatus::Closed {
            let _ = reply.send(Err(RpcError::session_closed()));
            return;
        }
        if !self.stop_turns(myself, None) {
            let status = InterruptStatus::Idle;
            let _ = reply.send(Ok(InterruptResult { status }));
            return;
        }
        let result = InterruptResult {
            status: InterruptStatus::Interrupted,
        };
        let last = self.commit.last_seq();
        self.wait_for(myself, last, Waiter::Reply(Deferred::new(reply, result)));
    }

    /// Every accepted turn the session holds ends now, for good: the
    /// completions a failed append still owes, the running turn
    /// (`interrupted`, `reason` its `failure_reason`) and each queued
    /// prompt (`dequeued`). Every way a session stops serving its turns
    /// (`session.close`, the close of a `close_on_disconnect` session its
    /// last peer left, a drain) ends them through here, in the same append
    /// as whatever it writes next, so none can leave a turn without its
    /// one ending. (A session this node lost, or one a crash stopped,
    /// cannot write: its next owner ends the turns of its stored marker,
    /// `marker.rs`.)
    pub(in crate::session) fn end_all_turns(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        reason: FailureReason,
    ) {
        self.pay_owed_now();
        if self.turns.running.is_some() {
            info!(session_id = %self.id, %reason, "ending the running turn");
            self.stop_turns(myself, Some(reason));
        }
        self.dequeue_all();
    }

    /// Ends the running turn as interrupted (with `reason` as its
    /// `failure_reason`, if any) and drops the queue; whether a turn was
    /// running.
    pub(in crate::session) fn stop_turns(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        reason: Option<FailureReason>,
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
        let reason = reason.map(|r| r.as_str());
        self.end_turn(myself, &turn_id, status, None, reason, None);
        self.turns.queue = dropped.into();
        self.dequeue_all();
        true
    }

    /// A prompt sent with `multitask` `interrupt` or `rollback` came: the
    /// running turn ends `interrupted` / `superseded`, the host abandons
    /// it, and the queue either drops (`dequeued`) or goes on as after any
    /// ending, its next prompt starting now.
    pub(in crate::session) fn supersede_running(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        drop_queued: bool,
    ) {
        if drop_queued {
            self.stop_turns(myself, Some(FailureReason::Superseded));
            return;
        }
        let Some(turn_id) = self.turns.running.as_ref().map(|t| t.tag.turn_id.clone()) else {
            return;
        };
        if let Some(hosts) = self.ctx.hosts() {
            let _ = hosts.cast(HostSupervisorMsg::Abandon {
                turn_id: turn_id.clone(),
            });
        }
        let status = CompleteStatus::Interrupted;
        let reason = Some(FailureReason::Superseded.as_str());
        self.end_turn(myself, &turn_id, status, None, reason, None);
    }

    /// Ends every queued prompt with its `dequeued` completion.
    fn dequeue_all(&mut self) {
        if self.turns.queue.is_empty() {
            return;
        }
        let dropped: Vec<QueuedTurn> = self.turns.queue.drain(..).collect();
        for q in dropped {
            self.complete_dequeued(q.tag);
        }
        self.turns.marker_dirty = true;
    }

    /// The one `message.complete` of a queued prompt that never ran
    /// (an interrupt, a drain, or a restart that found it in the marker).
    pub(in crate::session) fn complete_dequeued(&mut self, tag: TurnTag) {
        let dequeued = Some(FailureReason::Dequeued.as_str());
        self.ctx
            .metrics
            .turn_ended(CompleteStatus::Interrupted, dequeued, None);
        self.emit_durable(
            EventType::MessageComplete,
            &MessageCompletePayload {
                text: String::new(),
                status: CompleteStatus::Interrupted,
                failure_reason: Some(FailureReason::Dequeued.as_str().into()),
                recoverable: None,
                usage: None,
            },
            Some(tag),
        );
    }

    /// A drain (SIGTERM/SIGINT): the running turn ends `interrupted` /
    /// `gateway_shutdown` (recoverable: the client may simply send it
    /// again), queued prompts `dequeued`; `reply` answers once those
    /// endings are committed and fanned out, so the transports close their
    /// peers only after the peers have them.
    pub(in crate::session) fn drain(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        reply: RpcReplyPort<()>,
    ) {
        self.end_all_turns(myself, FailureReason::GatewayShutdown);
        self.when_settled(myself, reply);
    }

    /// The turn deadline passed: give up on the host and end the turn.
    pub(in crate::session) fn turn_deadline(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        turn_id: TurnId,
    ) {
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
            Some((FailureReason::HostTimeout.as_str(), &msg)),
        );
    }

    /// Drops turns whose `message.user` was never written (an append
    /// failed): they were never accepted, so they get no `message.complete`.
    pub(in crate::session) fn forget_unwritten_turns(&mut self, from_seq: u64) {
        self.transcript.dedupe.forget_from(from_seq);
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
}

/// Failures the client may simply retry: the protocol's rule for the
/// gateway's own reasons; an engine's own reason never is.
fn is_recoverable(reason: &str) -> bool {
    FailureReason::parse(reason).is_some_and(FailureReason::recoverable)
}
