//! `session.compress`: summarise the current segment on the session's host.
//!
//! The request goes to the HostSupervisor as a control with a wait; the
//! session does not block on it (a task waits and reports back), so the
//! session keeps serving while the host thinks. An answer within the wait
//! makes the result `compressed`; otherwise the result is `pending` and the
//! late answer arrives later as `ControlLate`, which is still applied.
//!
//! The answer waits in the session's state (not on the task), so whatever
//! ends the compression answers it: the host's answer once what it wrote
//! is on disk (`session.compacted`, or `status.update` `compacting`), a
//! close with 4002, a lost session with "retry".

use ractor::ActorRef;
use serde_json::Value;
use tether_protocol::{
    CompressParams, CompressResult, ErrorPayload, EventType, RpcError, SessionCompactedPayload,
    SessionStatus, StatusUpdatePayload, TurnId,
};
use tracing::{debug, info, warn};

use super::deferred::Deferred;
use super::write::{FirstWrite, Reply, Write};
use super::{SessionMsg, SessionState, Waiter};
use crate::host_supervisor::{ControlError, HostSupervisorMsg};
use crate::turn::ControlOutcome;
use tether_protocol::ControlRequest;

/// A compression waiting for its answer.
#[derive(Debug)]
pub(crate) struct Compacting {
    pub request_id: String,
    /// The request's answer, until the host's answer (or `pending`)
    /// within the wait; `None` once `pending` was answered.
    pub reply: Option<CompressReply>,
}

pub(crate) type CompressReply = Reply<CompressResult>;

impl Write for CompressParams {
    type Answer = CompressResult;
    // Its first event comes when the host answers, if ever.
    const FIRST_WRITE: FirstWrite = FirstWrite::Elsewhere;

    fn run(self, session: &mut SessionState, myself: &ActorRef<SessionMsg>, reply: CompressReply) {
        session.compress(myself, self.focus, reply);
    }
}

impl SessionState {
    fn compress(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        focus: Option<String>,
        reply: CompressReply,
    ) {
        if self.status == SessionStatus::Closed {
            let _ = reply.send(Err(RpcError::session_closed()));
            return;
        }
        if self.turns.running.is_some() || !self.turns.queue.is_empty() {
            let _ = reply.send(Err(RpcError::session_busy("a turn is running")));
            return;
        }
        if self.compacting.is_some() || self.pending_compress.is_some() {
            let _ = reply.send(Err(RpcError::session_busy(
                "a compression is already running",
            )));
            return;
        }
        if self.ctx.hosts_up() == 0 {
            let _ = reply.send(Err(RpcError::host_unavailable()));
            return;
        }
        let Some(history) = self.history_messages() else {
            self.pending_compress = Some((focus, reply));
            self.load_transcript(myself);
            return;
        };
        let Some(hosts) = self.ctx.hosts() else {
            let _ = reply.send(Err(RpcError::host_unavailable()));
            return;
        };
        let request_id = format!("r_{}", &TurnId::new().as_str()[2..]);
        let request = ControlRequest {
            request_id: request_id.clone(),
            op: "compress".into(),
            session_id: self.id.clone(),
            history,
            args: match focus {
                Some(f) => serde_json::json!({ "focus": f }),
                None => serde_json::json!({}),
            },
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sent = hosts.cast(HostSupervisorMsg::Control {
            request,
            preferred: self.turns.sticky_host,
            wait: self.ctx.config.compress_wait,
            late: myself.clone(),
            reply: tx.into(),
        });
        if sent.is_err() {
            let _ = reply.send(Err(RpcError::host_unavailable()));
            return;
        }
        info!(session_id = %self.id, request_id = %request_id, "compression requested");
        self.compacting = Some(Compacting {
            request_id: request_id.clone(),
            reply: Some(reply),
        });
        let myself = myself.clone();
        tokio::spawn(async move {
            let outcome = rx
                .await
                .unwrap_or_else(|_| ControlOutcome::Error("the host supervisor stopped".into()));
            let _ = myself.cast(SessionMsg::ControlDone {
                request_id,
                outcome,
            });
        });
    }

    /// A compression deferred until the transcript was loaded.
    pub(super) fn resume_pending_compress(&mut self, myself: &ActorRef<SessionMsg>) {
        if let Some((focus, reply)) = self.pending_compress.take() {
            self.compress(myself, focus, reply);
        }
    }

    /// The host's answer within the compress wait (or `Pending`). One for a
    /// compression that ended meanwhile (closed, lost) is stale: its
    /// request was answered then.
    pub(super) fn control_done(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        request_id: String,
        outcome: ControlOutcome,
    ) {
        let Some(reply) = self
            .compacting
            .as_mut()
            .filter(|c| c.request_id == request_id)
            .and_then(|c| c.reply.take())
        else {
            debug!(session_id = %self.id, request_id = %request_id, "answer for a compression that ended");
            return;
        };
        match outcome {
            ControlOutcome::Ack(result) => {
                self.compacting = None;
                match parse_compress(&result) {
                    Ok((summary, removed)) => {
                        let (seq, history_version) = self.apply_compaction(summary, removed);
                        let result = CompressResult::Compressed {
                            history_version,
                            removed,
                        };
                        // Answered once `session.compacted` is on disk.
                        self.wait_for(myself, seq, Waiter::Reply(Deferred::new(reply, result)));
                    }
                    Err(e) => drop(reply.send(Err(compress_failed(&e.to_string())))),
                }
            }
            ControlOutcome::Error(message) => {
                self.compacting = None;
                warn!(session_id = %self.id, request_id = %request_id, error = %message, "compression failed");
                let _ = reply.send(Err(compress_failed(&message)));
            }
            ControlOutcome::Pending => {
                let seq = self.emit_durable(
                    EventType::StatusUpdate,
                    &StatusUpdatePayload {
                        kind: "compacting".into(),
                        text: None,
                    },
                    None,
                );
                let result = CompressResult::Pending { request_id };
                self.wait_for(myself, seq, Waiter::Reply(Deferred::new(reply, result)));
            }
        }
    }

    /// Ends the compression in flight, if any, and one waiting for the
    /// transcript: a request still unanswered gets `error()` (the late
    /// answer, if it comes, is dropped).
    pub(super) fn abandon_compression(&mut self, error: impl Fn() -> RpcError) {
        if let Some(reply) = self.compacting.take().and_then(|c| c.reply) {
            let _ = reply.send(Err(error()));
        }
        if let Some((_, reply)) = self.pending_compress.take() {
            let _ = reply.send(Err(error()));
        }
    }

    /// The late answer of a compression that answered `pending` (or the
    /// end of one the host supervisor lost before it answered).
    pub(super) fn control_late(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        request_id: String,
        result: Result<Value, ControlError>,
    ) {
        let Some(compacting) = self
            .compacting
            .as_ref()
            .filter(|c| c.request_id == request_id)
        else {
            debug!(session_id = %self.id, request_id = %request_id, "late control answer for no pending compression");
            return;
        };
        if compacting.reply.is_some() {
            // Not answered yet: this is its answer.
            let outcome = match result {
                Ok(v) => ControlOutcome::Ack(v),
                Err(e) => ControlOutcome::Error(e.to_string()),
            };
            return self.control_done(myself, request_id, outcome);
        }
        self.compacting = None;
        let outcome = result
            .map_err(CompressFailed::from)
            .and_then(|v| parse_compress(&v));
        let (kind, text) = match outcome {
            Ok((summary, removed)) => {
                self.apply_compaction(summary, removed);
                ("compacted", None)
            }
            Err(message) => {
                warn!(session_id = %self.id, request_id = %request_id, error = %message, "late compression failed");
                self.emit_durable(
                    EventType::Error,
                    &ErrorPayload {
                        message: format!("compression failed: {message}"),
                        code: None,
                    },
                    None,
                );
                ("ready", None)
            }
        };
        self.emit_durable(
            EventType::StatusUpdate,
            &StatusUpdatePayload {
                kind: kind.into(),
                text,
            },
            None,
        );
    }

    /// Starts a new history segment with the summary; the seq of its
    /// `session.compacted` and its version.
    fn apply_compaction(&mut self, summary: String, removed: u64) -> (u64, u64) {
        self.history_version += 1;
        let history_version = self.history_version;
        info!(session_id = %self.id, history_version, removed, "session compacted");
        let seq = self.emit_durable(
            EventType::SessionCompacted,
            &SessionCompactedPayload {
                history_version,
                summary,
                removed,
            },
            None,
        );
        (seq, history_version)
    }
}

/// Why a compression made nothing.
#[derive(Debug, thiserror::Error)]
enum CompressFailed {
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error("the host's answer has no summary")]
    NoSummary,
}

fn parse_compress(result: &Value) -> Result<(String, u64), CompressFailed> {
    let summary = result
        .get("summary")
        .and_then(Value::as_str)
        .ok_or(CompressFailed::NoSummary)?;
    let removed = result.get("removed").and_then(Value::as_u64).unwrap_or(0);
    Ok((summary.to_string(), removed))
}

fn compress_failed(message: &str) -> RpcError {
    RpcError::new(
        tether_protocol::codes::HOST_UNAVAILABLE,
        format!("the compute host could not compress the session: {message}"),
    )
}
