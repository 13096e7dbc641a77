//! `tether bench idle`: resident memory of the gateway per idle connected
//! peer, per idle live session and per parked session.
//!
//! The gateway runs as a child process (`tether serve` of this binary,
//! pinned with `taskset` to the server CPU) so that its RSS is its own: the
//! load generator's sockets, buffers and tasks would otherwise be counted
//! with it. The generator reads the child's `/proc/PID/status` between the
//! steps and divides the growth by what was added.
//!
//! Parking needs a gateway whose orphan grace is 0, and the live-session
//! step one whose grace is long; the grace is fixed for a process, so the
//! parked step runs on a second gateway.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::MaybeTlsStream;

use super::harness::{
    on_pinned_thread, pinned_command, pinned_runtime, request, rss_kib, status_kib, Ws,
};
use super::store::cpu_label;

/// Longest wait for any single step; only bounds a stall.
const STALL: Duration = Duration::from_secs(120);

/// Connections opened at once (more would overflow the listen backlog and
/// turn into SYN retransmits).
const CONNECT_CONCURRENCY: usize = 128;

/// `session.create` requests in flight on the control connection.
const CREATE_WINDOW: usize = 64;

/// Ephemeral ports per source address are about 28k (32768–60999); leave
/// room for everything else on the machine.
const CONNECTIONS_PER_SOURCE: usize = 20_000;

#[derive(Debug, Args, Clone)]
pub struct IdleBench {
    /// Idle WebSocket peers to open (each only sends `gateway.ping`).
    #[arg(long, default_value_t = 10_000)]
    connections: usize,
    /// Idle sessions to create (live in the first gateway, parked in the
    /// second).
    #[arg(long, default_value_t = 10_000)]
    sessions: usize,
    /// Wait after each step before RSS is read, in ms.
    #[arg(long, default_value_t = 1000)]
    settle_ms: u64,
    /// CPU the gateway process is pinned to.
    #[arg(long, default_value_t = 0)]
    server_cpu: usize,
    /// CPU the load generator runs on.
    #[arg(long, default_value_t = 1)]
    client_cpu: usize,
}

/// A `tether serve` child, killed when dropped.
struct ServerProcess {
    child: Child,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl ServerProcess {
    fn start(b: &IdleBench, orphan_grace_s: u64) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let exe = crate::tether_exe()?;
        let mut cmd = pinned_command(b.server_cpu, &exe);
        let live_cap = (b.sessions * 2).max(10_000);
        let connection_cap = (b.connections + 1024).max(65_536);
        cmd.arg("serve")
            .args(["--listen", "127.0.0.1:0", "--hosts", "0"])
            .arg("--data-dir")
            .arg(dir.path())
            // One control connection creates every session.
            .args(["--rate-limit-rps", "0"])
            .args(["--orphan-grace-s", &orphan_grace_s.to_string()])
            .args(["--session-ttl-s", "86400"])
            .args(["--max-live-sessions", &live_cap.to_string()])
            .args(["--max-connections", &connection_cap.to_string()]);
        let (child, addr) = crate::load::server::spawn_listening(&mut cmd)?;
        let addr = addr.parse().context("listen address")?;
        Ok(Self { child, addr, dir })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// VmRSS and RssAnon of the gateway, and the size of its store, in KiB.
    fn rss(&self) -> Rss {
        let file_kib = |name: &str| {
            std::fs::metadata(self.dir.path().join(name)).map_or(0, |m| m.len() / 1024)
        };
        Rss {
            vm: rss_kib(self.pid()),
            anon: status_kib(self.pid(), "RssAnon:"),
            store: file_kib("tether.db"),
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug, Clone, Copy)]
struct Rss {
    vm: u64,
    anon: u64,
    /// tether.db (without its WAL, which is reused after checkpoints):
    /// SQLite's page caches grow with it.
    store: u64,
}

/// KiB per item of the growth from `before` to `after`.
fn per_item(before: Rss, after: Rss, n: usize) -> Value {
    let per = |a: u64, b: u64| {
        let d = a as f64 - b as f64;
        ((d / n.max(1) as f64) * 100.0).round() / 100.0
    };
    json!({
        "rss_before_kib": before.vm,
        "rss_after_kib": after.vm,
        "kib_each": per(after.vm, before.vm),
        "anon_kib_each": per(after.anon, before.anon),
        "db_kib_each": per(after.store, before.store),
    })
}

pub fn run(b: IdleBench) -> anyhow::Result<()> {
    let need = b.connections as u64 + 1024;
    let limit = open_files_limit();
    if limit.is_some_and(|l| l < need) {
        bail!(
            "the open-files limit ({}) is below {need}: run under `ulimit -n {}`",
            limit.unwrap_or(0),
            need.next_power_of_two().max(65_536)
        );
    }
    let cb = b.clone();
    let report = on_pinned_thread(b.client_cpu, move || -> anyhow::Result<Value> {
        let rt = pinned_runtime("tether-load", cb.client_cpu, 1)?;
        rt.block_on(measure(cb))
    })?;
    println!("{report}");
    Ok(())
}

async fn measure(b: IdleBench) -> anyhow::Result<Value> {
    let settle = Duration::from_millis(b.settle_ms);
    let mut steps = serde_json::Map::new();
    let mut clock = Instant::now();
    let mut lap = |name: &str| {
        steps.insert(name.into(), json!(round2(clock.elapsed().as_secs_f64())));
        clock = Instant::now();
    };

    // Live: peers, then sessions, on a gateway that never parks them.
    let server = ServerProcess::start(&b, 86_400)?;
    let mut control = warm_up(&server).await?;
    tokio::time::sleep(settle).await;
    let base = server.rss();
    lap("warm_up");
    let peers = open_idle_peers(server.addr, b.connections).await?;
    wait_stats(&mut control, |s| {
        s["peers"].as_u64() >= Some(b.connections as u64 + 1)
    })
    .await?;
    lap("open_peers");
    tokio::time::sleep(settle).await;
    let with_peers = server.rss();
    create_sessions(&mut control, b.sessions).await?;
    wait_stats(&mut control, |s| {
        s["sessions_live"].as_u64() >= Some(b.sessions as u64)
    })
    .await?;
    lap("create_live_sessions");
    tokio::time::sleep(settle).await;
    let with_sessions = server.rss();
    let threads = status_kib(server.pid(), "Threads:");
    drop(peers);
    drop(control);
    drop(server);

    // Parked: the same number of sessions, twice, on a gateway that parks
    // an orphan at once. The second batch tells memory kept per parked
    // session (it would grow again) from memory the first batch left to
    // the allocator and SQLite's page caches (reused by the second).
    let server = ServerProcess::start(&b, 0)?;
    let mut control = warm_up(&server).await?;
    wait_stats(&mut control, |s| s["sessions_live"].as_u64() == Some(0)).await?;
    tokio::time::sleep(settle).await;
    let parked_base = server.rss();
    lap("warm_up_parking_gateway");
    let mut parked = Vec::new();
    for _ in 0..2 {
        create_sessions(&mut control, b.sessions).await?;
        wait_stats(&mut control, |s| s["sessions_live"].as_u64() == Some(0)).await?;
        tokio::time::sleep(settle).await;
        parked.push(server.rss());
    }
    lap("create_and_park_twice");
    let listed = request(&mut control, "session.list", json!({"limit": 1})).await?;
    let status = listed["sessions"][0]["status"].clone();
    drop(control);
    drop(server);
    let (first, second) = (parked[0], parked[1]);

    Ok(json!({
        "scenario": "idle",
        "connections": b.connections,
        "sessions": b.sessions,
        "server_cpu": cpu_label(b.server_cpu),
        "client_cpu": cpu_label(b.client_cpu),
        "gateway_threads": threads,
        "idle_peer": per_item(base, with_peers, b.connections),
        "idle_live_session": per_item(with_peers, with_sessions, b.sessions),
        "parked_session": per_item(parked_base, first, b.sessions),
        "parked_session_second_batch": per_item(first, second, b.sessions),
        "newest_session_status": status,
        "step_seconds": steps,
    }))
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// A control connection, plus one of everything the steps do, so that
/// one-time allocations (pools, caches, the first session) are not
/// counted per item.
async fn warm_up(server: &ServerProcess) -> anyhow::Result<Ws> {
    let mut control = open(server.addr, 0).await?;
    request(&mut control, "gateway.ping", json!({})).await?;
    create_sessions(&mut control, 64).await?;
    let peers = open_idle_peers(server.addr, 64).await?;
    drop(peers);
    wait_stats(&mut control, |s| s["peers"].as_u64() == Some(1)).await?;
    Ok(control)
}

/// Polls `session.events.stats` until `done` holds.
async fn wait_stats(ws: &mut Ws, done: impl Fn(&Value) -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + STALL;
    loop {
        let s = request(ws, "session.events.stats", json!({})).await?;
        if done(&s) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("gateway did not reach the expected state: {s}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Idle peers of the load generator; their connections close when this is
/// dropped.
struct IdlePeers(Vec<tokio::task::JoinHandle<()>>);

impl Drop for IdlePeers {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// `n` connections that each said `gateway.ping` and then stay idle. Each
/// keeps reading, as a client library does, so that the gateway's
/// heartbeat pings are answered and it does not close them as dead.
async fn open_idle_peers(addr: SocketAddr, n: usize) -> anyhow::Result<IdlePeers> {
    let opened: anyhow::Result<Vec<Ws>> = futures::stream::iter(0..n)
        .map(|i| async move {
            let mut ws = open(addr, i / CONNECTIONS_PER_SOURCE).await?;
            request(&mut ws, "gateway.ping", json!({})).await?;
            anyhow::Ok(ws)
        })
        .buffer_unordered(CONNECT_CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect();
    Ok(IdlePeers(
        opened?
            .into_iter()
            .map(|mut ws| tokio::spawn(async move { while let Some(Ok(_)) = ws.next().await {} }))
            .collect(),
    ))
}

/// A WebSocket connection from source address 127.0.0.(1 + `source`), past
/// `gateway.ready`. Loopback answers on all of 127/8, and each source
/// address has its own ephemeral ports.
async fn open(addr: SocketAddr, source: usize) -> anyhow::Result<Ws> {
    let last = u8::try_from(source + 1).context("too many source addresses")?;
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)),
        0,
    ))?;
    let stream = tokio::time::timeout(STALL, socket.connect(addr))
        .await
        .context("connect stalled")??;
    stream.set_nodelay(true)?;
    let url = format!("ws://{addr}/ws");
    let (mut ws, _) = tokio::time::timeout(
        STALL,
        tokio_tungstenite::client_async(url, MaybeTlsStream::Plain(stream)),
    )
    .await
    .context("handshake stalled")??;
    tokio::time::timeout(STALL, ws.next())
        .await
        .context("no ready frame")?
        .context("closed before ready")??;
    Ok(ws)
}

/// Creates `n` sessions without attaching, `CREATE_WINDOW` at a time.
async fn create_sessions(ws: &mut Ws, n: usize) -> anyhow::Result<()> {
    let (mut sent, mut done) = (0, 0);
    while done < n {
        while sent < n && sent - done < CREATE_WINDOW {
            let frame = json!({"jsonrpc":"2.0","id": 1000 + sent,
                "method":"session.create","params":{"attach": false}});
            ws.send(Message::Text(frame.to_string().into())).await?;
            sent += 1;
        }
        let msg = tokio::time::timeout(STALL, ws.next())
            .await
            .context("session.create stalled")?
            .context("closed")??;
        let Message::Text(t) = msg else { continue };
        let v: Value = serde_json::from_str(&t)?;
        if v.get("id").is_none() {
            continue;
        }
        if let Some(e) = v.get("error") {
            bail!("session.create: {e}");
        }
        done += 1;
    }
    Ok(())
}

/// The soft `Max open files` limit of this process (inherited by the
/// gateway child).
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}
