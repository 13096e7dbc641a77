//! `tether serve --cluster`: this gateway as a node of a cluster on one
//! PostgreSQL (docs/ARCHITECTURE.md "Cluster"): it joins under a fresh
//! node id, hands the actors a fenced store (the actors' `Node` then
//! heartbeats, re-checks and sweeps for as long as the gateway runs), and
//! on a clean stop leaves, so other nodes take its sessions over at once
//! instead of after a lease.

use std::sync::{Arc, Mutex};

use tether_store::cluster::{Cluster, ClusterConfig, ClusterError};
use tether_store::{HandoffStore, PostgresConfig, StoreRead, WriterFactory};
use tracing::{info, warn};

/// A node that joined: its cluster handle.
pub struct Node {
    cluster: Cluster,
}

/// What the actors need of the store, whichever way it was opened.
pub struct StoreParts {
    pub reader: Arc<dyn StoreRead>,
    pub handoffs: Arc<dyn HandoffStore>,
    pub eraser: Arc<dyn tether_store::StoreErase>,
    pub epoch: String,
    pub writers: WriterFactory,
}

impl Node {
    /// Joins the cluster on `cfg`. The gateway's `Node` actor heartbeats
    /// from its start on (within a quarter of the lease, which this join
    /// counts as the first beat).
    pub async fn start(cfg: &PostgresConfig, config: ClusterConfig) -> Result<Node, ClusterError> {
        Ok(Node {
            cluster: Cluster::start(cfg, config).await?,
        })
    }

    /// The cluster handle, for the actors.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The fenced store of this node: its writer first, then a new fenced
    /// writer each time the StoreWriter actor is restarted.
    pub async fn open(&self) -> Result<StoreParts, ClusterError> {
        let opened = self.cluster.open().await?;
        let first = Mutex::new(Some(opened.writer));
        let cluster = self.cluster.clone();
        let writers: WriterFactory = Arc::new(move || {
            // A poisoned lock only means a panic elsewhere; a new writer is as good.
            let first = first.lock().ok().and_then(|mut first| first.take());
            let cluster = cluster.clone();
            Box::pin(async move {
                Ok(match first {
                    Some(writer) => writer,
                    None => cluster.open_writer().await,
                })
            })
        });
        Ok(StoreParts {
            reader: opened.reader,
            handoffs: opened.handoffs,
            eraser: opened.eraser,
            epoch: opened.epoch,
            writers,
        })
    }

    /// A clean stop, once the gateway has drained and stopped (its
    /// heartbeats with it): releases every session this node owns and
    /// removes the node. A failure is logged: the other nodes then take the
    /// sessions over after a lease.
    pub async fn leave(self) {
        match self.cluster.leave().await {
            Ok(released) => {
                info!(node_id = %self.cluster.node_id(), released, "left the cluster")
            }
            Err(e) => {
                warn!(node_id = %self.cluster.node_id(), error = %e, "could not leave the cluster; its sessions move after a lease")
            }
        }
    }
}
