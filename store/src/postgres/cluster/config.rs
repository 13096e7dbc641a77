//! The settings of a cluster node and the timeouts derived from them.

use std::time::Duration;

use super::ClusterError;

/// How a node keeps its lease (`--node-lease-s`, docs/ARCHITECTURE.md
/// "Nodes and leases").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterConfig {
    /// A node whose heartbeat is older than this is dead (default 3 s).
    pub lease: Duration,
    /// How often the caller runs [`Cluster::heartbeat`](super::Cluster::heartbeat) (default
    /// 1 s). Must leave room for at least one late heartbeat within the lease: at most half of
    /// it.
    pub heartbeat_every: Duration,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            lease: Duration::from_secs(3),
            heartbeat_every: Duration::from_secs(1),
        }
    }
}

impl ClusterConfig {
    /// A lease of `lease`, heartbeating every quarter of it, capped at 1 s (tests use short
    /// leases).
    pub fn with_lease(lease: Duration) -> Self {
        ClusterConfig {
            lease,
            heartbeat_every: (lease / 4).min(Duration::from_secs(1)),
        }
    }

    pub(crate) fn check(&self) -> Result<(), ClusterError> {
        if self.lease < Duration::from_millis(200) {
            return Err(ClusterError::Config(format!(
                "the node lease ({:?}) must be at least 200 ms",
                self.lease
            )));
        }
        if self.heartbeat_every.is_zero() || self.heartbeat_every * 2 > self.lease {
            return Err(ClusterError::Config(format!(
                "heartbeats every {:?} do not fit twice in the lease ({:?})",
                self.heartbeat_every, self.lease
            )));
        }
        Ok(())
    }

    /// The longest gap between two heartbeats that keeps a run unbroken. A longer one (an
    /// outage, a stalled process) starts a new run. `lease - heartbeat_every`: while this
    /// node's heartbeats keep within it, another live node's last heartbeat cannot be older
    /// than the lease for as long as the database was reachable, so "dead" means dead.
    pub fn max_gap(&self) -> Duration {
        self.lease.saturating_sub(self.heartbeat_every)
    }

    /// `idle_in_transaction_session_timeout` of a node's connections: a third of the lease,
    /// so a paused owner's transaction is ended by the server well before its lease runs out.
    pub fn idle_in_transaction_timeout(&self) -> Duration {
        self.lease / 3
    }

    /// `lock_timeout` of a node's connections: two thirds of the lease. Below the lease, and
    /// above the idle timeout, so a claim that waits on a paused holder outlives the holder's
    /// transaction instead of giving up just before the server ends it.
    pub fn lock_timeout(&self) -> Duration {
        self.lease * 2 / 3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_hold_and_the_timeouts_sit_below_the_lease() {
        let c = ClusterConfig::default();
        assert!(c.check().is_ok());
        assert_eq!(c.max_gap(), Duration::from_secs(2));
        assert!(c.idle_in_transaction_timeout() < c.lock_timeout());
        assert!(c.lock_timeout() < c.lease);
        assert!(ClusterConfig::with_lease(Duration::from_secs(1))
            .check()
            .is_ok());
        let tight = ClusterConfig {
            lease: Duration::from_secs(1),
            heartbeat_every: Duration::from_millis(600),
        };
        assert!(matches!(tight.check(), Err(ClusterError::Config(_))));
    }
}
