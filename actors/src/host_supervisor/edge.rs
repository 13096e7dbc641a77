//! The host edge: what a compute host may say, and what happens when it
//! says something else.
//!
//! - A `hello` must speak our protocol version and carry the pid of the
//!   process the gateway started (a wrapper must `exec` the host). Any other
//!   first `hello` is refused: the host is stopped and the slot restarted,
//!   which counts against its restart intensity, so a host that always lies
//!   ends up resting instead of looping.
//! - Well-formed frames a host may not send (event types of Part 2's list
//!   only, and no `status.update` of a kind the gateway announces; frames
//!   for another host's turns, answers to requests nobody made, a second
//!   `hello`, an unasked `shutdown.ack`) are dropped and
//!   logged sparingly, like undecodable lines, through the slot's
//!   [`crate::sparse_log::SparseLog`]: a host can write them far faster
//!   than a log can take them.
//! - A line over the host line cap, or nested deeper than 64 levels, that
//!   named a turn ends that turn with an error (`host_line_too_long`,
//!   `host_protocol_error`), and the host is told to stop working on it;
//!   one that named a control request fails that request. The line itself
//!   never got past the reader ([`crate::host`]).

use tether_protocol::{HostEvent, ToHost, TurnId};
use tracing::{info, warn};

use super::{send_update, HostSupervisorState, Phase};
use crate::host::Refusal;
use crate::turn::TurnUpdate;

/// The host protocol version this gateway speaks.
pub(super) const PROTOCOL_VERSION: u32 = 1;

impl HostSupervisorState {
    /// Counts a well-formed frame the host of `slot` may not send; `Some(n)`
    /// when this one should be logged.
    pub(super) fn forbidden_frame(&self, slot: u32) -> Option<u64> {
        self.slots
            .get(slot as usize)
            .and_then(|s| s.forbidden.hit())
    }

    /// Whether a host may send this event (else it is dropped here, before
    /// any session sees it).
    pub(super) fn allowed_event(&self, slot: u32, turn_id: &TurnId, event: &HostEvent) -> bool {
        let Some(why) = event.forbidden() else {
            return true;
        };
        if let Some(n) = self.forbidden_frame(slot) {
            warn!(host_id = slot, turn_id = %turn_id, kind = %event.kind, forbidden_frames = n,
                  why, "event a host may not send; dropped");
        }
        false
    }

    /// The host of `slot` (process `pid`) said `hello`.
    pub(super) fn hello(
        &mut self,
        slot: u32,
        pid: u32,
        said_pid: u32,
        protocol: u32,
        engine: &str,
        version: &str,
    ) {
        let Some(s) = self.slots.get_mut(slot as usize) else {
            return;
        };
        if s.phase != Phase::Starting {
            if let Some(n) = s.forbidden.hit() {
                warn!(
                    host_id = slot,
                    pid,
                    forbidden_frames = n,
                    "second hello from a host; ignored"
                );
            }
            return;
        }
        let refusal = if protocol != PROTOCOL_VERSION {
            Some(format!(
                "its hello speaks protocol {protocol}, not {PROTOCOL_VERSION}"
            ))
        } else if said_pid != pid {
            Some(format!(
                "its hello says pid {said_pid}, but the process started is {pid}"
            ))
        } else {
            None
        };
        if let Some(reason) = refusal {
            warn!(host_id = slot, pid, said_pid, protocol, expected_protocol = PROTOCOL_VERSION,
                  engine, version, reason = %reason, "compute host hello refused; restarting the slot");
            s.refused = true;
            if let Some(host) = &s.host {
                // Its stop comes back as `HostStopped`: the slot restarts
                // under its policy, like after any death.
                host.stop(Some(format!("hello refused: {reason}")));
            }
            return;
        }
        s.phase = Phase::Up;
        s.pid = Some(pid);
        info!(host_id = slot, pid, engine, version, "compute host up");
        self.registry.record(slot, pid);
        self.publish_up();
        self.release_held();
    }

    /// A line refused at the edge (`why`) named `turn_id` and/or
    /// `request_id`.
    pub(super) fn refused(
        &mut self,
        slot: u32,
        pid: u32,
        turn_id: Option<TurnId>,
        request_id: Option<String>,
        why: Refusal,
    ) {
        let message = why.message();
        if let Some(turn_id) = turn_id {
            if self.route_of(slot, &turn_id).is_some() {
                if let Some(route) = self.remove_route(&turn_id) {
                    warn!(host_id = slot, pid, turn_id = %turn_id, session_id = %route.session_id,
                          trace_id = %route.trace_id, error = %message,
                          "a line of the turn was refused; the turn ends with an error");
                    // The host may go on with a turn nobody waits for.
                    self.send_to(
                        slot,
                        ToHost::Interrupt {
                            turn_id: turn_id.clone(),
                        },
                    );
                    send_update(
                        &route.session,
                        turn_id,
                        TurnUpdate::Error {
                            reason: why.reason().as_str().into(),
                            message: message.clone(),
                        },
                    );
                }
            }
        }
        if let Some(request_id) = request_id {
            self.answer(slot, request_id, Err(message));
        }
    }
}
