//! When the writer commits: how many waiting appends one group commit gathers.
//!
//! Every commit costs at least one rewritten page (the page it ends in, written again by the
//! next commit) and, on ext4, a journal commit for the file's new length: about 4 + 12 KiB per
//! `fdatasync`, whatever the commit holds. So the bytes written per record are about
//! `1 + commits/s × 16 KiB ÷ record bytes/s`, and the way to the floor under load is fewer,
//! larger commits; at low load what matters is latency.

use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use crate::writer::Request;

/// How the writer turns waiting appends into group commits.
#[derive(Debug, Clone)]
pub enum CommitPolicy {
    /// Latency first when idle, batches under load: an append that finds the writer waiting
    /// is committed at once (with whatever else is already queued). When appends were already
    /// waiting as the previous commit ended (the writer is behind: load), the commit gathers
    /// more, until it holds `target_bytes` or `max_wait` has passed since it started
    /// gathering. So at low load an append waits for one sync; under load for at most
    /// `max_wait` plus one sync, and commits are at most about `1 / (max_wait + sync)` a second.
    Adaptive {
        /// Longest a loaded commit waits for more appends.
        max_wait: Duration,
        /// A loaded commit stops gathering at this many bytes.
        target_bytes: usize,
        /// No commit gathers more than this (an append is never split).
        max_bytes: usize,
    },
    /// A commit at most every `every` (from the start of one to the start of the next),
    /// holding everything that arrived meanwhile: the "commit every millisecond" of a
    /// fixed commit window.
    Interval {
        /// The spacing of commits.
        every: Duration,
        /// No commit gathers more than this.
        max_bytes: usize,
    },
}

impl Default for CommitPolicy {
    /// Adaptive, gathering up to 4 ms or 256 KiB under load (docs/benchmarks/2026-12.md, "The event
    /// log": at 10,000 records/s of 280 bytes this makes commits of about 12 KiB).
    fn default() -> Self {
        CommitPolicy::Adaptive {
            max_wait: Duration::from_millis(4),
            target_bytes: 256 << 10,
            max_bytes: 8 << 20,
        }
    }
}

impl CommitPolicy {
    fn max_bytes(&self) -> usize {
        match self {
            CommitPolicy::Adaptive { max_bytes, .. } | CommitPolicy::Interval { max_bytes, .. } => {
                *max_bytes
            }
        }
    }
}

/// Gathers the writer's batches.
pub(crate) struct Gatherer {
    policy: CommitPolicy,
    last_start: Option<Instant>,
}

impl Gatherer {
    pub(crate) fn new(policy: CommitPolicy) -> Self {
        Gatherer {
            policy,
            last_start: None,
        }
    }

    /// The next batch, or `None` once the log is closed and nothing waits.
    pub(crate) fn next(&mut self, rx: &Receiver<Request>) -> Option<Vec<Request>> {
        let (first, busy) = match rx.try_recv() {
            Ok(r) => (r, true),
            Err(TryRecvError::Empty) => (rx.recv().ok()?, false),
            Err(TryRecvError::Disconnected) => return None,
        };
        let max = self.policy.max_bytes();
        let mut batch = Batch {
            bytes: first.bytes,
            requests: vec![first],
            max,
        };
        batch.drain(rx);
        match self.policy {
            CommitPolicy::Adaptive {
                max_wait,
                target_bytes,
                ..
            } => {
                if busy {
                    batch.gather_until(rx, Instant::now() + max_wait, target_bytes.min(max));
                }
            }
            CommitPolicy::Interval { every, .. } => {
                if let Some(last) = self.last_start {
                    batch.gather_until(rx, last + every, max);
                }
            }
        }
        self.last_start = Some(Instant::now());
        Some(batch.requests)
    }
}

struct Batch {
    requests: Vec<Request>,
    bytes: usize,
    max: usize,
}

impl Batch {
    /// Takes what is already queued, up to the size bound.
    fn drain(&mut self, rx: &Receiver<Request>) {
        while self.bytes < self.max {
            match rx.try_recv() {
                Ok(r) => self.push(r),
                Err(_) => break,
            }
        }
    }

    fn push(&mut self, r: Request) {
        self.bytes += r.bytes;
        self.requests.push(r);
    }

    /// Waits for more until `deadline` or `bytes` are gathered.
    fn gather_until(&mut self, rx: &Receiver<Request>, deadline: Instant, bytes: usize) {
        while self.bytes < bytes {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            match rx.recv_timeout(deadline - now) {
                Ok(r) => {
                    self.push(r);
                    self.drain(rx);
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn request(bytes: usize) -> Request {
        Request {
            records: Vec::new(),
            bytes,
            done: Box::new(|_| {}),
        }
    }

    fn sizes(batch: &[Request]) -> Vec<usize> {
        batch.iter().map(|r| r.bytes).collect()
    }

    #[test]
    fn a_batch_takes_what_is_queued_up_to_the_size_bound_and_never_splits_an_append() {
        for policy in [
            CommitPolicy::Adaptive {
                max_wait: Duration::ZERO,
                target_bytes: 1 << 20,
                max_bytes: 100,
            },
            CommitPolicy::Interval {
                every: Duration::ZERO,
                max_bytes: 100,
            },
        ] {
            let (tx, rx) = mpsc::channel();
            for bytes in [40, 40, 40, 500, 10] {
                tx.send(request(bytes)).unwrap();
            }
            drop(tx);
            let mut g = Gatherer::new(policy);
            // 40 + 40 + 40 reaches the bound; the 500-byte append goes alone.
            assert_eq!(sizes(&g.next(&rx).unwrap()), [40, 40, 40]);
            assert_eq!(sizes(&g.next(&rx).unwrap()), [500]);
            assert_eq!(sizes(&g.next(&rx).unwrap()), [10]);
            assert!(g.next(&rx).is_none());
        }
    }

    #[test]
    fn a_loaded_adaptive_commit_waits_for_more_until_its_target() {
        let (tx, rx) = mpsc::channel();
        let mut g = Gatherer::new(CommitPolicy::Adaptive {
            max_wait: Duration::from_secs(600),
            target_bytes: 100,
            max_bytes: 1000,
        });
        // Queued before the writer looks: load, so the commit gathers until 100 bytes.
        tx.send(request(30)).unwrap();
        // The rest come later (a writer that did not wait would commit the first alone; the
        // pause only orders the sends after the gathering starts, nothing is timed).
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            for _ in 0..3 {
                tx.send(request(30)).unwrap();
            }
            tx
        });
        let batch = g.next(&rx).unwrap();
        assert_eq!(sizes(&batch), [30, 30, 30, 30]);
        drop(sender.join().unwrap());
        assert!(g.next(&rx).is_none());
    }
}
