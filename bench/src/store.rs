//! `tether bench store`: committed events per second through the
//! StoreWriter on its own (sessions emit, nobody is attached).

use std::time::Instant;

use clap::Args;
use futures::future::try_join_all;
use serde_json::json;
use tether_actors::hooks::LiveSession;

use super::harness::{drive, on_store_gateway, process_cpu_s, GatewayOptions, StoreOption};

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
    #[command(flatten)]
    gateway: GatewayOptions,
    #[command(flatten)]
    store: StoreOption,
}

pub fn run(b: StoreBench) -> anyhow::Result<()> {
    let (cpu, store) = (b.gateway.server_cpu, b.store.clone());
    on_store_gateway(cpu, store, move |ctx| async move {
        let mut actors = Vec::new();
        for _ in 0..b.sessions {
            actors.push(LiveSession::create(&ctx).await?);
        }
        let cpu0 = process_cpu_s();
        let t0 = Instant::now();
        try_join_all(
            actors
                .into_iter()
                .map(|a| drive(a, b.events, b.batch, b.gateway.payload_bytes, 8)),
        )
        .await?;
        let secs = t0.elapsed().as_secs_f64();
        let cpu = process_cpu_s() - cpu0;
        let total = (b.sessions * b.events) as f64;
        let report = json!({
            "scenario": "store",
            "backend": b.store.backend(),
            "sessions": b.sessions,
            "events_per_session": b.events,
            "batch": b.batch,
            "payload_bytes": b.gateway.payload_bytes,
            "server_cpu": cpu_label(b.gateway.server_cpu),
            "seconds": secs,
            "committed_events_per_s": (total / secs).round(),
            "cpu_seconds": cpu,
            "peak_rss_kib": super::harness::peak_rss_kib(),
        });
        println!("{report}");
        Ok(())
    })
}

pub fn cpu_label(cpu: usize) -> String {
    format!("cpu{cpu}")
}
