//! `tether bench fanout`: durable events appended and delivered to every
//! attached peer over loopback WebSocket, with gaps and duplicates checked
//! by seq on every client.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clap::Args;
use futures::future::try_join_all;
use futures::StreamExt;
use serde_json::json;
use tether_protocol::SessionId;
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Message;

use super::harness::{
    connect, create_attached, drive, on_pinned_thread, pinned_runtime, process_cpu_s, request,
    session_actor, start_gateway, GatewayOptions, Ws,
};
use super::store::cpu_label;

#[derive(Debug, Args, Clone)]
pub struct FanoutBench {
    /// Sessions.
    #[arg(long, default_value_t = 1)]
    sessions: usize,
    /// Peers attached to each session.
    #[arg(long, default_value_t = 4)]
    peers: usize,
    /// Durable events per session.
    #[arg(long, default_value_t = 50_000)]
    events: usize,
    /// Events per emission.
    #[arg(long, default_value_t = 10)]
    batch: usize,
    #[command(flatten)]
    gateway: GatewayOptions,
    /// CPU the load generator (clients) runs on.
    #[arg(long, default_value_t = 1)]
    client_cpu: usize,
}

struct ClientResult {
    received: u64,
    gaps: u64,
    duplicates: u64,
}

pub fn run(b: FanoutBench) -> anyhow::Result<()> {
    let (addr_tx, addr_rx) = oneshot::channel();
    let (ids_tx, ids_rx) = oneshot::channel::<Vec<SessionId>>();
    let (done_tx, done_rx) = oneshot::channel::<()>();
    let sb = b.clone();
    let server = std::thread::spawn(move || {
        on_pinned_thread(sb.gateway.server_cpu, move || {
            serve(sb, addr_tx, ids_rx, done_rx)
        })
    });
    let cb = b.clone();
    let outcome = on_pinned_thread(
        b.client_cpu,
        move || -> anyhow::Result<(Vec<ClientResult>, f64, f64)> {
            let rt = pinned_runtime("tether-load", cb.client_cpu, 1)?;
            rt.block_on(load(cb, addr_rx, ids_tx))
        },
    );
    let _ = done_tx.send(());
    let server_cpu_s = server
        .join()
        .map_err(|_| anyhow!("server thread panicked"))??;
    let (results, secs, _client_cpu) = outcome?;
    let received: u64 = results.iter().map(|r| r.received).sum();
    let gaps: u64 = results.iter().map(|r| r.gaps).sum();
    let duplicates: u64 = results.iter().map(|r| r.duplicates).sum();
    let appended = (b.sessions * b.events) as f64;
    let expected = (b.sessions * b.peers * b.events) as u64;
    let report = json!({
        "scenario": "fanout",
        "sessions": b.sessions,
        "peers_per_session": b.peers,
        "events_per_session": b.events,
        "batch": b.batch,
        "payload_bytes": b.gateway.payload_bytes,
        "server_cpu": cpu_label(b.gateway.server_cpu),
        "client_cpu": cpu_label(b.client_cpu),
        "seconds": secs,
        "appended_events_per_s": (appended / secs).round(),
        "deliveries_per_s": (received as f64 / secs).round(),
        "delivered": received,
        "expected": expected,
        "gaps": gaps,
        "duplicates": duplicates,
        "process_cpu_seconds": server_cpu_s,
        "peak_rss_kib": super::harness::peak_rss_kib(),
    });
    println!("{report}");
    if received != expected || gaps > 0 || duplicates > 0 {
        bail!(
            "delivery was not exact: {received}/{expected}, {gaps} gaps, {duplicates} duplicates"
        );
    }
    Ok(())
}

/// The gateway side: serve, wait for the sessions, drive them, stop.
fn serve(
    b: FanoutBench,
    addr_tx: oneshot::Sender<std::net::SocketAddr>,
    ids_rx: oneshot::Receiver<Vec<SessionId>>,
    done_rx: oneshot::Receiver<()>,
) -> anyhow::Result<f64> {
    let rt = pinned_runtime("tether-gw", b.gateway.server_cpu, 1)?;
    rt.block_on(async move {
        let gw = start_gateway(tether_actors::GatewayConfig::default()).await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let (addr, _serving) = gw.serve(listener)?;
        let _ = addr_tx.send(addr);
        let ids = ids_rx.await.context("load generator gave up")?;
        let mut actors = Vec::new();
        for id in &ids {
            actors.push(session_actor(&gw.handle, id).await?);
        }
        try_join_all(
            actors
                .into_iter()
                .map(|a| drive(a, b.events, b.batch, b.gateway.payload_bytes, 8)),
        )
        .await?;
        let _ = done_rx.await;
        let cpu = process_cpu_s();
        gw.handle.shutdown(Duration::from_secs(5)).await;
        Ok(cpu)
    })
}

/// The load generator: connect, attach, hand the sessions over, count.
async fn load(
    b: FanoutBench,
    addr_rx: oneshot::Receiver<std::net::SocketAddr>,
    ids_tx: oneshot::Sender<Vec<SessionId>>,
) -> anyhow::Result<(Vec<ClientResult>, f64, f64)> {
    let addr = addr_rx.await?;
    let url = format!("ws://{addr}/ws");
    let mut ids = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..b.sessions {
        let (creator, id) = create_attached(&url).await?;
        clients.push(creator);
        for _ in 1..b.peers {
            let mut c = connect(&url).await?;
            request(
                &mut c,
                "session.resume",
                json!({"session_id": id, "omit_messages": true}),
            )
            .await?;
            clients.push(c);
        }
        ids.push(SessionId::from(id));
    }
    let last_seq = b.events as u64 + 1;
    let t0 = Instant::now();
    ids_tx.send(ids).map_err(|_| anyhow!("gateway side gone"))?;
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|ws| tokio::spawn(count(ws, last_seq)))
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await??);
    }
    Ok((results, t0.elapsed().as_secs_f64(), 0.0))
}

/// Reads until seq `last_seq`, checking order by seq. Seq 1 (session.created)
/// reaches only the creator, so counting starts at 2.
async fn count(mut ws: Ws, last_seq: u64) -> anyhow::Result<ClientResult> {
    let mut r = ClientResult {
        received: 0,
        gaps: 0,
        duplicates: 0,
    };
    let mut last = 1;
    while last < last_seq {
        let msg = tokio::time::timeout(Duration::from_secs(60), ws.next())
            .await
            .context("stalled")?
            .context("closed")??;
        let Message::Text(t) = msg else { continue };
        let Some(seq) = seq_of(&t) else { continue };
        if seq <= 1 {
            continue;
        }
        if seq <= last {
            r.duplicates += 1;
            continue;
        }
        if seq > last + 1 {
            r.gaps += seq - last - 1;
        }
        r.received += 1;
        last = seq;
    }
    Ok(r)
}

/// The `seq` of an event frame, read without a full JSON parse (the load
/// generator must not be the bottleneck).
fn seq_of(frame: &str) -> Option<u64> {
    let at = frame.find("\"seq\":")? + 6;
    let digits: String = frame[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}
