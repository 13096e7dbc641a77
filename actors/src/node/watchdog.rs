//! The node's watchdog: stands the node down when its lease has not been
//! renewed for [`ClusterConfig::stand_down_after`] (half the lease), counted
//! from when the last answered heartbeat was sent. A task of its own, not
//! the `Node`'s mailbox: a heartbeat held by a silent link must not delay
//! it.
//!
//! Standing down forgets every fence (`Cluster::stand_down`) and asks the
//! registry for its poll, which tells every session this node owned that
//! it lost the session; each one then stops acting as the owner
//! (`session/cluster/cut_off.rs`). A heartbeat answered again ends it:
//! sessions are claimed again, from the store, as clients need them.
//!
//! [`ClusterConfig::stand_down_after`]: tether_store::cluster::ClusterConfig::stand_down_after

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::info;

use crate::ctx::Ctx;
use crate::registry::RegistryMsg;

/// How often, at most, the watchdog looks at the lease.
const LOOK_AT_MOST_EVERY: Duration = Duration::from_millis(10);

/// The watchdog's task, ended when dropped (with its `Node`).
pub(super) struct Watchdog(Option<JoinHandle<()>>);

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

impl Watchdog {
    /// Starts watching `ctx`'s cluster lease (none on a single gateway).
    pub(super) fn start(ctx: Ctx) -> Watchdog {
        let Some(cluster) = ctx.cluster.clone() else {
            return Watchdog(None);
        };
        let bound = cluster.config().stand_down_after();
        // A twentieth of the bound: standing down comes within 5 % of it.
        let every = (bound / 20).max(LOOK_AT_MOST_EVERY);
        // After a stall of the whole process, how long the heartbeat has
        // to answer before the node stands down.
        let grace = cluster.config().heartbeat_every;
        Watchdog(Some(tokio::spawn(async move {
            let mut was_cut_off = false;
            let mut last = Instant::now();
            let mut not_before = last;
            loop {
                tokio::time::sleep(every).await;
                let now = Instant::now();
                if now.duration_since(last) >= bound {
                    // The process itself did not run (paused, SIGSTOP):
                    // nothing could have been stopped in time. Its late
                    // heartbeat re-checks every ownership, and the sessions
                    // lost meanwhile follow their new owner; stand down
                    // only if that heartbeat is not answered either.
                    not_before = now + grace;
                }
                last = now;
                let cut_off = cluster.cut_off();
                if was_cut_off && !cut_off {
                    info!(node_id = %cluster.node_id(), "lease renewed again; sessions are claimed anew as clients need them");
                }
                was_cut_off = cut_off;
                if cut_off || now < not_before || cluster.since_renewed() < bound {
                    continue;
                }
                if cluster.stand_down().is_some() {
                    was_cut_off = true;
                    if let Ok(registry) = ctx.registry() {
                        let _ = registry.cast(RegistryMsg::PollOwners);
                    }
                }
            }
        })))
    }
}
