//! `tether bench store`: committed events per second through the
//! StoreWriter on its own (sessions emit, nobody is attached).

use std::time::Instant;

use clap::Args;
use futures::future::try_join_all;
use serde_json::json;
use tether_actors::hooks::LiveSession;
use tether_actors::GatewayConfig;

use super::harness::{drive, on_pinned_thread, pinned_runtime, process_cpu_s, start_gateway_on};

#[derive(Debug, Args)]
pub struct StoreBench {
    /// Sessions emitting at once.
    #[arg(long, default_value_t = 100)]
    sessions: usize,
    /// Durable events per session.
    #[arg(long, default_value_t = 5_000)]
    events: usize,
    /// Events per emission (what one host frame burst would carry).
    #[arg(long, default_value_t = 10)]
    batch: usize,
    /// Payload size of each event in bytes.
    #[arg(long, default_value_t = 100)]
    payload_bytes: usize,
    /// CPU the gateway runs on.
    #[arg(long, default_value_t = 0)]
    server_cpu: usize,
    /// Run on PostgreSQL: a database of the bench's own, created (and
    /// dropped) on the server this URL names; its user must be allowed to
    /// create databases. Without it, SQLite in a temporary directory.
    #[arg(long, value_name = "SERVER_URL")]
    postgres: Option<String>,
}

pub fn run(b: StoreBench) -> anyhow::Result<()> {
    let cpu = b.server_cpu;
    on_pinned_thread(cpu, move || {
        let rt = pinned_runtime("tether-gw", cpu, 1)?;
        rt.block_on(async move {
            let gw = start_gateway_on(GatewayConfig::default(), b.postgres.as_deref()).await?;
            let mut actors = Vec::new();
            for _ in 0..b.sessions {
                actors.push(LiveSession::create(gw.handle.ctx()).await?);
            }
            let cpu0 = process_cpu_s();
            let t0 = Instant::now();
            try_join_all(
                actors
                    .into_iter()
                    .map(|a| drive(a, b.events, b.batch, b.payload_bytes, 8)),
            )
            .await?;
            let secs = t0.elapsed().as_secs_f64();
            let cpu = process_cpu_s() - cpu0;
            let total = (b.sessions * b.events) as f64;
            let report = json!({
                "scenario": "store",
                "backend": if b.postgres.is_some() { "postgres" } else { "sqlite" },
                "sessions": b.sessions,
                "events_per_session": b.events,
                "batch": b.batch,
                "payload_bytes": b.payload_bytes,
                "server_cpu": cpu_label(b.server_cpu),
                "seconds": secs,
                "committed_events_per_s": (total / secs).round(),
                "cpu_seconds": cpu,
                "peak_rss_kib": super::harness::peak_rss_kib(),
            });
            println!("{report}");
            gw.handle.shutdown(std::time::Duration::from_secs(5)).await;
            Ok(())
        })
    })
}

pub fn cpu_label(cpu: usize) -> String {
    format!("cpu{cpu}")
}
