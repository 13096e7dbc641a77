//! `tether bench writer`: committed events per second through the
//! StoreWriter actor on its own (no live sessions, no peers). The appends
//! are for sessions that exist only in the store
//! (`tether_actors::hooks::WriterLoad`), a few in flight per session, as
//! live sessions keep them.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use serde_json::json;
use tether_actors::hooks::{AppendOutcome, WriterLoad};
use tokio::sync::mpsc;

use super::harness::{
    events, on_store_gateway, peak_rss_kib, process_cpu_s, GatewayOptions, StoreOption,
};
use super::store::cpu_label;

#[derive(Debug, Args)]
pub struct WriterBench {
    /// Sessions appending at once.
    #[arg(long, default_value_t = 100)]
    sessions: usize,
    /// Events per append.
    #[arg(long, default_value_t = 50)]
    append_events: usize,
    /// Events per session (rounded down to whole appends).
    #[arg(long, default_value_t = 10_000)]
    events: usize,
    /// Appends in flight per session.
    #[arg(long, default_value_t = 2)]
    in_flight: usize,
    #[command(flatten)]
    gateway: GatewayOptions,
    #[command(flatten)]
    store: StoreOption,
}

/// Plays the sessions: sends appends, counts commits, sends more.
struct Driver {
    load: WriterLoad,
    remaining: Vec<usize>,
    append_events: usize,
    payload_bytes: usize,
}

impl Driver {
    fn send(&mut self, session: usize) -> anyhow::Result<()> {
        if let Some(left) = self.remaining.get_mut(session) {
            *left = left.saturating_sub(1);
        }
        let batch = events(self.append_events, self.payload_bytes);
        Ok(self.load.append(session, batch)?)
    }

    fn has_more(&self, session: usize) -> bool {
        self.remaining.get(session).is_some_and(|left| *left > 0)
    }

    /// Keeps `in_flight` appends per session going until `target` events
    /// are committed.
    async fn run(
        &mut self,
        outcomes: &mut mpsc::UnboundedReceiver<AppendOutcome>,
        in_flight: usize,
        target: u64,
    ) -> anyhow::Result<()> {
        for session in 0..self.remaining.len() {
            for _ in 0..in_flight {
                if self.has_more(session) {
                    self.send(session)?;
                }
            }
        }
        let mut committed = 0u64;
        while committed < target {
            match outcomes
                .recv()
                .await
                .context("the writer stand-in stopped")?
            {
                AppendOutcome::Committed { session, .. } => {
                    committed += self.append_events as u64;
                    if self.has_more(session) {
                        self.send(session)?;
                    }
                }
                AppendOutcome::Failed { code, .. } => bail!("append failed: {code}"),
            }
        }
        Ok(())
    }
}

pub fn run(b: WriterBench) -> anyhow::Result<()> {
    let (cpu, store) = (b.gateway.server_cpu, b.store.clone());
    on_store_gateway(cpu, store, move |ctx| async move {
        let (load, mut outcomes) = WriterLoad::start(&ctx, b.sessions).await?;
        let appends = (b.events / b.append_events.max(1)).max(1);
        let target = (b.sessions * appends * b.append_events) as u64;
        let mut driver = Driver {
            load,
            remaining: vec![appends; b.sessions],
            append_events: b.append_events,
            payload_bytes: b.gateway.payload_bytes,
        };
        let cpu0 = process_cpu_s();
        let t0 = Instant::now();
        tokio::time::timeout(
            Duration::from_secs(300),
            driver.run(&mut outcomes, b.in_flight, target),
        )
        .await??;
        let secs = t0.elapsed().as_secs_f64();
        let cpu = process_cpu_s() - cpu0;
        let report = json!({
            "scenario": "writer",
            "backend": b.store.backend(),
            "sessions": b.sessions,
            "append_events": b.append_events,
            "appends_per_session": appends,
            "in_flight": b.in_flight,
            "payload_bytes": b.gateway.payload_bytes,
            "server_cpu": cpu_label(b.gateway.server_cpu),
            "seconds": secs,
            "committed_events_per_s": (target as f64 / secs).round(),
            "cpu_seconds": cpu,
            "peak_rss_kib": peak_rss_kib(),
        });
        println!("{report}");
        driver.load.stop();
        Ok(())
    })
}
