//! The client side of `tether bench flat`: requests timed one at a time
//! over one WebSocket (`session.list`, `session.resume`), and a large
//! session read whole with `session.events.since` pages.

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use super::gateway::RssPeak;
use crate::harness::{connect, request, Ws};

/// p50, p99 and max of `samples`, ms, rounded to µs.
pub fn percentiles(samples: &mut [Duration]) -> Value {
    samples.sort();
    let at = |q: f64| {
        let n = samples.len();
        if n == 0 {
            return 0.0;
        }
        let i = ((n as f64 * q).ceil() as usize).clamp(1, n) - 1;
        let ms = samples.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0);
        (ms * 1000.0).round() / 1000.0
    };
    json!({ "n": samples.len(), "p50_ms": at(0.50), "p99_ms": at(0.99), "max_ms": at(1.0) })
}

/// `session.list`'s first page (the protocol's default limit), `n` times.
pub async fn list(url: &str, n: usize) -> anyhow::Result<Value> {
    let mut ws = connect(url).await?;
    let first = request(&mut ws, "session.list", json!({})).await?;
    let listed = first["sessions"].as_array().map_or(0, Vec::len);
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        request(&mut ws, "session.list", json!({})).await?;
        samples.push(t0.elapsed());
    }
    let mut v = percentiles(&mut samples);
    v["sessions_per_page"] = json!(listed);
    Ok(v)
}

/// One `session.resume` (attaching, with its messages, as a client
/// opening a chat) and its detach; how long the resume took and how many
/// messages it returned.
async fn resume_one(ws: &mut Ws, id: &str) -> anyhow::Result<(Duration, usize)> {
    let t0 = Instant::now();
    let r = request(
        ws,
        "session.resume",
        json!({"session_id": id, "attach": true}),
    )
    .await?;
    let took = t0.elapsed();
    request(ws, "session.detach", json!({"session_id": id})).await?;
    Ok((took, r["messages"].as_array().map_or(0, Vec::len)))
}

/// Each of `sessions` resumed once: on a gateway that just started, each
/// is brought live from the store.
pub async fn resume_each(url: &str, sessions: &[String]) -> anyhow::Result<Vec<Duration>> {
    let mut ws = connect(url).await?;
    let mut samples = Vec::with_capacity(sessions.len());
    for id in sessions {
        samples.push(resume_one(&mut ws, id).await?.0);
    }
    Ok(samples)
}

/// `n` resumes of `sessions` in turn, once they are live (parking takes
/// longer than the run).
pub async fn resume_live(url: &str, sessions: &[String], n: usize) -> anyhow::Result<Value> {
    anyhow::ensure!(!sessions.is_empty(), "no probe session to resume");
    let mut ws = connect(url).await?;
    for id in sessions {
        resume_one(&mut ws, id).await?;
    }
    let mut samples = Vec::with_capacity(n);
    let mut messages = 0;
    for i in 0..n {
        let (took, m) = resume_one(&mut ws, &sessions[i % sessions.len()]).await?;
        samples.push(took);
        messages = m;
    }
    let mut v = percentiles(&mut samples);
    v["messages_returned"] = json!(messages);
    Ok(v)
}

/// Reads session `id` whole with `session.events.since` pages of `limit`,
/// while the gateway's RSS is sampled.
pub async fn page_through(url: &str, pid: u32, id: &str, limit: u32) -> anyhow::Result<Value> {
    let mut ws: Ws = connect(url).await?;
    let before = crate::harness::rss_kib(pid);
    let peak = RssPeak::start(pid);
    let t0 = Instant::now();
    let (mut last_seen, mut events, mut pages) = (0u64, 0u64, 0u64);
    let mut samples = Vec::new();
    loop {
        let p0 = Instant::now();
        let r = request(
            &mut ws,
            "session.events.since",
            json!({"session_id": id, "last_seen": last_seen, "limit": limit}),
        )
        .await?;
        samples.push(p0.elapsed());
        let page = r["events"]
            .as_array()
            .context("events.since without events")?;
        pages += 1;
        events += page.len() as u64;
        if let Some(seq) = page.last().and_then(|e| e["seq"].as_u64()) {
            last_seen = seq;
        }
        if !r["has_more"].as_bool().unwrap_or(false) || page.is_empty() {
            break;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let peak = peak.finish();
    Ok(json!({
        "events": events,
        "pages": pages,
        "limit": limit,
        "seconds": (secs * 1000.0).round() / 1000.0,
        "events_per_s": (events as f64 / secs).round(),
        "page": percentiles(&mut samples),
        "rss_before_kib": before,
        "rss_peak_kib": peak,
        "rss_growth_kib": peak.saturating_sub(before),
    }))
}
