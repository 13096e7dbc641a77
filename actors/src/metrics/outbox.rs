//! Process-wide counters of what peer outboxes did: frames handed to the
//! sockets, and what happened under pressure.
//!
//! Every outbox the gateway creates holds the same `Arc<OutboxMetrics>`, so
//! the counters survive the peers that bumped them and `session.events.stats`
//! (and `/metrics`) can read them without asking any actor.

use std::sync::atomic::{AtomicU64, Ordering};

use tether_protocol::OutboxStats;

/// Counters shared by every outbox of one gateway.
#[derive(Debug, Default)]
pub struct OutboxMetrics {
    delivered: AtomicU64,
    coalesced: AtomicU64,
    dropped: AtomicU64,
    slow_consumer_closes: AtomicU64,
}

impl OutboxMetrics {
    /// `n` event frames (durable or transient, a merged delta counting
    /// once) were taken by a connection's writer. Replies are not counted: they
    /// answer the peer's own requests and are not fan-out.
    pub(crate) fn delivered_n(&self, n: u64) {
        if n > 0 {
            self.delivered.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// A delta was merged into the delta queued before it.
    pub(crate) fn coalesced(&self) {
        self.coalesced.fetch_add(1, Ordering::Relaxed);
    }

    /// A transient frame was dropped because the outbox was full.
    pub(crate) fn dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// A peer was closed with 1013 "slow consumer".
    pub(crate) fn slow_consumer_closed(&self) {
        self.slow_consumer_closes.fetch_add(1, Ordering::Relaxed);
    }

    /// Event frames handed to connections so far.
    pub fn deliveries(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// The counters as `session.events.stats` reports them. Each is read on
    /// its own (Relaxed): a stats reply is a snapshot, not a transaction.
    pub fn snapshot(&self) -> OutboxStats {
        OutboxStats {
            coalesced: self.coalesced.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            slow_consumer_closes: self.slow_consumer_closes.load(Ordering::Relaxed),
        }
    }
}
