//! What a prompt does to the turns already there: `prompt.submit`'s
//! `multitask` and `dedupe_key` (PROTOCOL 1.4).
//!
//! - `enqueue` (the default): it waits behind the running turn and the
//!   queue, as every prompt always did.
//! - `reject`: a running or queued turn refuses it with 4091, before
//!   anything is written.
//! - `interrupt`: the running turn ends `interrupted` / `superseded` (the
//!   host is told to abandon it), the next queued prompt starts as after
//!   any ending, and this one joins the queue behind the others. The
//!   queued prompts stay: each was accepted with its own answer, and
//!   dropping them silently is not what "answer this instead" says; with
//!   `drop_queued` they end `dequeued` too.
//! - `rollback`: as `interrupt` with the queue dropped, and the new
//!   `message.user` carries `replaces` with the stopped turn's id: the
//!   same mark as a replacing prompt (`replace.rs`), so the history from
//!   this prompt on leaves that turn and the dropped prompts out, while
//!   their events stay in the log for replay. The queue cannot stay: its
//!   prompts were written after the stopped turn, so the cut takes them.
//!
//! Whichever it is, every turn accepted before ends exactly once: the
//! superseded one here, the dropped ones `dequeued`, the others later as
//! they run. A prompt whose `dedupe_key` was seen within the window is
//! answered with that turn (`duplicate: true`) before any policy applies,
//! and writes nothing.

use ractor::ActorRef;
use tether_protocol::{now_ms, Multitask, RpcError, SubmitParams, SubmitResult, SubmitStatus};
use tracing::info;

use super::super::deferred::Deferred;
use super::super::write::Reply;
use super::super::{SessionMsg, SessionState, Waiter};
use super::dedupe::Seen;

impl SessionState {
    /// `prompt.submit`.
    pub(in crate::session) fn submit(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        params: SubmitParams,
        reply: Reply<SubmitResult>,
    ) {
        let policy = params.policy();
        let needs_history = params.dedupe_key.is_some()
            || params.replaces.is_some()
            || (policy == Multitask::Rollback && self.turns.running.is_some());
        if needs_history && !self.history_ready() {
            self.submit_after_load(myself, params, reply);
            return;
        }
        if let Some(seen) = params
            .dedupe_key
            .as_deref()
            .and_then(|key| self.transcript.dedupe.get(key, now_ms()))
            .cloned()
        {
            self.answer_duplicate(myself, seen, reply);
            return;
        }
        let busy = self.turns.running.is_some() || !self.turns.queue.is_empty();
        if policy == Multitask::Reject && busy {
            if let Err(e) = self.check_open() {
                let _ = reply.send(Err(e));
            } else {
                let _ = reply.send(Err(RpcError::turn_in_progress()));
            }
            return;
        }
        let SubmitParams {
            text,
            replaces,
            dedupe_key,
            drop_queued,
            ..
        } = params;
        if let Some(turn) = replaces {
            self.submit_replacing(myself, text, turn, dedupe_key, reply);
            return;
        }
        let preempts = matches!(policy, Multitask::Interrupt | Multitask::Rollback)
            && self.turns.running.is_some();
        if !preempts {
            if let Err(e) = self.check_submit() {
                let _ = reply.send(Err(e));
                return;
            }
            self.accept(myself, text, None, dedupe_key, reply);
            return;
        }
        // Everything that can refuse it is checked before the running turn
        // is stopped: a refused request changes nothing. The queue's room
        // is not checked (the running turn's end makes room for one, and a
        // rollback empties it), nor are the profile's turn limits: the
        // prompt takes the place of the turn it stops (running, or queued
        // behind the one that moves up to run), so the profile holds no
        // more turns than before. Reserving one after the stop refused it
        // with 4290 under a limit, once the turn was already gone.
        if let Err(e) = self.check_open() {
            let _ = reply.send(Err(e));
            return;
        }
        let rollback = policy == Multitask::Rollback;
        let replacing = if rollback {
            self.rollback_point()
        } else {
            None
        };
        self.supersede_running(myself, rollback || drop_queued);
        self.accept_in_place(myself, text, replacing, dedupe_key, reply);
    }

    /// The running turn and how many messages of the segment come before
    /// it: what a rollback's `message.user` replaces. `None` when its
    /// prompt is not in the segment (then the rollback only interrupts).
    fn rollback_point(&self) -> Option<(tether_protocol::TurnId, u64)> {
        let turn = self.turns.running.as_ref()?.tag.turn_id.clone();
        let (_, kept) = self.replace_point(&turn)??;
        Some((turn, kept))
    }

    /// Answers a prompt whose `dedupe_key` was seen within the window
    /// with that prompt's turn, once its `message.user` is on disk; its
    /// `status` is where that turn is now (`queued` while it waits).
    fn answer_duplicate(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        seen: Seen,
        reply: Reply<SubmitResult>,
    ) {
        let queued = self
            .turns
            .queue
            .iter()
            .any(|q| q.tag.turn_id == seen.turn_id);
        let status = if queued {
            SubmitStatus::Queued
        } else {
            SubmitStatus::Started
        };
        info!(session_id = %self.id, turn_id = %seen.turn_id, "duplicate prompt answered with its first turn");
        let result = SubmitResult {
            status,
            turn_id: seen.turn_id,
            trace_id: seen.trace_id,
            duplicate: true,
        };
        self.wait_for(
            myself,
            seen.user_seq,
            Waiter::Reply(Deferred::new(reply, result)),
        );
    }
}
