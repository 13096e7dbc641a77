//! What every scenario needs: pinned runtimes, a gateway on a temporary
//! store, and a way to inject durable events into a session.

use anyhow::Context;
use tether_actors::hooks::{EventRecord, LiveSession};
use tether_actors::{GatewayArgs, GatewayConfig, GatewayHandle};
use tether_protocol::{now_ms, EventType, SessionId, TextPayload};
use tether_store::{StoreConfig, Synchronous};
use tokio::runtime::Runtime;

/// A tokio runtime whose worker threads all run on `cpu` (if it exists).
pub fn pinned_runtime(name: &str, cpu: usize, workers: usize) -> anyhow::Result<Runtime> {
    let core = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.id == cpu);
    if core.is_none() {
        eprintln!("bench: cpu {cpu} not available, {name} runs unpinned");
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name(name)
        .on_thread_start(move || {
            if let Some(core) = core {
                core_affinity::set_for_current(core);
            }
        })
        .enable_all()
        .build()
        .context("build runtime")
}

/// Runs `f` on a fresh thread pinned to `cpu`, so that threads spawned from
/// it (SQLite's connection workers) inherit the pinning.
pub fn on_pinned_thread<T: Send + 'static>(
    cpu: usize,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    std::thread::spawn(move || {
        if let Some(core) = core_affinity::get_core_ids()
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.id == cpu)
        {
            core_affinity::set_for_current(core);
        }
        f()
    })
    .join()
    .unwrap_or_else(|_| panic!("bench thread panicked"))
}

/// A gateway on a temporary SQLite store.
pub struct BenchGateway {
    pub handle: GatewayHandle,
    _dir: tempfile::TempDir,
    /// On PostgreSQL, the bench's own database (dropped after the run).
    _database: Option<tether_store::testing::TestDatabase>,
}

impl BenchGateway {
    /// Serves the gateway's transports on `listener` (a task on this
    /// runtime) and returns its address. Serving stops when the returned
    /// sender is dropped, so the caller keeps it while the scenario runs.
    pub fn serve(
        &self,
        listener: tokio::net::TcpListener,
    ) -> anyhow::Result<(std::net::SocketAddr, tokio::sync::watch::Sender<bool>)> {
        let addr = listener.local_addr()?;
        let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
        let app = tether_gateway::AppState::new(self.handle.ctx().clone(), shutdown_rx);
        tokio::spawn(tether_gateway::serve(listener, app, Default::default()));
        Ok((addr, shutdown_tx))
    }
}

pub async fn start_gateway(config: GatewayConfig) -> anyhow::Result<BenchGateway> {
    start_gateway_with_hosts(config, None).await
}

/// A gateway without hosts on SQLite, or (with `postgres`, a server URL)
/// on a database of its own created on that PostgreSQL server.
pub async fn start_gateway_on(
    config: GatewayConfig,
    postgres: Option<&str>,
) -> anyhow::Result<BenchGateway> {
    start_gateway_store(config, None, Synchronous::default(), postgres).await
}

/// A gateway with compute hosts (`tether host` processes of this binary).
pub async fn start_gateway_with_hosts(
    config: GatewayConfig,
    hosts: Option<tether_actors::HostConfig>,
) -> anyhow::Result<BenchGateway> {
    start_gateway_synchronous(config, hosts, Synchronous::default()).await
}

/// As [`start_gateway_with_hosts`], with the store's durability chosen.
pub async fn start_gateway_synchronous(
    config: GatewayConfig,
    hosts: Option<tether_actors::HostConfig>,
    synchronous: Synchronous,
) -> anyhow::Result<BenchGateway> {
    start_gateway_store(config, hosts, synchronous, None).await
}

/// The gateway of every scenario: SQLite in a temporary directory, or a
/// database of its own on the PostgreSQL server `postgres` names (its user
/// must be allowed to create databases).
pub async fn start_gateway_store(
    config: GatewayConfig,
    hosts: Option<tether_actors::HostConfig>,
    synchronous: Synchronous,
    postgres: Option<&str>,
) -> anyhow::Result<BenchGateway> {
    let dir = tempfile::tempdir()?;
    let (backend, database) = match postgres {
        None => (
            tether_store::Backend::Sqlite(StoreConfig {
                synchronous,
                ..StoreConfig::new(dir.path().join("tether.db"))
            }),
            None,
        ),
        Some(server) => {
            let db = tether_store::testing::TestDatabase::create(server).await;
            (tether_store::Backend::from_url(&db.url)?, Some(db))
        }
    };
    let store = tether_store::open(&backend).await?;
    let handle = GatewayHandle::start(GatewayArgs {
        config,
        hosts,
        reader: store.reader,
        handoffs: store.handoffs,
        eraser: store.eraser,
        epoch: store.epoch,
        writer_factory: store.writers,
        cluster: None,
    })
    .await?;
    Ok(BenchGateway {
        handle,
        _dir: dir,
        _database: database,
    })
}

/// The live actor of a session (bringing it live if needed), to inject
/// events into (`tether_actors::hooks`).
pub async fn session_actor(gw: &GatewayHandle, id: &SessionId) -> anyhow::Result<LiveSession> {
    Ok(LiveSession::resolve(gw.ctx(), id).await?)
}

/// `n` durable `message.system` events whose payload is about `bytes` long.
pub fn events(n: usize, bytes: usize) -> Vec<EventRecord> {
    let text = "x".repeat(bytes.saturating_sub(12).max(1));
    let now = now_ms();
    (0..n)
        .map(|_| {
            EventRecord::new(
                EventType::MessageSystem,
                &TextPayload { text: text.clone() },
                None,
                now,
            )
        })
        .collect()
}

/// Emits `total` events into a session in batches, keeping at most
/// `window` batches uncommitted, and returns once all are committed.
pub async fn drive(
    session: LiveSession,
    total: usize,
    batch: usize,
    bytes: usize,
    window: usize,
) -> anyhow::Result<()> {
    let mut sent = 0;
    let mut since_flush = 0;
    while sent < total {
        let n = batch.min(total - sent);
        session.emit(events(n, bytes))?;
        sent += n;
        since_flush += 1;
        if since_flush >= window {
            session.flush(None).await?;
            since_flush = 0;
        }
    }
    session.flush(None).await?;
    Ok(())
}

/// Total CPU seconds (user + system) this process used so far.
pub fn process_cpu_s() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may contain spaces) start at ')'.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 (1-based), i.e. 11 and 12 here.
    (ticks(11) + ticks(12)) / 100.0
}

/// Peak resident set size of this process in KiB.
pub fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// `taskset -c CPU PROGRAM` when taskset exists (it execs, so the child's
/// pid is the program's), else the program unpinned: benchmarks that start
/// a server process pin it apart from the load generator.
pub fn pinned_command(cpu: usize, program: &std::path::Path) -> std::process::Command {
    use std::process::{Command, Stdio};
    let have_taskset = Command::new("taskset")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if have_taskset {
        let mut c = Command::new("taskset");
        c.arg("-c").arg(cpu.to_string()).arg(program);
        c
    } else {
        eprintln!("bench: taskset not found, the server runs unpinned");
        Command::new(program)
    }
}

/// Current resident set size of process `pid` in KiB (`VmRSS`), or 0 when
/// it cannot be read.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// A `/proc/PID/status` field given in kB (e.g. `RssAnon:`), or 0.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// CPU seconds (user + system) used so far by this process's live threads
/// whose name starts with `prefix`. Gateway and load generator share the
/// process; their threads are told apart by name.
pub fn thread_cpu_s(prefix: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let mut total = 0.0;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // `comm` is the part in parentheses; it may contain spaces.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !stat[open + 1..close].starts_with(prefix) {
            continue;
        }
        let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        total += (ticks(11) + ticks(12)) / 100.0;
    }
    total
}

/// The options every bench that drives an in-process gateway takes.
#[derive(Debug, clap::Args, Clone)]
pub struct GatewayOptions {
    /// Payload size of each event in bytes.
    #[arg(long, default_value_t = 100)]
    pub payload_bytes: usize,
    /// CPU the gateway runs on.
    #[arg(long, default_value_t = 0)]
    pub server_cpu: usize,
}

/// The store option of the benches that measure the store.
#[derive(Debug, clap::Args, Clone)]
pub struct StoreOption {
    /// Run on PostgreSQL: a database of the bench's own, created (and
    /// dropped) on the server this URL names; its user must be allowed to
    /// create databases. Without it, SQLite in a temporary directory.
    #[arg(long, value_name = "SERVER_URL")]
    pub postgres: Option<String>,
}

impl StoreOption {
    /// The store's name in a report.
    pub fn backend(&self) -> &'static str {
        if self.postgres.is_some() {
            "postgres"
        } else {
            "sqlite"
        }
    }
}

/// Runs `body` against a gateway on the store `store` names, on a
/// runtime of its own pinned to `cpu`, and shuts the gateway
/// down once `body` is done.
pub fn on_store_gateway<F, Fut>(cpu: usize, store: StoreOption, body: F) -> anyhow::Result<()>
where
    F: FnOnce(tether_actors::Ctx) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    on_pinned_thread(cpu, move || {
        let rt = pinned_runtime("tether-gw", cpu, 1)?;
        rt.block_on(async move {
            let gw = start_gateway_on(GatewayConfig::default(), store.postgres.as_deref()).await?;
            body(gw.handle.ctx().clone()).await?;
            gw.handle.shutdown(std::time::Duration::from_secs(5)).await;
            Ok(())
        })
    })
}

/// A load-generator WebSocket client.
pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Connects (with Nagle off, like the server) and reads `gateway.ready`.
pub async fn connect(url: &str) -> anyhow::Result<Ws> {
    use futures::StreamExt;
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(url, None, true).await?;
    ws.next().await.context("no ready frame")??;
    Ok(ws)
}

/// Connects and creates a session attached to this connection; the
/// connection and the session's id.
pub async fn create_attached(url: &str) -> anyhow::Result<(Ws, String)> {
    let mut ws = connect(url).await?;
    let r = request(
        &mut ws,
        "session.create",
        serde_json::json!({"attach": true}),
    )
    .await?;
    let id = r["session"]["session_id"]
        .as_str()
        .context("session id")?
        .to_string();
    Ok((ws, id))
}

/// Sends a request and waits for its reply, skipping events.
pub async fn request(
    ws: &mut Ws,
    method: &str,
    params: serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let frame = serde_json::json!({"jsonrpc":"2.0","id":1,"method":method,"params":params});
    ws.send(Message::Text(frame.to_string().into())).await?;
    loop {
        let msg = ws.next().await.context("closed")??;
        if let Message::Text(t) = msg {
            let v: serde_json::Value = serde_json::from_str(&t)?;
            if v.get("id") == Some(&serde_json::json!(1)) {
                if let Some(e) = v.get("error") {
                    anyhow::bail!("{method}: {e}");
                }
                return Ok(v["result"].clone());
            }
        }
    }
}
