//! `tether serve`: open the store, start the actor system, serve a
//! transport, and drain on SIGTERM/SIGINT.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tether_actors::{
    GatewayArgs, GatewayConfig, GatewayHandle, HostConfig, HostStart, RestartPolicy, StartState,
};
use tether_store::{LockError, StoreLock};
use tracing::{debug, info};

use crate::config::ServeArgs;
use crate::node::{Node, StoreParts};
use tether_gateway::AppState;
use tether_store::cluster::ClusterError;

/// A SIGTERM drain exits within 10 s (docs/ARCHITECTURE.md, the drain), in three steps:
/// end the turns and deliver their endings, close the clients, then stop
/// the hosts and flush the store.
const END_TURNS_DEADLINE: Duration = Duration::from_secs(3);
const CLOSE_DEADLINE: Duration = Duration::from_millis(1500);
const DRAIN_DEADLINE: Duration = Duration::from_secs(5);

pub async fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let backend = args.backend()?;
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create data directory {}", args.data_dir.display()))?;
    // Before anything else touches the directory or the database: a second
    // gateway must leave the first one's hosts, files and clients alone.
    // The store takes its own lock as it opens (the SQLite file, or the
    // PostgreSQL database's writer lock), before any host is touched.
    let _lock = match StoreLock::data_dir(&args.data_dir) {
        Ok(lock) => lock,
        Err(e @ LockError::Held { .. }) => {
            crate::logging::stderr_line(format_args!("tether: {e}"));
            return Ok(ExitCode::from(crate::EX_USAGE));
        }
        Err(e) => return Err(e.into()),
    };
    let opened = match open_store(&args, &backend).await? {
        Ok(opened) => opened,
        Err(code) => return Ok(code),
    };
    let (store, node) = (opened.parts, opened.node);
    // Safe only because the lock is ours: whoever recorded these hosts is
    // dead (a live gateway would still hold the lock).
    let killed = tether_actors::kill_leftovers(&args.data_dir);
    if killed > 0 {
        tracing::warn!(
            killed,
            "killed compute hosts left over by a gateway that stopped hard"
        );
    }
    let config = gateway_config(&args)?;
    config.profile_engines.replace(args.profile_engines.clone());
    // Tokens (static, JWT keys, the JWKS fetched now) before any client;
    // stdio has a single peer of its own and takes none.
    let auth = if args.stdio {
        None
    } else {
        Some(
            tether_gateway::Auth::start(args.auth_config()?)
                .await
                .context("cannot set up token checks")?,
        )
    };
    let engines = config.profile_engines.clone();
    // Checked even with `--hosts 0`: a bad `--host-command` is an error.
    let hosts = host_config(&args)?;
    let store_at = StoreAt {
        epoch: store.epoch.clone(),
        db: backend.describe(),
        dir: backend.local_dir().map(std::path::Path::to_path_buf),
    };
    let mut gateway = GatewayHandle::start(GatewayArgs {
        config,
        hosts: (args.hosts > 0).then_some(hosts),
        reader: store.reader,
        handoffs: store.handoffs,
        eraser: store.eraser,
        epoch: store.epoch,
        writer_factory: store.writers,
        cluster: node.as_ref().map(|n| n.cluster().clone()),
    })
    .await
    .context("cannot start the gateway")?;
    let profiles = gateway.ctx().profiles.clone();
    reload_on_sighup(&args, engines, profiles, auth.clone());
    let hosts_failed = hosts_cannot_start(
        gateway.ctx().host_start.clone(),
        args.hosts,
        Duration::from_secs(args.host_start_deadline_s),
    );
    debug!(epoch = %store_at.epoch, db = %store_at.db, "store open");
    // Consistent before it serves: the turns the last stop cut short are
    // ended on disk before any client can read them (PROTOCOL 1.5).
    let lifecycle = gateway.ctx().lifecycle.clone();
    tokio::select! {
        _ = lifecycle.wait_recovered() => {}
        _ = gateway.stopped() => return Ok(ExitCode::FAILURE),
    }
    let code = match auth {
        None => serve_stdio(gateway, hosts_failed).await,
        Some(auth) => serve_http(gateway, &args, auth, &store_at, hosts_failed).await,
    };
    // After the drain and the flush: the sessions this node owned are
    // released, so the other nodes take them over at once.
    if let Some(node) = node {
        node.leave().await;
    }
    if let tether_store::Backend::Sqlite(cfg) = &backend {
        empty_wal(cfg.db_path.clone()).await;
    }
    code
}

/// The drain's last step on SQLite, with the store's lock still held:
/// the WAL folded into the database file and truncated, so a stopped
/// gateway leaves nothing in it (`tether_store::truncate_wal`).
async fn empty_wal(db: std::path::PathBuf) {
    let at = db.display().to_string();
    match tokio::task::spawn_blocking(move || tether_store::truncate_wal(&db)).await {
        Ok(Ok(true)) => debug!(db = %at, "WAL checkpointed and truncated"),
        Ok(Ok(false)) => tracing::warn!(db = %at, "the WAL is still in use; left as it is"),
        Ok(Err(e)) => tracing::warn!(db = %at, error = %e, "cannot checkpoint the WAL"),
        Err(e) => tracing::warn!(db = %at, error = %e, "the WAL checkpoint did not finish"),
    }
}

/// The store as this gateway opened it: the store's only gateway (its
/// lock is held as long as `_single` lives), or a node of a cluster.
struct OpenedStore {
    parts: StoreParts,
    node: Option<Node>,
    _single: Option<tether_store::Store>,
}

/// Opens the store `backend` names, as a node with `--cluster`. A store
/// that cannot be opened ends `tether serve` with 64 (configuration, or a
/// store held by another gateway) or 69 (unreachable), returned as `Err`.
async fn open_store(
    args: &ServeArgs,
    backend: &tether_store::Backend,
) -> anyhow::Result<Result<OpenedStore, ExitCode>> {
    let usage = |e: &dyn std::fmt::Display| {
        crate::logging::stderr_line(format_args!("tether: {e}"));
        Ok(Err(ExitCode::from(crate::EX_USAGE)))
    };
    let unreachable = |e: &dyn std::fmt::Display| {
        crate::logging::stderr_line(format_args!("tether: {e}"));
        Ok(Err(ExitCode::from(crate::EX_UNAVAILABLE)))
    };
    if args.cluster {
        let tether_store::Backend::Postgres(cfg) = backend else {
            return usage(&"--cluster needs a postgres:// --database-url");
        };
        let started = async {
            let config = args
                .cluster_config()
                .map_err(|e| ClusterError::Config(e.to_string()))?;
            let node = Node::start(cfg, config).await?;
            let parts = node.open().await?;
            Ok::<_, ClusterError>((node, parts))
        };
        return match started.await {
            Ok((node, parts)) => Ok(Ok(OpenedStore {
                parts,
                node: Some(node),
                _single: None,
            })),
            Err(ClusterError::Open(e)) if e.is_usage() => usage(&e),
            Err(ClusterError::Open(e)) if e.is_unreachable() => unreachable(&e),
            Err(e @ ClusterError::Config(_)) => usage(&e),
            Err(e @ ClusterError::Store(tether_store::StoreError::Unavailable(_))) => {
                unreachable(&e)
            }
            Err(e) => Err(anyhow::Error::new(e)
                .context(format!("cannot join the cluster at {}", backend.describe()))),
        };
    }
    match tether_store::open(backend).await {
        Ok(store) => Ok(Ok(OpenedStore {
            parts: StoreParts {
                reader: store.reader.clone(),
                handoffs: store.handoffs.clone(),
                eraser: store.eraser.clone(),
                epoch: store.epoch.clone(),
                writers: store.writers.clone(),
            },
            node: None,
            _single: Some(store),
        })),
        Err(e) if e.is_usage() => usage(&e),
        Err(e) if e.is_unreachable() => unreachable(&e),
        Err(e) => Err(anyhow::Error::new(e)
            .context(format!("cannot open the store at {}", backend.describe()))),
    }
}

/// What the logs and `/readyz` say about the open store.
struct StoreAt {
    epoch: String,
    /// The database, as the logs name it (a PostgreSQL password masked).
    db: String,
    /// The directory whose free space `/readyz` checks (SQLite only).
    dir: Option<std::path::PathBuf>,
}

/// `--hosts` and the `--host-*` flags, as the host supervisor takes them.
fn host_config(args: &ServeArgs) -> anyhow::Result<HostConfig> {
    Ok(HostConfig {
        slots: args.hosts,
        heartbeat: Duration::from_secs(args.host_heartbeat_s),
        restart: RestartPolicy {
            intensity: args.host_restarts,
            period: Duration::from_secs(args.host_restart_period_s),
            ..HostConfig::default_restart()
        },
        control_wait: Duration::from_secs(args.control_wait_s),
        late_ack_ttl: Duration::from_secs(args.late_ack_ttl_s),
        late_ack_cap: args.late_ack_cap,
        data_dir: Some(args.data_dir.clone()),
        max_line_bytes: args.max_host_line_bytes,
        max_turns_per_host: args.host_max_turns,
        ..HostConfig::new(args.host_argv()?)
    })
}

/// The gateway's settings from the flags (a flat table).
fn gateway_config(args: &ServeArgs) -> anyhow::Result<GatewayConfig> {
    let retention = args.retention.config()?;
    Ok(GatewayConfig {
        ring_events: args.ring_events,
        outbox_frames: args.outbox_frames,
        max_frame_bytes: args.max_frame_bytes,
        max_replay_events: args.max_replay_events,
        max_resume_messages: args.max_resume_messages,
        max_title_bytes: args.max_title_bytes,
        max_list_bytes: args.max_list_bytes,
        request_read_timeout: Duration::from_secs(args.handshake_timeout_s),
        heartbeat_s: args.heartbeat_s,
        commit_window: Duration::from_micros(args.commit_window_us),
        max_queued: args.max_queued,
        turn_deadline: Duration::from_secs(args.turn_deadline_s),
        compress_wait: args.compress_wait(),
        forward_timeout: Duration::from_secs(args.forward_timeout_s),
        rate_limit_rps: args.rate_limit_rps,
        orphan_grace: Duration::from_secs(args.orphan_grace_s),
        activity_stale: Duration::from_secs(args.activity_stale_s),
        session_ttl: Duration::from_secs(args.session_ttl_s),
        max_live_sessions: args.max_live_sessions,
        max_peers_per_session: args.max_peers_per_session,
        idle_timeout: Duration::from_secs(args.idle_timeout_s),
        profile_limits: args.profile_limits.clone(),
        retention,
        ..GatewayConfig::default()
    })
}

/// Resolves, with what to tell the operator, when the compute hosts
/// cannot start: no host has said hello within `deadline` of the start
/// (`--host-start-deadline-s`), or every slot is past its restart
/// intensity before any did. Never with `--hosts 0` or a zero deadline, nor
/// once a host said hello (later deaths are the supervisor's, and
/// `/readyz` says so). Until then `/readyz` is 503 "no compute host up".
fn hosts_cannot_start(
    start: Arc<HostStart>,
    hosts: usize,
    deadline: Duration,
) -> impl std::future::Future<Output = String> {
    let at = tokio::time::Instant::now() + deadline;
    async move {
        if hosts == 0 || deadline.is_zero() {
            return std::future::pending().await;
        }
        let last = match tokio::time::timeout_at(at, start.decided()).await {
            Ok(StartState::Started) | Ok(StartState::Waiting) => {
                return std::future::pending().await
            }
            Ok(StartState::Failed { last }) => {
                return format!(
                    "no compute host could start: every host slot is past its restart \
                     intensity (--host-restarts) and none said hello ({}). \
                     Check --host-command (its own errors are above)",
                    death(&last)
                )
            }
            Err(_) => start.last_death(),
        };
        let last = last.map_or_else(String::new, |l| format!(" ({})", death(&l)));
        format!(
            "no compute host said hello within {} s of the start \
             (--host-start-deadline-s){last}. Check --host-command (its own errors are above)",
            deadline.as_secs()
        )
    }
}

/// How a host died, for the operator: `sh` exits 127 when it found no
/// such command, 126 when it could not run it.
fn death(reason: &str) -> String {
    let hint = if reason.ends_with("status 127") {
        ": the shell found no such command; is it on PATH?"
    } else if reason.ends_with("status 126") {
        ": the shell could not run it; is it executable?"
    } else {
        ""
    };
    format!("the last host to die: {reason}{hint}")
}

/// The hosts could not start: said on stderr, as every start-up failure
/// is; the caller drains and exits 69.
fn report_hosts_failed(why: &str) {
    eprintln!("tether: {why}");
}

/// `--stdio`: one peer on stdin/stdout until EOF or a signal.
async fn serve_stdio(
    mut gateway: GatewayHandle,
    hosts_failed: impl std::future::Future<Output = String>,
) -> anyhow::Result<ExitCode> {
    let mut signals = ShutdownSignals::install();
    let ctx = gateway.ctx().clone();
    let (drain_tx, drain_rx) = tokio::sync::watch::channel(false);
    let serve = tether_gateway::serve_stdio(&ctx, drain_rx);
    tokio::pin!(serve);
    let mut code = ExitCode::SUCCESS;
    let drain = tokio::select! {
        r = &mut serve => {
            r?;
            false
        }
        _ = gateway.stopped() => return Ok(ExitCode::FAILURE),
        _ = signals.recv() => true,
        why = hosts_failed => {
            report_hosts_failed(&why);
            code = ExitCode::from(crate::EX_UNAVAILABLE);
            true
        }
    };
    if drain {
        debug!("draining");
        gateway.end_turns(END_TURNS_DEADLINE).await;
        // The peer writes what it holds, then stdout is done.
        let _ = drain_tx.send(true);
        let _ = tokio::time::timeout(CLOSE_DEADLINE, &mut serve).await;
    }
    gateway.shutdown(DRAIN_DEADLINE).await;
    Ok(code)
}

/// WebSocket, HTTP + SSE and the console on `--listen` until a signal (or
/// a core actor that could not be kept up), then the drain.
async fn serve_http(
    mut gateway: GatewayHandle,
    args: &ServeArgs,
    auth: Arc<tether_gateway::Auth>,
    store: &StoreAt,
    hosts_failed: impl std::future::Future<Output = String>,
) -> anyhow::Result<ExitCode> {
    let listener = tether_gateway::bind(args.listen)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    let (shutdown_tx, shutdown_rx) = tether_gateway::shutdown_channel();
    let app = AppState {
        ctx: gateway.ctx().clone(),
        shutdown: shutdown_rx.clone(),
        allowed_origins: Arc::new(args.allow_origin.clone()),
        client_buckets: Arc::new(tether_gateway::ClientBuckets::new(args.rate_limit_rps)),
        auth,
        store_dir: store.dir.as_deref().map(Arc::from),
    };
    let limits = tether_gateway::ListenLimits {
        max_connections: args.max_connections,
        handshake_timeout: Duration::from_secs(args.handshake_timeout_s),
    };
    let server = tether_gateway::serve(listener, app, limits);
    let mut server = tokio::spawn(server);
    // Before the line: a client that saw it may signal at once.
    let mut signals = ShutdownSignals::install();
    // The start-up line scripts and tests wait for; logs go to stderr.
    crate::logging::stdout_line(format_args!("tether listening on http://{addr}"));
    // The one line a quiet default shows while all is well (with the one
    // at the stop); actor and session detail is at debug.
    info!(%addr, epoch = %store.epoch, db = %store.db, hosts = args.hosts, "gateway started");

    let mut code = ExitCode::SUCCESS;
    let escalated = tokio::select! {
        _ = signals.recv() => false,
        _ = gateway.stopped() => true,
        r = &mut server => {
            r.context("server task failed")?.context("server failed")?;
            false
        }
        why = hosts_failed => {
            report_hosts_failed(&why);
            code = ExitCode::from(crate::EX_UNAVAILABLE);
            false
        }
    };
    if escalated {
        tracing::error!("a core actor could not be kept up; exiting");
        let _ = shutdown_tx.send(true);
        return Ok(ExitCode::FAILURE);
    }
    debug!("draining");
    // The story first: running turns end and queued prompts come out
    // `dequeued`, on disk and in the peers' outboxes. Only then are the
    // sockets told to close: each writes what it holds, then 1001.
    gateway.end_turns(END_TURNS_DEADLINE).await;
    let _ = shutdown_tx.send(true);
    let _ = tokio::time::timeout(CLOSE_DEADLINE, server).await;
    gateway.shutdown(DRAIN_DEADLINE).await;
    info!("gateway stopped");
    Ok(code)
}

/// SIGHUP re-reads the config file's `[profiles.NAME.engine]` tables
/// (sessions that follow their profile use the new config from their next
/// turn), its `[limits.PROFILE]` tables (new work is checked against them;
/// nothing already held is taken away) and the token configuration: static tokens, the JWT secret and
/// key files, the JWKS (fetched anew). Connections whose tokens are still
/// accepted stay; the others are closed with 4403. Other settings need a
/// restart. A file that no longer parses, or token settings that cannot be
/// used, are reported and the current ones kept.
fn reload_on_sighup(
    args: &ServeArgs,
    engines: tether_actors::ProfileEngines,
    profiles: Arc<tether_actors::ProfileLedger>,
    auth: Option<Arc<tether_gateway::Auth>>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    if args.config.is_none() && auth.is_none() {
        return;
    }
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP; the config file will not be reloaded");
        return;
    };
    let args = args.clone();
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            if let Some(path) = &args.config {
                match crate::config::read_profile_engines(path) {
                    Ok(map) => {
                        info!(profiles = map.len(), path = %path.display(), "profile engine configs reloaded");
                        engines.replace(map);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "config reload failed; keeping the current profiles")
                    }
                }
                match args.reload_limits() {
                    Ok(table) => {
                        info!(profiles = table.profiles.len(), "profile limits reloaded");
                        profiles.set_table(table);
                    }
                    Err(e) => tracing::warn!(
                        error = %format!("{e:#}"),
                        "limits reload failed; keeping the current limits"
                    ),
                }
            }
            let Some(auth) = &auth else { continue };
            let reloaded = match args.reload_auth() {
                Ok(config) => auth.reload(config).await.map_err(anyhow::Error::from),
                Err(e) => Err(e),
            };
            match reloaded {
                Ok(()) => info!("token configuration reloaded"),
                Err(e) => tracing::warn!(
                    error = %format!("{e:#}"),
                    "token reload failed; keeping the current tokens"
                ),
            }
        }
    });
}

/// SIGTERM and SIGINT, listened for from the moment they are installed:
/// one that comes between the listening line and the serving loop's
/// first poll drains the gateway like any other, instead of killing it
/// with the default action.
struct ShutdownSignals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl ShutdownSignals {
    fn install() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        if term.is_err() || int.is_err() {
            tracing::warn!("cannot listen for SIGTERM or SIGINT; Ctrl-C still stops the gateway");
        }
        ShutdownSignals {
            term: term.ok(),
            int: int.ok(),
        }
    }

    /// The first of them to arrive.
    async fn recv(&mut self) {
        match (&mut self.term, &mut self.int) {
            (Some(term), Some(int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}
