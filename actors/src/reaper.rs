//! `Reaper`: decides when a live session without peers is parked.
//!
//! Sessions tell it when they lose their last peer (`Orphaned`), get one
//! back (`Adopted`) and, while orphaned, when their work ends (`Settled`).
//! The reaper owns every timer: the orphan grace, the activity staleness of
//! a running turn and the idle TTL. It never parks anything itself: it asks
//! the Registry, which asks the Session, and the Session refuses if it has
//! a peer, a running turn or a queued prompt by then. So the reaper may be
//! wrong about a session (its messages race with the session's life)
//! without a session ever being parked mid-turn.
//!
//! The bound on live sessions (`--max-live-sessions`) is the Registry's to
//! keep, where sessions are brought live (`registry/bound.rs`); the reaper
//! only tells it when a session becomes an idle orphan while the count is
//! over the bound, since that session may be the one to park now.
//!
//! Every orphaning of a session gets its own number (`orphaning`, counted
//! by the reaper). A timer names the orphaning it was armed for; one that
//! fires for a session that was adopted (and maybe orphaned again) in
//! between finds another number and does nothing. (Not to be confused with
//! the store writer's `append_gen`, which orders a session's appends.)

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tether_protocol::now_ms;
use tracing::{debug, info};

use crate::ctx::{Ctx, SessionGauges};
use crate::registry::{RegistryMsg, SessionKey};

/// Why a session is parked (PROTOCOL `session.reclaimed` reasons, plus the
/// staleness of a running turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParkReason {
    /// The orphan grace passed with nobody attached.
    Orphan,
    /// Idle longer than the session TTL.
    Ttl,
    /// More sessions live than `max_live_sessions`; this one was the least
    /// recently active idle orphan (`registry/bound.rs`).
    Lru,
    /// Its running turn reported no activity within the staleness window:
    /// interrupt it, then park.
    Stale,
}

impl ParkReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ParkReason::Orphan => "orphan",
            ParkReason::Ttl => "ttl",
            ParkReason::Lru => "lru",
            ParkReason::Stale => "stale",
        }
    }
}

pub enum ReaperMsg {
    /// The session has no peer now (or was brought live without one).
    Orphaned {
        key: SessionKey,
        gauges: Arc<SessionGauges>,
    },
    /// A peer attached: every timer of the session is void.
    Adopted { key: SessionKey },
    /// An orphaned session's turn (and queue) ended.
    Settled { key: SessionKey },
    /// The session stopped (parked, closed, crashed).
    Gone { key: SessionKey },
    /// From the registry: how many sessions are live now.
    LiveCount { live: usize },
    /// From the registry: the session refused (or missed) a park.
    ParkRefused { key: SessionKey, orphaning: u64 },
    /// Internal: a timer armed for orphaning number `orphaning` fired.
    Due { key: SessionKey, orphaning: u64 },
}

struct Orphan {
    /// Which orphaning of the session this entry is (module doc).
    orphaning: u64,
    /// When the grace ends (ms since the epoch).
    grace_end_ms: i64,
    gauges: Arc<SessionGauges>,
    /// A park was asked for and not yet refused.
    parking: bool,
    /// When the earliest armed timer fires (ms); one timer at a time is
    /// enough, so a later one is not armed while an earlier one waits.
    next_due_ms: Option<i64>,
}

pub struct ReaperState {
    ctx: Ctx,
    orphans: HashMap<SessionKey, Orphan>,
    next_orphaning: u64,
    live: usize,
}

pub struct Reaper;

impl Actor for Reaper {
    type Msg = ReaperMsg;
    type State = ReaperState;
    type Arguments = Ctx;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        ctx: Ctx,
    ) -> Result<Self::State, ActorProcessingErr> {
        // A restarted reaper starts empty; the root asks the registry to
        // have every live session report again, so orphans are re-learned.
        Ok(ReaperState {
            ctx,
            orphans: HashMap::new(),
            next_orphaning: 1,
            live: 0,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ReaperMsg::Orphaned { key, gauges } => state.orphaned(&myself, key, gauges),
            ReaperMsg::Adopted { key } | ReaperMsg::Gone { key } => {
                state.orphans.remove(&key);
            }
            ReaperMsg::Settled { key } => {
                if let Some(o) = state.orphans.get(&key) {
                    if now_ms() >= o.grace_end_ms {
                        let orphaning = o.orphaning;
                        state.check(&myself, key, orphaning);
                    }
                }
                state.nudge_bound();
            }
            ReaperMsg::LiveCount { live } => state.live = live,
            ReaperMsg::ParkRefused { key, orphaning } => {
                if let Some(o) = state.orphans.get_mut(&key) {
                    if o.orphaning == orphaning {
                        o.parking = false;
                        // Something raced the park (an append in flight,
                        // a turn that just started): look again shortly.
                        state.arm(&myself, key, orphaning, Duration::from_secs(1));
                    }
                }
            }
            ReaperMsg::Due { key, orphaning } => {
                if let Some(o) = state.orphans.get_mut(&key) {
                    // Whichever timer fired, the next look re-arms one if
                    // needed (a spare timer costs a look, a missing one a
                    // session that is never parked).
                    if o.orphaning == orphaning {
                        o.next_due_ms = None;
                    }
                }
                state.check(&myself, key, orphaning);
            }
        }
        Ok(())
    }
}

impl ReaperState {
    fn orphaned(
        &mut self,
        myself: &ActorRef<ReaperMsg>,
        key: SessionKey,
        gauges: Arc<SessionGauges>,
    ) {
        let orphaning = self.next_orphaning;
        self.next_orphaning += 1;
        let grace = self.ctx.config.orphan_grace;
        debug!(session_id = %key.1, orphaning, grace_s = grace.as_secs(), "session orphaned");
        self.orphans.insert(
            key.clone(),
            Orphan {
                orphaning,
                grace_end_ms: now_ms() + grace.as_millis() as i64,
                gauges,
                parking: false,
                next_due_ms: None,
            },
        );
        self.check(myself, key, orphaning);
        self.nudge_bound();
    }

    /// A timer fired (or a session settled): park, wait on, or interrupt.
    fn check(&mut self, myself: &ActorRef<ReaperMsg>, key: SessionKey, orphaning: u64) {
        let Some(o) = self.orphans.get(&key) else {
            return;
        };
        if o.orphaning != orphaning || o.parking {
            // Adopted (and maybe orphaned again) since this timer was armed.
            return;
        }
        let seen = Seen {
            now_ms: now_ms(),
            grace_end_ms: o.grace_end_ms,
            last_activity_ms: o.gauges.last_activity_ms(),
            busy: o.gauges.busy(),
        };
        match verdict(&seen, &Limits::of(&self.ctx)) {
            Verdict::Park(reason) => self.park(key, reason),
            Verdict::Wait(after) => self.arm(myself, key, orphaning, after),
        }
    }

    /// A session became an idle orphan: past the bound, the registry parks
    /// the least recently active ones (`registry/bound.rs`).
    fn nudge_bound(&self) {
        if self.live <= self.ctx.config.max_live_sessions {
            return;
        }
        if let Ok(registry) = self.ctx.registry() {
            let _ = registry.cast(RegistryMsg::EnforceBound);
        }
    }

    /// Arms a timer for an orphan unless an earlier one is already armed
    /// (that one looks again and re-arms as needed).
    fn arm(
        &mut self,
        myself: &ActorRef<ReaperMsg>,
        key: SessionKey,
        orphaning: u64,
        after: Duration,
    ) {
        let Some(o) = self.orphans.get_mut(&key) else {
            return;
        };
        let due = now_ms() + after.as_millis() as i64;
        if o.next_due_ms.is_some_and(|d| d <= due) {
            return;
        }
        o.next_due_ms = Some(due);
        // The timer task runs detached; a stale one is disarmed by `orphaning`.
        drop(myself.send_after(after, move || ReaperMsg::Due { key, orphaning }));
    }

    fn park(&mut self, key: SessionKey, reason: ParkReason) {
        let Some(o) = self.orphans.get_mut(&key) else {
            return;
        };
        o.parking = true;
        let orphaning = o.orphaning;
        info!(session_id = %key.1, profile = %key.0, reason = reason.as_str(), "reclaiming session");
        match self.ctx.registry() {
            Ok(registry) => {
                let _ = registry.cast(RegistryMsg::Park {
                    key,
                    orphaning,
                    reason,
                });
            }
            // The registry is restarting: its sessions report again to the
            // next one, which re-arms everything.
            Err(_) => o.parking = false,
        }
    }
}

/// What the reaper knows of an orphan when one of its timers fires.
#[derive(Debug, Clone, Copy)]
struct Seen {
    now_ms: i64,
    grace_end_ms: i64,
    last_activity_ms: i64,
    busy: bool,
}

/// The reapers' windows, in ms.
#[derive(Debug, Clone, Copy)]
struct Limits {
    stale_ms: i64,
    ttl_ms: i64,
}

impl Limits {
    fn of(ctx: &Ctx) -> Self {
        Self {
            stale_ms: ctx.config.activity_stale.as_millis() as i64,
            ttl_ms: ctx.config.session_ttl.as_millis() as i64,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Park(ParkReason),
    /// Look again after this long.
    Wait(Duration),
}

/// PROTOCOL 1.7 as a pure function: a busy orphan is only ever interrupted
/// (after the grace, once silent for the staleness window); an idle one is
/// parked after the grace or the TTL, whichever ends first.
fn verdict(s: &Seen, l: &Limits) -> Verdict {
    let idle_ms = s.now_ms.saturating_sub(s.last_activity_ms);
    let grace_left = s.grace_end_ms - s.now_ms;
    let wait = |ms: i64| Verdict::Wait(Duration::from_millis(ms.max(1) as u64));
    if s.busy {
        let stale_left = l.stale_ms - idle_ms;
        if grace_left <= 0 && stale_left <= 0 {
            return Verdict::Park(ParkReason::Stale);
        }
        return wait(stale_left.max(grace_left));
    }
    if grace_left <= 0 {
        Verdict::Park(ParkReason::Orphan)
    } else if idle_ms >= l.ttl_ms {
        Verdict::Park(ParkReason::Ttl)
    } else {
        wait(grace_left.min(l.ttl_ms - idle_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        stale_ms: 600_000,
        ttl_ms: 6 * 3_600_000,
    };

    fn seen(now_ms: i64, grace_end_ms: i64, last_activity_ms: i64, busy: bool) -> Seen {
        Seen {
            now_ms,
            grace_end_ms,
            last_activity_ms,
            busy,
        }
    }

    #[test]
    fn an_idle_orphan_waits_out_its_grace_then_is_parked() {
        let v = verdict(&seen(1_000, 21_000, 1_000, false), &LIMITS);
        assert_eq!(v, Verdict::Wait(Duration::from_secs(20)));
        let v = verdict(&seen(21_000, 21_000, 1_000, false), &LIMITS);
        assert_eq!(v, Verdict::Park(ParkReason::Orphan));
    }

    #[test]
    fn a_zero_grace_parks_an_idle_orphan_at_once() {
        let v = verdict(&seen(5_000, 5_000, 5_000, false), &LIMITS);
        assert_eq!(v, Verdict::Park(ParkReason::Orphan));
    }

    #[test]
    fn the_ttl_parks_before_a_longer_grace_ends() {
        let ttl = LIMITS.ttl_ms;
        let v = verdict(&seen(ttl, 10 * ttl, 0, false), &LIMITS);
        assert_eq!(v, Verdict::Park(ParkReason::Ttl));
        // Idle for half the TTL: wait for the other half.
        let v = verdict(&seen(ttl / 2, 10 * ttl, 0, false), &LIMITS);
        assert_eq!(v, Verdict::Wait(Duration::from_millis((ttl / 2) as u64)));
    }

    #[test]
    fn a_busy_orphan_is_never_parked_only_interrupted_when_stale() {
        // Past the grace but the host spoke 10 s ago: wait until stale.
        let v = verdict(&seen(100_000, 20_000, 90_000, true), &LIMITS);
        assert_eq!(v, Verdict::Wait(Duration::from_millis(590_000)));
        // Silent for the whole window after the grace: interrupt.
        let v = verdict(&seen(700_000, 20_000, 100_000, true), &LIMITS);
        assert_eq!(v, Verdict::Park(ParkReason::Stale));
        // Silent long enough but still within the grace: wait for the grace.
        let v = verdict(&seen(700_000, 750_000, 0, true), &LIMITS);
        assert_eq!(v, Verdict::Wait(Duration::from_millis(50_000)));
        // Even past the TTL a busy orphan is not parked.
        let v = verdict(
            &seen(LIMITS.ttl_ms * 2, 0, LIMITS.ttl_ms * 2 - 1, true),
            &LIMITS,
        );
        assert!(matches!(v, Verdict::Wait(_)));
    }
}
