//! What every actor of one gateway shares: settings, the read side of the
//! store, and where the core actors currently live.
//!
//! Core actors get a new `ActorRef` when their supervisor restarts them, so
//! nobody caches one: the root publishes the current refs on `watch`
//! channels and callers read the latest one each time they need it.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use ractor::ActorRef;
use tether_protocol::RpcError;
use tether_store::{HandoffStore, StoreRead};
use tokio::sync::watch;

use crate::config::GatewayConfig;
use crate::host_supervisor::HostSupervisorMsg;
use crate::lifecycle::Lifecycle;
use crate::metrics::{Metrics, OutboxMetrics};
use crate::reaper::ReaperMsg;
use crate::registry::RegistryMsg;
use crate::store_writer::StoreWriterMsg;

/// Shared context handed to every actor, peer and request: one reference
/// count, so a clone is one atomic increment. It was the fields themselves,
/// a dozen reference counts and watch receivers, and each connection clones
/// it several times (the HTTP extractors, its peer), which `perf` put at 3 %
/// of the gateway's core during a reconnect storm; every peer and session
/// also held a copy of all of them.
#[derive(Clone)]
pub struct Ctx(Arc<CtxParts>);

impl Ctx {
    pub(crate) fn new(parts: CtxParts) -> Self {
        Ctx(Arc::new(parts))
    }
}

impl std::ops::Deref for Ctx {
    type Target = CtxParts;

    fn deref(&self) -> &CtxParts {
        &self.0
    }
}

/// What a [`Ctx`] shares.
pub struct CtxParts {
    pub config: Arc<GatewayConfig>,
    pub reader: Arc<dyn StoreRead>,
    /// The handoff queue: small compare-and-set writes on a connection of
    /// their own, beside the StoreWriter (see the store's `sqlite/handoffs.rs`).
    pub(crate) handoffs: Arc<dyn HandoffStore>,
    /// Deletion and retention: short transactions on a connection of their
    /// own (the store's `erase.rs`).
    pub(crate) eraser: Arc<dyn tether_store::StoreErase>,
    pub(crate) epoch: Arc<str>,
    pub(crate) writer: watch::Receiver<Option<ActorRef<StoreWriterMsg>>>,
    pub(crate) registry: watch::Receiver<Option<ActorRef<RegistryMsg>>>,
    pub(crate) hosts: watch::Receiver<Option<ActorRef<HostSupervisorMsg>>>,
    pub(crate) reaper: watch::Receiver<Option<ActorRef<ReaperMsg>>>,
    /// Host slots that are up now, kept by the host supervisor.
    pub(crate) hosts_up: Arc<AtomicUsize>,
    /// Counters every peer outbox of this gateway adds to.
    pub(crate) outbox_metrics: Arc<OutboxMetrics>,
    /// Everything `/metrics` reports; `outbox` is `outbox_metrics`.
    pub metrics: Arc<Metrics>,
    /// Recovering, serving or draining.
    pub lifecycle: Arc<Lifecycle>,
    /// Whether a compute host ever said hello (`tether serve` exits when
    /// none can).
    pub host_start: Arc<crate::HostStart>,
    /// What each profile holds, against its limits (`registry/ledger.rs`).
    pub profiles: Arc<crate::ProfileLedger>,
    /// The node this gateway is, on a cluster (`node.rs`).
    pub(crate) cluster: Option<tether_store::cluster::Cluster>,
    /// On a cluster: deltas of owned sessions to the other nodes.
    pub(crate) deltas: Option<crate::delta_relay::DeltaRelay>,
}

impl CtxParts {
    /// Whether a store writer is up (not between a crash and its restart).
    pub fn writer_up(&self) -> bool {
        self.writer.borrow().is_some()
    }

    /// On a cluster: whether this node cannot renew its lease, so it acts
    /// as the owner of nothing (`/readyz` is 503 meanwhile).
    pub fn lease_lost(&self) -> bool {
        self.cluster.as_ref().is_some_and(|c| !c.lease_held())
    }

    /// Whether the session registry is up (not between a crash and its
    /// restart).
    pub fn registry_up(&self) -> bool {
        self.registry.borrow().is_some()
    }

    /// The current store writer, if it is up.
    pub(crate) fn writer(&self) -> Option<ActorRef<StoreWriterMsg>> {
        self.writer.borrow().clone()
    }

    /// The current host supervisor, if it is up.
    pub(crate) fn hosts(&self) -> Option<ActorRef<HostSupervisorMsg>> {
        self.hosts.borrow().clone()
    }

    /// The current reaper, if it is up (a session that cannot reach it
    /// stays live until the next one asks it to report again).
    pub(crate) fn reaper(&self) -> Option<ActorRef<ReaperMsg>> {
        self.reaper.borrow().clone()
    }

    /// How many host slots can take work now.
    pub fn hosts_up(&self) -> usize {
        self.hosts_up.load(Ordering::Relaxed)
    }

    /// The current registry, or 5072 while it is being restarted.
    pub(crate) fn registry(&self) -> Result<ActorRef<RegistryMsg>, RpcError> {
        self.registry.borrow().clone().ok_or_else(|| {
            RpcError::new(
                tether_protocol::codes::STORAGE_UNAVAILABLE,
                "gateway is restarting its session registry",
            )
        })
    }
}

/// Counters a live session publishes for listings and stats, so that those
/// never have to wait on (or queue behind) the session's mailbox.
#[derive(Debug, Default)]
pub(crate) struct SessionGauges {
    pub peers: AtomicU32,
    /// On a cluster: peers attached through other live nodes (the
    /// registry's poll, `registry/follow.rs`).
    pub other_peers: AtomicU32,
    pub ring_events: AtomicU64,
    pub ring_bytes: AtomicU64,
    pub running: AtomicBool,
    /// A turn runs, a prompt is queued or a compression is in flight: the
    /// reapers must not park it.
    pub busy: AtomicBool,
    /// Last event emitted (ms since the epoch): the reapers' notion of
    /// activity, including a running turn's host frames.
    pub last_activity_ms: AtomicI64,
    /// The session parked itself and is stopping: listings count it as
    /// parked already. (Requests never depend on it: the registry holds
    /// them across a park, `registry/route.rs`.)
    pub parked: AtomicBool,
}

impl SessionGauges {
    /// Peers over every node (this one's, and on a cluster the others').
    pub fn peers(&self) -> u32 {
        self.peers
            .load(Ordering::Relaxed)
            .saturating_add(self.other_peers())
    }

    pub fn other_peers(&self) -> u32 {
        self.other_peers.load(Ordering::Relaxed)
    }

    pub fn running(&self) -> bool {
        self.running.load(Ordering::Relaxed)
    }

    pub(crate) fn set_running(&self, running: bool) {
        self.running.store(running, Ordering::Relaxed);
    }

    pub fn busy(&self) -> bool {
        self.busy.load(Ordering::Relaxed)
    }

    pub fn last_activity_ms(&self) -> i64 {
        self.last_activity_ms.load(Ordering::Relaxed)
    }

    pub fn parked(&self) -> bool {
        self.parked.load(Ordering::Acquire)
    }

    pub(crate) fn set(&self, peers: usize, ring_events: usize, ring_bytes: usize) {
        self.peers.store(peers as u32, Ordering::Relaxed);
        self.ring_events
            .store(ring_events as u64, Ordering::Relaxed);
        self.ring_bytes.store(ring_bytes as u64, Ordering::Relaxed);
    }
}
