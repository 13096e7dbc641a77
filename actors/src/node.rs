//! `Node`: this gateway as a node of a cluster on PostgreSQL (`--cluster`,
//! docs/ARCHITECTURE.md "Cluster"), a core child of the root that keeps the
//! node's ownerships true. It heartbeats every quarter of the lease; a
//! heartbeat that starts a new run (this node may have looked dead)
//! re-checks every ownership, so the sessions lost meanwhile are forgotten
//! by the writer's fences (their next write is refused, and the registry's
//! poll tells them within a second). And it sweeps, at start and once a
//! minute, what dead nodes and old forwards leave behind.
//!
//! A node that cannot renew its lease (cut off from PostgreSQL, or the
//! database down) stands down half a lease after its last answered
//! heartbeat was sent, before any other node may take its sessions: its
//! watchdog (`watchdog.rs`) forgets every fence and has the registry tell
//! every owned session, which stops acting as the owner
//! (`session/cluster/cut_off.rs`).
//!
//! Joining (before the store is opened) and leaving (after the drain) are
//! the binary's, around the gateway's life (`bin/node.rs`). How sessions
//! are claimed is `claim.rs`.

mod claim;
mod watchdog;

use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tether_store::cluster::{Cluster, ClusterError};
use tracing::{debug, info, warn};

use crate::ctx::Ctx;

pub(crate) use claim::{claim, Claimed};

/// How often a node sweeps (every node does; the deletes are idempotent).
const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// What a sweep keeps: nodes dead and forwards past their deadline for
/// less than this (a forwarder reads its forward's answer until shortly
/// after the deadline; an operator may want to see a recent dead node).
const SWEEP_KEEP: Duration = Duration::from_secs(600);

pub enum NodeMsg {
    /// Time for the next heartbeat.
    Heartbeat,
    /// Time for the next sweep.
    Sweep,
    /// Internal: a sweep ended.
    Swept,
}

pub struct NodeState {
    cluster: Cluster,
    /// `leave()` removed this node's row: nothing to beat for.
    left: bool,
    /// A sweep is running (on a task: a slow delete never holds up a
    /// heartbeat).
    sweeping: bool,
    /// Stands the node down when its lease is not renewed; ends with it.
    _watchdog: watchdog::Watchdog,
}

pub struct Node;

impl Actor for Node {
    type Msg = NodeMsg;
    type State = NodeState;
    type Arguments = Ctx;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        ctx: Ctx,
    ) -> Result<Self::State, ActorProcessingErr> {
        let cluster = ctx
            .cluster
            .clone()
            .ok_or("a Node needs a cluster to belong to")?;
        Ok(NodeState {
            _watchdog: watchdog::Watchdog::start(ctx),
            cluster,
            left: false,
            sweeping: false,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // At once: a node that starts (or restarts) beats and cleans up too.
        let _ = myself.cast(NodeMsg::Heartbeat);
        let _ = myself.cast(NodeMsg::Sweep);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            NodeMsg::Heartbeat => {
                state.heartbeat().await;
                if !state.left {
                    // The next one a period after this one ended: a slow
                    // heartbeat delays the next, never makes two at once.
                    // One that failed is tried again sooner: the lease
                    // runs out all the same.
                    let mut every = state.cluster.config().heartbeat_every;
                    if !state.cluster.lease_held() || state.cluster.since_renewed() > every {
                        every /= 4;
                    }
                    myself.send_after(every, || NodeMsg::Heartbeat);
                }
            }
            NodeMsg::Sweep => {
                if !state.sweeping {
                    state.sweeping = true;
                    let cluster = state.cluster.clone();
                    let me = myself.clone();
                    tokio::spawn(async move {
                        sweep(&cluster).await;
                        let _ = me.cast(NodeMsg::Swept);
                    });
                }
                myself.send_after(SWEEP_EVERY, || NodeMsg::Sweep);
            }
            NodeMsg::Swept => state.sweeping = false,
        }
        Ok(())
    }
}

impl NodeState {
    /// One heartbeat, and the re-check a late one calls for.
    async fn heartbeat(&mut self) {
        let cluster = &self.cluster;
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
                self.left = true;
            }
            Err(e) => warn!(node_id = %cluster.node_id(), error = %e, "heartbeat failed"),
        }
    }
}

/// Forgets nodes long dead (their rows and peer counts) and forwards long
/// past their deadline: without it both tables only grow.
async fn sweep(cluster: &Cluster) {
    match cluster.sweep(SWEEP_KEEP).await {
        Ok((0, 0)) => {}
        Ok((nodes, forwards)) => {
            info!(node_id = %cluster.node_id(), nodes, forwards, "swept dead nodes and old forwards")
        }
        Err(e) => debug!(node_id = %cluster.node_id(), error = %e, "sweep failed; next time"),
    }
}
