//! Slots' lives: starting hosts, their deaths and restarts (and rests past
//! the restart intensity), the drain.

use std::sync::atomic::Ordering;
use tether_protocol::FailureReason;

use ractor::{Actor, ActorRef, RpcReplyPort};
use tether_protocol::{HostStat, ToHost, TurnId};
use tracing::{debug, error, info, warn};

use super::{now, send_update, ControlError, HostSupervisorMsg, HostSupervisorState, Phase};
use crate::host::{Host, HostArgs, HostMsg};
use crate::session::SessionMsg;
use crate::supervisor::Decision;
use crate::turn::{ControlOutcome, TurnUpdate};

impl HostSupervisorState {
    /// Starts the host of `slot` (a new incarnation).
    pub(super) async fn spawn_host(&mut self, myself: &ActorRef<HostSupervisorMsg>, slot: u32) {
        let Some(s) = self.slots.get_mut(slot as usize) else {
            return;
        };
        s.incarnation += 1;
        let args = HostArgs {
            slot,
            incarnation: s.incarnation,
            config: self.config.clone(),
            supervisor: myself.clone(),
        };
        match Actor::spawn_linked(None, Host, args, myself.get_cell()).await {
            Ok((actor, _)) => {
                self.by_actor.insert(actor.get_id(), (slot, s.incarnation));
                s.host = Some(actor);
                s.phase = Phase::Starting;
                s.pid = None;
                s.finishing = false;
                s.refused = false;
                s.forbidden.reset();
            }
            Err(e) => {
                // Counts like a crash (e.g. out of file descriptors for a
                // moment): the slot backs off, and rests past its intensity.
                let reason = format!("cannot start: {e}");
                self.host_died(myself, slot, None, &reason);
            }
        }
    }

    /// The backoff of `slot` is over.
    pub(super) async fn restart(&mut self, myself: &ActorRef<HostSupervisorMsg>, slot: u32) {
        let waiting = self
            .slots
            .get(slot as usize)
            .is_some_and(|s| s.phase == Phase::Backoff);
        if waiting && !self.stopping {
            self.spawn_host(myself, slot).await;
        }
    }

    /// The rest of `slot` is over: retry it (after the first restart's
    /// backoff, as the first restart of a new window).
    pub(super) fn rest_over(&mut self, myself: &ActorRef<HostSupervisorMsg>, slot: u32) {
        if self.stopping {
            return;
        }
        let Some(s) = self.slots.get_mut(slot as usize) else {
            return;
        };
        if s.phase != Phase::Resting {
            return;
        }
        match s.tracker.on_rest_over(now()) {
            Decision::Restart { after, attempt } => {
                info!(
                    host_id = slot,
                    attempt,
                    backoff_ms = after.as_millis() as u64,
                    restarts = s.tracker.total_restarts(),
                    "retrying a compute host slot after its rest"
                );
                s.phase = Phase::Backoff;
                self.metrics.host_restarts.inc();
                myself.send_after(after, move || HostSupervisorMsg::Restart { slot });
            }
            Decision::Rest { until } => {
                // Woken early (timers are not exact): sleep on.
                let left = until.saturating_duration_since(now());
                myself.send_after(left, move || HostSupervisorMsg::RestOver { slot });
            }
            Decision::Escalate | Decision::Ignore => s.phase = Phase::Down,
        }
        self.publish_up();
    }

    pub(super) fn on_host_stopped(
        &mut self,
        myself: &ActorRef<HostSupervisorMsg>,
        slot: u32,
        incarnation: u64,
        reason: &str,
    ) {
        let Some(s) = self.slots.get_mut(slot as usize) else {
            return;
        };
        if s.incarnation != incarnation || s.host.is_none() {
            debug!(host_id = slot, incarnation, "stale host stop ignored");
            return;
        }
        s.host = None;
        let pid = s.pid.take();
        self.host_died(myself, slot, pid, reason);
        if self.stopping {
            self.finish_shutdown_if_done();
        }
    }

    /// Fails everything the host of `slot` held, then restarts the slot or
    /// leaves it down, per its restart policy.
    pub(super) fn host_died(
        &mut self,
        myself: &ActorRef<HostSupervisorMsg>,
        slot: u32,
        pid: Option<u32>,
        reason: &str,
    ) {
        self.registry.remove(slot);
        let message = format!("compute host {slot} died: {reason}");
        self.fail_slot(slot, FailureReason::HostCrash, &message);
        let stopping = self.stopping;
        let Some(s) = self.slots.get_mut(slot as usize) else {
            return;
        };
        if stopping {
            info!(host_id = slot, pid, reason, "compute host stopped");
            s.phase = Phase::Down;
            self.publish_up();
            return;
        }
        warn!(host_id = slot, pid, reason, "compute host died");
        self.start.died(reason);
        match s.tracker.on_stop(now()) {
            Decision::Restart { after, attempt } => {
                info!(
                    host_id = slot,
                    attempt,
                    backoff_ms = after.as_millis() as u64,
                    "restarting compute host"
                );
                s.phase = Phase::Backoff;
                self.metrics.host_restarts.inc();
                myself.send_after(after, move || HostSupervisorMsg::Restart { slot });
            }
            Decision::Rest { until } => {
                let rest = until.saturating_duration_since(now());
                warn!(
                    host_id = slot,
                    restarts = s.tracker.total_restarts(),
                    intensity = s.tracker.policy().intensity,
                    period_s = s.tracker.policy().period.as_secs(),
                    rest_ms = rest.as_millis() as u64,
                    "compute host slot exceeded its restart intensity; it rests until its period has passed"
                );
                s.phase = Phase::Resting;
                self.metrics.host_rests.inc();
                myself.send_after(rest, move || HostSupervisorMsg::RestOver { slot });
            }
            Decision::Escalate => {
                error!(
                    host_id = slot,
                    restarts = s.tracker.total_restarts(),
                    "compute host exceeded its restart intensity; the slot stays down"
                );
                s.phase = Phase::Down;
            }
            Decision::Ignore => s.phase = Phase::Down,
        }
        self.publish_up();
    }

    /// Ends every turn routed to `slot` with `reason` and fails its control
    /// requests (waiting and late), each exactly once.
    pub(super) fn fail_slot(&mut self, slot: u32, reason: FailureReason, message: &str) {
        let ended: Vec<TurnId> = self
            .turns
            .iter()
            .filter(|(_, r)| r.slot == slot)
            .map(|(id, _)| id.clone())
            .collect();
        for turn_id in ended {
            if let Some(route) = self.remove_route(&turn_id) {
                info!(host_id = slot, turn_id = %turn_id, session_id = %route.session_id,
                      trace_id = %route.trace_id, %reason, "turn ended by the host's death");
                send_update(
                    &route.session,
                    turn_id,
                    TurnUpdate::Error {
                        reason: reason.as_str().into(),
                        message: message.into(),
                    },
                );
            }
        }
        let failed = self.acks.fail_slot(slot);
        for (request_id, w) in failed.waiters {
            debug!(
                host_id = slot,
                request_id, "control request failed by the host's death"
            );
            let _ = w.reply.send(ControlOutcome::Error(message.into()));
        }
        for (request_id, late) in failed.late {
            debug!(
                host_id = slot,
                request_id, "late control request failed by the host's death"
            );
            let _ = late.cast(SessionMsg::ControlLate {
                request_id,
                result: Err(ControlError::HostDied(message.into())),
            });
        }
    }

    /// Keeps the shared gauge equal to the number of slots that can take
    /// work (now, or once their start or restart finishes) and
    /// `hosts_ready` to those whose host said hello; fails held work when
    /// no slot is left that could take it. Tells [`HostStart`] the first
    /// hello, and a start where no slot is left before any.
    ///
    /// [`HostStart`]: super::HostStart
    pub(super) fn publish_up(&mut self) {
        let (up, ready) = if self.stopping {
            (0, 0)
        } else {
            (
                self.slots.iter().filter(|s| s.available()).count(),
                self.slots.iter().filter(|s| s.usable()).count(),
            )
        };
        self.up_slots.store(up, Ordering::Relaxed);
        self.metrics.hosts_ready.set(ready as i64);
        if ready > 0 {
            self.start.hello();
        } else if up == 0 && !self.stopping {
            self.start.none_left();
        }
        if up == 0 {
            self.fail_held("no compute host is up");
        }
    }

    pub(super) fn stats(&self) -> Vec<HostStat> {
        self.slots
            .iter()
            .map(|s| HostStat {
                host_id: s.id,
                pid: s.pid,
                state: s.phase.as_str().into(),
                active_turns: s.active_turns,
                restarts: s.tracker.total_restarts(),
            })
            .collect()
    }

    pub(super) fn shutdown(
        &mut self,
        myself: &ActorRef<HostSupervisorMsg>,
        reply: RpcReplyPort<()>,
    ) {
        let first = !self.stopping;
        self.stopping = true;
        self.publish_up();
        self.shutdown_replies.push(reply);
        if first {
            info!(hosts = self.live_hosts(), "shutting the compute hosts down");
            for s in &mut self.slots {
                if matches!(s.phase, Phase::Backoff | Phase::Resting) {
                    s.phase = Phase::Down;
                }
                if let Some(host) = &s.host {
                    let _ = host.cast(HostMsg::Send(ToHost::Shutdown));
                }
            }
            if self.live_hosts() > 0 {
                myself.send_after(self.config.shutdown_grace, || {
                    HostSupervisorMsg::ShutdownDeadline
                });
            }
        }
        self.finish_shutdown_if_done();
    }

    /// The grace is over: stop the Host actors that are left (each kills
    /// its process group); the reply goes out when their stops are handled.
    pub(super) fn shutdown_deadline(&mut self) {
        for s in &self.slots {
            if let Some(host) = &s.host {
                warn!(
                    host_id = s.id,
                    pid = s.pid,
                    "host did not exit within the shutdown grace; killing it"
                );
                host.stop(Some("shutdown grace over".into()));
            }
        }
    }

    fn live_hosts(&self) -> usize {
        self.slots.iter().filter(|s| s.host.is_some()).count()
    }

    fn finish_shutdown_if_done(&mut self) {
        if self.live_hosts() == 0 && !self.shutdown_replies.is_empty() {
            // Answered once hosts.json lists no host: a gateway that has
            // stopped leaves nothing for the next one to reap.
            let replies: Vec<_> = self.shutdown_replies.drain(..).collect();
            let flushed = self.registry.flushed();
            tokio::spawn(async move {
                flushed.await;
                for reply in replies {
                    let _ = reply.send(());
                }
            });
        }
    }

    /// The supervisor stopped: its children are stopped (and their
    /// processes killed); whatever they still held fails now.
    pub(super) fn stopped(&mut self) {
        for s in &mut self.slots {
            s.host = None;
            self.registry.remove(s.id);
            s.phase = Phase::Down;
            s.pid = None;
        }
        for slot in 0..self.slots.len() as u32 {
            self.fail_slot(
                slot,
                FailureReason::HostCrash,
                "the host supervisor stopped",
            );
        }
        let failed = self.acks.fail_all();
        for (_, w) in failed.waiters {
            let _ = w
                .reply
                .send(ControlOutcome::Error("the host supervisor stopped".into()));
        }
        for (request_id, late) in failed.late {
            let _ = late.cast(SessionMsg::ControlLate {
                request_id,
                result: Err(ControlError::Supervisor("stopped")),
            });
        }
        self.publish_up();
        self.finish_shutdown_if_done();
    }
}
