//! Rate limits for HTTP clients, per (profile, remote address).
//!
//! A WebSocket peer carries its own token bucket for its lifetime, but each
//! `POST /rpc` is a new peer and each SSE open a new stream, so a bucket per
//! peer would forgive a client that simply opens a new request each time.
//! Those requests draw from a bucket shared by everything one remote
//! address does in one profile (same rate and burst as a peer's). Over it
//! the answer is HTTP 429 with `Retry-After` and a JSON-RPC 4029 body.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tether_actors::rate::{RateLimiter, Verdict};

/// Buckets idle this long are full again and can be forgotten.
const IDLE_FORGET: Duration = Duration::from_secs(60);
/// Sweep forgotten buckets once the map grows past this many.
const SWEEP_ABOVE: usize = 4096;

struct Bucket {
    limiter: RateLimiter,
    last: Instant,
}

pub struct ClientBuckets {
    rps: u32,
    buckets: Mutex<HashMap<(String, IpAddr), Bucket>>,
}

/// No limit (benchmarks, embedders that limit elsewhere).
impl Default for ClientBuckets {
    fn default() -> Self {
        Self::new(0)
    }
}

impl ClientBuckets {
    pub fn new(rps: u32) -> Self {
        Self {
            rps,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one token; `Err(retry_after)` when the client is over its rate.
    pub fn take(&self, profile: &str, addr: IpAddr) -> Result<(), Duration> {
        if self.rps == 0 {
            return Ok(());
        }
        let now = Instant::now();
        // A poisoned lock only means another request panicked mid-update;
        // the counters are still usable.
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() > SWEEP_ABOVE {
            buckets.retain(|_, b| now.saturating_duration_since(b.last) < IDLE_FORGET);
        }
        let bucket = buckets
            .entry((profile.to_string(), addr))
            .or_insert_with(|| Bucket {
                limiter: RateLimiter::new(self.rps, self.rps.saturating_mul(2), now),
                last: now,
            });
        bucket.last = now;
        match bucket.limiter.check(now) {
            Verdict::Allow => Ok(()),
            Verdict::Limit { retry_after } => Err(retry_after),
            // There is no connection to close: keep refusing.
            Verdict::Close => Err(Duration::from_secs(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_and_profile_share_a_bucket_others_do_not() {
        let b = ClientBuckets::new(5);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let c: IpAddr = "127.0.0.2".parse().unwrap();
        for _ in 0..10 {
            assert!(b.take("default", a).is_ok());
        }
        assert!(b.take("default", a).is_err());
        assert!(b.take("other", a).is_ok());
        assert!(b.take("default", c).is_ok());
    }

    #[test]
    fn zero_means_unlimited() {
        let b = ClientBuckets::new(0);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        for _ in 0..10_000 {
            assert!(b.take("default", a).is_ok());
        }
    }
}
