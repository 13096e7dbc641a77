//! `tether serve --cluster`: this gateway as a node of a cluster on one
//! PostgreSQL (docs/ARCHITECTURE.md "Cluster"): it joins
//! under a fresh node id, heartbeats on a task of its own, hands the actors
//! a fenced store, sweeps what dead nodes and old forwards leave behind,
//! and on a clean stop leaves, so other nodes take its sessions over at
//! once instead of after a lease.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tether_store::cluster::{Cluster, ClusterConfig, ClusterError};
use tether_store::{HandoffStore, PostgresConfig, StoreRead, WriterFactory};
use tracing::{debug, info, warn};

/// How often a node sweeps (every node does; the deletes are idempotent).
const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// What a sweep keeps: nodes dead and forwards past their deadline for
/// less than this (a forwarder reads its forward's answer until shortly
/// after the deadline; an operator may want to see a recent dead node).
const SWEEP_KEEP: Duration = Duration::from_secs(600);

/// A running node: the cluster handle, its heartbeat and sweep tasks.
pub struct Node {
    cluster: Cluster,
    heartbeat: tokio::task::JoinHandle<()>,
    sweep: tokio::task::JoinHandle<()>,
}

/// What the actors need of the store, whichever way it was opened.
pub struct StoreParts {
    pub reader: Arc<dyn StoreRead>,
    pub handoffs: Arc<dyn HandoffStore>,
    pub epoch: String,
    pub writers: WriterFactory,
}

impl Node {
    /// Joins the cluster on `cfg` and starts heartbeating every
    /// `config.heartbeat_every`.
    pub async fn start(cfg: &PostgresConfig, config: ClusterConfig) -> Result<Node, ClusterError> {
        let cluster = Cluster::start(cfg, config).await?;
        let heartbeat = tokio::spawn(heartbeat(cluster.clone()));
        let sweep = tokio::spawn(sweep(cluster.clone()));
        Ok(Node {
            cluster,
            heartbeat,
            sweep,
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
            epoch: opened.epoch,
            writers,
        })
    }

    /// A clean stop, once the gateway has drained and flushed: releases
    /// every session this node owns, then stops heartbeating. A failure is
    /// logged: the other nodes then take the sessions over after a lease.
    pub async fn leave(self) {
        match self.cluster.leave().await {
            Ok(released) => {
                info!(node_id = %self.cluster.node_id(), released, "left the cluster")
            }
            Err(e) => {
                warn!(node_id = %self.cluster.node_id(), error = %e, "could not leave the cluster; its sessions move after a lease")
            }
        }
        self.heartbeat.abort();
        self.sweep.abort();
    }
}

/// Forgets, now and then, nodes long dead (their rows and peer counts) and
/// forwards long past their deadline: without it both tables only grow.
async fn sweep(cluster: Cluster) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate: a node that starts cleans up too.
    loop {
        tick.tick().await;
        match cluster.sweep(SWEEP_KEEP).await {
            Ok((0, 0)) => {}
            Ok((nodes, forwards)) => {
                info!(node_id = %cluster.node_id(), nodes, forwards, "swept dead nodes and old forwards")
            }
            Err(e) => debug!(node_id = %cluster.node_id(), error = %e, "sweep failed; next time"),
        }
    }
}

/// Heartbeats for as long as the node runs. A heartbeat that starts a new
/// run (this node may have looked dead) re-checks every ownership: the
/// sessions lost meanwhile are forgotten by the writer's fences, so their
/// next write is refused (`NotOwner`), and the registry's poll tells them
/// within a second: they follow the new owner (or stop, with no peers).
async fn heartbeat(cluster: Cluster) {
    let every = cluster.config().heartbeat_every;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match cluster.heartbeat().await {
            Ok(beat) if beat.run_restarted => {
                warn!(node_id = %cluster.node_id(), run_ms = beat.run.as_millis() as u64, "heartbeat was late; re-checking ownerships");
                match cluster.recheck().await {
                    Ok(lost) if !lost.is_empty() => {
                        warn!(node_id = %cluster.node_id(), lost = lost.len(), "sessions lost to other nodes")
                    }
                    Ok(_) => {}
                    Err(e) => {
                        warn!(node_id = %cluster.node_id(), error = %e, "ownership re-check failed")
                    }
                }
            }
            Ok(_) => {}
            Err(e @ ClusterError::UnknownNode { .. }) => {
                // Only `leave` removes the row; nothing to beat for.
                debug!(node_id = %cluster.node_id(), error = %e, "heartbeat stopped");
                return;
            }
            Err(e) => warn!(node_id = %cluster.node_id(), error = %e, "heartbeat failed"),
        }
    }
}
