//! What one gateway counts, for `GET /metrics`.
//!
//! One [`Metrics`] per gateway, created with it and shared through the
//! [`crate::Ctx`] (and handed to the StoreWriter and HostSupervisor with
//! their arguments): no global registry, so two gateways in one process
//! (tests, benchmarks) count apart. Every collection point is a relaxed
//! atomic add on a field fixed at compile time; labels are small enums that
//! index arrays. So the per-event paths (an event committed, a frame handed
//! to a socket) take no lock, allocate nothing and look nothing up. The
//! Prometheus text encoding is the transports' business (`gateway/src/metrics.rs`);
//! this module only holds the numbers.

mod histogram;
mod outbox;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tether_protocol::{now_ms, CompleteStatus, FailureReason};
use tether_store::StoreError;

pub use histogram::{Histogram, HistogramSnapshot, COMMIT_SECONDS, TURN_SECONDS};
pub use outbox::OutboxMetrics;

/// A monotonic count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub(crate) fn inc(&self) {
        self.add(1);
    }

    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down.
#[derive(Debug, Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    pub fn set(&self, v: i64) {
        self.0.store(v, Ordering::Relaxed);
    }

    pub fn add(&self, n: i64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// How a client connection reaches the gateway (the `transport` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    WebSocket,
    /// A `GET /v1/sessions/{id}/events` stream.
    Sse,
    /// A `POST /rpc` being answered.
    Http,
}

impl Transport {
    pub const ALL: [Transport; 3] = [Transport::WebSocket, Transport::Sse, Transport::Http];

    pub fn label(self) -> &'static str {
        match self {
            Transport::WebSocket => "ws",
            Transport::Sse => "sse",
            Transport::Http => "http",
        }
    }
}

/// Which request asked for a replay (the `method` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayKind {
    /// `session.resume` with `last_seen` (an SSE open with `Last-Event-ID`
    /// or `?last_seen` is one).
    Resume,
    /// `session.events.since`.
    Since,
}

impl ReplayKind {
    pub const ALL: [ReplayKind; 2] = [ReplayKind::Resume, ReplayKind::Since];

    pub fn label(self) -> &'static str {
        match self {
            ReplayKind::Resume => "session.resume",
            ReplayKind::Since => "session.events.since",
        }
    }
}

/// Every `failure_reason` the gateway gives is counted under its own
/// label (by its index in [`FailureReason::ALL`]); an engine's own reason
/// (passed through from its `turn.error`) under one more, [`OTHER`], so no
/// host can grow the number of series.
const REASON_LABELS: usize = FailureReason::ALL.len() + 1;

/// The label of the reasons that are not the gateway's.
pub const OTHER: &str = "other";

const STATUSES: usize = 3;

/// How long a storage failure keeps the store "not writable" (and
/// `/readyz` at 503) when no commit succeeds after it.
pub const STORE_FAILURE_HOLD: Duration = Duration::from_secs(10);

/// Turns ended, by final status and failure reason.
#[derive(Debug, Default)]
pub struct TurnCounters {
    /// Ended without a failure reason, by status.
    plain: [Counter; STATUSES],
    /// Ended with one, by status and reason label.
    failed: [[Counter; REASON_LABELS]; STATUSES],
}

impl TurnCounters {
    fn ended(&self, status: CompleteStatus, reason: Option<&str>) {
        let s = status as usize;
        let counter = match reason {
            None => self.plain.get(s),
            Some(r) => {
                let i = FailureReason::parse(r)
                    .and_then(|f| FailureReason::ALL.iter().position(|known| *known == f))
                    .unwrap_or(REASON_LABELS - 1);
                self.failed.get(s).and_then(|row| row.get(i))
            }
        };
        if let Some(c) = counter {
            c.inc();
        }
    }

    /// `(status, failure_reason, turns)`: every status without a reason
    /// (zeros too, so that `sum by (status)` always has its series), then
    /// the reasons that occurred.
    pub fn snapshot(&self) -> Vec<(&'static str, Option<&'static str>, u64)> {
        let mut out = Vec::new();
        for status in CompleteStatus::ALL {
            let s = *status as usize;
            out.push((status.as_str(), None, self.plain[s].get()));
        }
        for status in CompleteStatus::ALL {
            let s = *status as usize;
            for (i, counter) in self.failed[s].iter().enumerate() {
                let n = counter.get();
                if n > 0 {
                    let label = FailureReason::ALL.get(i).map_or(OTHER, |f| f.as_str());
                    out.push((status.as_str(), Some(label), n));
                }
            }
        }
        out
    }
}

/// Everything one gateway counts.
#[derive(Debug)]
pub struct Metrics {
    /// Shared with every peer outbox (also `Ctx::outbox_metrics`).
    pub outbox: Arc<OutboxMetrics>,
    /// Open client connections by [`Transport`] index.
    pub connections: [Gauge; 3],
    /// Sessions with a live actor (kept by the Registry).
    pub sessions_live: Gauge,
    /// Durable events committed to the store (created sessions' first
    /// events included).
    pub events_appended: Counter,
    /// Duration of each group commit (a transaction of one or more jobs).
    pub store_commits: Histogram,
    /// Jobs that failed for a storage reason (full, I/O, unavailable).
    pub store_write_errors: Counter,
    /// When (ms since the epoch; 0: never) a commit last failed for a
    /// storage reason, and when one last worked.
    store_failed_at_ms: AtomicI64,
    store_ok_at_ms: AtomicI64,
    pub turns: TurnCounters,
    /// From a turn's start (its acceptance, or for a queued prompt the
    /// moment it leaves the queue) to its `message.complete`.
    pub turn_duration: Histogram,
    /// Compute-host processes restarted after they died.
    pub host_restarts: Counter,
    /// Times a host slot exceeded its restart intensity and began to rest.
    pub host_rests: Counter,
    /// Host slots whose host said `hello` and takes work now (kept by the
    /// HostSupervisor; `/readyz` needs one).
    pub hosts_ready: Gauge,
    /// Late control answers handed to their late handler.
    pub late_acks_adopted: Counter,
    /// Late handlers whose TTL ran out before an answer came.
    pub late_acks_expired: Counter,
    /// Late handlers evicted to stay within `--late-ack-cap`.
    pub late_acks_evicted: Counter,
    /// Answered replays, by [`ReplayKind`] index.
    pub replay_requests: [Counter; 2],
    /// Events those replays returned, by [`ReplayKind`] index.
    pub replayed_events: [Counter; 2],
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            outbox: Arc::default(),
            connections: Default::default(),
            sessions_live: Gauge::default(),
            events_appended: Counter::default(),
            store_commits: Histogram::new(COMMIT_SECONDS),
            store_write_errors: Counter::default(),
            store_failed_at_ms: AtomicI64::new(0),
            store_ok_at_ms: AtomicI64::new(0),
            turns: TurnCounters::default(),
            turn_duration: Histogram::new(TURN_SECONDS),
            host_restarts: Counter::default(),
            host_rests: Counter::default(),
            hosts_ready: Gauge::default(),
            late_acks_adopted: Counter::default(),
            late_acks_expired: Counter::default(),
            late_acks_evicted: Counter::default(),
            replay_requests: Default::default(),
            replayed_events: Default::default(),
        }
    }
}

impl Metrics {
    /// Counts a connection as open until the returned guard is dropped.
    pub fn open_connection(self: &Arc<Self>, transport: Transport) -> OpenConnection {
        self.connection_gauge(transport).add(1);
        OpenConnection {
            metrics: self.clone(),
            transport,
        }
    }

    pub fn connection_gauge(&self, transport: Transport) -> &Gauge {
        &self.connections[transport as usize]
    }

    /// A turn got its `message.complete`; `took` when it ran in this process.
    pub(crate) fn turn_ended(
        &self,
        status: CompleteStatus,
        reason: Option<&str>,
        took: Option<Duration>,
    ) {
        self.turns.ended(status, reason);
        if let Some(took) = took {
            self.turn_duration.observe(took);
        }
    }

    /// A replay was answered with `events` events.
    pub(crate) fn replayed(&self, kind: ReplayKind, events: usize) {
        self.replay_requests[kind as usize].inc();
        self.replayed_events[kind as usize].add(events as u64);
    }

    /// A group commit of ops writing `events[i]` events each returned
    /// `results` after `took`.
    pub(crate) fn committed(
        &self,
        events: &[usize],
        results: &[Result<(), StoreError>],
        took: Duration,
    ) {
        self.store_commits.observe(took);
        let mut appended = 0u64;
        let mut storage_failed = false;
        let mut written = false;
        for (n, result) in events.iter().zip(results) {
            match result {
                Ok(()) => {
                    written = true;
                    appended += *n as u64;
                }
                // The store is fine; the job was wrong (a seq or id taken).
                Err(StoreError::Conflict(_) | StoreError::Invalid(_)) => {}
                Err(_) => {
                    storage_failed = true;
                    self.store_write_errors.inc();
                }
            }
        }
        self.events_appended.add(appended);
        if storage_failed {
            self.store_failed_at_ms.store(now_ms(), Ordering::Relaxed);
        } else if written {
            self.store_ok_at_ms.store(now_ms(), Ordering::Relaxed);
        }
    }

    /// False from a commit that failed for a storage reason (disk full, an
    /// I/O error, the database unreachable) until one succeeds again, or
    /// until [`STORE_FAILURE_HOLD`] passes without another failure: a
    /// gateway taken out of rotation for it may get no traffic that could
    /// show the store works again, so it must not stay unready by itself.
    pub fn store_writable(&self) -> bool {
        self.store_writable_at(now_ms())
    }

    fn store_writable_at(&self, now: i64) -> bool {
        let failed = self.store_failed_at_ms.load(Ordering::Relaxed);
        let ok = self.store_ok_at_ms.load(Ordering::Relaxed);
        let hold = STORE_FAILURE_HOLD.as_millis() as i64;
        failed == 0 || ok >= failed || now.saturating_sub(failed) > hold
    }
}

/// An open connection, counted in [`Metrics::connections`] until dropped.
#[derive(Debug)]
pub struct OpenConnection {
    metrics: Arc<Metrics>,
    transport: Transport,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.metrics.connection_gauge(self.transport).add(-1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_count_by_status_and_known_reason() {
        let m = Metrics::default();
        m.turn_ended(CompleteStatus::Complete, None, Some(Duration::from_secs(1)));
        m.turn_ended(CompleteStatus::Error, Some("host_crash"), None);
        m.turn_ended(CompleteStatus::Error, Some("an engine's own"), None);
        m.turn_ended(CompleteStatus::Interrupted, Some("dequeued"), None);
        let s = m.turns.snapshot();
        assert_eq!(
            s,
            vec![
                ("complete", None, 1),
                ("error", None, 0),
                ("interrupted", None, 0),
                ("error", Some("host_crash"), 1),
                ("error", Some("other"), 1),
                ("interrupted", Some("dequeued"), 1),
            ]
        );
        assert_eq!(m.turn_duration.snapshot().count, 1);
    }

    #[test]
    fn connections_are_counted_while_their_guard_lives() {
        let m = Arc::new(Metrics::default());
        let a = m.open_connection(Transport::Sse);
        let b = m.open_connection(Transport::Sse);
        assert_eq!(m.connection_gauge(Transport::Sse).get(), 2);
        drop(a);
        drop(b);
        assert_eq!(m.connection_gauge(Transport::Sse).get(), 0);
        assert_eq!(m.connection_gauge(Transport::WebSocket).get(), 0);
    }

    #[test]
    fn a_storage_failure_marks_the_store_unwritable_until_a_commit_works() {
        let m = Metrics::default();
        // Two patches: no events.
        let ops = [0, 0];
        m.committed(
            &ops,
            &[Ok(()), Err(StoreError::Full("disk".into()))],
            Duration::ZERO,
        );
        assert!(!m.store_writable());
        assert_eq!(m.store_write_errors.get(), 1);
        // A conflict says nothing about the disk.
        m.committed(
            &ops[..1],
            &[Err(StoreError::Conflict("seq".into()))],
            Duration::ZERO,
        );
        assert!(!m.store_writable());
        let failed = m.store_failed_at_ms.load(Ordering::Relaxed);
        let hold = STORE_FAILURE_HOLD.as_millis() as i64;
        assert!(!m.store_writable_at(failed + hold));
        // Without traffic to prove it, the failure is forgotten after a while.
        assert!(m.store_writable_at(failed + hold + 1));
        m.committed(&ops[..1], &[Ok(())], Duration::ZERO);
        assert!(m.store_writable());
        assert_eq!(m.store_commits.snapshot().count, 3);
    }
}
