//! What the binary, the transports and tests hold of a running gateway:
//! the handle that starts the root with its shared context, drains and
//! stops it, and the start of a peer for each new connection.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef};
use tether_protocol::PeerId;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::warn;

use super::{Gateway, GatewayArgs, GatewayMsg, Published, RootArgs};
use crate::ctx::{Ctx, CtxParts};
use crate::outbox::{outbox, OutboxReceiver};
use crate::peer::{Identity, Peer, PeerArgs, PeerMsg};
use crate::registry::RegistryMsg;

/// A running gateway, as the binary and tests hold it.
pub struct GatewayHandle {
    ctx: Ctx,
    actor: ActorRef<GatewayMsg>,
    join: JoinHandle<()>,
}

impl GatewayHandle {
    /// Starts the root and its core children.
    pub async fn start(args: GatewayArgs) -> Result<Self, ractor::SpawnErr> {
        let (writer_tx, writer_rx) = watch::channel(None);
        let (registry_tx, registry_rx) = watch::channel(None);
        let (hosts_tx, hosts_rx) = watch::channel(None);
        let (reaper_tx, reaper_rx) = watch::channel(None);
        let metrics = Arc::new(crate::metrics::Metrics::default());
        let profiles = Arc::new(crate::ProfileLedger::new(
            args.config.profile_limits.clone(),
        ));
        let ctx = Ctx::new(CtxParts {
            config: Arc::new(args.config),
            reader: args.reader,
            handoffs: args.handoffs,
            eraser: args.eraser,
            epoch: Arc::from(args.epoch),
            writer: writer_rx,
            registry: registry_rx,
            hosts: hosts_rx,
            reaper: reaper_rx,
            hosts_up: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            outbox_metrics: metrics.outbox.clone(),
            metrics,
            lifecycle: Default::default(),
            host_start: Default::default(),
            profiles,
            deltas: args
                .cluster
                .clone()
                .map(crate::delta_relay::DeltaRelay::start),
            cluster: args.cluster,
        });
        let root = RootArgs {
            ctx: ctx.clone(),
            published: Published {
                writer: writer_tx,
                registry: registry_tx,
                hosts: hosts_tx,
                reaper: reaper_tx,
            },
            host_config: args.hosts,
            factory: args.writer_factory,
        };
        let (actor, join) = Actor::spawn(None, Gateway, root).await?;
        crate::retention::spawn(ctx.clone());
        Ok(Self { ctx, actor, join })
    }

    pub fn ctx(&self) -> &Ctx {
        &self.ctx
    }

    pub fn actor(&self) -> &ActorRef<GatewayMsg> {
        &self.actor
    }

    /// Starts a peer for a new connection; the transport writes what the
    /// returned receiver yields and feeds the peer its inbound frames.
    pub async fn spawn_peer(
        &self,
        identity: Identity,
    ) -> Result<(ActorRef<PeerMsg>, OutboxReceiver), ractor::SpawnErr> {
        spawn_peer(&self.ctx, identity).await
    }

    /// The first step of a drain, before any client is told to go: no new
    /// turn starts, and every running and queued turn ends (`interrupted`
    /// / `gateway_shutdown`, `dequeued`), written and pushed to the peers
    /// attached, so that the close that follows comes after them.
    pub async fn end_turns(&self, deadline: Duration) {
        self.ctx.lifecycle.start_draining();
        if let Ok(registry) = self.ctx.registry() {
            let ended = registry
                .call(|reply| RegistryMsg::DrainAll { reply }, Some(deadline))
                .await;
            if !matches!(ended, Ok(ractor::rpc::CallResult::Success(()))) {
                warn!("not every session ended its turns within the drain deadline");
            }
        }
    }

    /// Drains and stops the gateway (SIGTERM path).
    pub async fn shutdown(self, deadline: Duration) {
        let _ = self
            .actor
            .call(|reply| GatewayMsg::Shutdown { reply }, Some(deadline))
            .await;
        self.actor.stop(Some("shutdown".into()));
        let _ = tokio::time::timeout(Duration::from_secs(2), self.join).await;
    }

    /// Resolves when the gateway stopped by itself (a core actor escalated).
    pub async fn stopped(&mut self) {
        let _ = (&mut self.join).await;
    }
}

/// Starts a peer actor bound to a fresh outbox. Unlinked on purpose: the
/// caller, the transport task that owns the connection, is what supervises
/// it (it stops the peer when the socket ends), and a failed peer closes
/// its connection so that the client reconnects (see `peer.rs`).
pub async fn spawn_peer(
    ctx: &Ctx,
    identity: Identity,
) -> Result<(ActorRef<PeerMsg>, OutboxReceiver), ractor::SpawnErr> {
    spawn_peer_with_token(ctx, identity, None).await
}

/// [`spawn_peer`] for a connection whose token can expire or be revoked
/// (`peer::token`).
pub async fn spawn_peer_with_token(
    ctx: &Ctx,
    identity: Identity,
    token: Option<crate::peer::token::TokenGrant>,
) -> Result<(ActorRef<PeerMsg>, OutboxReceiver), ractor::SpawnErr> {
    let (tx, rx) = outbox(
        ctx.config.outbox_frames,
        ctx.config.outbox_bytes,
        ctx.outbox_metrics.clone(),
    );
    let args = PeerArgs {
        peer_id: PeerId::new(),
        identity,
        outbox: tx,
        ctx: ctx.clone(),
        token,
    };
    let (actor, _) = Actor::spawn(None, Peer, args).await?;
    Ok((actor, rx))
}
