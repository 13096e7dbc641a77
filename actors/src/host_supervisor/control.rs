//! Control requests: the waiter, its deadline, and the late handler that
//! takes over at the deadline (the table itself is [`crate::late_acks`]).

use std::time::Duration;

use ractor::{ActorRef, RpcReplyPort};
use tether_protocol::ToHost;
use tracing::{debug, info, warn};

use super::held::ControlJob;
use super::{now, HostSupervisorMsg, HostSupervisorState, Waiter};
use crate::late_acks::Taken;
use crate::session::SessionMsg;
use crate::turn::ControlOutcome;
use tether_protocol::ControlRequest;

/// Why a control request (a compression) got no answer from its host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// The host answered `control.error` with this message (or its answer
    /// was refused at the edge).
    #[error("{0}")]
    Host(String),
    /// The host's process died before it answered.
    #[error("{0}")]
    HostDied(String),
    /// The host supervisor stopped, or was restarted, before an answer.
    #[error("the host supervisor {0}")]
    Supervisor(&'static str),
    /// Evicted from the late handlers by newer ones.
    #[error("too many control requests are waiting for a late answer")]
    Evicted,
    /// No answer within the late-ack TTL.
    #[error("the compute host did not answer within the late-ack TTL")]
    Expired,
}

impl HostSupervisorState {
    pub(super) fn control(
        &mut self,
        request: ControlRequest,
        preferred: Option<u32>,
        wait: Duration,
        late: ActorRef<SessionMsg>,
        reply: RpcReplyPort<ControlOutcome>,
    ) {
        let now = now();
        self.dispatch_control(ControlJob {
            request,
            preferred,
            deadline: now + wait,
            give_up: now + wait.min(self.config.hello_timeout),
            late,
            reply,
        });
    }

    /// Sends a control request to a slot that is up, or holds it for one
    /// that is starting, or fails it when none is coming.
    pub(super) fn dispatch_control(&mut self, job: ControlJob) {
        let Some(slot) = self.choose(job.preferred) else {
            if let Some(job) = self.hold_control(job) {
                let _ = job
                    .reply
                    .send(ControlOutcome::Error("no compute host is up".into()));
            }
            return;
        };
        let ControlJob {
            request,
            deadline,
            late,
            reply,
            ..
        } = job;
        let request_id = request.request_id.clone();
        if let Err(w) =
            self.acks
                .insert_waiter(request_id.clone(), Waiter { reply, late }, slot, deadline)
        {
            warn!(request_id, "control request id already pending; refused");
            let _ = w.reply.send(ControlOutcome::Error(format!(
                "request {request_id} is already pending"
            )));
            return;
        }
        debug!(host_id = slot, request_id, session_id = %request.session_id, op = %request.op,
               "control request sent");
        self.send_to(slot, ToHost::Control(request));
        let wait = deadline.saturating_duration_since(now());
        self.myself
            .send_after(wait, || HostSupervisorMsg::WaitersDue);
    }

    /// Answers `Pending` to every waiter past its deadline and hands its
    /// request to the late table.
    pub(super) fn time_out_waiters(&mut self) {
        let evicted = self.acks.time_out(now(), |request_id, w| {
            debug!(
                request_id,
                "control request pending; a late handler holds it"
            );
            let _ = w.reply.send(ControlOutcome::Pending);
            w.late
        });
        for (request_id, late) in evicted {
            self.metrics.late_acks_evicted.inc();
            warn!(
                request_id,
                cap = self.config.late_ack_cap,
                "late control handler evicted"
            );
            let _ = late.cast(SessionMsg::ControlLate {
                request_id,
                result: Err(ControlError::Evicted),
            });
        }
    }

    /// Drops the late handlers whose TTL ran out; their sessions are told,
    /// so that none waits forever for an answer that will not be applied.
    pub(super) fn expire_late(&mut self) {
        for (request_id, late) in self.acks.expire(now()) {
            self.metrics.late_acks_expired.inc();
            warn!(
                request_id,
                "no answer to a control request within the late-ack TTL"
            );
            let _ = late.cast(SessionMsg::ControlLate {
                request_id,
                result: Err(ControlError::Expired),
            });
        }
    }

    /// Gives a control answer to whoever holds its request now.
    pub(super) fn answer(
        &mut self,
        slot: u32,
        request_id: String,
        result: Result<serde_json::Value, String>,
    ) {
        match self.acks.take(&request_id, now()) {
            Taken::Waiter(w) => {
                debug!(
                    host_id = slot,
                    request_id,
                    ok = result.is_ok(),
                    "control answered in time"
                );
                let _ = w.reply.send(match result {
                    Ok(value) => ControlOutcome::Ack(value),
                    Err(message) => ControlOutcome::Error(message),
                });
            }
            Taken::Late(late) => {
                self.metrics.late_acks_adopted.inc();
                info!(
                    host_id = slot,
                    request_id,
                    ok = result.is_ok(),
                    "late control answer delivered"
                );
                let result = result.map_err(ControlError::Host);
                let _ = late.cast(SessionMsg::ControlLate { request_id, result });
            }
            Taken::Expired => {
                self.metrics.late_acks_expired.inc();
                if let Some(n) = self.forbidden_frame(slot) {
                    warn!(
                        host_id = slot,
                        request_id,
                        forbidden_frames = n,
                        "control answer after the late-ack TTL; dropped"
                    );
                }
            }
            Taken::Unknown => {
                if let Some(n) = self.forbidden_frame(slot) {
                    warn!(
                        host_id = slot,
                        request_id,
                        forbidden_frames = n,
                        "control answer for no pending request; dropped"
                    );
                }
            }
        }
    }
}
