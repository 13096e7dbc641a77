//! A latency histogram with fixed buckets, as Prometheus exposes them.
//!
//! Observing is one relaxed add to the bucket the value falls in plus one
//! to the sum: no lock, no allocation, so it can sit on the store writer's
//! commit path. Buckets are kept non-cumulative and summed up only when
//! scraped, and the count is derived from them at that moment, so the
//! `+Inf` bucket and `_count` always agree, whatever was observed while
//! the scrape read them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of a turn's duration: seconds to an hour.
pub const TURN_SECONDS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// Upper bounds (seconds) of one group commit: sub-millisecond to seconds.
pub const COMMIT_SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Durations observed into fixed buckets.
#[derive(Debug)]
pub struct Histogram {
    /// Upper bounds in seconds, ascending; `+Inf` is implicit.
    bounds: &'static [f64],
    /// One more than `bounds`: the last counts what exceeds every bound.
    counts: Box<[AtomicU64]>,
    /// Sum of the observations in microseconds (an integer, so that adding
    /// is a plain atomic add; u64 microseconds last for 580 000 years).
    sum_us: AtomicU64,
}

/// A histogram as scraped: cumulative buckets, count and sum.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// `(le, observations <= le)`, ascending, without `+Inf`.
    pub buckets: Vec<(f64, u64)>,
    /// Every observation (the `+Inf` bucket).
    pub count: u64,
    pub sum_seconds: f64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_us: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        let i = self
            .bounds
            .iter()
            .position(|le| seconds <= *le)
            .unwrap_or(self.bounds.len());
        if let Some(bucket) = self.counts.get(i) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = 0u64;
        let mut buckets = Vec::with_capacity(self.bounds.len());
        for (le, count) in self.bounds.iter().zip(self.counts.iter()) {
            cumulative += count.load(Ordering::Relaxed);
            buckets.push((*le, cumulative));
        }
        let beyond = self.counts.last().map_or(0, |c| c.load(Ordering::Relaxed));
        HistogramSnapshot {
            buckets,
            count: cumulative + beyond,
            sum_seconds: self.sum_us.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let h = Histogram::new(&[0.01, 0.1, 1.0]);
        h.observe(Duration::from_millis(10)); // on the bound: le is inclusive
        h.observe(Duration::from_millis(50));
        h.observe(Duration::from_millis(50));
        h.observe(Duration::from_secs(5)); // beyond every bound
        let s = h.snapshot();
        assert_eq!(s.buckets, vec![(0.01, 1), (0.1, 3), (1.0, 3)]);
        assert_eq!(s.count, 4);
        assert!((s.sum_seconds - 5.11).abs() < 1e-9, "{}", s.sum_seconds);
    }

    #[test]
    fn an_empty_histogram_scrapes_as_zeros() {
        let s = Histogram::new(COMMIT_SECONDS).snapshot();
        assert_eq!(s.buckets.len(), COMMIT_SECONDS.len());
        assert!(s.buckets.iter().all(|(_, n)| *n == 0));
        assert_eq!((s.count, s.sum_seconds), (0, 0.0));
    }
}
