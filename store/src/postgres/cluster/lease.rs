//! What this node knows of its own lease, by its own clock: when it last renewed it, and
//! whether it has stood down because it could not (docs/CLUSTER.md "A node cut off from
//! PostgreSQL").
//!
//! Another node may claim this node's sessions once the database's clock says this node's
//! last heartbeat is older than the lease. That heartbeat was written after this node sent
//! it, so counting from the moment it was *sent* is on the safe side: a node that has not
//! renewed for [`ClusterConfig::stand_down_after`] (half the lease) since then stands down
//! well before anyone can take its sessions, whatever the link does (a silent link holds
//! every statement open; a reset one fails them at once).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Cluster, ClusterConfig, ClusterError, Heartbeat};
use crate::StoreError;

/// The node's own view of its lease. Shared by every clone of the [`Cluster`].
#[derive(Debug)]
pub(crate) struct LeaseClock {
    /// When the last heartbeat that the database answered was sent.
    renewed: Mutex<Instant>,
    /// The node stood down (its fences forgotten) and has not renewed since.
    cut_off: AtomicBool,
}

impl LeaseClock {
    /// A lease renewed by a registration sent at `sent`.
    pub(crate) fn new(sent: Instant) -> LeaseClock {
        LeaseClock {
            renewed: Mutex::new(sent),
            cut_off: AtomicBool::new(false),
        }
    }

    fn renewed_at(&self) -> Instant {
        // A panic while holding this lock leaves a plain instant behind.
        *self.renewed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A heartbeat sent at `sent` was answered: the lease runs from then, and the node may act
    /// again (after re-checking what it held: its fences were forgotten when it stood down).
    fn renew(&self, sent: Instant) {
        let mut renewed = self.renewed.lock().unwrap_or_else(|e| e.into_inner());
        *renewed = (*renewed).max(sent);
        drop(renewed);
        self.cut_off.store(false, Ordering::SeqCst);
    }
}

impl ClusterConfig {
    /// How long after sending its last answered heartbeat a node that could not renew its
    /// lease stops acting as an owner: half the lease, so it has stood down (its clients told,
    /// its hosts stopped) before any other node may take its sessions over.
    pub fn stand_down_after(&self) -> Duration {
        self.lease / 2
    }
}

impl Cluster {
    /// One heartbeat (see [`Cluster::heartbeat`]), bounded so that a silent link cannot hold
    /// it past the moment the node must stand down (and never below one heartbeat period).
    pub(super) async fn beat(&self) -> Result<Heartbeat, ClusterError> {
        let sent = Instant::now();
        let config = &self.inner.config;
        let left = config
            .stand_down_after()
            .saturating_sub(self.since_renewed())
            .max(config.heartbeat_every);
        let beat = super::node::heartbeat(&self.inner.beat, &self.inner.node, config);
        match tokio::time::timeout(left, beat).await {
            Ok(Ok(beat)) => {
                self.inner.lease.renew(sent);
                Ok(beat)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ClusterError::Store(StoreError::Unavailable(format!(
                "heartbeat not answered within {left:?}"
            )))),
        }
    }

    /// `Unavailable` (retryable) while this node stands down.
    pub(super) fn lease_check(&self) -> Result<(), ClusterError> {
        if self.cut_off() {
            return Err(ClusterError::Store(StoreError::Unavailable(
                "this node cannot renew its lease; it owns nothing until it does".into(),
            )));
        }
        Ok(())
    }

    /// How long ago the last heartbeat the database answered was sent.
    pub fn since_renewed(&self) -> Duration {
        self.inner.lease.renewed_at().elapsed()
    }

    /// Whether this node may still act as the owner of what it holds: it renewed its lease
    /// less than [`ClusterConfig::stand_down_after`] ago and has not stood down since.
    pub fn lease_held(&self) -> bool {
        !self.cut_off() && self.since_renewed() < self.inner.config.stand_down_after()
    }

    /// Whether this node stood down and has not renewed its lease since (`/readyz` is 503).
    pub fn cut_off(&self) -> bool {
        self.inner.lease.cut_off.load(Ordering::SeqCst)
    }

    /// Stops acting as an owner: every fence is forgotten (so every write of this node is
    /// refused, `NotOwner`, and the registry's poll tells each session it lost its ownership)
    /// and [`Cluster::cut_off`] holds until a heartbeat is answered again. Returns the
    /// sessions given up, or `None` when the node had already stood down.
    pub fn stand_down(&self) -> Option<Vec<(tether_protocol::SessionId, u64)>> {
        if self.inner.lease.cut_off.swap(true, Ordering::SeqCst) {
            return None;
        }
        let held = self.inner.fences.all();
        for (session_id, fence) in &held {
            self.inner.fences.forget(session_id, *fence);
        }
        tracing::warn!(node = %self.inner.node, sessions = held.len(), since_renewed_ms = self.since_renewed().as_millis() as u64, "lease not renewed; standing down");
        Some(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renewal_never_moves_the_lease_back_and_ends_a_stand_down() {
        let clock = LeaseClock::new(Instant::now());
        let later = clock.renewed_at();
        clock.renew(later - Duration::from_millis(10));
        assert_eq!(clock.renewed_at(), later);
        clock.cut_off.store(true, Ordering::SeqCst);
        clock.renew(later);
        assert!(!clock.cut_off.load(Ordering::SeqCst));
    }

    #[test]
    fn a_node_stands_down_at_half_its_lease() {
        let c = ClusterConfig::with_lease(Duration::from_secs(3));
        assert_eq!(c.stand_down_after(), Duration::from_millis(1500));
        assert!(c.stand_down_after() + c.heartbeat_every < c.lease);
    }
}
