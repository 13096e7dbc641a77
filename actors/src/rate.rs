//! Per-peer rate limiting (PROTOCOL 1.6, 1.10): a token bucket; and the
//! plain bucket of a profile's requests per second.
//!
//! Every request, batch member and undecodable frame takes a token. A peer
//! out of tokens gets 4029 with the time until the next token; a peer that
//! stays limited for three seconds in a row is closed (1008), so a runaway
//! client cannot keep a session's peers and actors busy answering it.
//!
//! Pure: time is passed in, so the rules are unit tested without sleeping.

use std::time::{Duration, Instant};

/// How long a peer may stay limited before it is disconnected.
pub const LIMITED_FOR_CLOSE: Duration = Duration::from_secs(3);

/// What the limiter says about one unit of work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Refuse with 4029; a token is available again after this long.
    Limit {
        retry_after: Duration,
    },
    /// Limited for too long: close the connection.
    Close,
}

#[derive(Debug, Clone)]
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
    limited_since: Option<Instant>,
}

impl RateLimiter {
    /// `rate` tokens per second, at most `burst` saved up. A rate of 0
    /// turns limiting off.
    pub fn new(rate: u32, burst: u32, now: Instant) -> Self {
        Self {
            rate: f64::from(rate),
            burst: f64::from(burst.max(1)),
            tokens: f64::from(burst.max(1)),
            last: now,
            limited_since: None,
        }
    }

    pub fn check(&mut self, now: Instant) -> Verdict {
        if self.rate <= 0.0 {
            return Verdict::Allow;
        }
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            // Only a peer that is back under the rate (a token to spare) is
            // no longer "limited"; one that squeezes a request through as
            // each token drips in is still flooding.
            if self.tokens >= 1.0 {
                self.limited_since = None;
            }
            return Verdict::Allow;
        }
        let since = *self.limited_since.get_or_insert(now);
        if now.saturating_duration_since(since) >= LIMITED_FOR_CLOSE {
            return Verdict::Close;
        }
        let wait = (1.0 - self.tokens) / self.rate;
        Verdict::Limit {
            retry_after: Duration::from_secs_f64(wait),
        }
    }
}

/// A plain token bucket: `rate` tokens a second, at most `burst` saved.
/// Unlike [`RateLimiter`] it only refuses, never closes: the profile-wide
/// rate (`registry/ledger.rs`) is shared by many connections, and none of
/// them is the one to blame.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket. `rate` is at least 1.
    pub fn new(rate: u32, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            rate: f64::from(rate.max(1)),
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Takes a token, or says how long until one is there.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        Err(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
    }

    /// Whether [`take`](Self::take) would give a token at `now`, taking
    /// none: a request refused by another limit then costs this one nothing.
    pub fn ready(&self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        let tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        if tokens >= 1.0 {
            return Ok(());
        }
        Err(Duration::from_secs_f64((1.0 - tokens) / self.rate))
    }

    /// Whether the bucket is full again by `now`: forgetting it then
    /// loses nothing.
    pub fn full_by(&self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens + elapsed * self.rate >= self.burst
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_refuses_with_the_wait_and_fills_again() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(4, 4, t0);
        for _ in 0..4 {
            assert_eq!(b.take(t0), Ok(()));
        }
        let wait = b.take(t0).expect_err("empty");
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(250),
            "{wait:?}"
        );
        assert!(!b.full_by(t0));
        assert_eq!(b.take(t0 + Duration::from_millis(250)), Ok(()));
        assert!(b.full_by(t0 + Duration::from_secs(2)));
    }

    #[test]
    fn a_burst_passes_then_the_rate_holds() {
        let t0 = Instant::now();
        let mut r = RateLimiter::new(10, 5, t0);
        for _ in 0..5 {
            assert_eq!(r.check(t0), Verdict::Allow);
        }
        match r.check(t0) {
            Verdict::Limit { retry_after } => assert!(retry_after <= Duration::from_millis(100)),
            v => panic!("expected a limit, got {v:?}"),
        }
        // 100 ms later one token is back.
        assert_eq!(r.check(t0 + Duration::from_millis(100)), Verdict::Allow);
        assert!(matches!(
            r.check(t0 + Duration::from_millis(100)),
            Verdict::Limit { .. }
        ));
    }

    #[test]
    fn flooding_for_three_seconds_closes_but_slowing_down_forgives() {
        let t0 = Instant::now();
        let mut r = RateLimiter::new(10, 10, t0);
        let mut t = t0;
        let mut closed_at = None;
        // 1000 requests per second against a rate of 10.
        for _ in 0..5_000 {
            t += Duration::from_millis(1);
            if r.check(t) == Verdict::Close {
                closed_at = Some(t);
                break;
            }
        }
        let closed_at = closed_at.expect("a flooding peer is closed");
        let limited = closed_at.duration_since(t0);
        assert!(
            limited >= LIMITED_FOR_CLOSE
                && limited < LIMITED_FOR_CLOSE + Duration::from_millis(100)
        );

        // A peer that was limited, then stays under the rate, is not closed.
        let mut r = RateLimiter::new(10, 10, t0);
        let mut t = t0;
        for _ in 0..20 {
            r.check(t);
        }
        for _ in 0..100 {
            t += Duration::from_millis(200);
            assert_eq!(r.check(t), Verdict::Allow);
        }
    }

    #[test]
    fn a_zero_rate_never_limits() {
        let t0 = Instant::now();
        let mut r = RateLimiter::new(0, 0, t0);
        for _ in 0..10_000 {
            assert_eq!(r.check(t0), Verdict::Allow);
        }
    }
}
