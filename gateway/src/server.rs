//! The axum server: routes and the state they share.

use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use ractor::ActorRef;
use std::sync::Arc;
use tether_actors::{Ctx, Identity, OutboxReceiver, PeerMsg};
use tokio::sync::watch;
use tracing::warn;

mod free_space;

/// What every request handler needs.
#[derive(Clone)]
pub struct AppState {
    pub ctx: Ctx,
    /// Becomes `true` when the gateway drains.
    pub shutdown: watch::Receiver<bool>,
    /// Origins a browser may call from besides the gateway's own
    /// (PROTOCOL 1.1, `crate::origin`).
    pub allowed_origins: Arc<Vec<String>>,
    /// Rate limits of `POST /rpc` and SSE opens, per (profile, address).
    pub client_buckets: Arc<crate::client_rate::ClientBuckets>,
    /// Configured tokens (static and JWT); none: loopback peers only.
    pub auth: Arc<crate::auth::Auth>,
    /// The directory of the store's database, whose filesystem `/readyz`
    /// checks for free space; `None` checks none. Shared: every request
    /// clones the state.
    pub store_dir: Option<Arc<std::path::Path>>,
}

impl AppState {
    /// No tokens, no extra origins, no HTTP rate limit (benchmarks).
    pub fn new(ctx: Ctx, shutdown: watch::Receiver<bool>) -> Self {
        Self {
            ctx,
            shutdown,
            allowed_origins: Default::default(),
            client_buckets: Default::default(),
            auth: Default::default(),
            store_dir: None,
        }
    }

    /// Starts the peer that speaks for one connection, request or stream
    /// of `caller`; `None` (logged) when the actor could not start, which
    /// each transport answers in its own way.
    pub(crate) async fn start_peer(
        &self,
        caller: crate::auth::Caller,
        can_attach: bool,
        transport: tether_protocol::PeerTransport,
    ) -> Option<(ActorRef<PeerMsg>, OutboxReceiver)> {
        let identity = Identity {
            profile: caller.profile,
            fixed: caller.fixed,
            can_attach,
            transport,
            limits: caller.limits,
        };
        match tether_actors::spawn_peer_with_token(&self.ctx, identity, caller.grant).await {
            Ok(p) => Some(p),
            Err(e) => {
                warn!(error = %e, "could not start a peer");
                None
            }
        }
    }
}

/// Serves the routes on `listener` until the drain signal.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: AppState,
    limits: crate::listen::ListenLimits,
) -> std::io::Result<()> {
    let shutdown = app.shutdown.clone();
    crate::listen::serve(listener, router(app), limits, shutdown).await
}

pub fn router(app: AppState) -> Router {
    Router::new()
        .route("/ws", get(crate::ws::ws_upgrade))
        .route("/rpc", post(crate::http::post_rpc))
        .route("/v1/sessions/{id}/events", get(crate::sse::session_events))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(crate::metrics::metrics))
        .merge(crate::console::routes())
        .merge(crate::ai_sdk::routes())
        .merge(crate::ag_ui::routes())
        // Inner layer: runs after the Origin/Host check below.
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            crate::auth::authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            crate::origin::check_origin,
        ))
        .with_state(app)
}

/// `/healthz`: the process is up and answering HTTP.
async fn healthz() -> &'static str {
    "ok\n"
}

/// `/readyz`: the gateway can do its work: its core actors are up, the
/// store writer is there to take appends, the store is writable (no storage
/// failure since the last good commit, or for 10 s, and free space on its
/// filesystem above [`free_space::threshold`]), and at least one compute
/// host has said `hello` (a slot that is only starting does not count; with
/// `--hosts 0` there is none, so such a gateway is never ready: it serves
/// reads, not turns), and on a cluster the node holds its lease. 503 with
/// the reasons otherwise (for load balancers and orchestrators).
async fn readyz(State(app): State<AppState>) -> Response {
    use axum::http::StatusCode;
    let mut missing = Vec::new();
    if !app.ctx.writer_up() {
        missing.push("store writer restarting".to_string());
    }
    if !app.ctx.metrics.store_writable() {
        missing.push("store not writable (the last commit failed)".to_string());
    }
    if let Some(dir) = app.store_dir.clone() {
        // statvfs may block on a network filesystem: not on a runtime thread.
        let space = tokio::task::spawn_blocking(move || free_space::of(&dir)).await;
        match space {
            Ok(Ok(space)) if space.low() => missing.push(format!(
                "store filesystem almost full ({} bytes free, at least {} needed)",
                space.available,
                free_space::threshold(space.total)
            )),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => missing.push(format!("cannot read the store's free space: {e}")),
            Err(e) => missing.push(format!("cannot read the store's free space: {e}")),
        }
    }
    if !app.ctx.registry_up() {
        missing.push("session registry restarting".to_string());
    }
    if app.ctx.lease_lost() {
        missing.push("cluster node cannot renew its lease".to_string());
    }
    if !app.ctx.lifecycle.recovered() {
        missing.push("ending the turns the last stop cut short".to_string());
    }
    if app.ctx.metrics.hosts_ready.get() <= 0 {
        missing.push("no compute host up".to_string());
    }
    if missing.is_empty() {
        crate::http::status_text(StatusCode::OK, "ready")
    } else {
        crate::http::status_text(StatusCode::SERVICE_UNAVAILABLE, &missing.join("; "))
    }
}
