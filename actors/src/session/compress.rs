//! `session.compress`: summarise the current segment on the session's host.
//!
//! The request goes to the HostSupervisor as a control with a wait; the
//! session does not block on it (a task waits and reports back), so the
//! session keeps serving while the host thinks. An answer within the wait
//! makes the result `compressed`; otherwise the result is `pending` and the
//! late answer arrives later as `ControlLate`, which is still applied.

use ractor::{ActorRef, RpcReplyPort};
use serde_json::Value;
use tether_protocol::{
    CompressResult, ErrorPayload, EventType, RpcError, SessionCompactedPayload, SessionStatus,
    StatusUpdatePayload, TurnId,
};
use tracing::{debug, info, warn};

use super::{SessionMsg, SessionState};
use crate::host_supervisor::HostSupervisorMsg;
use crate::turn::ControlOutcome;
use tether_protocol::ControlRequest;

/// A compression waiting for its answer.
#[derive(Debug)]
pub(crate) struct Compacting {
    pub request_id: String,
}

pub(crate) type CompressReply = RpcReplyPort<Result<CompressResult, RpcError>>;

impl SessionState {
    pub(super) fn compress(
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
        });
        let myself = myself.clone();
        tokio::spawn(async move {
            let outcome = rx
                .await
                .unwrap_or_else(|_| ControlOutcome::Error("the host supervisor stopped".into()));
            let _ = myself.cast(SessionMsg::ControlDone {
                request_id,
                outcome,
                reply,
            });
        });
    }

    /// A compression deferred until the transcript was loaded.
    pub(super) fn resume_pending_compress(&mut self, myself: &ActorRef<SessionMsg>) {
        if let Some((focus, reply)) = self.pending_compress.take() {
            self.compress(myself, focus, reply);
        }
    }

    pub(super) fn control_done(
        &mut self,
        request_id: String,
        outcome: ControlOutcome,
        reply: CompressReply,
    ) {
        if self.compacting.as_ref().map(|c| &c.request_id) != Some(&request_id) {
            let _ = reply.send(Err(RpcError::internal("compression state lost")));
            return;
        }
        match outcome {
            ControlOutcome::Ack(result) => {
                self.compacting = None;
                let answer = match parse_compress(&result) {
                    Ok((summary, removed)) => {
                        let history_version = self.apply_compaction(summary, removed);
                        Ok(CompressResult::Compressed {
                            history_version,
                            removed,
                        })
                    }
                    Err(e) => Err(compress_failed(&e)),
                };
                let _ = reply.send(answer);
            }
            ControlOutcome::Error(message) => {
                self.compacting = None;
                warn!(session_id = %self.id, request_id = %request_id, error = %message, "compression failed");
                let _ = reply.send(Err(compress_failed(&message)));
            }
            ControlOutcome::Pending => {
                self.emit_durable(
                    EventType::StatusUpdate,
                    &StatusUpdatePayload {
                        kind: "compacting".into(),
                        text: None,
                    },
                    None,
                );
                let _ = reply.send(Ok(CompressResult::Pending { request_id }));
            }
        }
    }

    /// The late answer of a compression that answered `pending`.
    pub(super) fn control_late(&mut self, request_id: String, result: Result<Value, String>) {
        if self.compacting.as_ref().map(|c| &c.request_id) != Some(&request_id) {
            debug!(session_id = %self.id, request_id = %request_id, "late control answer for no pending compression");
            return;
        }
        self.compacting = None;
        let outcome = result.and_then(|v| parse_compress(&v));
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

    /// Starts a new history segment with the summary; returns its version.
    fn apply_compaction(&mut self, summary: String, removed: u64) -> u64 {
        self.history_version += 1;
        let history_version = self.history_version;
        info!(session_id = %self.id, history_version, removed, "session compacted");
        self.emit_durable(
            EventType::SessionCompacted,
            &SessionCompactedPayload {
                history_version,
                summary,
                removed,
            },
            None,
        );
        history_version
    }
}

fn parse_compress(result: &Value) -> Result<(String, u64), String> {
    let summary = result
        .get("summary")
        .and_then(Value::as_str)
        .ok_or("the host's answer has no summary")?;
    let removed = result.get("removed").and_then(Value::as_u64).unwrap_or(0);
    Ok((summary.to_string(), removed))
}

fn compress_failed(message: &str) -> RpcError {
    RpcError::new(
        tether_protocol::codes::HOST_UNAVAILABLE,
        format!("the compute host could not compress the session: {message}"),
    )
}
