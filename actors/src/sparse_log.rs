//! Logging bad input sparingly.
//!
//! A misbehaving compute host can write a million bad or forbidden lines a
//! second; a warning for each would fill the disk with the log (19 MB in
//! 0.4 s was measured) and slow the gateway down for everyone. Each kind
//! of bad input therefore has a [`SparseLog`]: every occurrence is counted
//! (and still answered or dropped as the protocol says), but only the first
//! ten and then every thousandth are logged, with the count so far.

use std::sync::atomic::{AtomicU64, Ordering};

/// How many occurrences are logged before thinning out.
const FIRST: u64 = 10;
/// After the first ones, one in this many is logged.
const EVERY: u64 = 1000;

/// A counter that says which occurrences to log.
#[derive(Debug, Default)]
pub struct SparseLog(AtomicU64);

impl SparseLog {
    /// Counts one occurrence; `Some(count so far)` when this one should be
    /// logged.
    pub fn hit(&self) -> Option<u64> {
        let n = self.0.fetch_add(1, Ordering::Relaxed) + 1;
        (n <= FIRST || n.is_multiple_of(EVERY)).then_some(n)
    }

    /// Occurrences counted so far.
    #[cfg(test)]
    pub fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Starts counting afresh (a new host process in the slot).
    pub fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_ten_then_every_thousandth_are_logged() {
        let log = SparseLog::default();
        let logged: Vec<u64> = (0..5000).filter_map(|_| log.hit()).collect();
        assert_eq!(
            logged,
            [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1000, 2000, 3000, 4000, 5000]
        );
        assert_eq!(log.count(), 5000);
        log.reset();
        assert_eq!(log.hit(), Some(1));
    }
}
