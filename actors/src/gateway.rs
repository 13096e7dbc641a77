//! `Gateway`: the root supervisor.
//!
//! It starts the core actors (StoreWriter, Registry, HostSupervisor,
//! Reaper, and on a cluster the Node), restarts them per
//! their [`RestartPolicy`] and publishes each new `ActorRef` so that callers
//! always reach the current one. When a core actor exceeds its intensity the
//! gateway stops itself (escalation): the binary sees that and exits
//! cleanly instead of serving with a broken core.

mod handle;

pub use handle::{spawn_peer, spawn_peer_with_token, GatewayHandle};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};
use tether_store::{HandoffStore, StoreRead};
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::config::{GatewayConfig, HostConfig};
use crate::ctx::Ctx;
use crate::host_supervisor::{HostSupervisor, HostSupervisorArgs, HostSupervisorMsg};
use crate::node::Node;
use crate::reaper::{Reaper, ReaperMsg};
use crate::registry::{Registry, RegistryMsg};
use crate::store_writer::{StoreWriter, StoreWriterArgs, StoreWriterMsg, WriterFactory};
use crate::supervisor::{Decision, RestartTracker};

/// The core children of the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Child {
    StoreWriter,
    Registry,
    HostSupervisor,
    Reaper,
    /// On a cluster: the heartbeat, re-check and sweep (`node.rs`).
    Node,
}

/// Every core child.
const CHILDREN: [Child; 5] = [
    Child::StoreWriter,
    Child::Registry,
    Child::HostSupervisor,
    Child::Reaper,
    Child::Node,
];

pub enum GatewayMsg {
    /// Start (or restart) a core child.
    Start(Child),
    /// Drain: flush every session and the writer, then stop everything.
    Shutdown { reply: RpcReplyPort<()> },
}

pub struct GatewayArgs {
    pub config: GatewayConfig,
    /// Compute hosts; `None` runs without any (turns then get 5019).
    pub hosts: Option<HostConfig>,
    pub reader: Arc<dyn StoreRead>,
    pub handoffs: Arc<dyn HandoffStore>,
    /// Deletion and retention.
    pub eraser: Arc<dyn tether_store::StoreErase>,
    pub epoch: String,
    pub writer_factory: WriterFactory,
    /// This gateway is a node of a cluster on PostgreSQL (`--cluster`):
    /// sessions are claimed before they are written, and startup recovery
    /// is left to failover (`node/claim.rs`). `None`: the store's only gateway.
    pub cluster: Option<tether_store::cluster::Cluster>,
}

/// The sending side of `Ctx`'s actor refs: where the root publishes the
/// current `ActorRef` of each core child (`None` while it is down).
pub struct Published {
    writer: watch::Sender<Option<ActorRef<StoreWriterMsg>>>,
    registry: watch::Sender<Option<ActorRef<RegistryMsg>>>,
    hosts: watch::Sender<Option<ActorRef<HostSupervisorMsg>>>,
    reaper: watch::Sender<Option<ActorRef<ReaperMsg>>>,
}

impl Published {
    /// `child` is down: nobody may reach the old actor any more.
    fn clear(&self, child: Child) {
        match child {
            Child::StoreWriter => drop(self.writer.send(None)),
            Child::Registry => drop(self.registry.send(None)),
            Child::HostSupervisor => drop(self.hosts.send(None)),
            Child::Reaper => drop(self.reaper.send(None)),
            // Nobody sends it anything.
            Child::Node => {}
        }
    }
}

/// What the root actor starts from; built by [`GatewayHandle::start`].
pub struct RootArgs {
    ctx: Ctx,
    published: Published,
    host_config: Option<HostConfig>,
    factory: WriterFactory,
}

pub struct GatewayState {
    ctx: Ctx,
    published: Published,
    host_config: Option<HostConfig>,
    factory: WriterFactory,
    children: HashMap<ActorId, Child>,
    trackers: HashMap<Child, RestartTracker>,
    stopping: bool,
}

pub struct Gateway;

impl Actor for Gateway {
    type Msg = GatewayMsg;
    type State = GatewayState;
    type Arguments = RootArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: RootArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let policy = args.ctx.config.core_policy;
        let mut state = GatewayState {
            ctx: args.ctx,
            published: args.published,
            host_config: args.host_config,
            factory: args.factory,
            children: HashMap::new(),
            trackers: CHILDREN
                .into_iter()
                .map(|c| (c, RestartTracker::new(policy)))
                .collect(),
            stopping: false,
        };
        // Started here, not via messages, so the gateway is usable as soon
        // as `spawn` returns. The node first: it keeps this node alive in
        // the others' eyes from the moment it joined.
        if state.ctx.cluster.is_some() {
            state.start(&myself, Child::Node).await?;
        }
        state.start(&myself, Child::StoreWriter).await?;
        // The reaper before the registry: sessions brought live at once
        // (none today, but a restarted registry's) report to it.
        state.start(&myself, Child::Reaper).await?;
        state.start(&myself, Child::Registry).await?;
        if state.host_config.is_some() {
            state.start(&myself, Child::HostSupervisor).await?;
        }
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            GatewayMsg::Start(child) => {
                if !state.stopping {
                    if let Err(e) = state.start(&myself, child).await {
                        error!(child = ?child, error = %e, "core actor failed to restart; shutting down");
                        myself.stop(Some(format!("{child:?} could not restart")));
                    }
                }
            }
            GatewayMsg::Shutdown { reply } => {
                state.drain().await;
                state.stopping = true;
                myself
                    .get_cell()
                    .stop_children_and_wait(Some("shutdown".into()), Some(Duration::from_secs(1)))
                    .await;
                let _ = reply.send(());
                myself.stop(Some("shutdown".into()));
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        evt: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, why) = match &evt {
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                (cell, reason.clone().unwrap_or_else(|| "stopped".into()))
            }
            SupervisionEvent::ActorFailed(cell, err) => (cell, format!("failed: {err}")),
            _ => return Ok(()),
        };
        state.on_child_stopped(&myself, cell, &why);
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.stopping = true;
        myself
            .get_cell()
            .stop_children_and_wait(
                Some("gateway stopping".into()),
                Some(Duration::from_secs(5)),
            )
            .await;
        for child in CHILDREN {
            state.published.clear(child);
        }
        Ok(())
    }
}

impl GatewayState {
    async fn start(
        &mut self,
        myself: &ActorRef<GatewayMsg>,
        child: Child,
    ) -> Result<(), ActorProcessingErr> {
        let supervisor = myself.get_cell();
        let id = match child {
            Child::StoreWriter => {
                let args = StoreWriterArgs {
                    factory: self.factory.clone(),
                    max_batch_events: self.ctx.config.commit_batch_events,
                    commit_window: self.ctx.config.commit_window,
                    metrics: self.ctx.metrics.clone(),
                };
                let (actor, _) = Actor::spawn_linked(None, StoreWriter, args, supervisor).await?;
                let id = actor.get_id();
                let restarted =
                    self.published.writer.borrow().is_none() && !self.children.is_empty();
                let _ = self.published.writer.send(Some(actor));
                if restarted {
                    // Appends that were at the old writer may be lost; every
                    // live session checks against the store and re-sends.
                    if let Ok(registry) = self.ctx.registry() {
                        let _ = registry.cast(RegistryMsg::WriterRestarted);
                    }
                }
                id
            }
            Child::Registry => {
                let (actor, _) =
                    Actor::spawn_linked(None, Registry, self.ctx.clone(), supervisor).await?;
                let id = actor.get_id();
                let _ = self.published.registry.send(Some(actor));
                id
            }
            Child::Reaper => {
                let (actor, _) =
                    Actor::spawn_linked(None, Reaper, self.ctx.clone(), supervisor).await?;
                let id = actor.get_id();
                let restarted = !self.children.is_empty();
                let _ = self.published.reaper.send(Some(actor));
                if restarted {
                    // The new reaper knows no orphan: have every live
                    // session report again.
                    if let Ok(registry) = self.ctx.registry() {
                        let _ = registry.cast(RegistryMsg::ReaperRestarted);
                    }
                }
                id
            }
            Child::Node => {
                if self.ctx.cluster.is_none() {
                    return Ok(());
                }
                let (actor, _) =
                    Actor::spawn_linked(None, Node, self.ctx.clone(), supervisor).await?;
                actor.get_id()
            }
            Child::HostSupervisor => {
                let Some(config) = self.host_config.clone() else {
                    return Ok(());
                };
                let args = HostSupervisorArgs {
                    config,
                    up_slots: self.ctx.hosts_up.clone(),
                    metrics: self.ctx.metrics.clone(),
                    start: self.ctx.host_start.clone(),
                };
                let (actor, _) =
                    Actor::spawn_linked(None, HostSupervisor, args, supervisor).await?;
                let id = actor.get_id();
                let restarted = self
                    .trackers
                    .get(&Child::HostSupervisor)
                    .is_some_and(|t| t.total_restarts() > 0);
                let _ = self.published.hosts.send(Some(actor));
                if restarted {
                    // The old supervisor took its hosts and their turns
                    // down with it: every session ends what it ran there.
                    if let Ok(registry) = self.ctx.registry() {
                        let _ = registry.cast(RegistryMsg::HostsRestarted);
                    }
                }
                id
            }
        };
        self.children.insert(id, child);
        info!(child = ?child, "core actor started");
        Ok(())
    }

    fn on_child_stopped(&mut self, myself: &ActorRef<GatewayMsg>, cell: &ActorCell, why: &str) {
        let Some(child) = self.children.remove(&cell.get_id()) else {
            return;
        };
        self.published.clear(child);
        if self.stopping {
            return;
        }
        warn!(child = ?child, reason = why, "core actor stopped unexpectedly");
        let decision = match self.trackers.get_mut(&child) {
            Some(t) => t.on_stop(Instant::now()),
            None => Decision::Escalate,
        };
        match decision {
            Decision::Restart { after, attempt } => {
                info!(child = ?child, attempt, backoff_ms = after.as_millis() as u64, "restarting core actor");
                let myself = myself.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(after).await;
                    let _ = myself.cast(GatewayMsg::Start(child));
                });
            }
            Decision::Ignore => {}
            // Core policies escalate; a rest would leave the gateway without
            // a core actor, so it is treated alike.
            Decision::Escalate | Decision::Rest { .. } => {
                error!(child = ?child, "restart intensity exceeded; shutting the gateway down");
                self.stopping = true;
                myself.stop(Some(format!("{child:?} exceeded its restart intensity")));
            }
        }
    }

    /// Flushes every live session, then the writer, with a deadline.
    async fn drain(&mut self) {
        // Hosts first: a host told to shut down ends its running turns, and
        // those endings reach their sessions before the sessions' flush
        // below (the supervisor sends them before it answers). Then every
        // session's events, then the writer's queue. The deadlines add up
        // to less than the 10 s a SIGTERM drain may take.
        let hosts = self.ctx.hosts();
        drain_step(hosts, |reply| HostSupervisorMsg::Shutdown { reply }, 4).await;
        let registry = self.ctx.registry().ok();
        drain_step(registry, |reply| RegistryMsg::FlushAll { reply }, 3).await;
        let writer = self.ctx.writer();
        drain_step(writer, |reply| StoreWriterMsg::Flush { reply }, 1).await;
    }
}

/// One step of the drain: asks `actor`, if it is up, and waits for its
/// answer at most `wait_s` seconds. A step that finds its actor gone or
/// times out is over: the drain goes on to the next.
async fn drain_step<M: ractor::Message>(
    actor: Option<ActorRef<M>>,
    msg: impl FnOnce(RpcReplyPort<()>) -> M,
    wait_s: u64,
) {
    if let Some(actor) = actor {
        let _ = actor.call(msg, Some(Duration::from_secs(wait_s))).await;
    }
}
