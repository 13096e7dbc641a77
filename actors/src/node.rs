//! The gateway as a node of a cluster on PostgreSQL (`--cluster`, DESIGN.md
//! "Several gateways on one PostgreSQL"): a session is claimed before this
//! node writes anything of it (its creation, or its load from the store),
//! and the claim says whether a dead node's turns must be ended.
//!
//! Only the owner writes; the fenced writer refuses everything else
//! (`StoreError::NotOwner`), so a claim here is what makes the writes that
//! follow possible, never what makes them safe.

use std::time::Duration;

use tether_protocol::SessionId;
use tether_store::cluster::{Cluster, ClusterError, NodeId, PreviousOwner};
use tether_store::StoreError;
use tracing::{debug, info};

/// What a successful claim means for the session about to start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Claimed {
    /// The node that owned the session is dead: the turns its marker names
    /// end with `node_lost`, not `gateway_restart`.
    pub lost_from: Option<NodeId>,
}

/// How many leases a claim keeps retrying a refusal that time may lift (a
/// node younger than one lease, a late heartbeat, a brief outage) before it
/// answers 5072. Three, like the tests' bound on a failover.
const CLAIM_LEASES: u32 = 3;

/// Claims `session_id` for this node, retrying what a later try may turn
/// into a success within [`CLAIM_LEASES`] leases. A session a live other
/// node owns is refused at once, as 5072: following and forwarding to
/// another node are not wired yet (docs/ARCHITECTURE.md, "Cluster").
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
                return Ok(Claimed { lost_from });
            }
            Err(e @ ClusterError::OwnedElsewhere { .. }) => {
                return Err(StoreError::Unavailable(format!(
                    "{e}; this node cannot serve it (following another node's session is not wired yet)"
                )))
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
