//! OTP-style restart policy as data.
//!
//! ractor reports `SupervisionEvent::ActorFailed` / `ActorTerminated` but
//! leaves the policy to us. Every supervisor in tether (the root `Gateway`,
//! the `Registry` for sessions, the `HostSupervisor` for worker slots) uses
//! the same two pieces: a [`RestartPolicy`] that says what to do, and a
//! [`RestartTracker`] per child that remembers recent restarts and decides
//! between "restart after this backoff" and "give up and escalate".
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

/// Restart policy of one supervisor, as data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    pub strategy: Strategy,
    /// At most this many restarts ...
    pub intensity: u32,
    /// ... within this sliding period; one more and the supervisor escalates.
    pub period: Duration,
    pub backoff: Backoff,
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
    /// Intensity exceeded: stop this supervisor (or, for a slot, leave it down).
    Escalate,
}

/// Sliding-window restart counter for one child.
#[derive(Debug, Clone)]
pub struct RestartTracker {
    policy: RestartPolicy,
    recent: VecDeque<Instant>,
    total: u32,
}

impl RestartTracker {
    pub fn new(policy: RestartPolicy) -> Self {
        Self {
            policy,
            recent: VecDeque::new(),
            total: 0,
        }
    }

    pub fn policy(&self) -> &RestartPolicy {
        &self.policy
    }

    /// Restarts granted since this tracker was created.
    pub fn total_restarts(&self) -> u32 {
        self.total
    }

    /// Records an unexpected stop at `now` and decides what to do.
    pub fn on_stop(&mut self, now: Instant) -> Decision {
        if self.policy.strategy == Strategy::Temporary {
            return Decision::Ignore;
        }
        while let Some(first) = self.recent.front() {
            if now.saturating_duration_since(*first) >= self.policy.period {
                self.recent.pop_front();
            } else {
                break;
            }
        }
        if self.recent.len() as u32 >= self.policy.intensity {
            return Decision::Escalate;
        }
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
        }
    }

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
}
