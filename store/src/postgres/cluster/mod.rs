//! Several gateways on one PostgreSQL: the store-level foundation, which `tether serve
//! --cluster` (`bin/node.rs`) and the actors build on. The rules it keeps and how the gateway
//! uses it are docs/ARCHITECTURE.md, "Cluster".
//!
//! One concept per file:
//!
//! - `config.rs`: the lease and the timeouts derived from it;
//! - `node.rs`: a node's row in `nodes`, its heartbeat and its run of heartbeats;
//! - `claim.rs`: claiming a session (the fence), releasing it;
//! - `forwards.rs`: requests forwarded to a session's owner, accepted at most once;
//! - `lease.rs`: this node's own view of its lease, and standing down when it cannot renew it;
//! - `listener.rs`: `LISTEN` for committed events, with a resync after every reconnect;
//! - `peers.rs`: each node's peer count per session, and who those peers are;
//! - `erased.rs`: the notification that a session was erased;
//! - `error.rs`: [`ClusterError`].
//!
//! What the writer and the handoff store need to fence their writes (the fences this node
//! holds, the node and forward ids, the forwards a write accepts, the fenced transaction
//! itself) is `postgres/fencing.rs`, below both them and this module, which starts them.
//!
//! PostgreSQL is the only shared component: nodes never talk to each other. Every judgement of
//! time (who is dead, whose run is long enough) is made by the server's `clock_timestamp()`.

mod claim;
mod config;
mod deltas;
pub(crate) mod erased;
mod error;
mod forwards;
mod lease;
mod listener;
mod node;
mod peers;

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
use tether_protocol::SessionId;

use crate::{Opened, PostgresConfig, StoreWrite};

use super::connect::{close, node_lock_key, Settings, WriterLock};
use super::fencing::{Accepts, Fencing};
pub use super::fencing::{Fences, ForwardId, NodeId};
use super::{check_pool, connect_retrying, ensure_epoch, migrate, writer, HANDOFF_CONNECTIONS};
use crate::served::Served;

pub use claim::{Claim, Ownership, PreviousOwner};
pub use config::ClusterConfig;
pub use deltas::{Deltas, DELTA_CHANNEL, MAX_BODY as MAX_DELTA_BODY};
pub use error::ClusterError;
pub use forwards::{ForwardRow, ForwardState, ForwardWriteError, FORWARD_CHANNEL};
pub use listener::{parse as parse_notification, EventListener, Wake, CHANNEL};
pub use node::Heartbeat;

/// Connections of a node's own pool: claims, peer counts, forwards. Heartbeats have a
/// connection of their own, so that claims waiting on row locks (up to `lock_timeout` each)
/// can never delay a heartbeat past the lease.
const NODE_CONNECTIONS: u32 = 4;

/// A node of a cluster: its id, its connections, the fences it holds. Cheap to clone; every
/// clone is the same node.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    settings: Arc<Settings>,
    node: NodeId,
    config: ClusterConfig,
    pool: PgPool,
    /// The heartbeat's own connection (see [`NODE_CONNECTIONS`]).
    beat: PgPool,
    fences: Fences,
    accepts: Accepts,
    epoch: String,
    /// The events the store held when this node started.
    held: u64,
    /// What this node's data directory saw the store hold, kept up to date.
    served: Option<Arc<Served>>,
    /// This node's own view of its lease (`lease.rs`).
    lease: lease::LeaseClock,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("node", &self.inner.node)
            .field("config", &self.inner.config)
            .field("sessions", &self.inner.fences.len())
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Joins the cluster on `cfg`'s database as a new node: connects (retrying an unreachable
    /// server for `cfg.connect_timeout`) as a node, which a single gateway on the same database
    /// keeps out (`OpenError::Held`) and other nodes do not; migrates; creates the epoch on
    /// first open (one per database); registers a fresh node id. The caller then heartbeats
    /// every [`ClusterConfig::heartbeat_every`].
    pub async fn start(
        cfg: &PostgresConfig,
        config: ClusterConfig,
    ) -> Result<Cluster, ClusterError> {
        config.check()?;
        let node = NodeId::fresh();
        let mut settings = Settings::new(cfg)?;
        settings.lock = WriterLock::Node {
            key: node_lock_key(node.as_str()),
            lock_timeout: config.lock_timeout(),
            idle_in_transaction_timeout: config.idle_in_transaction_timeout(),
        };
        let settings = Arc::new(settings);
        let mut conn = connect_retrying(&settings, writer::next_writer()).await?;
        let prepared = async {
            migrate(&mut conn, &settings.url).await?;
            ensure_epoch(&mut conn, cfg.served.as_deref(), &settings.url)
                .await
                .map_err(ClusterError::from)
        }
        .await;
        close(conn).await;
        let (epoch, held) = prepared?;
        let served = cfg
            .served
            .clone()
            .map(|path| Arc::new(Served::start(path, epoch.clone(), held)));
        let options = settings
            .node_options("node")
            .ok_or_else(|| ClusterError::Config("not a node's settings".into()))?;
        let pool = PgPoolOptions::new()
            .max_connections(NODE_CONNECTIONS)
            .min_connections(0)
            .acquire_timeout(config.lock_timeout().max(Duration::from_millis(500)))
            .connect_lazy_with(options.clone());
        let beat = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .acquire_timeout(config.heartbeat_every.max(Duration::from_millis(200)))
            .connect_lazy_with(options);
        let registered = std::time::Instant::now();
        node::register(&beat, &node).await?;
        tracing::info!(node = %node, url = %settings.url, epoch = %epoch, lease_ms = config.lease.as_millis() as u64, "cluster node started");
        Ok(Cluster {
            inner: Arc::new(Inner {
                settings,
                node,
                config,
                pool,
                beat,
                fences: Fences::default(),
                accepts: Accepts::default(),
                epoch,
                held,
                served,
                lease: lease::LeaseClock::new(registered),
            }),
        })
    }

    /// This node's id.
    pub fn node_id(&self) -> &NodeId {
        &self.inner.node
    }

    /// The lease and heartbeat settings.
    pub fn config(&self) -> &ClusterConfig {
        &self.inner.config
    }

    /// The database's epoch (one per database, whichever node a client talks to).
    pub fn epoch(&self) -> &str {
        &self.inner.epoch
    }

    /// One heartbeat; run it every [`ClusterConfig::heartbeat_every`]. A `run_restarted`
    /// answer means this node may have looked dead: re-check ownerships (docs/ARCHITECTURE.md "Cluster").
    /// Bounded by the time left before the node must stand down (`lease.rs`).
    pub async fn heartbeat(&self) -> Result<Heartbeat, ClusterError> {
        self.beat().await
    }

    /// Claims `session_id` (which need not exist yet: claim before creating it). Succeeds when
    /// it is unowned, owned by this node, or owned by a node dead by the lease while this node
    /// has heartbeated without a break for one lease; the fence moves by one and is recorded
    /// for this node's writer. [`PreviousOwner::Dead`] tells the caller to end that node's
    /// running turns with `node_lost`.
    /// Refused (retryable) while this node stands down: it must not own anything before it
    /// has renewed its lease (`lease.rs`).
    pub async fn claim(&self, session_id: &SessionId) -> Result<Claim, ClusterError> {
        self.lease_check()?;
        let claim = claim::claim(
            &self.inner.pool,
            &self.inner.node,
            &self.inner.config,
            session_id,
        )
        .await?;
        self.inner.fences.hold(session_id, claim.fence);
        if let Err(e) = self.lease_check() {
            // It stood down while the claim was on its way: given up with the rest.
            self.inner.fences.forget(session_id, claim.fence);
            return Err(e);
        }
        Ok(claim)
    }

    /// Re-checks every ownership this node holds (after a late heartbeat,
    /// [`Heartbeat::run_restarted`]) without moving any fence, and forgets the sessions lost
    /// to other nodes' claims; returns those (with the fence that was held). The caller
    /// interrupts their turns, drops their rings and follows them. Unlike a re-claim, this
    /// does not refuse this node's own batches in flight.
    pub async fn recheck(&self) -> Result<Vec<(SessionId, u64)>, ClusterError> {
        let held = self.inner.fences.all();
        let lost = claim::lost(&self.inner.pool, &self.inner.node, &held).await?;
        for (session_id, fence) in &lost {
            tracing::warn!(node = %self.inner.node, session_id = %session_id, fence, "session lost to another node");
            self.inner.fences.forget(session_id, *fence);
        }
        Ok(lost)
    }

    /// Gives `session_id` up if this node still owns it under `fence` (a clean stop, a park),
    /// so the next node claims it without waiting for a lease. `true` when released.
    pub async fn release(&self, session_id: &SessionId, fence: u64) -> Result<bool, ClusterError> {
        self.inner.fences.forget(session_id, fence);
        claim::release(&self.inner.pool, &self.inner.node, session_id, fence).await
    }

    /// A clean stop (drain, rolling restart), once this node's writers are done: releases
    /// every session it owns so other nodes take them over at once, removes its peer counts
    /// and its row. Afterwards every write and claim of this node fails (its row is gone:
    /// [`ClusterError::UnknownNode`]). Returns how many sessions were released.
    pub async fn leave(&self) -> Result<u64, ClusterError> {
        let released = node::leave(&self.inner.beat, &self.inner.node).await?;
        for (session_id, fence) in self.inner.fences.all() {
            self.inner.fences.forget(&session_id, fence);
        }
        Ok(released)
    }

    /// The ownership of each of `ids` that has a row, with each owner's liveness by the
    /// server's clock: the poll a follower runs at least every second (a dead node cannot
    /// notify anyone), claiming the sessions whose owner is not live.
    pub async fn owners(&self, ids: &[SessionId]) -> Result<Vec<Ownership>, ClusterError> {
        claim::owners(&self.inner.pool, &self.inner.config, ids).await
    }

    /// Housekeeping, for any node to run now and then: forgets nodes dead for longer than
    /// `keep` (at least two leases), their peer counts, and forwards whose deadline is more
    /// than `keep` past. Returns (nodes, forwards) deleted.
    pub async fn sweep(&self, keep: Duration) -> Result<(u64, u64), ClusterError> {
        node::sweep(&self.inner.pool, keep.max(self.inner.config.lease * 2)).await
    }

    /// The owner and fence of a session as stored (`None`: never claimed; owner `None`:
    /// released). A read: by the time it returns it may have changed.
    pub async fn owner_of(
        &self,
        session_id: &SessionId,
    ) -> Result<Option<(Option<NodeId>, u64)>, ClusterError> {
        claim::owner_of(&self.inner.pool, session_id).await
    }

    /// The fence this node believes it holds for `session_id`.
    pub fn fence(&self, session_id: &SessionId) -> Option<u64> {
        self.inner.fences.get(session_id)
    }

    /// The fences this node holds (shared with its writers).
    pub fn fences(&self) -> &Fences {
        &self.inner.fences
    }

    /// A writer of this node: every batch is fenced (`postgres/fencing.rs`). Like
    /// [`open_postgres_writer`](crate::open_postgres_writer) it does not fail when the
    /// server is down (it answers 5072 and connects in the background); a newer writer of
    /// this node replaces an older one.
    pub async fn open_writer(&self) -> Box<dyn StoreWrite> {
        let settings = self.inner.settings.clone();
        let writer_id = writer::next_writer();
        let conn = match settings.connect_writer(writer_id, 1).await {
            Ok(conn) => Some(conn),
            Err(e) => {
                tracing::warn!(node = %self.inner.node, error = %e.to_store_error(&settings.url), "node writer not connected yet");
                None
            }
        };
        let writer = Box::new(writer::start(
            settings,
            writer_id,
            conn,
            Some(self.fencing()),
        ));
        match &self.inner.served {
            Some(served) => served.counted(writer),
            None => writer,
        }
    }

    /// The whole store as this node sees it, for a gateway that runs as a node: a fenced
    /// writer ([`Cluster::open_writer`]), a read pool, and a handoff queue on connections of
    /// this node's kind, whose `request` is fenced like the writer's batches (the other
    /// transitions are compare-and-sets on the handoff row alone).
    pub async fn open(&self) -> Result<Opened, ClusterError> {
        let settings = &self.inner.settings;
        let acquire = settings
            .connect_timeout
            .clamp(Duration::from_millis(500), Duration::from_secs(3));
        let reader_options = settings
            .node_options("reader")
            .ok_or_else(|| ClusterError::Config("not a node's settings".into()))?
            .options([("default_transaction_read_only", "on")]);
        let reader = PgPoolOptions::new()
            .max_connections(settings.read_connections)
            .min_connections(0)
            .acquire_timeout(acquire)
            .connect_lazy_with(reader_options);
        let handoff_options = settings
            .node_options("handoffs")
            .ok_or_else(|| ClusterError::Config("not a node's settings".into()))?;
        let handoffs = PgPoolOptions::new()
            .max_connections(HANDOFF_CONNECTIONS)
            .min_connections(0)
            .acquire_timeout(acquire)
            .connect_lazy_with(handoff_options);
        let erase_options = settings
            .node_options("erase")
            .ok_or_else(|| ClusterError::Config("not a node's settings".into()))?;
        let eraser = PgPoolOptions::new()
            .max_connections(crate::postgres::ERASE_CONNECTIONS)
            .min_connections(0)
            .acquire_timeout(acquire)
            .connect_lazy_with(erase_options);
        check_pool(&reader).await?;
        Ok(Opened {
            writer: self.open_writer().await,
            reader: Arc::new(super::reader::new(reader, self.inner.epoch.clone())),
            handoffs: Arc::new(super::handoffs::fenced(handoffs, self.fencing())),
            eraser: Arc::new(crate::postgres::erase::new(eraser)),
            epoch: self.inner.epoch.clone(),
            held: self.inner.held,
        })
    }

    fn fencing(&self) -> Fencing {
        Fencing {
            node: self.inner.node.clone(),
            fences: self.inner.fences.clone(),
            accepts: self.inner.accepts.clone(),
            lease: self.inner.config.lease,
        }
    }

    /// A listener for committed events of every node (`listener.rs`). Connects on its first
    /// [`EventListener::recv`].
    pub fn listener(&self) -> Result<EventListener, ClusterError> {
        let options = self
            .inner
            .settings
            .node_options("listener")
            .ok_or_else(|| ClusterError::Config("not a node's settings".into()))?;
        Ok(EventListener::new(options))
    }

    /// A connection of this node's kind (its lock and idle-transaction timeouts), for one-off
    /// work outside the writer (and for tests that play a paused owner).
    pub async fn connection(&self) -> Result<PgConnection, ClusterError> {
        let settings = &self.inner.settings;
        let options = settings
            .node_options("node")
            .ok_or_else(|| ClusterError::Config("not a node's settings".into()))?;
        settings
            .connect(&options)
            .await
            .map_err(|e| ClusterError::Store(e.to_store_error(&settings.url)))
    }

    /// Owner: the forwards of `session_id` still pending and within their deadline, oldest
    /// first.
    pub async fn pending_forwards(
        &self,
        session_id: &SessionId,
    ) -> Result<Vec<ForwardRow>, ClusterError> {
        forwards::pending(&self.inner.pool, session_id).await
    }

    /// Owner: the write of event `seq` of `session_id` is the first write of forward `id`.
    /// This node's writer then accepts the forward in the transaction that writes that event
    /// (and only before its deadline); if it cannot, the op fails with
    /// [`StoreError::ForwardRefused`](crate::StoreError::ForwardRefused) and nothing of it is
    /// written, so the request does not run. Register before sending the op.
    pub fn accept_with(&self, session_id: &SessionId, seq: u64, id: &ForwardId) {
        self.inner.accepts.register(session_id, seq, id);
    }

    /// Owner: sends transient events of sessions with peers on other nodes, each body
    /// (at most [`MAX_DELTA_BODY`] bytes; larger ones are left out) as one notification, all
    /// in one statement. Best effort: nothing is stored or sent again. Returns how many were
    /// sent.
    pub async fn send_deltas(&self, batch: &[(SessionId, String)]) -> Result<usize, ClusterError> {
        deltas::send(&self.inner.pool, &self.inner.node, batch).await
    }

    /// Owner: accepts forward `id` now, before running it, for a request whose first write
    /// is not known in advance. `false`: the forwarder withdrew it (or its deadline passed);
    /// do not run it.
    pub async fn accept_forward(&self, id: &ForwardId) -> Result<bool, ClusterError> {
        forwards::accept(&self.inner.pool, id).await
    }

    /// Owner: the answer to forward `id` (JSON text), for its forwarder. `false` when the
    /// forward was neither pending nor accepted, or was accepted while this node no longer owns
    /// the session (the node that accepted it answers).
    pub async fn answer_forward(&self, id: &ForwardId, answer: &str) -> Result<bool, ClusterError> {
        forwards::answer(&self.inner.pool, &self.inner.node, id, answer).await
    }

    /// Forwarder: gives up on forward `id` if nobody accepted it yet. `true`: it never runs.
    /// `false`: it was accepted (or answered) first; read [`Cluster::forward_state`].
    pub async fn withdraw_forward(&self, id: &ForwardId) -> Result<bool, ClusterError> {
        forwards::withdraw(&self.inner.pool, id).await
    }

    /// Anyone: forward `id` as stored.
    pub async fn forward_state(&self, id: &ForwardId) -> Result<Option<ForwardRow>, ClusterError> {
        forwards::state(&self.inner.pool, id).await
    }

    /// Sets this node's peer count on `session_id`, under the session's ownership row (share
    /// lock), so it cannot slip between a park's count of live peers and its commit. Returns
    /// the owner and fence as they stand under that lock: a parked or unowned session is the
    /// attacher's to claim; a live owner's to follow.
    pub async fn set_peers(
        &self,
        session_id: &SessionId,
        peers: u64,
    ) -> Result<Option<(Option<NodeId>, u64)>, ClusterError> {
        peers::set(&self.inner.pool, &self.inner.node, session_id, peers, None).await
    }

    /// [`Cluster::set_peers`] with who those peers are (`presence`, a JSON array of presence
    /// entries), notifying the other nodes (`tether_presence`) in the same transaction.
    pub async fn set_presence(
        &self,
        session_id: &SessionId,
        peers: u64,
        presence: &str,
    ) -> Result<(), ClusterError> {
        peers::set(
            &self.inner.pool,
            &self.inner.node,
            session_id,
            peers,
            Some(presence),
        )
        .await
        .map(|_| ())
    }

    /// Each other live node's presence array for `session_id`.
    pub async fn others_presence(
        &self,
        session_id: &SessionId,
    ) -> Result<Vec<(NodeId, String)>, ClusterError> {
        peers::others_presence(
            &self.inner.pool,
            &self.inner.config,
            &self.inner.node,
            session_id,
        )
        .await
    }

    /// Peers on each of `ids` over every live node but this one, in one read; sessions with
    /// none are left out.
    pub async fn others_peers(
        &self,
        ids: &[SessionId],
    ) -> Result<Vec<(SessionId, u64)>, ClusterError> {
        peers::others(&self.inner.pool, &self.inner.config, &self.inner.node, ids).await
    }

    /// Peers on `session_id` over all live nodes.
    pub async fn live_peers(&self, session_id: &SessionId) -> Result<u64, ClusterError> {
        peers::live(&self.inner.pool, &self.inner.config, session_id).await
    }
}
