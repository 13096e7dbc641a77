//! A prompt that replaces a turn (`prompt.submit` with `replaces`): a
//! regenerated answer, or an edited prompt, of a front-end that lets its
//! user go back.
//!
//! Durable events are never deleted, so the replacement is said where it
//! happens: the new `message.user` carries `replaces: TURN`, and the
//! history (the transcript of the segment, what a turn's host reads) leaves
//! out that turn's messages and every message after them, from that event
//! on (`crate::transcript::replaced_turn`). The event log keeps all of it.
//!
//! It is refused while a turn runs or waits (4009: what it would replace
//! may still grow), for a turn the current segment holds no message of
//! (-32602), and it needs the segment in memory to know what stays: a
//! session that has not loaded it yet loads it first and answers then, a
//! request forwarded from another node too (it carries its forward id,
//! `cluster/forwarded.rs`).
//!
//! A `multitask: rollback` prompt is the same mechanism applied to the
//! running turn: that turn ends `superseded` and the new `message.user`
//! carries `replaces` with its id (`turns/multitask.rs`).

use ractor::ActorRef;
use tether_protocol::{RpcError, SubmitParams, SubmitResult, TurnId};

use super::write::Reply;
use super::{SessionMsg, SessionState};

/// A prompt waiting for the segment to load: one that replaces a turn,
/// rolls the running one back, or carries a `dedupe_key` (whose earlier
/// keys are known only with the segment in memory, `turns/dedupe.rs`).
#[derive(Debug)]
pub(crate) struct PendingSubmit {
    pub params: SubmitParams,
    pub reply: Reply<SubmitResult>,
}

impl SessionState {
    /// `prompt.submit` with `replaces`, the segment in memory.
    pub(super) fn submit_replacing(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        text: String,
        replaces: TurnId,
        dedupe_key: Option<String>,
        reply: Reply<SubmitResult>,
    ) {
        if let Err(e) = self.check_replace() {
            let _ = reply.send(Err(e));
            return;
        }
        match self.replace_point(&replaces) {
            Some(Some((_, kept))) => {
                self.accept(myself, text, Some((replaces, kept)), dedupe_key, reply)
            }
            _ => {
                let _ = reply.send(Err(not_in_history(&replaces)));
            }
        }
    }

    /// Holds a prompt until the segment is in memory. A forwarded one
    /// keeps its forward id in `reply`, and is accepted with its first
    /// event when it runs.
    pub(super) fn submit_after_load(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        params: SubmitParams,
        reply: Reply<SubmitResult>,
    ) {
        self.load_transcript(myself);
        if self.pending_submits.len() >= self.ctx.config.max_queued.max(1) {
            let _ = reply.send(Err(RpcError::session_busy(format!(
                "{} prompts are already waiting for the session's history",
                self.pending_submits.len()
            ))));
            return;
        }
        self.pending_submits
            .push_back(PendingSubmit { params, reply });
    }

    /// Whether a replacing prompt may be accepted now (the segment aside).
    pub(super) fn check_replace(&self) -> Result<(), RpcError> {
        self.check_submit()?;
        if self.turns.running.is_some() || !self.turns.queue.is_empty() {
            return Err(RpcError::session_busy(
                "a turn is running or queued: a prompt that replaces a turn waits for none",
            ));
        }
        Ok(())
    }

    /// The prompts deferred until the segment was loaded, in the order
    /// they came; a forwarded one accepted with its first event.
    pub(super) fn resume_pending_submits(&mut self, myself: &ActorRef<SessionMsg>) {
        for p in std::mem::take(&mut self.pending_submits) {
            match (self.ctx.cluster.clone(), p.reply.forward().cloned()) {
                (Some(cluster), Some(id)) => self.accepting(&cluster, id, |state| {
                    state.submit(myself, p.params, p.reply)
                }),
                _ => self.submit(myself, p.params, p.reply),
            }
        }
    }
}

pub(super) fn not_in_history(turn: &TurnId) -> RpcError {
    RpcError::invalid_params(
        "replaces",
        format!("turn {turn} has no message in the session's current history"),
    )
}
