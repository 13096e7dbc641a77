//! What the cluster's own operations (heartbeat, claim, release, listen) can answer.
//!
//! A refused claim is not a store failure: it says who holds the session or why this node may
//! not take it yet, so the caller can forward, wait, or become a follower. Store failures keep
//! their [`StoreError`] (and so their wire code).

use std::time::Duration;

use tether_protocol::SessionId;

use crate::{OpenError, StoreError};

use crate::postgres::fencing::NodeId;

/// Why a cluster operation did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// The session is owned by another node whose heartbeat is within the lease: forward to it
    /// (or follow it); do not claim.
    #[error("session {session_id} is owned by live node {owner}")]
    OwnedElsewhere {
        /// The session asked for.
        session_id: SessionId,
        /// Its live owner.
        owner: NodeId,
    },
    /// The session's owner is dead, but this node's own run of heartbeats is shorter than one
    /// lease: it may just have come back from a PostgreSQL outage, in which every other node
    /// looks dead too (docs/ARCHITECTURE.md: "a PostgreSQL outage is not a node death"). Retry later.
    #[error(
        "node {node} has heartbeated without a break for {run:?}, less than the lease ({lease:?}): \
         it may not claim session {session_id} of node {owner} yet"
    )]
    NotSettled {
        /// This node.
        node: NodeId,
        /// The session asked for.
        session_id: SessionId,
        /// Its (dead) owner.
        owner: NodeId,
        /// How long this node's current run of heartbeats is, by the database's clock.
        run: Duration,
        /// The lease the run must reach.
        lease: Duration,
    },
    /// This node's own heartbeat is older than the lease: to the others it is dead, so it may
    /// claim nothing until it has heartbeated again.
    #[error("node {node}'s last heartbeat is {age:?} old, beyond the lease ({lease:?})")]
    NotLive {
        /// This node.
        node: NodeId,
        /// The age of its last heartbeat, by the database's clock.
        age: Duration,
        /// The lease.
        lease: Duration,
    },
    /// This node's row is gone from `nodes`: it must start again under a new id.
    #[error("node {node} is not registered")]
    UnknownNode {
        /// This node.
        node: NodeId,
    },
    /// The cluster settings do not make sense together.
    #[error("cluster settings: {0}")]
    Config(String),
    /// Opening the database failed.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The store failed (unreachable, lock wait timed out, ...): nothing was claimed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ClusterError {
    /// True for a refusal that a later retry may turn into a success without anything else
    /// changing: the owner may die, this node's run may grow long enough, the store may come
    /// back.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ClusterError::OwnedElsewhere { .. }
                | ClusterError::NotSettled { .. }
                | ClusterError::NotLive { .. }
                | ClusterError::Store(StoreError::Unavailable(_))
        )
    }
}
