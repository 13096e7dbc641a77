//! `--max-live-sessions`, enforced where sessions are brought live.
//!
//! The registry owns the map of live sessions, so it keeps the bound
//! itself, at the moment the bound is passed: a session brought live past
//! it (created, or loaded by a request) makes the registry ask the least
//! recently active idle orphans to park, before it handles anything else.
//! A session whose park is under way (asked, or decided and stopping) no
//! longer counts as live, so every answer the registry gives afterwards
//! (a creation's, `session.events.stats`, the gauge) finds at most the
//! bound live, unless what is past it cannot be parked: a session with a
//! peer, a running turn, a queued prompt or a compression in flight, and
//! the session just brought live, which its request is about to use.
//!
//! A refused park (the session got a peer or work meanwhile) is made up at
//! once by parking the next candidate; the refuser sits out until a retry
//! a second later, so two sessions that keep refusing cannot keep the
//! registry busy. The reaper nudges the registry when a session becomes an
//! idle orphan while the count is over the bound (it may be the one to
//! park now). The orphan grace is not waited for: past the bound, idle
//! orphans go first, least recently active first.

use std::time::Duration;

use ractor::ActorRef;

use super::{RegistryMsg, RegistryState, SessionKey};
use crate::reaper::ParkReason;

/// How long a session that refused a park for the bound sits out.
const REFUSED_RETRY: Duration = Duration::from_secs(1);

/// The reaper numbers its orphanings from 1: a park the registry asks for
/// the bound names none of them, so its refusal touches no reaper timer.
pub(super) const BOUND_ORPHANING: u64 = 0;

impl RegistryState {
    /// Live sessions that count against the bound: those not on their way
    /// to being parked.
    pub(super) fn live_counted(&self) -> usize {
        self.live.len().saturating_sub(self.parking.len())
    }

    /// Whether the session counts against the bound.
    pub(super) fn counted(&self, key: &SessionKey) -> bool {
        !self.parking.contains(key)
    }

    /// Parks least recently active idle orphans while more sessions count
    /// as live than the bound; `spare` is the session just brought live.
    pub(super) fn enforce_bound(
        &mut self,
        myself: &ActorRef<RegistryMsg>,
        spare: Option<&SessionKey>,
    ) {
        let cap = self.ctx.config.max_live_sessions;
        let counted = self.live_counted();
        if counted <= cap {
            return;
        }
        let mut idle: Vec<(i64, SessionKey)> = self
            .live
            .iter()
            .filter(|(key, l)| {
                l.held.is_none()
                    && l.gauges.peers() == 0
                    && !l.gauges.busy()
                    && Some(*key) != spare
                    && !self.bound_refused.contains(*key)
            })
            .map(|(key, l)| (l.gauges.last_activity_ms(), key.clone()))
            .collect();
        let parking = idle.len().min(counted - cap);
        if parking == 0 {
            return;
        }
        // The `parking` least recently active, without sorting them all.
        idle.select_nth_unstable(parking - 1);
        idle.truncate(parking);
        for (_, key) in idle {
            self.park(myself, key, BOUND_ORPHANING, ParkReason::Lru);
        }
    }

    /// A park asked for the bound was refused: the next candidate goes now,
    /// the refuser after [`REFUSED_RETRY`].
    pub(super) fn bound_park_refused(&mut self, myself: &ActorRef<RegistryMsg>, key: SessionKey) {
        self.bound_refused.insert(key);
        if !self.bound_retry_armed {
            self.bound_retry_armed = true;
            drop(myself.send_after(REFUSED_RETRY, || RegistryMsg::BoundRetry));
        }
        self.report_live_count();
        self.enforce_bound(myself, None);
    }

    /// The retry: every session is a candidate again.
    pub(super) fn bound_retry(&mut self, myself: &ActorRef<RegistryMsg>) {
        self.bound_retry_armed = false;
        self.bound_refused.clear();
        self.enforce_bound(myself, None);
    }
}
