//! OTP-style restart policy as data.
//!
//! ractor reports `SupervisionEvent::ActorFailed` / `ActorTerminated` but
//! leaves the policy to us. Every supervisor in tether (the root `Gateway`,
//! the `Registry` for sessions, the `HostSupervisor` for worker slots) uses
//! the same two pieces: a [`RestartPolicy`] that says what to do, and a
//! [`RestartTracker`] per child that remembers recent restarts and decides
//! between "restart after this backoff" and, past the intensity, what the
//! policy's [`AfterIntensity`] says: escalate (core actors: a gateway that
//! cannot keep its store writer is better stopped), or rest until the period
//! has passed and then try again (host slots: the intensity is a *rate*, and
//! a slot that gave up for good would let one client take every compute
//! host down until the gateway restarts).
//!
//! The tracker is pure (time is passed in), so the intensity rules are unit
//! tested without sleeping.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Which children restart when one stops unexpectedly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Only the child that stopped is restarted (Erlang's `one_for_one`).
    OneForOne,
    /// The child is never restarted (connections: a dead peer's socket is gone).
    Temporary,
}

/// Backoff between a failure and the restart it triggers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backoff {
    /// Restart at once.
    None,
    /// `min(max, base · 2^(n−1))` for the n-th restart inside the period.
    Exponential { base: Duration, max: Duration },
}

/// What happens to a child that stops once more after `intensity` restarts
/// within the period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterIntensity {
    /// Give up: the supervisor stops (Erlang's behaviour).
    Escalate,
    /// Leave the child down until the period since its latest restart has
    /// passed (the window is empty again), then restart it with the usual
    /// backoff and a fresh budget. The supervisor goes on meanwhile.
    Rest,
}

/// Restart policy of one supervisor, as data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    pub strategy: Strategy,
    /// At most this many restarts ...
    pub intensity: u32,
    /// ... within this sliding period; one more and `after_intensity` applies.
    pub period: Duration,
    pub backoff: Backoff,
    pub after_intensity: AfterIntensity,
}

impl RestartPolicy {
    /// Core actors (store writer, registry): a few quick restarts, then the
    /// root shuts the gateway down cleanly rather than limping along.
    pub const fn core() -> Self {
        Self {
            strategy: Strategy::OneForOne,
            intensity: 3,
            period: Duration::from_secs(10),
            backoff: Backoff::None,
            after_intensity: AfterIntensity::Escalate,
        }
    }
}

/// What a supervisor does about a child that stopped without being asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Start a replacement after `after`; this is restart number `attempt`
    /// (1-based) inside the current period.
    Restart { after: Duration, attempt: u32 },
    /// Do not restart; the child stays down.
    Ignore,
    /// Intensity exceeded under [`AfterIntensity::Escalate`]: stop this
    /// supervisor.
    Escalate,
    /// Intensity exceeded under [`AfterIntensity::Rest`]: leave the child
    /// down until `until`, then ask [`RestartTracker::on_rest_over`].
    Rest { until: Instant },
}

/// Sliding-window restart counter for one child.
#[derive(Debug, Clone)]
pub struct RestartTracker {
    policy: RestartPolicy,
    recent: VecDeque<Instant>,
    total: u32,
    /// Set while the child rests (past its intensity, under `Rest`).
    resting_until: Option<Instant>,
}

impl RestartTracker {
    pub fn new(policy: RestartPolicy) -> Self {
        Self {
            policy,
            recent: VecDeque::new(),
            total: 0,
            resting_until: None,
        }
    }

    pub fn policy(&self) -> &RestartPolicy {
        &self.policy
    }

    /// Restarts granted since this tracker was created.
    pub fn total_restarts(&self) -> u32 {
        self.total
    }

    /// When the current rest ends, while the child rests.
    #[cfg(test)]
    pub fn resting_until(&self) -> Option<Instant> {
        self.resting_until
    }

    /// Records an unexpected stop at `now` and decides what to do.
    pub fn on_stop(&mut self, now: Instant) -> Decision {
        if self.policy.strategy == Strategy::Temporary {
            return Decision::Ignore;
        }
        self.forget_before(now);
        if self.recent.len() as u32 >= self.policy.intensity {
            return match self.policy.after_intensity {
                AfterIntensity::Escalate => Decision::Escalate,
                AfterIntensity::Rest => {
                    // Until the latest restart leaves the window, so the
                    // retry starts a fresh budget. With no restart in the
                    // window (intensity 0) a whole period from now.
                    let since = self.recent.back().copied().unwrap_or(now);
                    let until = since + self.policy.period;
                    self.resting_until = Some(until);
                    Decision::Rest { until }
                }
            };
        }
        self.grant(now)
    }

    /// The rest that [`Decision::Rest`] asked for is over at `now`: the
    /// retry is granted (it counts as a restart, the first of a new window,
    /// with that restart's backoff), even under intensity 0, since retrying
    /// is the point of resting. Asked early, it answers the same `Rest`.
    pub fn on_rest_over(&mut self, now: Instant) -> Decision {
        match self.resting_until {
            Some(until) if now < until => Decision::Rest { until },
            _ => {
                self.resting_until = None;
                self.forget_before(now);
                self.grant(now)
            }
        }
    }

    /// Drops the restarts that left the sliding window.
    fn forget_before(&mut self, now: Instant) {
        while let Some(first) = self.recent.front() {
            if now.saturating_duration_since(*first) >= self.policy.period {
                self.recent.pop_front();
            } else {
                break;
            }
        }
    }

    fn grant(&mut self, now: Instant) -> Decision {
        self.recent.push_back(now);
        self.total += 1;
        let attempt = self.recent.len() as u32;
        Decision::Restart {
            after: backoff_for(self.policy.backoff, attempt),
            attempt,
        }
    }
}

/// The delay before restart number `attempt` (1-based).
pub fn backoff_for(backoff: Backoff, attempt: u32) -> Duration {
    match backoff {
        Backoff::None => Duration::ZERO,
        Backoff::Exponential { base, max } => {
            let shift = attempt.saturating_sub(1).min(20);
            base.saturating_mul(1u32 << shift).min(max)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(intensity: u32, period_s: u64) -> RestartPolicy {
        RestartPolicy {
            strategy: Strategy::OneForOne,
            intensity,
            period: Duration::from_secs(period_s),
            backoff: Backoff::Exponential {
                base: Duration::from_millis(250),
                max: Duration::from_secs(5),
            },
            after_intensity: AfterIntensity::Escalate,
        }
    }

    fn resting(intensity: u32, period_s: u64) -> RestartPolicy {
        RestartPolicy {
            after_intensity: AfterIntensity::Rest,
            ..policy(intensity, period_s)
        }
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn restarts_within_intensity_then_escalates() {
        let mut t = RestartTracker::new(policy(3, 300));
        let t0 = Instant::now();
        let d: Vec<_> = (0..4)
            .map(|i| t.on_stop(t0 + Duration::from_secs(i)))
            .collect();
        assert_eq!(
            d[0],
            Decision::Restart {
                after: Duration::from_millis(250),
                attempt: 1
            }
        );
        assert_eq!(
            d[1],
            Decision::Restart {
                after: Duration::from_millis(500),
                attempt: 2
            }
        );
        assert_eq!(
            d[2],
            Decision::Restart {
                after: Duration::from_millis(1000),
                attempt: 3
            }
        );
        assert_eq!(d[3], Decision::Escalate);
        assert_eq!(t.total_restarts(), 3);
    }

    #[test]
    fn old_restarts_leave_the_window() {
        let mut t = RestartTracker::new(policy(2, 10));
        let t0 = Instant::now();
        assert!(matches!(t.on_stop(t0), Decision::Restart { .. }));
        assert!(matches!(
            t.on_stop(t0 + Duration::from_secs(1)),
            Decision::Restart { .. }
        ));
        assert_eq!(t.on_stop(t0 + Duration::from_secs(2)), Decision::Escalate);
        // Ten seconds after the first restart it no longer counts.
        assert_eq!(
            t.on_stop(t0 + Duration::from_secs(10)),
            Decision::Restart {
                after: Duration::from_millis(500),
                attempt: 2
            }
        );
    }

    #[test]
    fn zero_intensity_escalates_at_once() {
        let mut t = RestartTracker::new(policy(0, 10));
        assert_eq!(t.on_stop(Instant::now()), Decision::Escalate);
    }

    #[test]
    fn temporary_children_are_never_restarted() {
        let mut t = RestartTracker::new(RestartPolicy {
            strategy: Strategy::Temporary,
            ..policy(3, 10)
        });
        assert_eq!(t.on_stop(Instant::now()), Decision::Ignore);
        assert_eq!(t.on_stop(Instant::now()), Decision::Ignore);
    }

    #[test]
    fn backoff_is_capped() {
        let b = Backoff::Exponential {
            base: Duration::from_millis(250),
            max: Duration::from_secs(5),
        };
        assert_eq!(backoff_for(b, 1), Duration::from_millis(250));
        assert_eq!(backoff_for(b, 5), Duration::from_secs(4));
        assert_eq!(backoff_for(b, 6), Duration::from_secs(5));
        assert_eq!(backoff_for(b, 60), Duration::from_secs(5));
        assert_eq!(backoff_for(Backoff::None, 3), Duration::ZERO);
    }

    #[test]
    fn past_its_intensity_a_resting_child_waits_for_its_period_then_gets_a_fresh_budget() {
        let mut t = RestartTracker::new(resting(3, 300));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        for (i, s) in [0, 1, 2].into_iter().enumerate() {
            assert!(matches!(
                t.on_stop(at(s)),
                Decision::Restart { attempt, .. } if attempt == i as u32 + 1
            ));
        }
        // The fourth stop within the period: rest until the latest restart
        // (at 2 s) has left the window.
        assert_eq!(t.on_stop(at(3)), Decision::Rest { until: at(302) });
        assert_eq!(t.resting_until(), Some(at(302)));
        assert_eq!(t.total_restarts(), 3);
        // Asked early, it is still resting.
        assert_eq!(t.on_rest_over(at(100)), Decision::Rest { until: at(302) });
        // Then retried as the first restart of a new window, with its backoff.
        assert_eq!(
            t.on_rest_over(at(302)),
            Decision::Restart {
                after: MS(250),
                attempt: 1
            }
        );
        assert_eq!(t.resting_until(), None);
        assert_eq!(t.total_restarts(), 4);
        // The whole budget is back: two more restarts, then a rest again.
        assert!(matches!(
            t.on_stop(at(303)),
            Decision::Restart { attempt: 2, .. }
        ));
        assert!(matches!(
            t.on_stop(at(304)),
            Decision::Restart { attempt: 3, .. }
        ));
        assert_eq!(t.on_stop(at(305)), Decision::Rest { until: at(604) });
    }

    #[test]
    fn zero_intensity_rests_a_whole_period_and_then_retries_once() {
        let mut t = RestartTracker::new(resting(0, 10));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(t.on_stop(at(0)), Decision::Rest { until: at(10) });
        assert_eq!(
            t.on_rest_over(at(10)),
            Decision::Restart {
                after: MS(250),
                attempt: 1
            }
        );
        // The retry died too: another period from that retry.
        assert_eq!(t.on_stop(at(11)), Decision::Rest { until: at(20) });
        assert_eq!(t.total_restarts(), 1);
    }

    #[test]
    fn a_child_that_keeps_dying_is_restarted_at_most_intensity_times_per_period() {
        // Restarted the moment its backoff is over and dead at once, for
        // an hour of simulated time: in every window of one period there
        // are at most `intensity` restarts, and it is never left for good.
        let (intensity, period) = (3u32, Duration::from_secs(60));
        let mut t = RestartTracker::new(resting(intensity, 60));
        let t0 = Instant::now();
        let mut now = t0;
        let mut restarts = Vec::new();
        while now < t0 + Duration::from_secs(3600) {
            let mut decision = t.on_stop(now);
            if let Decision::Rest { until } = decision {
                assert!(until > now, "a rest ends in the future");
                now = until;
                decision = t.on_rest_over(now);
            }
            match decision {
                Decision::Restart { after, .. } => {
                    assert!(after <= Duration::from_secs(5));
                    restarts.push(now);
                    now += after;
                }
                other => panic!("a resting policy never gives up: {other:?}"),
            }
        }
        assert!(
            restarts.len() > 100,
            "retried all along: {}",
            restarts.len()
        );
        for (i, start) in restarts.iter().enumerate() {
            let within = restarts[i..]
                .iter()
                .take_while(|r| r.duration_since(*start) < period)
                .count();
            assert!(
                within <= intensity as usize,
                "{within} restarts in a period"
            );
        }
    }

    #[test]
    fn restarts_spread_wider_than_the_period_never_rest() {
        let mut t = RestartTracker::new(resting(1, 10));
        let t0 = Instant::now();
        for i in 0..20 {
            assert!(matches!(
                t.on_stop(t0 + Duration::from_secs(10 * i)),
                Decision::Restart { attempt: 1, .. }
            ));
        }
        assert_eq!(t.resting_until(), None);
    }

    #[test]
    fn the_core_policy_still_escalates() {
        let mut t = RestartTracker::new(RestartPolicy::core());
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(matches!(t.on_stop(t0), Decision::Restart { .. }));
        }
        assert_eq!(t.on_stop(t0), Decision::Escalate);
        assert_eq!(t.resting_until(), None);
    }
}
