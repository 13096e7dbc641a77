//! `tether bench turns` and `tether bench crash`: turns end to end through
//! real compute-host processes (the echo engine), driven over WebSocket.
//!
//! `turns`: S sessions each submit prompts back to back (closed loop);
//! latency is submit → `message.complete` as the client sees it.
//! `crash`: a turn hangs on a host, the host is killed with SIGKILL, and we
//! time the client's `message.complete` (`host_crash`) and the
//! replacement's readiness.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clap::Args;
use futures::{SinkExt, StreamExt};
use serde_json::json;
use tether_actors::{GatewayConfig, HostConfig};
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Message;

use super::harness::{
    connect, create_attached, on_pinned_thread, peak_rss_kib, pinned_runtime, request,
    start_gateway_store, Ws,
};
use super::store::cpu_label;
use tether_store::Synchronous;

#[derive(Debug, Args, Clone)]
pub struct TurnsBench {
    /// Concurrent sessions, each running one turn at a time.
    #[arg(long, default_value_t = 1)]
    sessions: usize,
    /// Turns per session.
    #[arg(long, default_value_t = 500)]
    turns: usize,
    /// Words in each prompt (the echo reply streams one delta per word).
    #[arg(long, default_value_t = 10)]
    words: usize,
    /// Compute-host processes.
    #[arg(long, default_value_t = 2)]
    hosts: usize,
    /// The echo engine's --delay-ms between deltas.
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
    /// The store's durability, as `tether serve --synchronous`.
    #[arg(long, value_enum, default_value = "full")]
    synchronous: Synchronous,
    /// The store writer's group-commit window, as `tether serve
    /// --commit-window-us` (0: every commit at once).
    #[arg(long, default_value_t = 1000)]
    commit_window_us: u64,
    /// Run on PostgreSQL: a database of the bench's own, created (and
    /// dropped) on the server this URL names; its user must be allowed to
    /// create databases. Without it, SQLite in a temporary directory.
    #[arg(long, value_name = "SERVER_URL")]
    postgres: Option<String>,
    #[arg(long, default_value_t = 0)]
    server_cpu: usize,
    #[arg(long, default_value_t = 1)]
    client_cpu: usize,
}

#[derive(Debug, Args, Clone)]
pub struct CrashBench {
    /// How many kill -9 rounds to time.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    #[arg(long, default_value_t = 0)]
    server_cpu: usize,
    #[arg(long, default_value_t = 1)]
    client_cpu: usize,
}

fn host_config(slots: usize, delay_ms: u64) -> anyhow::Result<HostConfig> {
    let exe = crate::tether_exe()?.to_string_lossy().into_owned();
    let mut argv = vec![exe, "host".into(), "--engine".into(), "echo".into()];
    if delay_ms > 0 {
        argv.extend(["--delay-ms".into(), delay_ms.to_string()]);
    }
    Ok(HostConfig {
        slots,
        // Crash rounds restart the slot each time; do not let the bench
        // itself exhaust the intensity.
        restart: tether_actors::RestartPolicy {
            intensity: 1000,
            ..HostConfig::default_restart()
        },
        ..HostConfig::new(argv)
    })
}

/// The gateway's settings for a bench run. One closed-loop session submits
/// hundreds of prompts a second, past the default per-peer rate limit; the
/// bench measures turns, not it.
fn bench_config(commit_window: Duration) -> GatewayConfig {
    GatewayConfig {
        rate_limit_rps: 0,
        commit_window,
        ..GatewayConfig::default()
    }
}

/// Runs a gateway with hosts on `server_cpu` until `done` fires; sends its
/// address back.
fn serve(
    server_cpu: usize,
    config: GatewayConfig,
    synchronous: Synchronous,
    postgres: Option<String>,
    hosts: HostConfig,
    addr_tx: oneshot::Sender<std::net::SocketAddr>,
    done: oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    let rt = pinned_runtime("tether-gw", server_cpu, 1)?;
    rt.block_on(async move {
        let gw = start_gateway_store(config, Some(hosts), synchronous, postgres.as_deref()).await?;
        // Wait for the hosts to say hello.
        for _ in 0..500 {
            if gw.handle.ctx().hosts_up() > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let (addr, _serving) = gw.serve(listener)?;
        let _ = addr_tx.send(addr);
        let _ = done.await;
        gw.handle.shutdown(Duration::from_secs(5)).await;
        Ok(())
    })
}

pub fn run_turns(b: TurnsBench) -> anyhow::Result<()> {
    let (addr_tx, addr_rx) = oneshot::channel();
    let (done_tx, done_rx) = oneshot::channel();
    let hosts = host_config(b.hosts, b.delay_ms)?;
    let cpu = b.server_cpu;
    let synchronous = b.synchronous;
    let postgres = b.postgres.clone();
    let config = bench_config(Duration::from_micros(b.commit_window_us));
    let server = std::thread::spawn(move || {
        on_pinned_thread(cpu, move || {
            serve(cpu, config, synchronous, postgres, hosts, addr_tx, done_rx)
        })
    });
    let cb = b.clone();
    let result = on_pinned_thread(
        b.client_cpu,
        move || -> anyhow::Result<(Vec<Duration>, f64)> {
            let rt = pinned_runtime("tether-load", cb.client_cpu, 1)?;
            rt.block_on(async move {
                let addr = addr_rx.await?;
                let url = format!("ws://{addr}/ws");
                let prompt: String = (0..cb.words).map(|i| format!("word{i} ")).collect();
                let mut clients = Vec::new();
                for _ in 0..cb.sessions {
                    clients.push(create_attached(&url).await?);
                }
                let t0 = Instant::now();
                let tasks: Vec<_> = clients
                    .into_iter()
                    .map(|(ws, id)| tokio::spawn(session_loop(ws, id, prompt.clone(), cb.turns)))
                    .collect();
                let mut latencies = Vec::new();
                for t in tasks {
                    latencies.extend(t.await??);
                }
                Ok((latencies, t0.elapsed().as_secs_f64()))
            })
        },
    );
    let _ = done_tx.send(());
    server
        .join()
        .map_err(|_| anyhow!("server thread panicked"))??;
    let (mut latencies, secs) = result?;
    latencies.sort();
    let n = latencies.len();
    let report = json!({
        "scenario": "turns",
        "backend": if b.postgres.is_some() { "postgres" } else { "sqlite" },
        "sessions": b.sessions,
        "turns": n,
        "words": b.words,
        "hosts": b.hosts,
        "delay_ms": b.delay_ms,
        "synchronous": b.synchronous.as_str(),
        "commit_window_us": b.commit_window_us,
        "server_cpu": cpu_label(b.server_cpu),
        "client_cpu": cpu_label(b.client_cpu),
        "seconds": secs,
        "turns_per_s": (n as f64 / secs).round(),
        "p50_ms": pct(&latencies, 0.50),
        "p99_ms": pct(&latencies, 0.99),
        "p999_ms": pct(&latencies, 0.999),
        "max_ms": latencies.last().map(|d| d.as_secs_f64() * 1000.0),
        "peak_rss_kib": peak_rss_kib(),
    });
    println!("{report}");
    Ok(())
}

fn pct(sorted: &[Duration], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    Some((sorted[i].as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0)
}

/// Submits `turns` prompts one after the other and times each.
async fn session_loop(
    mut ws: Ws,
    id: String,
    prompt: String,
    turns: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut out = Vec::with_capacity(turns);
    for i in 0..turns {
        let started = Instant::now();
        let frame = json!({"jsonrpc":"2.0","id": i + 10,"method":"prompt.submit",
            "params":{"session_id": id, "text": prompt}});
        ws.send(Message::Text(frame.to_string().into())).await?;
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(30), ws.next())
                .await
                .context("turn stalled")?
                .context("closed")??;
            let Message::Text(t) = msg else { continue };
            if t.contains("\"error\":{") {
                bail!("request failed: {t}");
            }
            if t.contains("\"type\":\"message.complete\"") {
                if !t.contains("\"status\":\"complete\"") {
                    bail!("turn did not complete: {t}");
                }
                break;
            }
        }
        out.push(started.elapsed());
    }
    Ok(out)
}

pub fn run_crash(b: CrashBench) -> anyhow::Result<()> {
    let (addr_tx, addr_rx) = oneshot::channel();
    let (done_tx, done_rx) = oneshot::channel();
    let hosts = host_config(1, 0)?;
    let cpu = b.server_cpu;
    let server = std::thread::spawn(move || {
        on_pinned_thread(cpu, move || {
            let config = bench_config(GatewayConfig::default().commit_window);
            serve(
                cpu,
                config,
                Synchronous::default(),
                None,
                hosts,
                addr_tx,
                done_rx,
            )
        })
    });
    let cb = b.clone();
    let result = on_pinned_thread(b.client_cpu, move || -> anyhow::Result<Vec<(f64, f64)>> {
        let rt = pinned_runtime("tether-load", cb.client_cpu, 1)?;
        rt.block_on(async move {
            let addr = addr_rx.await?;
            let url = format!("ws://{addr}/ws");
            let mut ws = connect(&url).await?;
            let mut probe = connect(&url).await?;
            let r = request(&mut ws, "session.create", json!({"attach": true})).await?;
            let id = r["session"]["session_id"]
                .as_str()
                .context("id")?
                .to_string();
            let mut rounds = Vec::new();
            for _ in 0..cb.rounds {
                let pid = wait_host_up(&mut probe, None).await?;
                request(
                    &mut ws,
                    "prompt.submit",
                    json!({"session_id": id, "text": "/hang"}),
                )
                .await?;
                wait_for(&mut ws, "\"type\":\"message.delta\"").await?;
                let killed = Instant::now();
                std::process::Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status()?;
                let complete = wait_for(&mut ws, "\"type\":\"message.complete\"").await?;
                if !complete.contains("host_crash") {
                    bail!("expected host_crash: {complete}");
                }
                let to_complete = killed.elapsed().as_secs_f64() * 1000.0;
                wait_host_up(&mut probe, Some(pid)).await?;
                let to_ready = killed.elapsed().as_secs_f64() * 1000.0;
                rounds.push((to_complete, to_ready));
            }
            Ok(rounds)
        })
    });
    let _ = done_tx.send(());
    server
        .join()
        .map_err(|_| anyhow!("server thread panicked"))??;
    let rounds = result?;
    let report = json!({
        "scenario": "crash",
        "rounds": rounds.len(),
        "kill_to_complete_ms": rounds.iter().map(|r| (r.0 * 1000.0).round() / 1000.0).collect::<Vec<_>>(),
        "kill_to_replacement_up_ms": rounds.iter().map(|r| (r.1 * 1000.0).round() / 1000.0).collect::<Vec<_>>(),
        "server_cpu": cpu_label(b.server_cpu),
        "client_cpu": cpu_label(b.client_cpu),
    });
    println!("{report}");
    Ok(())
}

/// Polls `session.events.stats` until a host other than `old` is up; its pid.
async fn wait_host_up(ws: &mut Ws, old: Option<u32>) -> anyhow::Result<u32> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let s = request(ws, "session.events.stats", json!({})).await?;
        if let Some(h) = s["hosts"].as_array().and_then(|h| h.first()) {
            let pid = h["pid"].as_u64().map(|p| p as u32);
            if h["state"] == "up" && pid.is_some() && pid != old {
                return pid.context("pid");
            }
        }
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
    bail!("no host came up")
}

async fn wait_for(ws: &mut Ws, needle: &str) -> anyhow::Result<String> {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await
            .context("stalled")?
            .context("closed")??;
        if let Message::Text(t) = msg {
            if t.contains(needle) {
                return Ok(t.to_string());
            }
        }
    }
}
