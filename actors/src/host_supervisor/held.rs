//! Work that waits for a host: turns and control requests that arrived
//! while no slot was up but one was starting or restarting.
//!
//! Right after the gateway starts (no host has said `hello` yet) and right
//! after a crash, a prompt or a compression has nowhere to go for a moment;
//! failing it with 5019 would make clients race the hosts' start. So it
//! waits here and goes out when a host says `hello`. A held turn waits as
//! long as some slot may still come up (it was accepted; it ends with
//! `host_unavailable` only when none can); a held control request waits at
//! most the hello timeout (and never past its own wait), since its caller
//! is waiting for the answer.

use std::collections::VecDeque;
use std::time::Instant;
use tether_protocol::FailureReason;

use ractor::{ActorRef, RpcReplyPort};
use tether_protocol::{ControlRequest, TurnId, TurnStart};
use tracing::{debug, info};

use super::{now, send_update, HostSupervisorMsg, HostSupervisorState, Slot};
use crate::session::SessionMsg;
use crate::turn::{ControlOutcome, TurnUpdate};

/// Work held at most while slots start; beyond, new work fails at once.
const MAX_HELD: usize = 4096;

/// A turn to start once a host is up.
pub(super) struct HeldTurn {
    pub start: TurnStart,
    pub preferred: Option<u32>,
    pub session: ActorRef<SessionMsg>,
    pub profile: std::sync::Arc<str>,
}

/// A control request on its way to a host.
pub(super) struct ControlJob {
    pub request: ControlRequest,
    pub preferred: Option<u32>,
    /// The caller's wait ends here (then `Pending` and a late handler).
    pub deadline: Instant,
    /// Held for a host, it fails here (the hello timeout, within the wait).
    pub give_up: Instant,
    pub late: ActorRef<SessionMsg>,
    pub reply: RpcReplyPort<ControlOutcome>,
}

enum Held {
    Turn(HeldTurn),
    Control(ControlJob),
}

/// The queue, in arrival order.
#[derive(Default)]
pub(super) struct HeldWork(VecDeque<Held>);

impl HostSupervisorState {
    /// Whether a slot that is not up now may still be (starting, or
    /// restarting after its backoff).
    fn host_coming(&self) -> bool {
        !self.stopping && self.slots.iter().any(Slot::available)
    }

    /// Holds a turn for the next `hello`; gives it back when no host is
    /// coming (or too much already waits).
    pub(super) fn hold_turn(&mut self, turn: HeldTurn) -> Option<HeldTurn> {
        if !self.host_coming() || self.held.0.len() >= MAX_HELD {
            return Some(turn);
        }
        debug!(turn_id = %turn.start.turn_id, session_id = %turn.start.session_id,
               trace_id = %turn.start.trace_id, "no compute host is up yet; the turn waits for one");
        self.held.0.push_back(Held::Turn(turn));
        None
    }

    /// Holds a control request for the next `hello`, until its `give_up`;
    /// gives it back when it cannot wait.
    pub(super) fn hold_control(&mut self, job: ControlJob) -> Option<ControlJob> {
        if !self.host_coming() || self.held.0.len() >= MAX_HELD || job.give_up <= now() {
            return Some(job);
        }
        debug!(request_id = %job.request.request_id, session_id = %job.request.session_id,
               "no compute host is up yet; the control request waits for one");
        let after = job.give_up.saturating_duration_since(now());
        self.myself.send_after(after, || HostSupervisorMsg::HeldDue);
        self.held.0.push_back(Held::Control(job));
        None
    }

    /// A host said `hello`: everything held goes out, in order.
    pub(super) fn release_held(&mut self) {
        for held in std::mem::take(&mut self.held.0) {
            match held {
                Held::Turn(t) => self.start_turn(t),
                Held::Control(job) => self.dispatch_control(job),
            }
        }
    }

    /// Fails every held item, and every turn waiting for room: no slot
    /// will come back for them.
    pub(super) fn fail_held(&mut self, message: &str) {
        let waiting = self.fair.drain().into_iter().map(Held::Turn);
        let held: Vec<Held> = std::mem::take(&mut self.held.0)
            .into_iter()
            .chain(waiting)
            .collect();
        for held in held {
            match held {
                Held::Turn(t) => {
                    info!(turn_id = %t.start.turn_id, session_id = %t.start.session_id,
                          trace_id = %t.start.trace_id, "no compute host is coming for the held turn");
                    send_update(
                        &t.session,
                        t.start.turn_id,
                        TurnUpdate::Error {
                            reason: FailureReason::HostUnavailable.as_str().into(),
                            message: message.into(),
                        },
                    );
                }
                Held::Control(job) => {
                    let _ = job.reply.send(ControlOutcome::Error(message.into()));
                }
            }
        }
    }

    /// Fails the held control requests whose wait for a host is over.
    pub(super) fn expire_held(&mut self) {
        let now = now();
        let timeout_ms = self.config.hello_timeout.as_millis() as u64;
        let (due, kept): (VecDeque<Held>, VecDeque<Held>) = std::mem::take(&mut self.held.0)
            .into_iter()
            .partition(|h| matches!(h, Held::Control(job) if job.give_up <= now));
        self.held.0 = kept;
        for held in due {
            if let Held::Control(job) = held {
                info!(request_id = %job.request.request_id, session_id = %job.request.session_id,
                      timeout_ms, "no compute host came up for the control request");
                let _ = job.reply.send(ControlOutcome::Error(format!(
                    "no compute host came up within {timeout_ms} ms"
                )));
            }
        }
    }

    /// The session gave up on a turn that may still be held, or wait for
    /// room.
    pub(super) fn drop_held_turn(&mut self, turn_id: &TurnId) {
        self.held
            .0
            .retain(|h| !matches!(h, Held::Turn(t) if &t.start.turn_id == turn_id));
        self.fair.remove(|t| &t.start.turn_id == turn_id);
    }
}
