//! Claims before writes: a session is claimed before this node writes
//! anything of it (its creation, or its load from the store), and the
//! claim says whether a dead node's turns must be ended.
//!
//! Only the owner writes; the fenced writer refuses everything else
//! (`StoreError::NotOwner`), so a claim here is what makes the writes that
//! follow possible, never what makes them safe.

use std::time::Duration;

use tether_protocol::SessionId;
use tether_store::cluster::{Cluster, ClusterError, NodeId, PreviousOwner};
use tether_store::StoreError;
use tracing::{debug, info};

/// What a claim means for the session about to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Claimed {
    /// This node owns it now. `lost_from`: the node that owned it is dead,
    /// so the turns its marker names end with `node_lost`, not
    /// `gateway_restart`.
    Owner { lost_from: Option<NodeId> },
    /// A live other node owns it: this node follows it (`session/cluster/follow.rs`).
    Follower { owner: NodeId },
}

/// How many leases a claim keeps retrying a refusal that time may lift (a
/// node younger than one lease, a late heartbeat, a brief outage) before it
/// answers 5072. Three, like the tests' bound on a failover.
const CLAIM_LEASES: u32 = 3;

/// Claims `session_id` for this node, retrying what a later try may turn
/// into a success within [`CLAIM_LEASES`] leases. A session a live other
/// node owns is that node's: [`Claimed::Follower`] at once.
pub(crate) async fn claim(
    cluster: &Cluster,
    session_id: &SessionId,
) -> Result<Claimed, StoreError> {
    let config = cluster.config();
    let deadline = tokio::time::Instant::now() + config.lease * CLAIM_LEASES;
    loop {
        match cluster.claim(session_id).await {
            Ok(claim) => {
                let lost_from = match claim.previous {
                    PreviousOwner::Dead(node) => {
                        info!(session_id = %session_id, node_id = %cluster.node_id(), dead = %node, fence = claim.fence, "session taken over from a dead node");
                        Some(node)
                    }
                    PreviousOwner::None | PreviousOwner::Itself => {
                        debug!(session_id = %session_id, node_id = %cluster.node_id(), fence = claim.fence, "session claimed");
                        None
                    }
                };
                return Ok(Claimed::Owner { lost_from });
            }
            Err(ClusterError::OwnedElsewhere { owner, .. }) => {
                debug!(session_id = %session_id, node_id = %cluster.node_id(), owner = %owner, "session owned by a live node; following it");
                return Ok(Claimed::Follower { owner });
            }
            Err(e) if e.is_retryable() && tokio::time::Instant::now() < deadline => {
                debug!(session_id = %session_id, node_id = %cluster.node_id(), error = %e, "claim refused for now; retrying");
                tokio::time::sleep(retry_every(config.heartbeat_every)).await;
            }
            Err(ClusterError::Store(e)) => return Err(e),
            Err(e) => return Err(StoreError::Unavailable(e.to_string())),
        }
    }
}

/// A refused claim is retried once per heartbeat: what lifts it (this
/// node's run growing, the owner's lease running out) moves no faster.
fn retry_every(heartbeat_every: Duration) -> Duration {
    heartbeat_every.max(Duration::from_millis(50))
}
