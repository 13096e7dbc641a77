//! Turns: accept a prompt, run it on a compute host, end it exactly once.
//!
//! A prompt becomes a durable `message.user` (tagged with its new turn id
//! and trace id) and then either starts or waits in the queue. Whatever
//! happens next (the host's `turn.end` or `turn.error`, a crash the
//! supervisor reports, the deadline, an interrupt) ends the running turn
//! through [`SessionState::finish_turn`], and a queued prompt that never
//! runs ends through [`SessionState::complete_dequeued`]: with the turns
//! a restart interrupted (`marker.rs`), the only places that write a
//! turn's `message.complete`, so every accepted turn gets exactly one.
//!
//! The turn marker (running and queued turn ids) is persisted with the
//! events that change it, so a gateway that dies mid-turn finds the turns
//! to end at its next start.
//!
//! Accepting and starting turns is here; what a prompt does to the turns
//! already there (`multitask`, `dedupe_key`) is in `turns/multitask.rs`
//! and `turns/dedupe.rs`, the host's frames of a running turn are read in
//! `turns/host.rs`, and every way a turn ends is in `turns/end.rs`.

pub(super) mod dedupe;
mod end;
mod host;
mod multitask;
mod unstored;

use std::collections::VecDeque;
use std::time::Duration;
use tether_protocol::FailureReason;

use ractor::ActorRef;
use serde_json::{Map, Value};
use tether_protocol::{
    now_ms, ActiveTurn, CompleteStatus, EventType, RpcError, SessionStatus, StatusUpdatePayload,
    SubmitParams, SubmitResult, SubmitStatus, Todos, TraceId, TurnId, TurnStart, UserPayload,
};
use tracing::info;

use super::deferred::Deferred;
use super::write::{FirstWrite, Reply, Write};
use super::{SessionMsg, SessionState, Waiter};
use crate::event::TurnTag;
use crate::host_supervisor::HostSupervisorMsg;

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

impl RunningTurn {
    /// A turn that starts now, not yet sent to a host.
    fn new(tag: TurnTag, prompt: String, user_seq: u64) -> Self {
        Self {
            tag,
            prompt,
            user_seq,
            started_at_ms: now_ms(),
            host_id: None,
            dispatched: false,
            text: String::new(),
            reasoning_bytes: 0,
            deadline: None,
            usage: None,
        }
    }
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

impl Write for SubmitParams {
    type Answer = SubmitResult;
    // Its `message.user`, or the ending of the turn it supersedes just
    // before it (a refused or deduplicated prompt writes nothing).
    const FIRST_WRITE: FirstWrite = FirstWrite::Event;

    fn run(
        self,
        session: &mut SessionState,
        myself: &ActorRef<SessionMsg>,
        reply: Reply<SubmitResult>,
    ) {
        session.submit(myself, self, reply);
    }
}

impl SessionState {
    /// Accepts a checked prompt: its `message.user`, then the turn starts
    /// or waits. `replacing`: the turn it replaces, and how many messages
    /// of the segment stay before it (`replace.rs`).
    pub(super) fn accept(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        text: String,
        replacing: Option<(TurnId, u64)>,
        dedupe_key: Option<String>,
        reply: Reply<SubmitResult>,
    ) {
        if let Err(e) = self.reserve_turn() {
            let _ = reply.send(Err(e));
            return;
        }
        self.accept_in_place(myself, text, replacing, dedupe_key, reply);
    }

    /// [`accept`](Self::accept) without a place of its own under the
    /// profile's turn limits: for a prompt that takes the place of the turn
    /// it stops (`multitask.rs`). The count settles after the message.
    pub(super) fn accept_in_place(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        text: String,
        replacing: Option<(TurnId, u64)>,
        dedupe_key: Option<String>,
        reply: Reply<SubmitResult>,
    ) {
        let tag = TurnTag {
            turn_id: TurnId::new(),
            trace_id: TraceId::new(),
        };
        let (replaces, kept) = match replacing {
            Some((turn, kept)) => (Some(turn), Some(kept)),
            None => (None, None),
        };
        let payload = UserPayload {
            text: text.clone(),
            replaces,
            dedupe_key,
        };
        let user_seq = match kept {
            None => self.emit_durable(EventType::MessageUser, &payload, Some(tag.clone())),
            Some(kept) => self.emit_durable_counted(
                EventType::MessageUser,
                &payload,
                Some(tag.clone()),
                kept + 1,
            ),
        };
        let status = if self.turns.running.is_none() {
            self.turns.running = Some(RunningTurn::new(tag.clone(), text, user_seq));
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
        let result = SubmitResult {
            status,
            turn_id: tag.turn_id,
            trace_id: tag.trace_id,
            duplicate: false,
        };
        self.wait_for(
            myself,
            user_seq,
            Waiter::Reply(Deferred::new(reply, result)),
        );
    }

    /// Whether a prompt may be accepted now, the queue's room included.
    pub(super) fn check_submit(&self) -> Result<(), RpcError> {
        self.check_open()?;
        if self.turns.running.is_some() && self.turns.queue.len() >= self.ctx.config.max_queued {
            return Err(RpcError::session_busy(format!(
                "{} prompts are already queued",
                self.turns.queue.len()
            )));
        }
        Ok(())
    }

    /// Whether the session takes prompts at all: open, not compacting, a
    /// host up, the gateway not draining.
    pub(super) fn check_open(&self) -> Result<(), RpcError> {
        if self.status == SessionStatus::Closed {
            return Err(RpcError::session_closed());
        }
        if self.compacting.is_some() {
            return Err(RpcError::session_busy("the session is being compacted"));
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
            history_base: None,
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
                        profile: std::sync::Arc::from(self.profile.as_str()),
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
                Some((
                    FailureReason::HostUnavailable.as_str(),
                    "no compute host is running",
                )),
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

    /// `active_turn` of a resume.
    pub(super) fn active_turn(&self) -> Option<ActiveTurn> {
        if self.following() {
            // The owner runs it; what crossed nodes tells it here.
            return self.followed_turn();
        }
        self.turns.running.as_ref().map(|t| ActiveTurn {
            turn_id: t.tag.turn_id.clone(),
            trace_id: t.tag.trace_id.clone(),
            text: t.text.clone(),
            started_at: tether_protocol::format_ts(t.started_at_ms),
            user_seq: Some(t.user_seq),
        })
    }

    /// Elapsed time of the running turn, for stats.
    pub(super) fn running_for(&self) -> Option<Duration> {
        self.turns
            .running
            .as_ref()
            .map(|t| Duration::from_millis((now_ms() - t.started_at_ms).max(0) as u64))
    }
}
