//! What a storm measured, and the JSON line it is reported as.

use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::{json, Value};

use super::client::{ClientOutcome, Held};
use super::StormBench;
use crate::harness::peak_rss_kib;
use crate::store::cpu_label;

/// Everything measured, turned into the JSON line at the end.
pub(super) struct Report {
    pub outcomes: Vec<ClientOutcome>,
    pub finals: Vec<u64>,
    pub timeline: Timeline,
    pub server_cpu_s: f64,
}

/// When the storm's steps happened, and what the gateway spent on them.
pub(super) struct Timeline {
    pub dropped_at: Instant,
    pub drop_spread: Duration,
    pub reconnect_at: Instant,
    pub all_caught_up_at: Instant,
    pub storm_server_cpu_s: f64,
    /// Gateway CPU seconds per second while only streaming.
    pub steady_server_cpu_per_s: f64,
    pub storm_client_cpu_s: f64,
}

/// Per-client latencies, in the order of the outcomes.
#[derive(Default)]
struct Latencies {
    ready: Vec<Duration>,
    resume: Vec<Duration>,
    resume_rtt: Vec<Duration>,
    resume_from_drop: Vec<Duration>,
    caught_up: Vec<Duration>,
    caught_up_from_drop: Vec<Duration>,
}

/// What the clients missed and got back.
#[derive(Default)]
struct Recovery {
    missed: u64,
    replayed: u64,
    resyncs: u64,
}

/// Delivery over one client's two connections, checked against its
/// session's last seq.
#[derive(Default)]
struct Delivery {
    delivered: u64,
    expected: u64,
    gaps: u64,
    duplicates: u64,
    beyond: u64,
}

impl Delivery {
    fn add(&mut self, held: &Held, last: u64) {
        self.expected += last;
        for (seq, &c) in held.counts.iter().enumerate().skip(1) {
            if seq as u64 > last {
                self.beyond += u64::from(c);
            } else if c > 0 {
                self.delivered += 1;
                self.duplicates += u64::from(c - 1);
            }
        }
        let held_upto_last = held
            .counts
            .iter()
            .skip(1)
            .take(last as usize)
            .filter(|c| **c > 0);
        self.gaps += last - held_upto_last.count() as u64;
    }
}

impl Report {
    pub(super) fn print(self, b: &StormBench) -> anyhow::Result<()> {
        let mut d = Delivery::default();
        let mut lat = Latencies::default();
        let mut rec = Recovery::default();
        let t = &self.timeline;
        for o in &self.outcomes {
            let last = self.finals.get(o.session).copied().unwrap_or(0);
            d.add(&o.held, last);
            rec.missed += o.target.saturating_sub(o.watermark);
            rec.replayed += o.replayed;
            rec.resyncs += u64::from(o.resync);
            lat.ready.push(o.ready_at - o.reconnect_at);
            lat.resume.push(o.resumed_at - o.reconnect_at);
            lat.resume_rtt.push(o.resumed_at - o.ready_at);
            lat.resume_from_drop.push(o.resumed_at - t.dropped_at);
            lat.caught_up.push(o.caught_up_at - o.reconnect_at);
            lat.caught_up_from_drop.push(o.caught_up_at - t.dropped_at);
        }
        println!("{}", self.json(b, &d, lat, &rec));
        if d.delivered != d.expected
            || d.gaps > 0
            || d.duplicates > 0
            || d.beyond > 0
            || rec.resyncs > 0
        {
            bail!(
                "delivery was not exact: {}/{}, {} gaps, {} duplicates, {} beyond the last seq, {} resyncs",
                d.delivered, d.expected, d.gaps, d.duplicates, d.beyond, rec.resyncs
            );
        }
        Ok(())
    }

    fn json(&self, b: &StormBench, d: &Delivery, lat: Latencies, rec: &Recovery) -> Value {
        let t = &self.timeline;
        let ms = |d: Duration| (d.as_secs_f64() * 1e6).round() / 1e3;
        json!({
            "scenario": "storm",
            "clients": b.clients,
            "sessions": b.sessions,
            "rate_events_per_s": b.rate,
            "batch": b.batch,
            "payload_bytes": b.payload_bytes,
            "down_ms": b.down_ms,
            "backlog": b.backlog,
            "server_cpu": cpu_label(b.server_cpu),
            "client_cpu": cpu_label(b.client_cpu),
            "drop_spread_ms": ms(t.drop_spread),
            "missed_events": rec.missed,
            "replayed_events": rec.replayed,
            "resyncs": rec.resyncs,
            "ready_ms": summary(lat.ready),
            "resume_ms": summary(lat.resume),
            // `session.resume` sent on the open socket until its answer,
            // missed events included: the replay alone, without the TCP and
            // WebSocket handshakes of 1000 clients connecting at once.
            "resume_rtt_ms": summary(lat.resume_rtt),
            "caught_up_ms": summary(lat.caught_up),
            "resume_from_drop_ms": summary(lat.resume_from_drop),
            "caught_up_from_drop_ms": summary(lat.caught_up_from_drop),
            "all_caught_up_from_reconnect_ms": ms(t.all_caught_up_at - t.reconnect_at),
            "all_caught_up_from_drop_ms": ms(t.all_caught_up_at - t.dropped_at),
            "delivered": d.delivered,
            "expected": d.expected,
            "gaps": d.gaps,
            "duplicates": d.duplicates,
            "beyond_last": d.beyond,
            "storm_server_cpu_s": round3(t.storm_server_cpu_s),
            "steady_server_cpu_per_s": round3(t.steady_server_cpu_per_s),
            // What the storm cost the gateway beyond the streaming, per client.
            "server_cpu_ms_per_reconnect": round3(
                (t.storm_server_cpu_s
                    - t.steady_server_cpu_per_s
                        * (t.all_caught_up_at - t.dropped_at).as_secs_f64())
                    * 1000.0
                    / self.outcomes.len().max(1) as f64
            ),
            "storm_client_cpu_s": round3(t.storm_client_cpu_s),
            "server_cpu_s": round3(self.server_cpu_s),
            "peak_rss_kib": peak_rss_kib(),
        })
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// p50/p99/max in ms.
fn summary(mut v: Vec<Duration>) -> Value {
    v.sort();
    let at = |q: f64| -> Option<f64> {
        if v.is_empty() {
            return None;
        }
        let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
        v.get(i).map(|d| round3(d.as_secs_f64() * 1000.0))
    };
    json!({"p50": at(0.50), "p99": at(0.99), "max": at(1.0)})
}
