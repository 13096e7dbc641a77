//! `--scenario idle`: the server's resident memory per idle subscribed
//! connection. N clients connect and subscribe (tether: attach to one of
//! S sessions; the baselines: join one of S rooms), then only answer
//! heartbeats; the growth of the server's VmRSS, divided by N, is the
//! figure.
//!
//! 50,000 connections cannot be opened on this machine: the hard limit of
//! open files is 20,000 per process and cannot be raised, and the server
//! and the generator each need one per connection. The report carries the
//! limit so that a reader of the numbers knows why N stops where it does.

use std::time::Duration;

use anyhow::bail;
use serde_json::{json, Value};

use super::proc;
use super::tally::round3;
use super::target::Target;
use super::{LoadBench, TargetKind};

/// Subscriptions opened and closed before the baseline is read, so that
/// what every server allocates once (buffers, maps) is not counted per
/// connection.
const WARM_UP: usize = 64;

/// Files the generator needs besides its connections.
const SPARE_FDS: u64 = 64;

/// tether's default `--max-peers-per-session`.
const MAX_PEERS_PER_SESSION: usize = 64;

pub async fn run(b: &LoadBench, url: &str, pid: Option<u32>) -> anyhow::Result<Value> {
    let limits = proc::fd_limits();
    if let Some((soft, hard)) = limits {
        if b.connections as u64 + SPARE_FDS > soft {
            bail!(
                "{} connections need more open files than this process may have \
                 ({soft}, hard limit {hard}); run under a higher `ulimit -n`",
                b.connections
            );
        }
    }
    if b.target == TargetKind::Tether && b.connections > b.sessions * MAX_PEERS_PER_SESSION {
        bail!("more than {MAX_PEERS_PER_SESSION} peers per session: raise --sessions");
    }
    let target = Target::prepare(b.target, url, b.sessions).await?;
    drop(target.subscribe_all(WARM_UP).await?);
    tokio::time::sleep(Duration::from_millis(b.settle_ms)).await;
    let before = proc::sample(pid);
    let clients = target.subscribe_all(b.connections).await?;
    let opened = clients.len();
    let readers: Vec<_> = clients
        .into_iter()
        .map(|c| {
            let mut conn = c.sub.conn;
            // Answers heartbeats (tungstenite answers pings while reading;
            // Socket.IO's `2` is answered in `next`) until dropped.
            tokio::spawn(async move { while conn.next().await.is_ok() {} })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(b.settle_ms)).await;
    let after = proc::sample(pid);
    for r in &readers {
        r.abort();
    }
    let grown = after.server_rss_kib.saturating_sub(before.server_rss_kib);
    Ok(json!({
        "sessions": b.sessions,
        "connections": opened,
        "rss_before_kib": before.server_rss_kib,
        "rss_after_kib": after.server_rss_kib,
        "kib_per_connection": round3(grown as f64 / opened.max(1) as f64),
        "server_peak_rss_kib": after.server_peak_kib,
        "hosts_peak_rss_kib": after.children_peak_kib,
        "fd_limit": limits.map(|(soft, hard)| json!({"soft": soft, "hard": hard})),
    }))
}
