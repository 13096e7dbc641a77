//! What one client received: which of its room's events (by `n`), how
//! late each was, and, against tether, whether the durable `seq`s were
//! gap-free and unique.
//!
//! A client task records into its own tally (behind an uncontended mutex:
//! the generator runs on one thread); the scenario resets it when a
//! publishing phase starts and harvests it when the phase ends.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::conn::{Event, Flood};

/// A client's tally, shared between its task and the scenario.
#[derive(Clone, Default)]
pub struct Shared(Arc<Mutex<Tally>>);

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, Tally> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Default)]
pub struct Tally {
    /// Highest `seq` seen (tether), over every connection of the client.
    pub last_seq: u64,
    pub seq_gaps: u64,
    pub seq_dups: u64,
    /// Socket.IO's latest offset (what a recovery resumes after).
    pub offset: Option<String>,
    /// Why the connection ended, if it did.
    pub closed: Option<String>,
    /// Whether to keep latency samples in this phase.
    pub timing: bool,
    /// Events of the room this phase publishes.
    pub expected: u64,
    /// Bit `n` set once event `n` arrived.
    seen: Vec<u64>,
    /// Every `n` below this arrived.
    pub upto: u64,
    pub distinct: u64,
    pub dups: u64,
    /// Events numbered at or past `expected`.
    pub beyond: u64,
    /// Highest `n` received.
    pub max_n: Option<u64>,
    /// Receive time − intended send time, microseconds.
    pub latencies_us: Vec<u32>,
    /// Receive time of the latest event, unix microseconds.
    pub last_at_us: u64,
    /// Turn shape: the benchmark events are whole turns, each counted
    /// (and timed) at its `message.complete`, numbered by the turn's
    /// first message (tether: its `tool.start`).
    pub turns: bool,
    /// Turn shape: the number of the turn under way.
    pending: Option<Flood>,
    /// Event frames received in this phase, durable ones, and the deltas
    /// they carried (a merged delta carries several).
    pub frames: u64,
    pub durable: u64,
    pub pieces: u64,
}

impl Tally {
    /// Starts a publishing phase of `expected` events per room.
    pub fn reset(&mut self, expected: u64, timing: bool) {
        self.pending = None;
        self.frames = 0;
        self.durable = 0;
        self.pieces = 0;
        self.expected = expected;
        self.timing = timing;
        self.seen = vec![0; usize::try_from(expected.div_ceil(64)).unwrap_or(0)];
        self.upto = 0;
        self.distinct = 0;
        self.dups = 0;
        self.beyond = 0;
        self.max_n = None;
        self.latencies_us.clear();
        self.last_at_us = 0;
    }

    pub fn complete(&self) -> bool {
        self.distinct >= self.expected
    }

    pub fn record(&mut self, event: Event, now_us: u64) {
        if let Some(seq) = event.seq {
            if seq <= self.last_seq {
                self.seq_dups += 1;
            } else {
                self.seq_gaps += seq - self.last_seq - 1;
                self.last_seq = seq;
            }
        }
        if let Some(offset) = event.offset {
            self.offset = Some(offset);
        }
        self.frames += 1;
        self.durable += u64::from(event.durable);
        self.pieces += u64::from(event.pieces);
        let flood = if !self.turns {
            event.flood
        } else if event.complete {
            event.flood.or(self.pending.take())
        } else {
            if event.flood.is_some() {
                self.pending = event.flood;
            }
            None
        };
        let Some(flood) = flood else { return };
        self.last_at_us = now_us;
        self.max_n = Some(self.max_n.map_or(flood.n, |m| m.max(flood.n)));
        let word = usize::try_from(flood.n / 64)
            .ok()
            .and_then(|i| self.seen.get_mut(i));
        let Some(word) = word.filter(|_| flood.n < self.expected) else {
            self.beyond += 1;
            return;
        };
        let bit = 1u64 << (flood.n % 64);
        if *word & bit != 0 {
            self.dups += 1;
            return;
        }
        *word |= bit;
        self.distinct += 1;
        while self.upto < self.expected && self.has(self.upto) {
            self.upto += 1;
        }
        if self.timing {
            let late = now_us.saturating_sub(flood.t_us);
            self.latencies_us
                .push(u32::try_from(late).unwrap_or(u32::MAX));
        }
    }

    fn has(&self, n: u64) -> bool {
        usize::try_from(n / 64)
            .ok()
            .and_then(|i| self.seen.get(i))
            .is_some_and(|w| w & (1u64 << (n % 64)) != 0)
    }
}

/// `seq` gaps and duplicates over every client so far.
pub fn seq_faults(tallies: &[Shared]) -> (u64, u64) {
    tallies.iter().fold((0, 0), |(g, d), t| {
        let t = t.lock();
        (g + t.seq_gaps, d + t.seq_dups)
    })
}

/// The value at quantile `q` of sorted microseconds, in milliseconds.
pub fn quantile_ms(sorted_us: &[u32], q: f64) -> Option<f64> {
    if sorted_us.is_empty() {
        return None;
    }
    let i = ((sorted_us.len() as f64 * q).ceil() as usize).clamp(1, sorted_us.len()) - 1;
    Some(round3(f64::from(sorted_us[i]) / 1000.0))
}

/// p50 / p99 / p99.9 / max of durations in microseconds, as JSON (ms).
pub fn summary_ms(mut us: Vec<u32>) -> serde_json::Value {
    us.sort_unstable();
    serde_json::json!({
        "count": us.len(),
        "p50": quantile_ms(&us, 0.50),
        "p99": quantile_ms(&us, 0.99),
        "p999": quantile_ms(&us, 0.999),
        "max": us.last().map(|m| round3(f64::from(*m) / 1000.0)),
    })
}

pub fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flood(n: u64) -> Event {
        Event {
            flood: Some(Flood { n, t_us: 0 }),
            ..Event::default()
        }
    }

    #[test]
    fn counts_distinct_duplicate_and_contiguous_events() {
        let mut t = Tally::default();
        t.reset(100, false);
        for n in [0, 1, 3, 3, 2, 100, 150] {
            t.record(flood(n), 1);
        }
        assert_eq!((t.distinct, t.dups, t.beyond, t.upto), (4, 1, 2, 4));
        assert!(!t.complete());
    }

    #[test]
    fn seq_gaps_and_duplicates() {
        let mut t = Tally::default();
        for seq in [1, 2, 2, 5, 4, 6] {
            t.record(
                Event {
                    seq: Some(seq),
                    ..Event::default()
                },
                1,
            );
        }
        assert_eq!((t.last_seq, t.seq_gaps, t.seq_dups), (6, 2, 2));
    }
}
