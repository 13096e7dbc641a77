//! `tether bench storm`: every client drops its connection at once while
//! events keep being appended, then all of them reconnect on new
//! connections and `session.resume` from their watermarks. Measures how
//! long the resume and the catch-up take, and checks that every client
//! ends holding each seq of its session exactly once.
//!
//! Gateway and generator run as in `fanout` (one pinned runtime each, real
//! WebSocket clients over loopback). The gateway side appends at a fixed
//! rate, independent of delivery, and publishes per session the latest seq
//! it emitted, so a client can tell what "caught up" means at the instant
//! it reconnected: holding every event produced before it came back.

mod client;
mod report;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clap::Args;
use tether_actors::hooks::LiveSession;
use tether_protocol::SessionId;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::MissedTickBehavior;

use super::harness::{
    events, on_pinned_thread, pinned_runtime, process_cpu_s, session_actor, start_gateway,
    thread_cpu_s,
};
use client::{Ack, Control, Phase};
use report::{Report, Timeline};

/// Thread name of the load generator's runtime (the gateway's CPU time is
/// the process's minus these threads').
const LOAD_THREADS: &str = "tether-load";

/// Read buffer of a generator client; event frames are a few hundred bytes.
const CLIENT_READ_BUFFER: usize = 8 * 1024;

/// Longest wait for any single frame or step; only bounds a stall.
const STALL: Duration = Duration::from_secs(60);

#[derive(Debug, Args, Clone)]
pub struct StormBench {
    /// WebSocket clients; client i attaches to session i mod --sessions.
    #[arg(long, default_value_t = 1000)]
    clients: usize,
    /// Sessions.
    #[arg(long, default_value_t = 250)]
    sessions: usize,
    /// Durable events appended per second, over all sessions, on a fixed
    /// schedule that does not wait for delivery.
    #[arg(long, default_value_t = 2_000)]
    rate: u64,
    /// Events per emission.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Payload size of each event in bytes.
    #[arg(long, default_value_t = 100)]
    payload_bytes: usize,
    /// Streaming before the drop, in ms.
    #[arg(long, default_value_t = 1000)]
    warmup_ms: u64,
    /// Time between the drop and the reconnects, in ms (events keep flowing).
    #[arg(long, default_value_t = 200)]
    down_ms: u64,
    /// Streaming after every client resumed, before appends stop, in ms.
    #[arg(long, default_value_t = 1000)]
    after_ms: u64,
    /// Listen backlog of the gateway's socket. 4096 is what `tether serve`
    /// uses; tokio's `TcpListener::bind` default is 128, and a storm of
    /// connects beyond it overflows the accept queue: the dropped SYNs are
    /// retried by the clients' kernels after 1 s.
    #[arg(long, default_value_t = 4096)]
    backlog: u32,
    /// CPU the gateway runs on.
    #[arg(long, default_value_t = 0)]
    server_cpu: usize,
    /// CPU the load generator (clients) runs on.
    #[arg(long, default_value_t = 1)]
    client_cpu: usize,
}

pub fn run(b: StormBench) -> anyhow::Result<()> {
    if b.sessions == 0 || b.clients == 0 || b.rate == 0 || b.batch == 0 {
        bail!("--clients, --sessions, --rate and --batch must be positive");
    }
    let latest: Arc<Vec<AtomicU64>> =
        Arc::new((0..b.sessions).map(|_| AtomicU64::new(1)).collect());
    let (addr_tx, addr_rx) = oneshot::channel();
    let (ids_tx, ids_rx) = oneshot::channel::<Vec<SessionId>>();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (finals_tx, finals_rx) = oneshot::channel::<Vec<u64>>();
    let (done_tx, done_rx) = oneshot::channel::<()>();
    let sb = b.clone();
    let sc = latest.clone();
    let server = std::thread::spawn(move || {
        on_pinned_thread(sb.server_cpu, move || {
            serve(sb, sc, addr_tx, ids_rx, stop_rx, finals_tx, done_rx)
        })
    });
    let cb = b.clone();
    // Named so its CPU time can be told from the gateway's.
    let client = std::thread::Builder::new()
        .name(LOAD_THREADS.into())
        .spawn(move || -> anyhow::Result<Report> {
            let rt = pinned_runtime(LOAD_THREADS, cb.client_cpu, 1)?;
            rt.block_on(load(cb, latest, addr_rx, ids_tx, stop_tx, finals_rx))
        })?;
    let outcome = client
        .join()
        .map_err(|_| anyhow!("load generator panicked"));
    let _ = done_tx.send(());
    let server_cpu_s = server
        .join()
        .map_err(|_| anyhow!("server thread panicked"))?;
    let report = outcome??;
    server_cpu_s?;
    report.print(&b)
}

/// The gateway side: serve, drive every session at the fixed rate until
/// told to stop, then hand back each session's last seq.
fn serve(
    b: StormBench,
    latest: Arc<Vec<AtomicU64>>,
    addr_tx: oneshot::Sender<std::net::SocketAddr>,
    ids_rx: oneshot::Receiver<Vec<SessionId>>,
    stop_rx: oneshot::Receiver<()>,
    finals_tx: oneshot::Sender<Vec<u64>>,
    done_rx: oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    let rt = pinned_runtime("tether-gw", b.server_cpu, 1)?;
    rt.block_on(async move {
        let gw = start_gateway(tether_actors::GatewayConfig::default()).await?;
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind((std::net::Ipv4Addr::LOCALHOST, 0).into())?;
        let listener = socket.listen(b.backlog)?;
        let (addr, _serving) = gw.serve(listener)?;
        let _ = addr_tx.send(addr);
        let ids = ids_rx.await.context("load generator gave up")?;
        let (stop, stopped) = watch::channel(false);
        // Each session emits one batch per period; the sessions' ticks are
        // spread over the period so the appends do not come in waves.
        let period = Duration::from_secs_f64(b.sessions as f64 * b.batch as f64 / b.rate as f64);
        let start = tokio::time::Instant::now();
        let mut drivers = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            let actor = session_actor(&gw.handle, id).await?;
            let first = start + period.mul_f64(i as f64 / b.sessions as f64);
            drivers.push(tokio::spawn(drive_at_rate(
                actor,
                first,
                period,
                b.batch,
                b.payload_bytes,
                latest.clone(),
                i,
                stopped.clone(),
            )));
        }
        let _ = stop_rx.await;
        let _ = stop.send(true);
        let mut finals = Vec::new();
        for d in drivers {
            finals.push(d.await??);
        }
        let _ = finals_tx.send(finals);
        let _ = done_rx.await;
        gw.handle.shutdown(Duration::from_secs(5)).await;
        Ok(())
    })
}

/// Emits `batch` events every `period` until `stop`, publishing the
/// latest seq emitted after each emission, and returns the last seq once
/// all are committed. The schedule never waits for commits or delivery
/// (missed ticks are made up in a burst).
#[allow(clippy::too_many_arguments)]
async fn drive_at_rate(
    session: LiveSession,
    first: tokio::time::Instant,
    period: Duration,
    batch: usize,
    bytes: usize,
    latest: Arc<Vec<AtomicU64>>,
    index: usize,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<u64> {
    let mut tick = tokio::time::interval_at(first, period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    // Seq 1 is `session.created`; nothing else but these events is durable.
    let mut seq: u64 = 1;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        session.emit(events(batch, bytes))?;
        seq += batch as u64;
        if let Some(l) = latest.get(index) {
            l.store(seq, Ordering::Release);
        }
    }
    session.flush(Some(STALL)).await?;
    Ok(seq)
}
/// The load generator: attach everyone, then run the storm.
async fn load(
    b: StormBench,
    latest: Arc<Vec<AtomicU64>>,
    addr_rx: oneshot::Receiver<std::net::SocketAddr>,
    ids_tx: oneshot::Sender<Vec<SessionId>>,
    stop_tx: oneshot::Sender<()>,
    finals_rx: oneshot::Receiver<Vec<u64>>,
) -> anyhow::Result<Report> {
    let addr = addr_rx.await?;
    let url = format!("ws://{addr}/ws");
    let (clients, ids) = client::attach_all(&url, b.clients, b.sessions).await?;
    ids_tx
        .send(ids.iter().cloned().map(SessionId::from).collect())
        .map_err(|_| anyhow!("gateway side gone"))?;

    let (phase_tx, phase) = watch::channel(Phase::Stream);
    let (finals_set, finals) = watch::channel(None);
    let (acks, mut acks_rx) = mpsc::unbounded_channel();
    let ctl = Control {
        url,
        phase,
        acks,
        latest,
        finals,
    };
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|(ws, session, held)| {
            let id = ids.get(session).cloned().unwrap_or_default();
            tokio::spawn(client::client(ws, session, id, held, ctl.clone()))
        })
        .collect();
    drop(ctl);

    let timeline = storm(&b, &phase_tx, &mut acks_rx).await?;
    tokio::time::sleep(Duration::from_millis(b.after_ms)).await;
    let _ = stop_tx.send(());
    let last = tokio::time::timeout(STALL, finals_rx)
        .await
        .context("appends did not stop")??;
    finals_set.send(Some(Arc::new(last.clone())))?;
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await??);
    }
    Ok(Report {
        outcomes,
        finals: last,
        timeline,
        server_cpu_s: process_cpu_s() - thread_cpu_s(LOAD_THREADS),
    })
}

/// The storm itself, once every client streams: warm up, drop everyone,
/// wait, reconnect everyone, and wait until all have caught up.
async fn storm(
    b: &StormBench,
    phase: &watch::Sender<Phase>,
    acks: &mut mpsc::UnboundedReceiver<Ack>,
) -> anyhow::Result<Timeline> {
    // The second half of the warm-up gives the gateway's CPU cost of the
    // streaming alone, to tell the storm's own cost apart.
    let half = Duration::from_millis(b.warmup_ms / 2);
    tokio::time::sleep(half).await;
    let steady_from = (process_cpu_s() - thread_cpu_s(LOAD_THREADS), Instant::now());
    tokio::time::sleep(half).await;
    let cpu_before = (process_cpu_s(), thread_cpu_s(LOAD_THREADS));
    let steady_server_cpu_per_s =
        (cpu_before.0 - cpu_before.1 - steady_from.0) / steady_from.1.elapsed().as_secs_f64();
    let dropped_at = Instant::now();
    phase.send(Phase::Drop)?;
    wait_acks(acks, b.clients, |a| matches!(a, Ack::Dropped)).await?;
    let all_dropped_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(b.down_ms)).await;
    let reconnect_at = Instant::now();
    phase.send(Phase::Reconnect)?;
    wait_acks(acks, b.clients, |a| matches!(a, Ack::CaughtUp)).await?;
    let all_caught_up_at = Instant::now();
    let cpu_after = (process_cpu_s(), thread_cpu_s(LOAD_THREADS));
    let storm_cpu = cpu_after.0 - cpu_before.0;
    let storm_client_cpu = cpu_after.1 - cpu_before.1;
    Ok(Timeline {
        dropped_at,
        drop_spread: all_dropped_at - dropped_at,
        reconnect_at,
        all_caught_up_at,
        storm_server_cpu_s: storm_cpu - storm_client_cpu,
        steady_server_cpu_per_s,
        storm_client_cpu_s: storm_client_cpu,
    })
}

async fn wait_acks(
    rx: &mut mpsc::UnboundedReceiver<Ack>,
    n: usize,
    want: impl Fn(&Ack) -> bool,
) -> anyhow::Result<()> {
    let mut seen = 0;
    while seen < n {
        let ack = tokio::time::timeout(STALL, rx.recv())
            .await
            .context("clients stalled")?
            .context("a client task ended early")?;
        if want(&ack) {
            seen += 1;
        }
    }
    Ok(())
}
