//! The per-session replay ring.
//!
//! A reconnecting client usually missed a handful of events; serving those
//! from memory keeps a reconnect storm off the disk. The ring holds the most
//! recent *committed* durable events of one session, bounded by count and by
//! bytes. It is a cache, never the source of truth: anything older is read
//! back from the store, so a replay is complete whether or not the ring still
//! reaches back far enough.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::value::RawValue;

/// One committed durable event, as the `params` object of its event frame.
#[derive(Debug, Clone)]
pub struct RingEntry {
    pub seq: u64,
    pub params: Arc<RawValue>,
}

impl RingEntry {
    fn bytes(&self) -> usize {
        self.params.get().len()
    }
}

/// Bounded window over the latest committed events of a session.
#[derive(Debug)]
pub struct Ring {
    entries: VecDeque<RingEntry>,
    bytes: usize,
    max_events: usize,
    max_bytes: usize,
}

/// What the ring can say about a replay request `(after, upto]`.
#[derive(Debug, PartialEq)]
pub enum Coverage {
    /// Every event of the range is in the ring.
    Full,
    /// The ring does not reach back to `after + 1`: read the store.
    Partial,
}

impl Ring {
    pub fn new(max_events: usize, max_bytes: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            bytes: 0,
            max_events,
            max_bytes,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Appends a newly committed event. Seqs must arrive in increasing
    /// order; the oldest entries are evicted to stay within both bounds.
    pub fn push(&mut self, entry: RingEntry) {
        debug_assert!(self.entries.back().is_none_or(|last| last.seq < entry.seq));
        if self.max_events == 0 {
            return;
        }
        self.bytes += entry.bytes();
        self.entries.push_back(entry);
        while self.entries.len() > self.max_events
            || (self.bytes > self.max_bytes && self.entries.len() > 1)
        {
            if let Some(old) = self.entries.pop_front() {
                self.bytes -= old.bytes();
            }
        }
    }

    /// Drops the entries before `seq` (retention trimmed them from the
    /// store): a replay from before it then reads the store, which says
    /// `truncated`.
    pub fn forget_before(&mut self, seq: u64) {
        while self.entries.front().is_some_and(|e| e.seq < seq) {
            if let Some(old) = self.entries.pop_front() {
                self.bytes -= old.bytes();
            }
        }
    }

    /// Whether the ring alone can answer `seq > after` (up to its newest).
    pub fn coverage(&self, after: u64, upto: u64) -> Coverage {
        if after >= upto {
            return Coverage::Full;
        }
        match self.entries.front() {
            Some(first) if first.seq <= after.saturating_add(1) => Coverage::Full,
            _ => Coverage::Partial,
        }
    }

    /// Entries with `after < seq <= upto`, at most `limit`, in order.
    pub fn range(&self, after: u64, upto: u64, limit: usize) -> Vec<RingEntry> {
        let start = self.entries.partition_point(|e| e.seq <= after);
        self.entries
            .range(start..)
            .take_while(|e| e.seq <= upto)
            .take(limit)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, body: &str) -> RingEntry {
        let raw = RawValue::from_string(format!("{{\"seq\":{seq},\"b\":\"{body}\"}}"))
            .expect("valid json");
        RingEntry {
            seq,
            params: Arc::from(raw),
        }
    }

    fn seqs(v: &[RingEntry]) -> Vec<u64> {
        v.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn keeps_the_latest_events_within_the_count_bound() {
        let mut r = Ring::new(3, 1 << 20);
        for s in 1..=5 {
            r.push(entry(s, "x"));
        }
        assert_eq!(r.len(), 3);
        assert_eq!(seqs(&r.range(0, 10, 100)), vec![3, 4, 5]);
        assert_eq!(r.coverage(2, 5), Coverage::Full);
        assert_eq!(r.coverage(1, 5), Coverage::Partial);
        assert_eq!(r.coverage(5, 5), Coverage::Full);
    }

    #[test]
    fn evicts_by_bytes_but_keeps_the_newest() {
        let big = "y".repeat(100);
        let mut r = Ring::new(100, 250);
        for s in 1..=4 {
            r.push(entry(s, &big));
        }
        assert!(r.bytes() <= 250);
        assert_eq!(seqs(&r.range(0, 10, 100)), vec![3, 4]);
        // A single entry larger than the budget is still kept (it is the newest).
        let mut tiny = Ring::new(10, 5);
        tiny.push(entry(1, &big));
        assert_eq!(tiny.len(), 1);
    }

    #[test]
    fn range_respects_after_upto_and_limit() {
        let mut r = Ring::new(10, 1 << 20);
        for s in 1..=8 {
            r.push(entry(s, "z"));
        }
        assert_eq!(seqs(&r.range(3, 6, 100)), vec![4, 5, 6]);
        assert_eq!(seqs(&r.range(3, 8, 2)), vec![4, 5]);
        assert!(r.range(8, 8, 10).is_empty());
        assert!(r.range(9, 20, 10).is_empty());
    }

    #[test]
    fn byte_accounting_follows_evictions() {
        let mut r = Ring::new(2, 1 << 20);
        r.push(entry(1, "a"));
        let one = r.bytes();
        r.push(entry(2, "a"));
        r.push(entry(3, "a"));
        assert_eq!(r.bytes(), 2 * one);
    }

    #[test]
    fn a_zero_sized_ring_holds_nothing_and_defers_to_the_store() {
        let mut r = Ring::new(0, 1 << 20);
        r.push(entry(1, "a"));
        assert!(r.is_empty());
        assert_eq!(r.coverage(0, 1), Coverage::Partial);
    }

    #[test]
    fn forgetting_a_prefix_leaves_the_rest_and_its_bytes() {
        let mut ring = Ring::new(10, 1 << 20);
        for seq in 1..=5 {
            ring.push(entry(seq, "x"));
        }
        let one = entry(1, "x").bytes();
        ring.forget_before(3);
        assert_eq!(ring.len(), 3);
        assert_eq!(ring.bytes(), 3 * one);
        assert_eq!(ring.coverage(1, 5), Coverage::Partial);
        assert_eq!(ring.coverage(2, 5), Coverage::Full);
        ring.forget_before(1);
        assert_eq!(ring.len(), 3);
    }
}
