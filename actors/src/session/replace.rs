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
//! session that has not loaded it yet loads it first and answers then (a
//! request forwarded from another node is answered 4009 instead, and
//! retried by its client).

use ractor::ActorRef;
use tether_protocol::{RpcError, SubmitResult, TurnId};

use super::write::Reply;
use super::{SessionMsg, SessionState};

/// A replacing prompt waiting for the segment to load.
#[derive(Debug)]
pub(crate) struct PendingReplace {
    pub text: String,
    pub replaces: TurnId,
    pub reply: Reply<SubmitResult>,
}

impl SessionState {
    /// `prompt.submit` with `replaces`.
    pub(super) fn submit_replacing(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        text: String,
        replaces: TurnId,
        reply: Reply<SubmitResult>,
    ) {
        if let Err(e) = self.check_replace() {
            let _ = reply.send(Err(e));
            return;
        }
        match self.replace_point(&replaces) {
            None if self.running_forward() => {
                // A forward is accepted with its first event, written in
                // this handler or never: a deferred one could run twice.
                // The forwarder's client retries; the segment is loaded
                // by then.
                self.load_transcript(myself);
                let _ = reply.send(Err(RpcError::session_busy(
                    "the session is loading its history: retry",
                )));
            }
            None => {
                self.pending_replace = Some(PendingReplace {
                    text,
                    replaces,
                    reply,
                });
                self.load_transcript(myself);
            }
            Some(None) => {
                let _ = reply.send(Err(not_in_history(&replaces)));
            }
            Some(Some((_, kept))) => self.accept(myself, text, Some((replaces, kept)), reply),
        }
    }

    /// Whether a replacing prompt may be accepted now (the segment aside).
    pub(super) fn check_replace(&self) -> Result<(), RpcError> {
        self.check_submit()?;
        if self.turns.running.is_some() || !self.turns.queue.is_empty() {
            return Err(RpcError::session_busy(
                "a turn is running or queued: a prompt that replaces a turn waits for none",
            ));
        }
        if self.pending_replace.is_some() {
            return Err(RpcError::session_busy(
                "another replacing prompt is waiting",
            ));
        }
        Ok(())
    }

    /// A replacing prompt deferred until the segment was loaded.
    pub(super) fn resume_pending_replace(&mut self, myself: &ActorRef<SessionMsg>) {
        if let Some(p) = self.pending_replace.take() {
            self.submit_replacing(myself, p.text, p.replaces, p.reply);
        }
    }
}

pub(super) fn not_in_history(turn: &TurnId) -> RpcError {
    RpcError::invalid_params(
        "replaces",
        format!("turn {turn} has no message in the session's current history"),
    )
}
